"""Three agents share one daemon: cursors, checkpoints, noise rules, tab filters and clears stay
per client. Everything goes through the real MCP server (``app.mcp.handle``)."""

from __future__ import annotations

import json

import pytest
from _mcp_calls import session_for, tool_calls

from gasoline.core.storage.store import ACTIONS, CONSOLE, NETWORK_BODIES
from gasoline.tools.observe import ERRORS_CURSOR


observe, _ = tool_calls("observe")
configure, _ = tool_calls("configure")


def messages(data):
    return [e.get("message") for e in data["entries"]]


@pytest.fixture
def abc(app):
    return session_for(app, "agent-a"), session_for(app, "agent-b"), session_for(app, "agent-c")


def test_each_of_three_clients_has_its_own_read_cursor(app, abc):
    a, b, c = abc
    app.store.add(CONSOLE, [{"level": "error", "message": f"e{i}"} for i in range(3)])
    assert messages(observe(app, a, what="errors")[1]) == ["e0", "e1", "e2"]
    assert messages(observe(app, a, what="errors")[1]) == []
    # B reads a page of two; C has not read at all.
    assert messages(observe(app, b, what="errors", limit=2)[1]) == ["e0", "e1"]
    app.store.add(CONSOLE, [{"level": "error", "message": "e3"}])
    assert messages(observe(app, a, what="errors")[1]) == ["e3"]
    assert messages(observe(app, b, what="errors")[1]) == ["e2", "e3"]
    assert messages(observe(app, c, what="errors")[1]) == ["e0", "e1", "e2", "e3"]
    assert {s.client_id: s.state.cursors[ERRORS_CURSOR] for s in abc} == {
        "agent-a": 4, "agent-b": 4, "agent-c": 4}


def test_checkpoints_are_namespaced_per_client_and_reachable_on_purpose(app, abc):
    a, b, c = abc
    app.store.add(CONSOLE, [{"level": "error", "message": "before"}])
    configure(app, a, what="checkpoint", name="before")
    app.store.add(CONSOLE, [{"level": "error", "message": "middle"}])
    configure(app, b, what="checkpoint", name="before")
    # Same name, two different checkpoints.
    assert a.state.checkpoints["before"]["heads"][CONSOLE] == 1
    assert b.state.checkpoints["before"]["heads"][CONSOLE] == 2
    assert c.state.checkpoints == {}
    _, listed = configure(app, c, what="checkpoint", checkpoint_action="list")
    assert listed["checkpoints"] == []
    # C reaches B's on purpose with "agent-b:before".
    from gasoline.tools._state import resolve_checkpoint
    from gasoline.tools.context import ToolContext

    ctx_c = ToolContext(app=app.daemon, tools=app.tools, request=None, state=c.state, client_id="agent-c")
    assert resolve_checkpoint(ctx_c, "agent-b:before")["heads"][CONSOLE] == 2
    assert resolve_checkpoint(ctx_c, "agent-a:before")["heads"][CONSOLE] == 1
    with pytest.raises(Exception, match="no checkpoint"):
        resolve_checkpoint(ctx_c, "before")
    # Deleting A's leaves B's.
    configure(app, a, what="checkpoint", checkpoint_action="delete", name="before")
    assert "before" not in a.state.checkpoints and "before" in b.state.checkpoints


def test_noise_rules_of_one_client_hide_nothing_from_the_others(app, abc):
    a, b, c = abc
    configure(app, a, what="noise_rule", noise_action="add", pattern="chatty", field="message")
    app.store.add(CONSOLE, [{"level": "error", "message": "chatty widget"},
                            {"level": "error", "message": "real bug"}])
    summary, data = observe(app, a, what="errors")
    assert messages(data) == ["real bug"] and data["noise_hidden"] == 1
    assert "hidden by noise rules" in summary
    assert messages(observe(app, b, what="errors")[1]) == ["chatty widget", "real bug"]
    # A global rule is seen by everyone; B removes nothing of A's.
    configure(app, c, what="noise_rule", noise_action="add", pattern="real", scope="global")
    app.store.add(CONSOLE, [{"level": "error", "message": "real again"},
                            {"level": "error", "message": "chatty again"}])
    assert messages(observe(app, a, what="errors")[1]) == []
    assert messages(observe(app, b, what="errors")[1]) == ["chatty again"]
    assert messages(observe(app, c, what="errors", after_cursor=0)[1]) == [
        "chatty widget", "chatty again"]
    _, rules_b = configure(app, b, what="noise_rule", noise_action="list")
    assert not any(r["pattern"] == "chatty" for r in rules_b["rules"])
    # Persisted in A's client state as JSON.
    assert any(r["pattern"] == "chatty" for r in a.state.noise_rules["rules"])
    assert json.loads(json.dumps(a.state.to_json()))["noise_rules"]["rules"][0]["pattern"] == "chatty"


def test_tab_filters_narrow_only_the_callers_view(app, abc):
    a, b, c = abc
    configure(app, a, what="select_tab", patterns=["http://localhost:3000/*"])
    configure(app, b, what="select_tab", patterns=["admin.example"])
    app.store.add(CONSOLE, [
        {"level": "error", "message": "app", "url": "http://localhost:3000/page", "tabId": 1},
        {"level": "error", "message": "admin", "url": "https://admin.example/x", "tabId": 2},
    ])
    app.store.add(NETWORK_BODIES, [
        {"method": "GET", "url": "http://localhost:3000/api", "status": 200, "tab_id": 1},
        {"method": "GET", "url": "https://admin.example/api", "status": 200, "tab_id": 2},
    ])
    assert messages(observe(app, a, what="errors")[1]) == ["app"]
    assert messages(observe(app, b, what="errors")[1]) == ["admin"]
    assert messages(observe(app, c, what="errors")[1]) == ["app", "admin"]
    _, net_a = observe(app, a, what="network_bodies")
    assert [e["url"] for e in net_a["entries"]] == ["http://localhost:3000/api"]
    assert net_a["filters"]["tab_filters"] == ["http://localhost:3000/*"]
    # scope:"all" ignores the selection for one read; clearing it restores everything.
    _, all_a = observe(app, a, what="errors", after_cursor=0, scope="all")
    assert messages(all_a) == ["app", "admin"]
    _, listed = configure(app, b, what="select_tab")
    assert listed["patterns"] == ["admin.example"]
    configure(app, a, what="select_tab", tab_action="clear")
    assert messages(observe(app, a, what="errors", after_cursor=0)[1]) == ["app", "admin"]
    assert b.state.tab_filters == ["admin.example"]


def test_clear_by_default_resets_only_the_callers_cursors(app, abc):
    a, b, c = abc
    app.store.add(CONSOLE, [{"level": "error", "message": "old"}])
    summary, data = configure(app, a, what="clear")
    assert "not touched" in summary and data["skipped"][CONSOLE] == 1
    assert len(app.store.buffers[CONSOLE]) == 1
    assert messages(observe(app, a, what="errors")[1]) == []
    assert messages(observe(app, b, what="errors")[1]) == ["old"]


def test_clear_scope_all_empties_shared_buffers_and_others_are_told(app, abc):
    a, b, c = abc
    app.store.add(CONSOLE, [{"level": "error", "message": "old"}])
    app.store.add(ACTIONS, [{"type": "click", "timestamp": 1}])
    observe(app, b, what="errors")  # B has read: its cursor is at the head
    app.store.add(CONSOLE, [{"level": "error", "message": "unread by b"}])
    summary, data = configure(app, a, what="clear", scope="all", buffer="logs")
    assert data["removed"][CONSOLE] == 2
    assert len(app.store.buffers[CONSOLE]) == 0
    assert len(app.store.buffers[ACTIONS]) == 1  # only the logs group was emptied
    summary_b, read_b = observe(app, b, what="errors")
    assert read_b["count"] == 0 and read_b["cleared"]["by_you"] is False
    assert "cleared by another client since your last read" in summary_b
    assert read_b["missed"] == 0  # cleared, not evicted
    summary_c, read_c = observe(app, c, what="errors")
    assert "cleared" in read_c and "cleared by another client" in summary_c
    # After that read the notice is gone; new entries flow again.
    app.store.add(CONSOLE, [{"level": "error", "message": "fresh"}])
    _, again = observe(app, b, what="errors")
    assert messages(again) == ["fresh"] and "cleared" not in again
    _, mine = observe(app, a, what="errors")
    assert messages(mine) == ["fresh"]


def test_one_clients_kv_store_is_invisible_to_the_others(app, abc):
    a, b, _ = abc
    configure(app, a, what="store", key="token-ish", value={"n": 1})
    configure(app, b, what="store", key="token-ish", value=[2])
    assert configure(app, a, what="load", key="token-ish")[1]["value"] == {"n": 1}
    assert configure(app, b, what="load", key="token-ish")[1]["value"] == [2]

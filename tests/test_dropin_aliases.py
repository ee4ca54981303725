"""The published Gasoline's parameter names (gasoline.tools.aliases), through the real MCP server on
a task.Clock: each alias translates to this project's name, the answer names the preferred one,
the schemas do not advertise the aliases, and the error contract carries ``retryable``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _mcp_calls import parsed, start
from _mcp_calls import session_for as _session_for

from gasoline.app import Config, build
from gasoline.core.errors import (
    ExtensionTimeout,
    GasolineError,
    InvalidParam,
    QueueFull,
    TooManyClients,
)
from gasoline.core.storage.store import CONSOLE
from gasoline.core.clients.ratelimit import SlidingWindowLimiter, RateLimited
from gasoline.mcp.tools import error_result
from gasoline.tools.aliases import ALIASES, translate

T0 = 1_700_000_000
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def app(tmp_path, clock):
    clock.advance(T0)
    app = build(Config(state_dir=tmp_path, persist=False, tool_rate_limit=0), clock)
    app.extension.sync({"settings": {"tracked_tab_id": 1, "pilot_enabled": True,
                                     "tracked_tab_url": "https://app.test/"}})
    yield app
    app.router.close()
    app.extension.stop()


def session_for(app, client_id):
    return _session_for(app, client_id, "2025-11-25")


def call(app, session, tool, **args):
    return start(app, session, tool, args)


def ok(app, session, tool, **args):
    err, summary, data = parsed(call(app, session, tool, **args))
    assert not err, (summary, data)
    return summary, data


def fails(app, session, tool, **args):
    err, summary, data = parsed(call(app, session, tool, **args))
    assert err, (summary, data)
    return data


def answer_all(app, reply):
    cmds = app.extension.commands.deliverable()
    for cmd in cmds:
        app.extension.commands.resolve({"id": cmd.id, "status": "complete", "result": reply})
    return cmds


# -- the table ------------------------------------------------------------------------------------


def test_translate_leaves_this_projects_names_alone():
    args = {"what": "store", "key": "k", "value": 1}
    t = translate("configure", args)
    assert (t.tool, t.calls, t.used) == ("configure", [args], [])


def test_our_name_wins_over_the_alias():
    t = translate("configure", {"what": "load", "action": "store", "key": "k"})
    assert t.calls == [{"what": "load", "action": "store", "key": "k"}] and t.used == []
    t = translate("configure", {"what": "store", "key": "k", "value": 1, "data": 2})
    assert t.calls[0]["value"] == 1 and t.used == []


def test_schemas_do_not_advertise_the_aliases(app):
    tools = {t["name"]: t["inputSchema"]["properties"] for t in app.mcp.tools.definitions()}
    for name in ("store_action", "data", "rules", "match_spec", "classification",
                 "message_regex"):
        assert name not in tools["configure"], name
    assert "action" not in tools["interact"] and "format" not in tools["generate"]
    configure_modes = tools["configure"]["what"]["enum"]
    assert "get_sequence" not in configure_modes and "list_sequences" not in configure_modes
    assert "annotation_report" not in tools["generate"]["what"]["enum"]


def test_docs_migrating_lists_every_alias():
    text = (ROOT / "docs" / "migrating.md").read_text()
    for alias in ALIASES:
        assert f"| {alias.tool} | `{alias.published}` | `{alias.preferred}` |" in text, alias


# -- store ----------------------------------------------------------------------------------------


def test_store_action_save_load_list_delete_with_data(app):
    s = session_for(app, "A")
    summary, data = ok(app, s, "configure", what="store", store_action="save", key="plan",
                       data={"step": 3, "todo": ["a"]})
    assert summary.startswith("stored session/plan") or "stored" in summary
    assert "preferred here" in summary
    assert data["aliases"] == [{"published": 'store_action:"save" + data',
                                "preferred": 'what:"store" + value'}]
    # Stored under our names: our own load sees it.
    assert ok(app, s, "configure", what="load", key="plan")[1]["value"] == {"step": 3,
                                                                             "todo": ["a"]}
    assert ok(app, s, "configure", what="store", store_action="load",
              key="plan")[1]["value"] == {"step": 3, "todo": ["a"]}
    assert ok(app, s, "configure", what="store", store_action="list")[1]["keys"] == ["plan"]
    ok(app, s, "configure", what="store", store_action="delete", key="plan")
    assert ok(app, s, "configure", what="load")[1]["keys"] == []
    # The published action alias of what, combined.
    summary, data = ok(app, s, "configure", action="store", store_action="save", key="k", data=1)
    assert [a["published"] for a in data["aliases"]] == ["action",
                                                         'store_action:"save" + data']


def test_store_action_without_equivalent_is_a_clear_error(app):
    s = session_for(app, "A")
    data = fails(app, s, "configure", what="store", store_action="stats")
    assert data["error"] == "invalid_param" and data["param"] == "store_action"
    assert data["valid"] == ["save", "load", "list", "delete"]
    assert data["retryable"] is False
    assert data["aliases"][0]["published"] == "store_action (other values)"
    data = fails(app, s, "configure", what="store", store_action="load")
    assert data["param"] == "key"


# -- noise rules ----------------------------------------------------------------------------------


def test_published_noise_rules_list_adds_one_rule_each(app):
    s = session_for(app, "A")
    summary, data = ok(app, s, "configure", what="noise_rule", noise_action="add", rules=[
        {"category": "console", "classification": "known analytics chatter",
         "match_spec": {"message_regex": "^analytics: "}},
        {"category": "network", "classification": "health probe",
         "match_spec": {"url_regex": "/healthz$"}},
    ])
    assert summary.startswith("2 calls done") and data["count"] == 2
    listed = ok(app, s, "configure", what="noise_rule", noise_action="list")[1]["rules"]
    mine = {(r["pattern"], r["field"], r["reason"]) for r in listed if not r.get("builtin")}
    assert ("^analytics: ", "message", "known analytics chatter") in mine
    assert ("/healthz$", "url", "health probe") in mine
    # The rule works: a matching console error is hidden from A's errors.
    app.store.add(CONSOLE, [{"level": "error", "message": "analytics: beacon failed",
                             "url": "https://app.test/"},
                            {"level": "error", "message": "TypeError: boom",
                             "url": "https://app.test/"}])
    errors = ok(app, s, "observe", what="errors")[1]
    messages = json.dumps(errors)
    assert "TypeError: boom" in messages and "analytics: beacon" not in messages


def test_flattened_noise_helpers_and_refusals(app):
    s = session_for(app, "A")
    summary, data = ok(app, s, "configure", what="noise_rule", message_regex="ResizeObserver",
                       classification="benign")
    assert data["rule"]["pattern"] == "ResizeObserver" and data["rule"]["reason"] == "benign"
    data = fails(app, s, "configure", what="noise_rule", rules=[
        {"match_spec": {"message_regex": "a", "url_regex": "b"}}])
    assert "exactly one" in data["message"] and data["retryable"] is False
    data = fails(app, s, "configure", what="noise_rule", rules=[
        {"match_spec": {"url_regex": "b", "status_min": 400}}])
    assert "status_min" in data["message"]
    data = fails(app, s, "configure", what="noise_rule", rules=[])
    assert data["param"] == "rules"


# -- sequences, generate, interact ------------------------------------------------------------------


def test_published_sequence_modes(app):
    s = session_for(app, "A")
    ok(app, s, "configure", what="save_sequence", name="login",
       steps=[{"what": "navigate", "url": "https://app.test/login"}])
    summary, data = ok(app, s, "configure", what="list_sequences")
    assert [q["name"] for q in data["sequences"]] == ["login"]
    assert data["aliases"][0]["preferred"] == 'what:"save_sequence" + sequence_action:"list"'
    assert len(ok(app, s, "configure", what="get_sequence", name="login")[1]["steps"]) == 1
    ok(app, s, "configure", action="delete_sequence", name="login")
    assert ok(app, s, "configure", what="list_sequences")[1]["sequences"] == []


def test_generate_annotation_report_runs_analyze_annotations(app):
    s = session_for(app, "A")
    out = call(app, s, "generate", what="annotation_report")
    cmds = answer_all(app, {"annotations": [{"id": "a1", "note": "button is misaligned"}],
                            "total": 1, "draw_mode_active": False})
    assert [c.type for c in cmds] == ["annotations"]
    _, summary, data = parsed(out)
    assert summary.startswith("1 annotation(s)")
    assert data["annotations"][0]["note"] == "button is misaligned"
    assert data["aliases"][0]["preferred"] == 'analyze {what:"annotations"}'


def test_interact_action_alias(app):
    s = session_for(app, "A")
    out = call(app, s, "interact", action="navigate", url="https://app.test/next")
    cmds = answer_all(app, {"url": "https://app.test/next", "title": "Next"})
    assert cmds, "navigate reached the extension"
    err, summary, data = parsed(out)
    assert not err and data["aliases"][0] == {"published": "action", "preferred": "what"}


# -- the error contract ------------------------------------------------------------------------


def test_errors_carry_retryable_and_retry_after_ms(clock):
    assert InvalidParam("x").to_json()["retryable"] is False
    assert GasolineError("gone", code="no_data").to_json()["retryable"] is False
    for error in (ExtensionTimeout("slow"), QueueFull("full"), TooManyClients("many")):
        body = error.to_json()
        assert body["retryable"] is True and body["retry"], body
        assert "retry_after_ms" not in body
    limiter = SlidingWindowLimiter(clock, limit=1, window=10.0)
    limiter.acquire("A")
    clock.advance(2.5)
    with pytest.raises(RateLimited) as info:
        limiter.acquire("A")
    body = info.value.to_json()
    assert body["retryable"] is True and body["retry_after_ms"] == 7500
    assert body["retry"] == "Wait 7.5 s before calling again."
    # Explicit values win; details cannot override the contract's fields.
    body = GasolineError("x", code="extension_timeout", retryable=False, retryable_x=1).to_json()
    assert body["retryable"] is False
    body = GasolineError("x", retry_after_ms=-5).to_json()
    assert body["retry_after_ms"] == 0
    text = error_result(QueueFull("full"))["content"][0]["text"]
    assert json.loads(text.partition("\n")[2])["retryable"] is True


def test_tool_errors_over_mcp_carry_retryable(app):
    s = session_for(app, "A")
    data = fails(app, s, "observe", what="nope")
    assert data["error"] == "unknown_mode" and data["retryable"] is False

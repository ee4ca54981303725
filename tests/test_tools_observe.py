"""observe: every built mode through the real MCP server, on a task.Clock (no sockets)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from _mcp_calls import call, parse, session_for, start, tool_calls

from gasoline.app import Config, build
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    EXTENSION_LOGS,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)
from gasoline.tools.observe import MODES, parse_path
from gasoline.tools.schemas import OBSERVE_MODES

PENDING = object()


ok, error = tool_calls("observe")


@pytest.fixture
def s(app):
    return session_for(app, "me")


def connect(app, settings=None):
    """The extension syncs once (connected, with settings); answers come through sync too."""
    app.extension.sync({"settings": settings or {
        "tracked_tab_id": 7, "tracked_tab_url": "http://localhost:3000/app",
        "tracked_tab_title": "App", "pilot_enabled": True, "tracking_enabled": True}})


def answer(app, result_for):
    """Play the extension: take the queued commands and report C{result_for(command)}."""
    commands = app.extension.commands.deliverable()
    assert commands, "no command was queued"
    app.extension.sync({"command_results": [
        {"id": c.id, "status": "complete", "result": result_for(c)} for c in commands],
        "last_command_ack": commands[-1].id})
    return commands


def test_every_observe_mode_of_the_tool_surface_is_built():
    assert set(OBSERVE_MODES) - set(MODES) == set()


def test_recordings_capture_the_actions_between_start_and_stop(app, s):
    app.store.add(ACTIONS, [{"type": "click", "timestamp": 1, "url": "http://x/before"}])
    err, summary, _ = call(app, s, "configure", {"what": "recording_start", "name": "login"})
    assert not err and "login started" in summary
    assert call(app, s, "configure", {"what": "recording_start"})[2]["error"] == "invalid_param"
    app.store.add(ACTIONS, [{"type": "input", "timestamp": 2, "url": "http://x/login",
                             "value": "bob"},
                            {"type": "click", "timestamp": 3, "url": "http://x/login"}])
    app.store.add(CONSOLE, [{"level": "error", "message": "bad"}])
    summary, listed = ok(app, s, what="recordings")
    assert listed["active"]["name"] == "login" and "running" in summary
    err, summary, saved = call(app, s, "configure", {"action": "recording_stop"})
    assert not err and saved["action_count"] == 2 and saved["errors"] == 1
    assert saved["start_url"] == "http://x/login"
    _, listed = ok(app, s, what="recordings")
    assert [r["name"] for r in listed["recordings"]] == ["login"] and listed["active"] is None
    _, acts = ok(app, s, what="recording_actions", name="login")
    assert [a["type"] for a in acts["actions"]] == ["input", "click"]
    assert error(app, s, what="recording_actions", name="nope")["error"] == "no_data"
    assert error(app, s, what="recording_actions")["error"] == "missing_param"
    # Another client sees none of it; the reserved namespace is hidden and protected.
    other = session_for(app, "other")
    assert ok(app, other, what="recordings")[1]["recordings"] == []
    err, _, listing = call(app, s, "configure", {"what": "load"})
    assert not any(n.startswith("gasoline:") for n in listing["namespaces"])
    err, _, refused = call(app, s, "configure", {"what": "store", "key": "k", "value": 1,
                                                 "namespace": "gasoline:recordings"})
    assert err and refused["error"] == "invalid_param"


def test_results_say_data_age_and_extension_state(app, s, clock):
    app.store.add(CONSOLE, [{"level": "error", "message": "x"}])
    clock.advance(12.5)
    summary, data = ok(app, s, what="errors")
    assert data["data_age_seconds"] == 12.5 and data["extension_connected"] is False
    assert "extension not connected" in summary
    connect(app)
    _, data = ok(app, s, what="logs", after_cursor=0)
    # Once connected, that goes without saying; the read still says how old its data is.
    assert "extension_connected" not in data and data["data_age_seconds"] == 12.5


def test_network_bodies_are_redacted_and_filtered(app, s):
    app.store.add(NETWORK_BODIES, [
        {"method": "POST", "url": "http://localhost:3000/api/login", "status": 200,
         "request_body": json.dumps({"user": "bob", "password": "hunter2"}),
         "request_headers": {"Authorization": "Bearer eyJhbGciOiJIUzI1NiJ9.abc.def-ghi"},
         "response_body": json.dumps({"ok": True, "user": {"id": 5}})},
        {"method": "GET", "url": "http://localhost:3000/api/items", "status": 500,
         "headers": [{"name": "Authorization", "value": "Bearer s3cr3t-token-value"}]},
    ])
    summary, data = ok(app, s, what="network_bodies")
    text = json.dumps(data)
    assert "hunter2" not in text and "s3cr3t-token-value" not in text
    assert "eyJhbGciOiJIUzI1NiJ9" not in text and "[REDACTED:" in text
    assert "bob" in text  # non-secret parts stay readable
    _, post = ok(app, s, what="network_bodies", after_cursor=0, method="post")
    assert [e["url"] for e in post["entries"]] == ["http://localhost:3000/api/login"]
    _, failed = ok(app, s, what="network_bodies", after_cursor=0, status_min=500)
    assert [e["status"] for e in failed["entries"]] == [500]
    _, by_url = ok(app, s, what="network_bodies", after_cursor=0, url="/items")
    assert by_url["count"] == 1


def test_network_bodies_body_path_and_body_key_extract_from_json(app, s):
    app.store.add(NETWORK_BODIES, [
        {"method": "GET", "url": "http://x/a", "status": 200,
         "response_body": json.dumps({"data": {"items": [{"id": 1}, {"id": 2}]}})},
        {"method": "GET", "url": "http://x/b", "status": 200, "response_body": "not json"},
    ])
    _, data = ok(app, s, what="network_bodies", body_path="data.items[1].id")
    assert data["entries"][0]["extracted"] == {"response_body": 2}
    assert data["entries"][1]["extracted"] is None
    assert "response_body" not in data["entries"][0]
    _, data = ok(app, s, what="network_bodies", after_cursor=0, body_key="id")
    assert data["entries"][0]["extracted_key"] == {"response_body": [1, 2]}
    assert parse_path("$.a[0].b") == ["a", 0, "b"] and parse_path("/a/0") == ["a", 0]


def test_pagination_cursors_limit_and_last_n(app, s):
    app.store.add(CONSOLE, [{"level": "log", "message": str(i)} for i in range(10)])
    _, page = ok(app, s, what="logs", limit=4)
    assert page["cursor"] == 4 and page["has_more"] is True
    _, last = ok(app, s, what="logs", last_n=3)
    assert [e["message"] for e in last["entries"]] == ["7", "8", "9"]
    assert s.state.cursors[CONSOLE] == 4  # last_n did not move the cursor
    _, since = ok(app, s, what="logs", since_cursor=8)
    assert [e["message"] for e in since["entries"]] == ["8", "9"]
    assert error(app, s, what="logs", limit=5000)["error"] == "invalid_param"
    assert error(app, s, what="logs", after_cursor=-1)["error"] == "invalid_param"


def test_reading_errors_does_not_skip_logs_and_clear_moves_both_cursors(app, s):
    app.store.add(CONSOLE, [{"level": "log", "message": "boot"},
                            {"level": "error", "message": "boom"},
                            {"level": "log", "message": "after"}])
    _, errors = ok(app, s, what="errors")
    assert [e["message"] for e in errors["entries"]] == ["boom"]
    _, logs = ok(app, s, what="logs")  # its own cursor: nothing was skipped by the errors read
    assert [e["message"] for e in logs["entries"]] == ["boot", "boom", "after"]
    app.store.add(CONSOLE, [{"level": "error", "message": "second"}])
    _, logs = ok(app, s, what="logs")
    assert [e["message"] for e in logs["entries"]] == ["second"]
    _, errors = ok(app, s, what="errors")  # and reading logs did not skip this error
    assert [e["message"] for e in errors["entries"]] == ["second"]
    app.store.add(CONSOLE, [{"level": "error", "message": "old news"}])
    failed, _summary, _data = call(app, s, "configure", {"what": "clear", "buffer": "logs"})
    assert not failed
    assert ok(app, s, what="errors")[1]["entries"] == []
    assert ok(app, s, what="logs")[1]["entries"] == []


def test_missed_entries_explain_cursor_expiry(tmp_path, clock):
    app = build(Config(state_dir=tmp_path, persist=False, max_entries=3), clock)
    session = session_for(app, "x")
    app.store.add(CONSOLE, [{"level": "error", "message": str(i)} for i in range(5)])
    summary, data = ok(app, session, what="errors")
    assert data["missed"] == 2 and "cursor_expired" in summary


def test_scope_current_page_keeps_the_tracked_tab(app, s):
    connect(app)
    app.store.add(CONSOLE, [{"level": "error", "message": "mine", "tabId": 7},
                            {"level": "error", "message": "other", "tabId": 8}])
    _, data = ok(app, s, what="errors", scope="current_page")
    assert [e["message"] for e in data["entries"]] == ["mine"]
    assert data["filters"]["tracked_tab_id"] == 7
    _, data = ok(app, s, what="errors", after_cursor=0, tab_id=8)
    assert [e["message"] for e in data["entries"]] == ["other"]


def test_websocket_events_and_status(app, s):
    app.store.add(WEBSOCKET_EVENTS, [
        {"event": "open", "id": "ws1", "url": "ws://x/feed"},
        {"event": "message", "id": "ws1", "direction": "incoming", "data": "hi"},
        {"event": "message", "id": "ws1", "direction": "outgoing", "data": "yo"},
        {"event": "open", "id": "ws2", "url": "ws://x/other"},
        {"event": "close", "id": "ws2", "code": 1000},
    ])
    _, data = ok(app, s, what="websocket_events", connection_id="ws1", direction="outgoing")
    assert [e["data"] for e in data["entries"]] == ["yo"]
    summary, status = ok(app, s, what="websocket_status")
    assert [c["id"] for c in status["active"]] == ["ws1"]
    assert [c["id"] for c in status["closed"]] == ["ws2"]
    assert "1 open" in summary


def test_actions_history_timeline_and_pilot(app, s):
    connect(app)
    app.store.add(ACTIONS, [
        {"type": "click", "timestamp": 1_700_000_001_000, "url": "http://x/"},
        {"type": "navigate", "timestamp": 1_700_000_002_000, "from_url": "http://x/",
         "to_url": "http://x/next"},
        {"type": "click", "timestamp": 1_700_000_004_000, "source": "ai"},
    ])
    app.store.add(CONSOLE, [{"level": "error", "message": "boom",
                             "ts": "2023-11-14T22:13:23.000Z"}])
    _, acts = ok(app, s, what="actions", source="ai")
    assert acts["count"] == 1
    _, hist = ok(app, s, what="history")
    assert [h["to_url"] for h in hist["entries"]] == ["http://x/next"]
    _, tl = ok(app, s, what="timeline")
    kinds = [e["kind"] for e in tl["entries"]]
    times = [e["t"] for e in tl["entries"]]
    assert times == sorted(times) and "console" in kinds and kinds.count("actions") == 3
    summary, pilot = ok(app, s, what="pilot")
    assert pilot["pilot_enabled"] is True and "enabled" in summary
    _, page = ok(app, s, what="page")
    assert page["page"]["url"] == "http://localhost:3000/app"


def test_vitals_error_bundles_summaries_and_extension_logs(app, s):
    app.store.add_performance([{"url": "http://x/", "timestamp": 1,
                                "timing": {"largest_contentful_paint": 1200, "load": 900}}])
    _, vitals = ok(app, s, what="vitals")
    assert vitals["count"] == 1
    app.store.add(CONSOLE, [
        {"level": "log", "message": "clicked", "ts": "2023-11-14T22:13:20.000Z"},
        {"level": "error", "message": "boom 1", "ts": "2023-11-14T22:13:21.000Z"},
        {"level": "error", "message": "boom 2", "ts": "2023-11-14T22:13:22.000Z"},
    ])
    _, bundles = ok(app, s, what="error_bundles", window_seconds=5)
    assert len(bundles["bundles"]) == 2
    _, summary = ok(app, s, what="summarized_logs")
    assert summary["total"] == 3
    app.store.add(EXTENSION_LOGS, [{"level": "warn", "message": "content script slow"}])
    _, ext = ok(app, s, what="extension_logs", min_level="warn")
    assert ext["count"] == 1


def test_extension_bound_modes_fail_fast_when_disconnected(app, s):
    for what in ("screenshot", "storage", "indexeddb"):
        assert error(app, s, what=what)["error"] == "extension_disconnected"


def test_waterfall_and_tabs_come_from_the_extension_when_connected(app, s):
    app.store.add(WATERFALL, [{"name": "old", "url": "http://x/old.js", "duration": 1}])
    _, buffered = ok(app, s, what="network_waterfall")
    assert buffered["source"] == "buffer" and buffered["count"] == 1
    connect(app)
    out = start(app, s, "observe", {"what": "network_waterfall", "url": ".css"})
    assert out == []
    cmds = answer(app, lambda c: {"entries": [{"url": "http://x/a.css", "duration": 3},
                                              {"url": "http://x/b.js", "duration": 4}]})
    assert cmds[0].type == "waterfall" and cmds[0].owner == "me"
    _, _, data = parse(out[0])
    assert data["source"] == "extension" and [e["url"] for e in data["entries"]] == [
        "http://x/a.css"]
    out = start(app, s, "observe", {"what": "tabs"})
    answer(app, lambda c: {"tabs": [{"id": 7, "url": "http://localhost:3000/app"},
                                    {"id": 9, "url": "http://other/"}]})
    _, summary, tabs = parse(out[0])
    assert summary.startswith("2 tabs open") and tabs["tabs"][0]["tracked"] is True


def test_screenshot_is_saved_under_the_state_dir(app, s, tmp_path):
    connect(app)
    out = start(app, s, "observe", {"what": "screenshot"})
    png = base64.b64encode(b"\x89PNG fake image").decode()
    answer(app, lambda c: {"data_url": "data:image/png;base64," + png, "url": "http://x/"})
    err, summary, data = parse(out[0])
    assert not err, data
    path = Path(data["path"])
    assert path.parent == tmp_path / "screenshots" and path.read_bytes() == b"\x89PNG fake image"
    assert "data_url" not in data and summary.startswith("screenshot saved to")


def test_storage_and_indexeddb_go_through_the_router_and_are_redacted(app, s):
    connect(app)
    out = start(app, s, "observe", {"what": "storage"})
    cmds = answer(app, lambda c: {"localStorage": {"theme": "dark", "auth_token": "abc123xyz"},
                                  "cookies": [{"name": "session", "value": "s-42"}]})
    assert cmds[0].type == "state_capture"
    _, _, data = parse(out[0])
    assert data["storage"]["localStorage"]["theme"] == "dark"
    assert "abc123xyz" not in json.dumps(data)
    out = start(app, s, "observe", {"what": "indexeddb"})
    cmds = answer(app, lambda c: {"result": {"databases": [{"name": "db", "stores": []}]}})
    assert cmds[0].type == "execute" and "readonly" in cmds[0].params["script"]
    _, summary, data = parse(out[0])
    assert summary.startswith("1 IndexedDB databases")


def test_command_results_and_pending_commands_are_the_callers_own(app, s):
    connect(app)
    other = session_for(app, "other")
    cid = app.router.submit("me", "dom", {"selector": "h1"})
    _, pending = ok(app, s, what="pending_commands")
    assert pending["count"] == 1 and pending["commands"][0]["correlation_id"] == cid
    assert ok(app, other, what="pending_commands")[1]["count"] == 0
    assert error(app, other, what="command_result", correlation_id=cid)["error"] == "no_data"
    answer(app, lambda c: {"matches": []})
    _, result = ok(app, s, what="command_result", correlation_id=cid)
    assert result["status"] == "complete"
    assert error(app, s, what="command_result")["error"] == "missing_param"
    assert ok(app, s, what="failed_commands")[1]["count"] == 0


def test_bad_arguments_are_invalid_param_results(app, s):
    assert error(app, s, what="errors", level="loud")["error"] == "invalid_param"
    assert error(app, s, what="network_bodies", status_min="x")["error"] == "invalid_param"
    assert error(app, s, what="websocket_events", direction="sideways")["error"] == "invalid_param"
    assert error(app, s, what="errors", scope="current_page")["error"] == "no_data"
    assert error(app, s, what="timeline", source="nowhere")["error"] == "invalid_param"

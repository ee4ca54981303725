"""The extension ingest routes (extension-protocol.md §2, §4) through StubTreq on a Clock."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
from _stub_daemon import StubDaemon
from gasoline.testing import stub_request
from treq.testing import StubTreq

from gasoline.http.guards import Guard
from gasoline.http.routes import ROUTES, Caller
from gasoline.http.site import GasolineRoot
from gasoline.http.ingest import IngestAPI
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    EXTENSION_LOGS,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)
from gasoline.http.ingest import is_extension_client
from gasoline.testing import EXTENSION_HEADERS

URL = "http://127.0.0.1:7890"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake image bytes").decode()


class Daemon(StubDaemon):
    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        self.stopped = []
        self.app.shutdown.stop = lambda: self.stopped.append(self.clock.seconds())

    def call(self, method, path, body=None, headers=EXTENSION_HEADERS, raw=None):
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        r, b = stub_request(self.treq, method, URL + path, data=data, headers=headers)
        return r.code, json.loads(b), r

    def post(self, path, body=None, **kw):
        return self.call("POST", path, body, **kw)

    def items(self, buffer):
        return self.app.store.read(buffer).items


@pytest.fixture
def d(tmp_path):
    return Daemon(tmp_path)


CONSOLE_ENTRY = {
    "ts": "2026-11-26T01:00:00.000Z", "url": "http://localhost:3000/", "message": "hello",
    "source": "app.js:1", "level": "log", "type": "console", "args": ["hello"], "tabId": 12,
}


@pytest.mark.parametrize(
    "value,ok",
    [(b"gasoline-extension", True), (b"gasoline-extension/0.7.9", True),
     (b"gasoline-extension-offscreen", True), (b"gasoline-extension-other", False),
     (b"agent-1", False), (None, False), (b"", False)],
)
def test_extension_header_gate(value, ok):
    assert is_extension_client(value) is ok


#: Every route the policy gives the extension, but the WebSocket link and the public identity
#: (GET /pairing: local callers read it too, see gasoline.http.pairing).
_EXTENSION_ROUTES = [(m, r.pattern) for r in ROUTES if r.caller is Caller.EXTENSION
                     and r.pattern not in ("/pairing", "/extension/cdp") for m in r.methods]


@pytest.mark.parametrize("method,path", _EXTENSION_ROUTES)
def test_every_extension_route_refuses_requests_without_the_extension_header(d, method, path):
    assert len(_EXTENSION_ROUTES) >= 15
    code, body, _ = d.call(method, path, {}, headers={"Content-Type": "application/json",
                                                      "X-Gasoline-Client": "some-agent"})
    assert code == 403
    assert body["error"].startswith("forbidden")
    assert d.stopped == []


@pytest.mark.parametrize("method,path,body", [
    ("GET", "/snapshot", None), ("POST", "/clear", {}), ("DELETE", "/clear", None),
    ("DELETE", "/logs", None), ("POST", "/test-boundary", {"test_id": "t-1", "action": "start"}),
    ("POST", "/shutdown", {})])
def test_the_admin_routes_answer_an_admin_caller_without_the_extension_header(d, method, path, body):
    """The policy makes them ADMIN routes (no browser origin, the key when set): the operator and
    CI call them as themselves, not by naming themselves the extension."""
    assert next(r for r in ROUTES if r.pattern == path and method in r.methods).caller \
        is Caller.ADMIN
    code, answer, _ = d.call(method, path, body, headers={"Content-Type": "application/json"})
    assert code == 200, answer
    d.clock.advance(0.1)
    assert len(d.stopped) == (path == "/shutdown")


def test_logs_stores_valid_entries_and_counts_rejected(d):
    entries = [
        CONSOLE_ENTRY,
        {"level": "error", "type": "exception", "message": "x", "stack": "s", "_errorId": "e1"},
        {"level": "fatal"},            # unknown level
        {"message": "no level"},       # missing level
        {"level": ["log"]},            # unhashable level
        "a string",
        None,
        [1, 2],
    ]
    code, body, _ = d.post("/logs", {"entries": entries})
    assert code == 200
    assert body == {"received": 2, "rejected": 6, "entries": 2}
    stored = d.items(CONSOLE)
    assert stored[0] == CONSOLE_ENTRY  # unknown fields kept, camelCase tabId untouched
    assert stored[1]["_errorId"] == "e1"
    code, body, _ = d.post("/logs", {"entries": [CONSOLE_ENTRY]})
    assert body["entries"] == 3


def test_logs_entry_over_1_mb_is_rejected_not_400(d):
    big = {"level": "log", "message": "m" * (1024 * 1024)}
    code, body, _ = d.post("/logs", {"entries": [big, CONSOLE_ENTRY]})
    assert code == 200 and body["received"] == 1 and body["rejected"] == 1


def test_logs_entry_nested_too_deep_to_store_is_rejected(d):
    deep = {"level": "log", "args": json.loads("[" * 300 + "]" * 300)}
    code, body, _ = d.post("/logs", {"entries": [deep, CONSOLE_ENTRY]})
    assert code == 200 and body["received"] == 1 and body["rejected"] == 1
    assert d.items(CONSOLE) == [CONSOLE_ENTRY]


@pytest.mark.parametrize(
    "raw,fragment",
    [(b"{not json", "invalid JSON"), (b"", "invalid JSON"), (b"[]", "expected a JSON object"),
     (b'"x"', "expected a JSON object"), (b"{}", "missing array field 'entries'"),
     (b'{"entries":{}}', "must be an array"), (b'{"entries":"abc"}', "must be an array"),
     (b"\xff\xfe", "invalid JSON")],
)
def test_logs_bad_bodies_are_400_json(d, raw, fragment):
    code, body, _ = d.post("/logs", raw=raw)
    assert code == 400
    assert fragment in body["error"]


def test_delete_logs_clears_the_console_buffer(d):
    d.post("/logs", {"entries": [CONSOLE_ENTRY] * 3})
    code, body, _ = d.call("DELETE", "/logs")
    assert (code, body) == (200, {"cleared": True})
    assert d.items(CONSOLE) == []


@pytest.mark.parametrize(
    "path,field,buffer",
    [("/network-bodies", "bodies", NETWORK_BODIES), ("/enhanced-actions", "actions", ACTIONS),
     ("/websocket-events", "events", WEBSOCKET_EVENTS)],
)
def test_batch_routes_store_objects_and_answer_status_count(d, path, field, buffer):
    good = [{"url": "http://a/", "type": "click", "id": "ws1", "event": "open"},
            {"url": "http://b/", "id": "ws1", "event": "message"}]
    code, body, _ = d.post(path, {field: good + [1, "x"]})
    assert code == 200
    assert body["status"] == "ok" and body["count"] == 2 and body["rejected"] == 2
    assert d.items(buffer) == good
    code, body, _ = d.post(path, {field: "nope"})
    assert code == 400


def test_websocket_events_feed_the_connection_table(d):
    d.post("/websocket-events", {"events": [
        {"type": "websocket", "event": "open", "id": "c1", "url": "ws://x/"},
        {"type": "websocket", "event": "message", "id": "c1", "direction": "incoming", "data": "hi"},
    ]})
    active = d.app.store.websocket_status()["active"]
    assert [(c["id"], c["messages"]["incoming"]) for c in active] == [("c1", 1)]


def test_websocket_events_over_the_rate_limit_get_429_with_retry_after(d):
    a = d.app
    ingest = IngestAPI(a.clock, a.store, a.extension, a.daemon.screenshots, a.shutdown,
                       ws_events_per_second=150)
    d.treq = StubTreq(GasolineRoot(Guard(), [ingest]))
    batch = {"events": [{"event": "message", "id": "c"}] * 100}
    assert d.post("/websocket-events", batch)[0] == 200
    code, body, r = d.post("/websocket-events", batch)
    assert code == 429
    assert r.headers.getRawHeaders(b"retry-after") == [b"1"]
    assert body["error"].startswith("rate limited")
    assert len(d.items(WEBSOCKET_EVENTS)) == 100
    d.clock.advance(1)
    assert d.post("/websocket-events", batch)[0] == 200
    assert len(d.items(WEBSOCKET_EVENTS)) == 200


def test_performance_snapshots_keep_the_latest_per_url(d):
    code, body, _ = d.post("/performance-snapshots", {"snapshots": [
        {"url": "http://a/", "timing": {"load": 1}}, {"url": "http://b/", "timing": {"load": 2}},
        {"url": "http://a/", "timing": {"load": 3}}, 7,
    ]})
    assert (code, body["status"], body["count"], body["rejected"]) == (200, "ok", 3, 1)
    assert d.app.store.performance["http://a/"]["timing"]["load"] == 3
    assert len(d.app.store.performance) == 2


def test_network_waterfall_entries_get_the_page_url(d):
    code, body, _ = d.post("/network-waterfall", {
        "entries": [{"name": "a.js", "duration": 3}, {"name": "b.css", "page_url": "http://other/"}],
        "page_url": "http://page/",
    })
    assert (code, body["count"]) == (200, 2)
    assert [e["page_url"] for e in d.items(WATERFALL)] == ["http://page/", "http://other/"]


def test_extension_status_and_extension_logs(d):
    status = {"type": "status", "tracking_enabled": True, "tracked_tab_id": 4,
              "tracked_tab_url": "http://x/", "message": "m", "extension_connected": True,
              "timestamp": 1}
    assert d.post("/api/extension-status", status)[:2] == (200, {"status": "ok"})
    assert d.app.extension.status == status
    code, body, _ = d.post("/extension-logs", {"logs": [
        {"level": "info", "message": "token=abcdef123456 sent"}, 5]})
    assert (code, body) == (200, {"status": "ok", "count": 1})
    assert "abcdef123456" not in json.dumps(d.items(EXTENSION_LOGS))


def test_legacy_pending_queries_and_dom_result(d):
    commands = d.app.extension.commands
    cmd = commands.enqueue("dom", {"selector": "h1"}, "agent-a")
    results = []
    commands.on_result(results.append)
    code, body, _ = d.call("GET", "/pending-queries")
    assert (code, body) == (200, {"queries": [cmd.to_json()]})
    assert d.app.extension.connected  # a legacy poll counts as a sign of life
    code, body, _ = d.post("/dom-result", {"id": cmd.id, "result": {"count": 1}})
    assert (code, body) == (200, {"status": "ok", "resolved": True})
    code, body, _ = d.post("/dom-result", {"id": cmd.id, "result": {"count": 2}})
    assert (code, body) == (200, {"status": "ok", "resolved": False})
    assert [r["result"] for r in results] == [{"count": 1}]
    assert d.call("GET", "/pending-queries")[1] == {"queries": []}
    assert d.post("/dom-result", {"result": 1})[0] == 400
    d.app.extension.stop()


def test_query_result_resolves_and_ignores_unknown_ids(d):
    commands = d.app.extension.commands
    cmd = commands.enqueue("execute", {}, "agent", correlation_id="corr-1")
    results = []
    commands.on_result(results.append)
    assert d.post("/query-result", {"id": "q-999", "status": "complete"})[:2] == (
        200, {"status": "ok", "resolved": False})
    code, body, _ = d.post("/query-result", {"id": cmd.id, "status": "error", "error": "boom"})
    assert (code, body["status"]) == (200, "ok")
    assert [(r["id"], r["status"], r["error"], r["correlation_id"]) for r in results] == [
        (cmd.id, "error", "boom", "corr-1")]


def test_screenshot_is_saved_under_the_state_dir(d, tmp_path):
    code, body, _ = d.post("/screenshots", {
        "data_url": "data:image/png;base64," + PNG, "url": "http://localhost:3000/page",
        "correlation_id": "corr/../x"})
    assert code == 200
    assert body["correlation_id"] == "corr/../x"
    path = body["path"]
    assert os.path.dirname(path) == str(tmp_path / "screenshots")
    assert body["filename"] == os.path.basename(path) and body["filename"].endswith(".png")
    assert "/" not in body["filename"] and ".." not in body["filename"]
    with open(path, "rb") as f:
        assert f.read() == base64.b64decode(PNG)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_screenshot_camel_case_fields_from_the_error_path_are_accepted(d):
    code, body, _ = d.post("/screenshots", {
        "dataUrl": "data:image/jpeg;base64," + PNG, "url": "http://x/", "errorId": "err-7",
        "errorType": "exception"})
    assert code == 200
    assert body["filename"].endswith(".jpg") and body["correlation_id"] == "err-7"


def test_screenshot_rate_limit_is_one_per_second_per_client(d):
    shot = {"data_url": "data:image/png;base64," + PNG, "url": "http://x/"}
    assert d.post("/screenshots", shot)[0] == 200
    code, body, r = d.post("/screenshots", shot)
    assert code == 429 and r.headers.getRawHeaders(b"retry-after") == [b"1"]
    other = dict(EXTENSION_HEADERS, **{"X-Gasoline-Client": "gasoline-extension-offscreen"})
    assert d.post("/screenshots", shot, headers=other)[0] == 200
    d.clock.advance(1)
    assert d.post("/screenshots", shot)[0] == 200


def test_screenshot_with_query_id_resolves_that_command(d):
    commands = d.app.extension.commands
    cmd = commands.enqueue("screenshot", {}, "agent-s")
    results = []
    commands.on_result(results.append)
    code, body, _ = d.post("/screenshots", {
        "data_url": "data:image/png;base64," + PNG, "url": "http://x/", "query_id": cmd.id})
    assert code == 200
    assert results[0]["id"] == cmd.id and results[0]["owner"] == "agent-s"
    assert results[0]["result"]["path"] == body["path"]


@pytest.mark.parametrize(
    "payload",
    [{}, {"data_url": 5}, {"data_url": "http://not-a-data-url"},
     {"data_url": "data:image/png;base64,!!!notbase64"}, {"data_url": "data:text/html;base64,PGI+"},
     {"data_url": "data:image/png;base64,"}],
)
def test_bad_screenshots_are_400(d, payload):
    code, body, _ = d.post("/screenshots", payload)
    assert code == 400 and "error" in body


def test_test_boundary_tags_entries_and_snapshot_filters_by_test(d):
    code, body, _ = d.post("/test-boundary", {"test_id": "t1", "action": "start"})
    assert code == 200
    assert body == {"test_id": "t1", "action": "start", "timestamp": "2023-11-14T22:13:20.000Z"}
    d.post("/logs", {"entries": [dict(CONSOLE_ENTRY, message="during")]})
    d.post("/test-boundary", {"test_id": "t1", "action": "end"})
    d.post("/logs", {"entries": [dict(CONSOLE_ENTRY, message="after")]})
    code, snap, _ = d.call("GET", "/snapshot?test_id=t1")
    assert code == 200
    assert [e["message"] for e in snap["logs"]] == ["during"]
    assert snap["test_id"] == "t1"
    assert set(snap) == {"timestamp", "test_id", "logs", "websocket_events", "network_bodies",
                         "enhanced_actions", "stats"}
    assert d.post("/test-boundary", {"test_id": "", "action": "start"})[0] == 400
    assert d.post("/test-boundary", {"test_id": "t2", "action": "pause"})[0] == 400


def test_snapshot_since_filters_by_entry_time(d):
    d.post("/logs", {"entries": [
        dict(CONSOLE_ENTRY, ts="2026-01-01T00:00:00.000Z", message="old"),
        dict(CONSOLE_ENTRY, ts="2026-06-01T00:00:00.000Z", message="new", level="error"),
    ]})
    d.post("/enhanced-actions", {"actions": [{"type": "click", "timestamp": 1767225600000 + 10}]})
    code, snap, _ = d.call("GET", "/snapshot?since=2026-03-01T00:00:00Z")
    assert [e["message"] for e in snap["logs"]] == ["new"]
    assert snap["stats"]["errors"] == 1 and snap["stats"]["total_logs"] == 1
    assert snap["enhanced_actions"] == []
    code, snap, _ = d.call("GET", "/snapshot?since=1767225600001")
    assert [e["message"] for e in snap["logs"]] == ["new"] and len(snap["enhanced_actions"]) == 1
    assert d.call("GET", "/snapshot?since=yesterday")[0] == 400


@pytest.mark.parametrize("method", ["POST", "DELETE"])
def test_clear_empties_every_buffer(d, method):
    d.post("/logs", {"entries": [CONSOLE_ENTRY] * 2})
    d.post("/enhanced-actions", {"actions": [{"type": "click"}]})
    code, body, _ = d.call(method, "/clear")
    assert (code, body) == (200, {"cleared": True, "entries_removed": 3})
    assert d.items(CONSOLE) == [] and d.items(ACTIONS) == []


def test_shutdown_answers_then_stops_after_a_short_delay(d):
    code, body, _ = d.post("/shutdown")
    assert (code, body) == (200, {"status": "shutting_down"})
    assert d.stopped == []
    d.post("/shutdown")
    d.clock.advance(0.1)
    assert len(d.stopped) == 1  # once, however many times it was asked


def test_shutdown_without_a_stop_callable_is_503(d):
    d.app.shutdown.stop = None
    code, body, _ = d.post("/shutdown")
    assert code == 503 and "error" in body


def test_unknown_path_and_wrong_method_are_json(d):
    code, body, _ = d.call("GET", "/definitely/not/here")
    assert code == 404 and body == {"error": "not found", "path": "/definitely/not/here"}
    code, body, r = d.call("PUT", "/logs")  # (GET /logs is an agent's cursor read)
    assert code == 405 and r.headers.getRawHeaders(b"allow")
    code, body, _ = d.call("PUT", "/clear")
    assert code == 405

"""The MCP dispatcher: lifecycle, negotiation, methods, tools, resources, cancellation, progress."""

from __future__ import annotations

import json

import jsonschema
import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE
from gasoline.mcp import jsonrpc
from gasoline.mcp.server import LATEST_VERSION, SUPPORTED_VERSIONS
from gasoline.tools import load_tables
from gasoline.tools.observe import ERRORS_CURSOR
from gasoline.mcp.tools import Tool
from gasoline.tools.schemas import (
    ANALYZE_MODES,
    CONFIGURE_MODES,
    GENERATE_MODES,
    INTERACT_MODES,
    OBSERVE_MODES,
    TOOL_MODES,
)

PENDING = object()


@pytest.fixture
def server(app):
    return app.mcp


def call(server, session, msg, emit=None):
    out = []
    server.handle(session, msg, emit).addCallback(out.append)
    return out[0] if out else PENDING


def req(id, method, params=None):
    return jsonrpc.request(id, method, params if params is not None else {})


def init(server, session, version=LATEST_VERSION, capabilities=None):
    r = call(server, session, req(0, "initialize", {
        "protocolVersion": version, "capabilities": capabilities or {},
        "clientInfo": {"name": "t", "version": "1"}}))
    call(server, session, jsonrpc.notification("notifications/initialized"))
    return r


def ready(server, client_id=None, **kw):
    session = server.open_session(client_id, "streamable")
    init(server, session, **kw)
    return session


def tool(server, session, name, args, emit=None):
    r = call(server, session, req(7, "tools/call", {"name": name, "arguments": args}), emit)
    return r


def tool_json(result):
    text = result["result"]["content"][0]["text"]
    summary, _, payload = text.partition("\n")
    return summary, json.loads(payload)


# -- lifecycle ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_initialize_answers_the_requested_supported_version(server, version):
    session = server.open_session(None, "streamable")
    r = init(server, session, version)
    assert r["result"]["protocolVersion"] == version
    assert session.protocol_version == version
    assert r["result"]["serverInfo"]["name"] == "gasoline"
    assert "gasoline://guide" in r["result"]["instructions"]
    caps = r["result"]["capabilities"]
    assert caps["logging"] == {} and caps["resources"]["subscribe"] is True and "tools" in caps


def test_initialize_with_an_unknown_version_answers_the_latest(server):
    session = server.open_session(None, "streamable")
    assert init(server, session, "1999-01-01")["result"]["protocolVersion"] == LATEST_VERSION


def test_initialize_without_protocol_version_is_invalid_params(server):
    session = server.open_session(None, "streamable")
    r = call(server, session, req(1, "initialize", {"capabilities": {}}))
    assert r["error"]["code"] == jsonrpc.INVALID_PARAMS and not session.initialized


def test_second_initialize_is_refused(server):
    session = ready(server)
    r = call(server, session, req(2, "initialize", {"protocolVersion": LATEST_VERSION}))
    assert r["error"]["code"] == jsonrpc.INVALID_REQUEST


def test_requests_before_initialize_are_refused_but_ping_is_answered(server):
    session = server.open_session(None, "streamable")
    r = call(server, session, req(1, "tools/list"))
    assert r["error"]["code"] == jsonrpc.INVALID_REQUEST
    assert "before initialize" in r["error"]["message"]
    assert call(server, session, req(2, "ping")) == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_initialized_notification_gets_no_response(server):
    session = server.open_session(None, "streamable")
    init(server, session)
    assert call(server, session, jsonrpc.notification("notifications/initialized")) is None
    assert session.ready


def test_unknown_method_is_method_not_found(server):
    session = ready(server)
    r = call(server, session, req(3, "no/such"))
    assert r["error"]["code"] == jsonrpc.METHOD_NOT_FOUND and r["id"] == 3


def test_malformed_messages_get_invalid_request_with_their_id(server):
    session = ready(server)
    r = call(server, session, {"jsonrpc": "1.0", "id": 5, "method": "ping"})
    assert r["error"]["code"] == jsonrpc.INVALID_REQUEST and r["id"] == 5
    r = call(server, session, {"jsonrpc": "2.0", "id": 6, "method": "ping", "params": [1]})
    assert r["error"]["code"] == jsonrpc.INVALID_PARAMS and r["id"] == 6
    r = call(server, session, [])
    assert r["error"]["code"] == jsonrpc.INVALID_REQUEST and r["id"] is None


# -- batches --------------------------------------------------------------------------------------


def test_batches_are_answered_only_under_2025_03_26(server):
    old = ready(server, version="2025-03-26")
    out = []
    server.handle_batch(old, [req(1, "ping"), jsonrpc.notification("notifications/initialized"),
                              req(2, "tools/list")]).addCallback(out.append)
    assert [r["id"] for r in out[0]] == [1, 2]
    new = ready(server)
    out = []
    server.handle_batch(new, [req(1, "ping")]).addCallback(out.append)
    assert out[0]["error"]["code"] == jsonrpc.INVALID_REQUEST
    assert "2025-03-26" in out[0]["error"]["message"]


def test_initialize_inside_a_batch_is_refused(server):
    session = ready(server, version="2025-03-26")
    out = []
    server.handle_batch(session, [req(9, "initialize", {"protocolVersion": "2025-03-26"})]
                        ).addCallback(out.append)
    assert out[0][0]["error"]["code"] == jsonrpc.INVALID_REQUEST and out[0][0]["id"] == 9


# -- tools ----------------------------------------------------------------------------------------


def test_tools_list_has_five_tools_with_valid_schemas_and_every_mode(server):
    session = ready(server)
    tools = {t["name"]: t for t in call(server, session, req(1, "tools/list"))["result"]["tools"]}
    assert set(tools) == {"observe", "analyze", "generate", "configure", "interact"}
    modes = {"observe": OBSERVE_MODES, "analyze": ANALYZE_MODES, "generate": GENERATE_MODES,
             "configure": CONFIGURE_MODES, "interact": INTERACT_MODES}
    for name, t in tools.items():
        jsonschema.Draft202012Validator.check_schema(t["inputSchema"])
        assert t["description"]
        assert t["inputSchema"]["properties"]["what"]["enum"] == list(modes[name])
    # A few names users know from the published server are there.
    assert {"errors", "logs", "network_waterfall", "error_bundles"} <= set(OBSERVE_MODES)
    assert {"accessibility", "changes", "security_audit"} <= set(ANALYZE_MODES)
    assert {"noise_rule", "health", "checkpoint", "select_tab"} <= set(CONFIGURE_MODES)
    assert {"execute_js", "fill_form_and_submit", "list_interactive"} <= set(INTERACT_MODES)
    assert tools["observe"]["inputSchema"]["properties"]["limit"]["maximum"] == 1000


def test_unknown_tool_and_bad_arguments_are_protocol_errors(server):
    session = ready(server)
    assert tool(server, session, "nope", {})["error"]["code"] == jsonrpc.INVALID_PARAMS
    r = call(server, session, req(1, "tools/call", {"name": "observe", "arguments": [1]}))
    assert r["error"]["code"] == jsonrpc.INVALID_PARAMS
    r = call(server, session, req(1, "tools/call", {"name": 5}))
    assert r["error"]["code"] == jsonrpc.INVALID_PARAMS


_TABLES = load_tables()
_UNBUILT = {tool: [m for m in modes if m not in _TABLES[tool]]
            for tool, (modes, _alias) in TOOL_MODES.items()}


def test_every_listed_mode_is_built():
    # Every mode of every tool's table is built; a mode missing from its table
    # still answers not_implemented (tests/test_tools_infra.py checks that path).
    assert {tool: missing for tool, missing in _UNBUILT.items() if missing} == {}


@pytest.mark.parametrize("name,args", [
    ("observe", {"what": "network_bodies"}),
    ("configure", {"action": "noise_rule"}),
])
def test_built_modes_answer_instead_of_not_implemented(server, name, args):
    # These two were not_implemented before their mode tables existed.
    r = tool(server, ready(server), name, args)["result"]
    assert r["isError"] is False, r


def test_missing_and_unknown_modes_are_tool_errors(server):
    session = ready(server)
    r = tool(server, session, "observe", {})["result"]
    assert r["isError"] and json.loads(r["content"][0]["text"].partition("\n")[2])["error"] == "missing_param"
    r = tool(server, session, "observe", {"what": "everything"})["result"]
    body = json.loads(r["content"][0]["text"].partition("\n")[2])
    assert body["error"] == "unknown_mode" and "errors" in body["valid"]
    r = tool(server, session, "observe", {"what": "errors", "limit": "lots"})["result"]
    assert json.loads(r["content"][0]["text"].partition("\n")[2])["error"] == "invalid_param"


def _logs(app):
    app.store.add(CONSOLE, [
        {"level": "info", "message": "a", "ts": "t1", "url": "http://localhost/x"},
        {"level": "error", "message": "b", "ts": "t2", "url": "http://localhost/x"},
        {"level": "warn", "message": "c", "ts": "t3", "url": "http://localhost/y"},
        {"level": "error", "type": "exception", "message": "d", "ts": "t4"},
        {"level": "error", "type": "network", "message": "e", "status": 500, "ts": "t5"},
    ])


def test_observe_errors_reads_through_the_callers_cursor(server, app):
    _logs(app)
    a = ready(server, "client-a")
    b = ready(server, "client-b")
    summary, data = tool_json(tool(server, a, "observe", {"what": "errors"}))
    assert [e["message"] for e in data["entries"]] == ["b", "d", "e"]
    assert data["cursor"] == 5 and data["has_more"] is False and data["total"] == 5
    assert data["oldest_timestamp"] == "t2" and data["newest_timestamp"] == "t5"
    assert data["extension_connected"] is False and "extension not connected" in summary
    assert a.state.cursors[ERRORS_CURSOR] == 5  # observe errors has its own cursor
    # Nothing new for A; B has its own cursor and sees everything.
    assert tool_json(tool(server, a, "observe", {"what": "errors"}))[1]["count"] == 0
    assert tool_json(tool(server, b, "observe", {"what": "errors"}))[1]["count"] == 3
    app.store.add(CONSOLE, [{"level": "error", "message": "f", "ts": "t6"}])
    assert [e["message"] for e in tool_json(tool(server, a, "observe", {"what": "errors"}))[1]["entries"]] == ["f"]


def test_two_sessions_of_one_client_share_its_cursor(server, app):
    _logs(app)
    one = ready(server, "same")
    two = ready(server, "same")
    assert tool_json(tool(server, one, "observe", {"what": "logs"}))[1]["count"] == 5
    assert tool_json(tool(server, two, "observe", {"what": "logs"}))[1]["count"] == 0


def test_observe_logs_limit_pages_and_filters(server, app):
    _logs(app)
    s = ready(server)
    _, first = tool_json(tool(server, s, "observe", {"what": "logs", "limit": 2}))
    assert [e["message"] for e in first["entries"]] == ["a", "b"]
    assert first["has_more"] is True and first["cursor"] == 2
    _, rest = tool_json(tool(server, s, "observe", {"what": "logs"}))
    assert [e["message"] for e in rest["entries"]] == ["c", "d", "e"]
    _, warn = tool_json(tool(server, s, "observe", {"what": "logs", "min_level": "warn", "after_cursor": 0}))
    assert [e["message"] for e in warn["entries"]] == ["b", "c", "d", "e"]
    _, url = tool_json(tool(server, s, "observe", {"what": "logs", "url": "/y", "after_cursor": 0}))
    assert [e["message"] for e in url["entries"]] == ["c"]
    _, last = tool_json(tool(server, s, "observe", {"what": "errors", "last_n": 2}))
    assert [e["message"] for e in last["entries"]] == ["d", "e"]


def test_observe_reports_entries_missed_to_eviction(tmp_path, clock):
    app = build(Config(state_dir=tmp_path, persist=False, max_entries=3), clock)
    s = ready(app.mcp)
    app.store.add(CONSOLE, [{"level": "error", "message": str(i)} for i in range(5)])
    summary, data = tool_json(tool(app.mcp, s, "observe", {"what": "errors"}))
    assert data["missed"] == 2 and data["count"] == 3 and "evicted" in summary


def test_configure_health_reports_daemon_and_caller(server, app):
    s = ready(server, "me")
    summary, body = tool_json(tool(server, s, "configure", {"what": "health"}))
    assert summary.startswith("Gasoline ") and body["status"] == "ok"
    assert body["you"]["client_id"] == "me" and body["mcp_sessions"] == 1
    assert body["clients"]["active"] >= 1 and "console" in body["buffers"]


def test_a_crashing_tool_is_an_internal_error_result(server):
    def boom(ctx, args):
        raise ZeroDivisionError("nope")

    server.tools.add(Tool("crash", "crashes", {"type": "object"}, boom))
    r = tool(server, ready(server), "crash", {})["result"]
    assert r["isError"] is True and "internal_error" in r["content"][0]["text"]


# -- cancellation, progress, logging, server->client requests ------------------------------------


def _slow_tool(server, clock, seen):
    async def slow(ctx, args):
        ctx.progress(1, 2, "half")
        await deferLater(clock, 10, lambda: None)
        seen.append("finished")
        return {"content": [{"type": "text", "text": "done"}]}

    server.tools.add(Tool("slow", "slow", {"type": "object"},
                          lambda ctx, a: Deferred.fromCoroutine(slow(ctx, a))))


def test_cancelled_notification_cancels_the_in_flight_request(server, clock):
    seen: list = []
    _slow_tool(server, clock, seen)
    s = ready(server)
    r = call(server, s, req("x", "tools/call", {"name": "slow", "arguments": {}}))
    assert r is PENDING and "x" in s.in_flight
    call(server, s, jsonrpc.notification("notifications/cancelled", {"requestId": "x"}))
    assert s.in_flight == {}
    clock.advance(20)
    assert seen == []
    assert clock.getDelayedCalls() != []  # the session's idle timer only
    server.close_all()
    assert clock.getDelayedCalls() == []


def test_progress_is_sent_only_with_a_progress_token(server, clock):
    _slow_tool(server, clock, [])
    s = ready(server)
    sent: list = []
    out = []
    server.handle(s, req(1, "tools/call", {"name": "slow", "arguments": {},
                                           "_meta": {"progressToken": "tok"}}),
                  sent.append).addCallback(out.append)
    assert sent == [jsonrpc.notification("notifications/progress", {
        "progressToken": "tok", "progress": 1, "total": 2, "message": "half"})]
    clock.advance(10)
    assert out[0]["result"]["content"][0]["text"] == "done"
    sent.clear()
    server.handle(s, req(2, "tools/call", {"name": "slow", "arguments": {}}), sent.append)
    clock.advance(10)
    assert sent == []


def test_set_level_validates_and_filters_log_messages(server, app):
    s = ready(server)
    sent: list = []
    assert call(server, s, req(1, "logging/setLevel", {"level": "loud"}))["error"]["code"] == jsonrpc.INVALID_PARAMS
    # Before any setLevel, tool calls send no log records.
    tool(server, s, "observe", {"what": "errors"}, sent.append)
    assert sent == []
    assert call(server, s, req(2, "logging/setLevel", {"level": "debug"}), sent.append)["result"] == {}
    tool(server, s, "observe", {"what": "errors"}, sent.append)
    assert [m["params"]["level"] for m in sent] == ["info", "debug"]
    assert sent[1]["params"]["data"]["tool"] == "observe"
    sent.clear()
    call(server, s, req(3, "logging/setLevel", {"level": "warning"}), sent.append)
    tool(server, s, "observe", {"what": "errors"}, sent.append)
    assert sent == []  # info and debug records are below "warning"
    tool(server, s, "observe", {"what": "nope"}, sent.append)
    assert [m["params"]["level"] for m in sent] == ["warning"]


def test_server_request_to_client_resolves_with_the_client_response(server, clock):
    s = ready(server, capabilities={"sampling": {}})
    sent: list = []

    async def ask(ctx, args):
        answer = await ctx.request_client("sampling/createMessage", {"messages": [], "maxTokens": 1})
        return {"content": [{"type": "text", "text": answer["content"]["text"]}]}

    server.tools.add(Tool("ask", "asks", {"type": "object"},
                          lambda ctx, a: Deferred.fromCoroutine(ask(ctx, a))))
    out = []
    server.handle(s, req(1, "tools/call", {"name": "ask"}), sent.append).addCallback(out.append)
    outgoing = sent[0]
    assert outgoing["method"] == "sampling/createMessage" and out == []
    call(server, s, {"jsonrpc": "2.0", "id": outgoing["id"],
                     "result": {"role": "assistant", "content": {"type": "text", "text": "hi"}}})
    assert out[0]["result"]["content"][0]["text"] == "hi"
    assert s.outgoing == {}


# -- resources ------------------------------------------------------------------------------------


def test_guide_resource_is_listed_and_readable(server):
    s = ready(server)
    listed = call(server, s, req(1, "resources/list"))["result"]["resources"]
    assert "gasoline://guide" in [r["uri"] for r in listed]
    content = call(server, s, req(2, "resources/read", {"uri": "gasoline://guide"}))["result"]["contents"][0]
    assert content["mimeType"] == "text/markdown" and "observe" in content["text"]
    caps = call(server, s, req(3, "resources/read", {"uri": "gasoline://capabilities"}))["result"]
    assert "errors" in json.loads(caps["contents"][0]["text"])["tools"]["observe"]["modes"]
    assert call(server, s, req(4, "resources/templates/list"))["result"] == {"resourceTemplates": []}


def test_unknown_resource_is_resource_not_found(server):
    s = ready(server)
    r = call(server, s, req(1, "resources/read", {"uri": "gasoline://nope"}))
    assert r["error"]["code"] == jsonrpc.RESOURCE_NOT_FOUND
    r = call(server, s, req(2, "resources/subscribe", {"uri": "gasoline://nope"}))
    assert r["error"]["code"] == jsonrpc.RESOURCE_NOT_FOUND
    assert call(server, s, req(3, "resources/read", {}))["error"]["code"] == jsonrpc.INVALID_PARAMS


def test_resource_updates_reach_only_subscribed_sessions(server):
    a = ready(server)
    b = ready(server)
    assert call(server, a, req(1, "resources/subscribe", {"uri": "gasoline://guide"}))["result"] == {}
    assert server.resource_updated("gasoline://guide") == 1
    assert len(a.standalone) == 1 and len(b.standalone) == 0
    call(server, a, req(2, "resources/unsubscribe", {"uri": "gasoline://guide"}))
    assert server.resource_updated("gasoline://guide") == 0


# -- sessions -------------------------------------------------------------------------------------


def test_idle_sessions_close_after_an_hour_and_release_their_client(server, app, clock):
    s = ready(server, "idle-one")
    assert app.registry.get("idle-one").connections == 1
    clock.advance(1800)
    server.touch(s)
    clock.advance(1800)
    assert not s.closed
    clock.advance(1800)
    assert s.closed and s.session_id not in server.sessions
    assert app.registry.get("idle-one").connections == 0
    assert clock.getDelayedCalls() == []


def test_session_ids_are_random_128_bit_hex(server):
    ids = {server.open_session("one-client", "streamable").session_id for _ in range(50)}
    assert len(ids) == 50 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    server.close_all()


def test_observe_redacts_secrets_in_entries(server, app):
    app.store.add(CONSOLE, [{"level": "error", "message": "login failed",
                             "headers": {"Authorization": "Bearer abc"}, "password": "hunter2"}])
    s = ready(server)
    text = tool(server, s, "observe", {"what": "errors"})["result"]["content"][0]["text"]
    assert "hunter2" not in text and "Bearer abc" not in text and "[REDACTED:" in text


def test_before_cursor_pages_backwards_without_moving_the_cursor(server, app):
    app.store.add(CONSOLE, [{"level": "error", "message": str(i), "tabId": i % 2} for i in range(7)])
    s = ready(server)
    summary, page = tool_json(tool(server, s, "observe", {"what": "errors", "before_cursor": 7, "limit": 3}))
    assert [e["message"] for e in page["entries"]] == ["4", "5", "6"]
    assert page["has_more"] is True and page["before_cursor"] == 4 and "older ones waiting" in summary
    _, older = tool_json(tool(server, s, "observe", {"what": "errors", "before_cursor": 4, "limit": 3}))
    assert [e["message"] for e in older["entries"]] == ["1", "2", "3"]
    _, oldest = tool_json(tool(server, s, "observe", {"what": "errors", "before_cursor": 1, "limit": 3}))
    assert [e["message"] for e in oldest["entries"]] == ["0"] and oldest["has_more"] is False
    assert s.state.cursors.get(CONSOLE, 0) == 0
    _, tab = tool_json(tool(server, s, "observe", {"what": "errors", "tab_id": 1}))
    assert [e["message"] for e in tab["entries"]] == ["1", "3", "5"]


def test_at_the_client_limit_the_least_recently_used_quiet_session_makes_room(tmp_path, clock):
    """Only live clients hold slots: a session quiet (no stream, nothing in flight) for
    RECLAIM_MIN_QUIET, named or not, is closed for a newcomer, least recently used first; its
    state stays inheritable for the TTL. A named session quieter than that is not: the newcomer
    is refused. Sessions with an open stream or a request in flight are never closed."""
    from gasoline.core.errors import TooManyClients
    from gasoline.mcp.server import RECLAIM_MIN_QUIET

    app = build(Config(state_dir=tmp_path, persist=False, max_clients=2), clock)
    server = app.mcp
    old = ready(server, "older")
    old.state.kv["k"] = "v"
    clock.advance(RECLAIM_MIN_QUIET)
    named = ready(server, "named")
    new = server.open_session(None, "streamable")
    assert old.closed and not named.closed and not new.closed
    assert app.registry.get("older").gone_at is not None  # kept for the TTL, inheritable
    with pytest.raises(TooManyClients) as refused:  # named was active a moment ago
        ready(server, "older")
    assert "--max-clients 2" in refused.value.message and not named.closed
    clock.advance(RECLAIM_MIN_QUIET)
    new.in_flight[0] = Deferred()  # still busy: named is now the only quiet one
    back = ready(server, "older")
    assert back.state.kv == {"k": "v"} and back.state.inherited
    assert named.closed and not new.closed
    del new.in_flight[0]
    # Busy sessions keep their slots: an open stream, a request in flight.
    back.standalone.attach(lambda event_id, payload: None)
    new.in_flight[1] = Deferred()
    from gasoline.core.errors import TooManyClients

    with pytest.raises(TooManyClients):
        server.open_session("another", "connector")
    server.close_all()

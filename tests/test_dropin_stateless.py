"""Stateless requests (MCP 2026-07-28: no initialize, no session) on POST /mcp and from the
connector's bridge, next to clients that initialize and keep 2025-11-25 behaviour (StubTreq, a
task.Clock, the bridge against a fake daemon)."""

from __future__ import annotations

import json


from gasoline.core.storage.store import CONSOLE
from gasoline.mcp import jsonrpc
from gasoline.mcp.server import STATELESS_CLIENT, STATELESS_VERSION
from test_connector import INIT, INITIALIZED, handshake, make_bridge, send
from test_mcp_http import app, call, client, conn  # noqa: F401  (app, client: fixtures)

STATELESS = {"mcp-protocol-version": STATELESS_VERSION}


def result_json(body):
    text = json.loads(body)["result"]["content"][0]["text"]
    return json.loads(text.partition("\n")[2])


def observe_errors(client, rid, headers):
    response, body = call(client, None, rid, "tools/call",
                          {"name": "observe", "arguments": {"what": "errors"}}, headers)
    assert response.code == 200, body
    return result_json(body)


def test_plain_post_without_initialize_or_session_is_answered(client, app):
    response, body = call(client, None, 1, "tools/list")
    assert response.code == 200
    assert response.headers.getRawHeaders("mcp-session-id") is None
    names = {t["name"] for t in json.loads(body)["result"]["tools"]}
    assert names == {"observe", "analyze", "generate", "configure", "interact"}
    # Nothing is left behind: the request's session is closed and the client holds no
    # connection.
    assert app.mcp.sessions == {}
    assert app.registry.get(STATELESS_CLIENT).connections == 0


def test_stateless_calls_keep_the_named_clients_state_and_isolation(client, app):
    a = {**conn("repo-a"), **STATELESS}
    b = {**conn("repo-b"), **STATELESS}
    app.store.add(CONSOLE, [{"level": "error", "message": "boom"}])
    assert observe_errors(client, 1, a)["count"] == 1
    # Same client, new request, no session: its cursor moved.
    assert observe_errors(client, 2, a)["count"] == 0
    # Another client's cursor is its own.
    assert observe_errors(client, 3, b)["count"] == 1
    # Per-client state written statelessly is read back statelessly.
    response, body = call(client, None, 4, "tools/call", {"name": "configure", "arguments": {
        "what": "store", "key": "k", "value": {"x": 1}}}, a)
    assert response.code == 200
    response, body = call(client, None, 5, "tools/call", {"name": "configure", "arguments": {
        "what": "load", "key": "k"}}, a)
    assert result_json(body)["value"] == {"x": 1}
    response, body = call(client, None, 6, "tools/call", {"name": "configure", "arguments": {
        "what": "load", "key": "k"}}, b)
    assert json.loads(body)["result"]["isError"] is True
    assert app.mcp.sessions == {}
    assert app.registry.get("repo-a").connections == 0


def test_initializing_clients_keep_2025_11_25_behaviour(client, app):
    sid = client.initialize()
    assert sid is not None
    # A 2025-11-25 request without its session is still refused...
    response, body = call(client, None, 2, "tools/list",
                          headers={"mcp-protocol-version": "2025-11-25"})
    assert response.code == 400 and "Mcp-Session-Id" in json.loads(body)["error"]["message"]
    # ...an unknown session is still a 404...
    response, body = call(client, "0" * 32, 2, "tools/list")
    assert response.code == 404 and json.loads(body)["error"]["code"] == jsonrpc.SESSION_NOT_FOUND
    # ...and the session works as before.
    response, body = call(client, sid, 3, "tools/list")
    assert response.code == 200 and response.headers.getRawHeaders("mcp-session-id") == [sid]
    # initialize asking for 2026-07-28 negotiates the newest revision with a handshake.
    response, body = client.post({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {
        "protocolVersion": STATELESS_VERSION, "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}})
    assert json.loads(body)["result"]["protocolVersion"] == "2025-11-25"


def test_connector_form_is_stateless_only_when_it_says_so(client, app):
    h = conn("repo-c")
    # No revision header: the initialized connector's case after a daemon restart; 404 makes it
    # re-create its session (tests/test_mcp_http.py).
    response, body = call(client, None, 1, "tools/list", headers=h)
    assert response.code == 404
    response, body = call(client, None, 1, "tools/list", headers={**h, **STATELESS})
    assert response.code == 200 and "tools" in json.loads(body)["result"]
    # A connection with a live session uses it, whatever the header says.
    client.initialize(headers=h)
    (session,) = app.mcp.sessions.values()
    response, _ = call(client, None, 2, "tools/list", headers={**h, **STATELESS})
    assert response.code == 200 and list(app.mcp.sessions.values()) == [session]
    assert not session.closed and session.transport == "connector"


def test_stateless_notifications_batches_and_bad_input(client, app):
    response, body = client.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert response.code == 202 and body == b""
    response, body = client.post([jsonrpc.request(1, "ping", {})])
    assert response.code == 400 and "batch" in json.loads(body)["error"]["message"]
    response, body = client.post(None, raw=b"{nope")
    assert response.code == 400 and json.loads(body)["error"]["code"] == jsonrpc.PARSE_ERROR
    response, body = call(client, None, 1, "tools/list",
                          headers={"mcp-protocol-version": "1999-01-01"})
    assert response.code == 400 and STATELESS_VERSION in json.loads(body)["error"]["message"]
    response, body = call(client, None, 1, "no/such/method")
    assert json.loads(body)["error"]["code"] == jsonrpc.METHOD_NOT_FOUND
    assert app.mcp.sessions == {}


def test_bridge_marks_requests_stateless_until_the_agent_initializes():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    send(bridge, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert daemon.stateless_flags == [True]
    daemon.answer(0, {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}})
    assert [json.loads(o) for o in out] == [{"jsonrpc": "2.0", "id": 1,
                                             "result": {"tools": []}}]
    # An agent that initializes gets a session: its requests are not stateless.
    clock2, daemon2, bridge2, out2 = make_bridge()
    handshake(bridge2, daemon2)
    send(bridge2, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert daemon2.stateless_flags == [False, False, False]
    assert INIT["method"] == "initialize" and INITIALIZED["method"].endswith("initialized")

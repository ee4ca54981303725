"""The /session routes on a task.Clock through the whole HTTP surface (StubTreq): no process can
start on a Clock, so every child is reported down with that reason; the routes, the guards, the
idle timeout and the timers are checked without sockets or real time."""

from __future__ import annotations

import json

from treq.testing import StubTreq
from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.common import client_id_for_cwd
from gasoline.testing import client_headers


def make(tmp_path, servers=None, proxy=None, **config):
    path = tmp_path / "servers.json"
    body = {"mcpServers": servers if servers is not None else {"fs": {"command": "fs-server"}}}
    if proxy:
        body["proxy"] = proxy
    path.write_text(json.dumps(body))
    clock = Clock()
    clock.advance(1_700_000_000)
    app = build(Config(state_dir=tmp_path / "state", persist=False, proxy_config=path, **config),
                clock)
    app.services.startService()
    return clock, app, StubTreq(app.resource)


def call(stub, method, path, body=None, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    d = stub.request(method, "http://127.0.0.1:7890" + path, headers=h,
                     data=json.dumps(body).encode() if body is not None else None)
    stub.flush()
    response = d.result
    content = stub.content(response)
    stub.flush()
    return response.code, (json.loads(content.result) if content.result else None)


def test_init_on_a_clock_answers_with_every_child_down_and_its_reason(tmp_path):
    clock, app, stub = make(tmp_path)
    # The connector's client id (the working directory's hash) only with its proof.
    cid = client_id_for_cwd(str(tmp_path))
    code, refused = call(stub, "POST", "/session/init", {"workingDirectory": str(tmp_path)},
                         {"X-Gasoline-Client": cid})
    assert code == 403 and refused["error"] == "client_proof" and app.proxy.sessions == {}
    code, info = call(stub, "POST", "/session/init", {"workingDirectory": str(tmp_path)},
                      client_headers(app, cid))
    assert code == 200
    fs = info["servers"]["fs"]
    assert fs["status"] == "down" and "cannot start processes" in fs["error"]
    assert info["tools"] == []
    sid = info["sessionId"]
    session = app.proxy.sessions[sid]
    assert session.client_id == client_id_for_cwd(str(tmp_path))
    assert app.mcp.sessions[sid].extra_tools is not None
    code, refused = call(stub, "GET", f"/session/{sid}")  # the id alone is not enough
    assert code == 403 and refused["error"] == "session_owner"
    code, described = call(stub, "GET", f"/session/{sid}", headers=client_headers(app, cid))
    assert code == 200 and described["servers"]["fs"]["status"] == "down"
    code, ended = call(stub, "DELETE", f"/session/{sid}", headers=client_headers(app, cid))
    assert (code, ended) == (200, {"sessionId": sid, "ended": True})
    assert sid not in app.mcp.sessions and app.proxy.sessions == {}
    app.services.stopService()
    assert clock.getDelayedCalls() == []


def test_the_idle_timeout_ends_a_session_that_nobody_uses(tmp_path):
    clock, app, stub = make(tmp_path, proxy={"sessionIdleTimeout": 60})
    sid = call(stub, "POST", "/session/init", {"workingDirectory": str(tmp_path)})[1]["sessionId"]
    clock.pump([20, 20])
    assert sid in app.proxy.sessions
    call(stub, "GET", f"/session/{sid}")  # reading its description is not use
    code, _ = call(stub, "POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                   {"Mcp-Session-Id": sid})
    assert code == 200  # a request on its MCP session is
    clock.pump([30, 29])  # 59 s after the ping
    assert sid in app.proxy.sessions
    clock.pump([1])
    assert sid not in app.proxy.sessions and sid not in app.mcp.sessions
    app.services.stopService()
    assert clock.getDelayedCalls() == []


def test_the_api_key_guards_the_session_routes(tmp_path):
    _, app, stub = make(tmp_path, api_key="s3cret")
    code, _ = call(stub, "POST", "/session/init", {"workingDirectory": str(tmp_path)})
    assert code == 401 and app.proxy.sessions == {}
    code, info = call(stub, "POST", "/session/init", {"workingDirectory": str(tmp_path)},
                      {"X-Gasoline-Key": "s3cret"})
    assert code == 200
    code, _ = call(stub, "GET", f"/session/{info['sessionId']}")
    assert code == 401
    app.services.stopService()


def test_a_connector_connection_binds_to_a_session_and_an_unknown_one_is_refused(tmp_path):
    _, app, stub = make(tmp_path)
    sid = call(stub, "POST", "/session/init", {"workingDirectory": str(tmp_path)},
               client_headers(app, "abc123"))[1]["sessionId"]
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}}
    connector = {**client_headers(app, "abc123"), "X-Gasoline-Connection": "c1"}
    code, answer = call(stub, "POST", "/mcp", init,
                        {**connector, "X-Gasoline-Proxy-Session": "nope"})
    assert code == 404 and answer["error"]["data"]["error"] == "unknown_session"
    # Another client's connector cannot bind it (it would call the session's tools).
    code, answer = call(stub, "POST", "/mcp", init, {
        **client_headers(app, "other"), "X-Gasoline-Connection": "c2",
        "X-Gasoline-Proxy-Session": sid})
    assert code == 404 and answer["error"]["data"]["error"] == "session_owner"
    code, answer = call(stub, "POST", "/mcp", init, {**connector, "X-Gasoline-Proxy-Session": sid})
    assert code == 200 and answer["result"]["capabilities"]["tools"]["listChanged"] is True
    bound = [s for s in app.mcp.sessions.values() if s.transport == "connector"]
    assert len(bound) == 1 and bound[0].extra_tools is not None
    # Ending the connection leaves the session; ending the session unbinds the connection.
    call(stub, "DELETE", f"/session/{sid}", headers=client_headers(app, "abc123"))
    assert bound[0].extra_tools is None and not bound[0].closed
    app.services.stopService()


def test_a_connection_opened_before_its_proxy_session_is_bound_on_a_later_request(tmp_path):
    """The connector's fast initialize opens its MCP session before it knows the proxy session."""
    _, app, stub = make(tmp_path)
    connector = {**client_headers(app, "abc123"), "X-Gasoline-Connection": "c1"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}}
    assert call(stub, "POST", "/mcp", init, connector)[0] == 200
    session = next(s for s in app.mcp.sessions.values() if s.transport == "connector")
    assert session.extra_tools is None
    sid = call(stub, "POST", "/session/init", {"workingDirectory": str(tmp_path)},
               client_headers(app, "abc123"))[1]["sessionId"]
    code, _ = call(stub, "POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "ping"},
                   {**connector, "X-Gasoline-Proxy-Session": sid})
    assert code == 200 and session.extra_tools is not None
    assert session in app.proxy.sessions[sid].bound
    app.services.stopService()

"""L{gasoline.proxy.remote.RemoteServer} on a task.Clock against an in-memory resource
(treq's StubTreq): the streamable-HTTP client's edge cases, without sockets."""

from __future__ import annotations

import json

from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.web.resource import Resource

from gasoline.proxy.peer import ChildDown
from gasoline.proxy.remote import RemoteServer, display_url


class FakeMcp(Resource):
    """A streamable-HTTP MCP endpoint: initialize gives session ``s1``, then ``s2``, ...;
    ``tools/call`` answers per C{self.mode}."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[bytes, dict, dict]] = []
        self.sessions = 0
        self.live: str | None = None
        self.mode = "ok"

    def render_POST(self, request):
        msg = json.loads(request.content.read())
        headers = {k.decode().lower(): v[0].decode()
                   for k, v in request.requestHeaders.getAllRawHeaders()}
        self.seen.append((request.method, msg, headers))
        request.setHeader(b"content-type", b"application/json")
        method = msg.get("method")
        if method == "initialize":
            self.sessions += 1
            self.live = f"s{self.sessions}"
            request.setHeader(b"mcp-session-id", self.live.encode())
            return json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake"}}}).encode()
        if headers.get("mcp-session-id") != self.live:
            request.setResponseCode(404)
            return (b'{"jsonrpc":"2.0","id":null,'
                    b'"error":{"code":-32001,"message":"Session not found"}}')
        if "id" not in msg:
            request.setResponseCode(202)
            return b""
        if method == "tools/list":
            return json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}}).encode()
        if self.mode == "unauthorized":
            request.setResponseCode(401)
            return b'{"error":"bad token"}'
        if self.mode == "no-id":
            return b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"nope"}}'
        return json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
            "content": [{"type": "text", "text": "hi"}]}}).encode()

    def render_GET(self, request):
        request.setResponseCode(405)
        return b""

    def render_DELETE(self, request):
        self.seen.append((request.method, {}, {}))
        return b""


def _server(resource: FakeMcp, clock: Clock) -> tuple[RemoteServer, StubTreq]:
    stub = StubTreq(resource)
    server = RemoteServer(clock, "r", "http://mcp.example/mcp?key=secret",
                          {"Authorization": "Bearer t0k"}, timeout=5, start_timeout=5,
                          capabilities={}, on_request=lambda *a: {},
                          on_notification=lambda *a: None, http=stub)
    return server, stub


def _started(server: RemoteServer, stub: StubTreq) -> None:
    d = server.ensure_started()
    stub.flush()
    assert d.called and server.state == "ready", server.last_error


def _call(server: RemoteServer, stub: StubTreq):
    results: list = []
    server.request("tools/call", {"name": "echo", "arguments": {}}).addBoth(results.append)
    stub.flush()
    assert results, "the call is still pending"
    return results[0]


def test_display_url_hides_query_credentials_and_fragment():
    assert display_url("https://u:p@h.example:8443/mcp?key=s#f") == "https://h.example:8443/mcp"
    assert display_url("http://[::1]:9000/mcp") == "http://[::1]:9000/mcp"


def test_handshake_sends_headers_session_id_and_protocol_version():
    resource, clock = FakeMcp(), Clock()
    server, stub = _server(resource, clock)
    _started(server, stub)
    assert server.session_id == "s1" and [t["name"] for t in server.tools] == ["echo"]
    assert _call(server, stub)["content"][0]["text"] == "hi"
    methods = [m.get("method") for _, m, _ in resource.seen]
    assert methods == ["initialize", "notifications/initialized", "tools/list", "tools/call"]
    first, later = resource.seen[0][2], resource.seen[-1][2]
    assert first["authorization"] == "Bearer t0k" and "mcp-session-id" not in first
    assert later["mcp-session-id"] == "s1" and later["mcp-protocol-version"] == "2025-06-18"
    assert "application/json" in later["accept"] and "text/event-stream" in later["accept"]


def test_http_errors_fail_the_call_with_the_status():
    resource, clock = FakeMcp(), Clock()
    server, stub = _server(resource, clock)
    _started(server, stub)
    resource.mode = "unauthorized"
    failure = _call(server, stub)
    assert failure.check(ChildDown) and failure.value.code == "server_http_error"
    assert "HTTP 401" in failure.value.message and "headers" in failure.value.message
    assert "bad token" in server.stderr_tail()
    resource.mode = "no-id"  # a JSON answer that is not the response: no waiting for a timeout
    failure = _call(server, stub)
    assert failure.check(ChildDown) and "without a response" in failure.value.message
    assert server.state == "ready"


def test_a_forgotten_session_ends_the_run_and_a_new_initialize_follows():
    resource, clock = FakeMcp(), Clock()
    server, stub = _server(resource, clock)
    _started(server, stub)
    resource.live = "restarted-server"
    failure = _call(server, stub)
    assert failure.check(ChildDown) and server.state == "down"
    assert "HTTP 404" in server.last_error
    clock.advance(0.5)  # the first back-off
    stub.flush()
    assert server.state == "ready" and server.session_id == "s2" and server.restarts == 1
    assert _call(server, stub)["content"][0]["text"] == "hi"


def test_stop_ends_the_servers_session_with_delete():
    resource, clock = FakeMcp(), Clock()
    server, stub = _server(resource, clock)
    _started(server, stub)
    done: list = []
    server.stop().addBoth(done.append)
    stub.flush()
    assert done == [None] and server.state == "closed"
    assert resource.seen[-1][0] == b"DELETE"
    failure = []
    server.ensure_started().addErrback(failure.append)
    assert failure and failure[0].check(ChildDown)

"""The legacy HTTP+SSE transport (2024-11-05): GET /mcp/sse + POST /mcp/messages/<session-id>."""

from __future__ import annotations

import json

import pytest

from gasoline.http.mcp_http import McpHTTP
from gasoline.testing import client_headers
from support import Streams
from treq.testing import StubTreq

from gasoline.core.storage.store import CONSOLE
from gasoline.mcp import jsonrpc

BASE = "http://localhost"


class Legacy:
    def __init__(self, app) -> None:
        self.app = app
        self.stub = StubTreq(app.resource)
        self.streams = Streams()

    def open(self, headers=None):
        out: list = []
        self.stub.get(BASE + "/mcp/sse", headers={"accept": "text/event-stream", **(headers or {})}
                      ).addCallback(out.append)
        self.stub.flush()
        response = out[0]
        chunks: list = []
        response.done = []
        if response.code == 200:
            self.streams.collect(response, chunks.append).addBoth(response.done.append)
            self.stub.flush()
        return response, chunks

    def post(self, path: str, body=None, raw: bytes | None = None):
        out: list = []
        data = raw if raw is not None else json.dumps(body).encode()
        self.stub.post(BASE + path, data=data, headers={"content-type": "application/json"}
                       ).addCallback(out.append)
        self.stub.flush()
        content: list = []
        out[0].content().addCallback(content.append)
        self.stub.flush()
        return out[0], content[0]

    def drop_connections(self) -> None:
        self.streams.drop()
        self.stub.flush()


def sse_events(chunks):
    out = []
    for block in b"".join(chunks).split(b"\n\n"):
        ev = {}
        for line in block.split(b"\n"):
            if line and not line.startswith(b":"):
                k, _, v = line.partition(b": ")
                ev[k.decode()] = v.decode()
        if ev:
            out.append(ev)
    return out


def endpoint(chunks) -> str:
    first = sse_events(chunks)[0]
    assert first["event"] == "endpoint"
    return first["data"]


@pytest.fixture
def legacy(app):
    return Legacy(app)


def initialize(legacy, path):
    legacy.post(path, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    legacy.post(path, {"jsonrpc": "2.0", "method": "notifications/initialized"})


def test_sse_stream_has_the_headers_and_the_endpoint_event(legacy, app):
    response, chunks = legacy.open()
    assert response.code == 200
    assert response.headers.getRawHeaders("content-type") == ["text/event-stream"]
    assert response.headers.getRawHeaders("cache-control") == ["no-cache"]
    assert response.headers.getRawHeaders("x-accel-buffering") == ["no"]
    path = endpoint(chunks)
    assert path.startswith("/mcp/messages/")
    sid = path.rsplit("/", 1)[1]
    assert len(sid) == 32 and app.mcp.sessions[sid].transport == "sse"


def test_posts_get_202_and_answers_arrive_as_message_events(legacy, app):
    _, chunks = legacy.open()
    path = endpoint(chunks)
    response, body = legacy.post(path, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert response.code == 202 and body == b"Accepted"
    legacy.stub.flush()
    msgs = [e for e in sse_events(chunks) if e.get("event") == "message"]
    answer = json.loads(msgs[0]["data"])
    assert answer["id"] == 1 and answer["result"]["protocolVersion"] == "2024-11-05"
    assert msgs[0]["id"]
    legacy.post(path, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    app.store.add(CONSOLE, [{"level": "error", "message": "boom"}])
    legacy.post(path, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "observe", "arguments": {"what": "errors"}}})
    legacy.stub.flush()
    msgs = [json.loads(e["data"]) for e in sse_events(chunks) if e.get("event") == "message"]
    # notifications/initialized produced no message: the second message answers the tool call.
    assert [m["id"] for m in msgs] == [1, 2]
    assert '"message":"boom"' in msgs[1]["result"]["content"][0]["text"]


def test_unknown_session_is_404(legacy):
    response, body = legacy.post("/mcp/messages/" + "f" * 32, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.code == 404 and json.loads(body)["error"]["code"] == jsonrpc.SESSION_NOT_FOUND


def test_bad_json_is_400_and_the_stream_survives(legacy):
    _, chunks = legacy.open()
    path = endpoint(chunks)
    response, body = legacy.post(path, raw=b"{nope")
    assert response.code == 400 and json.loads(body)["error"]["code"] == jsonrpc.PARSE_ERROR
    legacy.post(path, {"jsonrpc": "2.0", "id": 3, "method": "ping"})
    legacy.stub.flush()
    assert json.loads(sse_events(chunks)[-1]["data"]) == {"jsonrpc": "2.0", "id": 3, "result": {}}


def test_wrong_types_are_answered_with_errors_on_the_stream(legacy):
    _, chunks = legacy.open()
    path = endpoint(chunks)
    initialize(legacy, path)
    legacy.post(path, {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": "x"})
    legacy.post(path, {"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": 5}})
    legacy.stub.flush()
    errors = [json.loads(e["data"]) for e in sse_events(chunks) if e.get("event") == "message"][-2:]
    assert [(m["id"], m["error"]["code"]) for m in errors] == [(4, jsonrpc.INVALID_PARAMS),
                                                               (5, jsonrpc.INVALID_PARAMS)]


def test_get_only_on_sse_and_post_only_on_messages(legacy):
    response, _ = legacy.post("/mcp/sse", {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.code == 405


def test_disconnect_ends_the_session_and_releases_the_client(legacy, app):
    _, chunks = legacy.open()
    sid = endpoint(chunks).rsplit("/", 1)[1]
    client_id = app.mcp.sessions[sid].client_id
    assert app.registry.get(client_id).connections == 1
    legacy.drop_connections()
    assert sid not in app.mcp.sessions
    assert app.registry.get(client_id).connections == 0
    response, _ = legacy.post("/mcp/messages/" + sid, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.code == 404


def test_idle_session_is_dropped_after_an_hour(legacy, app, clock):
    response, chunks = legacy.open()
    path = endpoint(chunks)
    sid = path.rsplit("/", 1)[1]
    clock.advance(3000)
    legacy.post(path, {"jsonrpc": "2.0", "id": 1, "method": "ping"})  # activity resets the timer
    clock.advance(3000)
    assert sid in app.mcp.sessions
    clock.advance(700)
    legacy.stub.flush()
    assert sid not in app.mcp.sessions
    assert response.done  # the stream was closed
    assert clock.getDelayedCalls() == []


def test_notification_flood_does_not_disturb_another_session(legacy, app):
    _, a_chunks = legacy.open()
    _, b_chunks = legacy.open()
    a, b = endpoint(a_chunks), endpoint(b_chunks)
    initialize(legacy, a)
    initialize(legacy, b)
    for i in range(300):
        assert legacy.post(a, {"jsonrpc": "2.0", "method": "notifications/x", "params": {"i": i}})[0].code == 202
    legacy.post(b, {"jsonrpc": "2.0", "id": 9, "method": "ping"})
    legacy.stub.flush()
    assert json.loads(sse_events(b_chunks)[-1]["data"])["id"] == 9
    # A's flood produced no messages at all (notifications are not answered).
    assert len([e for e in sse_events(a_chunks) if e.get("event") == "message"]) == 1


def test_each_sse_session_gets_its_own_client_unless_it_names_one(legacy, app):
    _, one = legacy.open()
    _, two = legacy.open()
    _, named = legacy.open(client_headers(app, "repo-x"))
    ids = [app.mcp.sessions[endpoint(c).rsplit("/", 1)[1]].client_id for c in (one, two, named)]
    assert ids[0] != ids[1] and ids[2] == "repo-x"
    # Naming an id without its proof is refused, never served as another id.
    refused, _ = legacy.open({"x-gasoline-client": "repo-x"})
    assert refused.code == 403


def test_open_streams_get_keepalive_comments_until_they_close(legacy, app, clock):
    http = app.resource.handlers.api(McpHTTP)
    http.keepalive_service.startService()
    response, chunks = legacy.open()
    assert len(http.open_streams) == 1
    clock.advance(25)
    legacy.stub.flush()
    assert b": keepalive\n\n" in b"".join(chunks)
    legacy.drop_connections()
    assert http.open_streams == set()
    http.keepalive_service.stopService()
    assert clock.getDelayedCalls() == []


def test_huge_post_is_413_and_the_session_keeps_working(legacy, app):
    _, chunks = legacy.open()
    path = endpoint(chunks)
    app.resource.handlers.api(McpHTTP).max_body = 1000
    response, body = legacy.post(path, {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "a" * 5000}})
    assert response.code == 413 and json.loads(body)["error"]["code"] == jsonrpc.INVALID_REQUEST
    legacy.post(path, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
    legacy.stub.flush()
    assert json.loads(sse_events(chunks)[-1]["data"]) == {"jsonrpc": "2.0", "id": 2, "result": {}}

"""Streamable HTTP at /mcp and the connector's form of it, through the whole HTTP surface (StubTreq)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import Streams
from treq.testing import StubTreq

from gasoline.http.mcp_http import McpHTTP
from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE
from gasoline.testing import client_headers
from gasoline.mcp import jsonrpc
from gasoline.mcp.tools import Tool

URL = "http://localhost/mcp"
BOTH = "application/json, text/event-stream"
BASE = {"content-type": "application/json", "accept": BOTH}


def init_msg(id=1, version="2025-11-25"):
    return {"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


class Client:
    """A tiny HTTP client over StubTreq that keeps the responses' bodies and headers."""

    def __init__(self, app) -> None:
        self.app = app
        self.stub = StubTreq(app.resource)
        self.streams = Streams()
        _APP[:] = [app]  # conn() proves client ids with this daemon's client key

    def request(self, method: str, body=None, headers=None, url=URL, raw: bytes | None = None):
        out: list = []
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        d = self.stub.request(method, url, data=data, headers={**BASE, **(headers or {})})
        d.addCallback(out.append)
        self.stub.flush()
        response = out[0]
        content: list = []
        response.content().addCallback(content.append)
        self.stub.flush()
        return response, (content[0] if content else None)

    def post(self, body=None, headers=None, **kw):
        return self.request("POST", body, headers, **kw)

    def stream(self, method: str, body=None, headers=None, url=URL):
        """Open a streaming response; return (response, chunks list) and keep collecting."""
        out: list = []
        data = None if body is None else json.dumps(body).encode()
        self.stub.request(method, url, data=data, headers={**BASE, **(headers or {})}).addCallback(out.append)
        self.stub.flush()
        response = out[0]
        chunks: list = []
        response.done = []
        self.streams.collect(response, chunks.append).addBoth(response.done.append)
        self.stub.flush()
        return response, chunks

    def drop_connections(self) -> None:
        """Every client connection goes away (the client closed its streams)."""
        self.streams.drop()
        self.stub.flush()

    def initialize(self, version="2025-11-25", headers=None) -> str | None:
        response, body = self.post(init_msg(version=version), headers)
        assert response.code == 200, body
        sid = response.headers.getRawHeaders("mcp-session-id")
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                  {**(headers or {}), **({"mcp-session-id": sid[0]} if sid else {})})
        return sid[0] if sid else None


def events(chunks: list[bytes]) -> list[dict]:
    """Parse SSE chunks into events ({id, event, data, retry})."""
    out = []
    for block in b"".join(chunks).split(b"\n\n"):
        if not block.strip():
            continue
        ev: dict = {}
        for line in block.split(b"\n"):
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            ev[name.decode()] = value[1:].decode() if value.startswith(b" ") else value.decode()
        if ev:
            out.append(ev)
    return out


def messages(chunks: list[bytes]) -> list[dict]:
    return [json.loads(e["data"]) for e in events(chunks) if e.get("data")]


@pytest.fixture
def app(tmp_path, clock):
    built = build(Config(state_dir=tmp_path, persist=False, max_clients=50), clock)
    _APP[:] = [built]  # conn() proves client ids with this daemon's client key
    return built


_APP: list = []


@pytest.fixture
def client(app):
    return Client(app)


def call(client, sid, id, method, params=None, headers=None):
    h = {"mcp-session-id": sid} if sid else {}
    return client.post(jsonrpc.request(id, method, params or {}), {**h, **(headers or {})})


# -- session lifecycle ----------------------------------------------------------------------------


def test_initialize_issues_a_random_session_id_with_a_json_answer(client):
    response, body = client.post(init_msg())
    assert response.code == 200
    assert response.headers.getRawHeaders("content-type") == ["application/json"]
    sid = response.headers.getRawHeaders("mcp-session-id")[0]
    assert len(sid) == 32 and int(sid, 16) >= 0
    assert json.loads(body)["result"]["protocolVersion"] == "2025-11-25"
    other, _ = client.post(init_msg())
    assert other.headers.getRawHeaders("mcp-session-id")[0] != sid


def test_request_without_session_id_is_400_and_unknown_session_is_404(client):
    client.initialize()
    # A 2025-11-25 request needs its session (without any revision it is a stateless
    # 2026-07-28 request: tests/test_dropin_stateless.py).
    response, body = call(client, None, 2, "tools/list", headers={
        "mcp-protocol-version": "2025-11-25"})
    assert response.code == 400 and "Mcp-Session-Id" in json.loads(body)["error"]["message"]
    response, body = call(client, "0" * 32, 2, "tools/list")
    assert response.code == 404 and json.loads(body)["error"]["code"] == jsonrpc.SESSION_NOT_FOUND


def test_delete_ends_the_session_and_later_requests_get_404(client, app):
    sid = client.initialize()
    response, _ = client.request("DELETE", headers={"mcp-session-id": sid})
    assert response.code == 204
    assert sid not in app.mcp.sessions
    assert call(client, sid, 3, "ping")[0].code == 404
    assert client.request("DELETE", headers={"mcp-session-id": sid})[0].code == 404


def test_notifications_and_responses_get_202_without_body(client):
    sid = client.initialize()
    response, body = client.post({"jsonrpc": "2.0", "method": "notifications/progress",
                                  "params": {"progressToken": 1, "progress": 1}},
                                 {"mcp-session-id": sid})
    assert response.code == 202 and body == b""
    response, body = client.post({"jsonrpc": "2.0", "id": "gasoline-99", "result": {}},
                                 {"mcp-session-id": sid})
    assert response.code == 202 and body == b""


def test_initialized_notification_has_no_jsonrpc_answer(client):
    response, _ = client.post(init_msg())
    sid = response.headers.getRawHeaders("mcp-session-id")[0]
    response, body = client.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                                 {"mcp-session-id": sid})
    assert response.code == 202 and body == b""


def test_unsupported_protocol_version_header_is_400(client):
    sid = client.initialize()
    response, body = call(client, sid, 2, "ping", headers={"mcp-protocol-version": "2099-01-01"})
    assert response.code == 400 and "MCP-Protocol-Version" in json.loads(body)["error"]["message"]
    for version in ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"):
        assert call(client, sid, 3, "ping", headers={"mcp-protocol-version": version})[0].code == 200


def test_refused_initialize_leaves_no_session(client, app):
    response, body = client.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert response.code == 200 and json.loads(body)["error"]["code"] == jsonrpc.INVALID_PARAMS
    assert response.headers.getRawHeaders("mcp-session-id") is None
    assert app.mcp.sessions == {}


def test_put_is_405_with_allow(client):
    response, _ = client.request("PUT", {})
    assert response.code == 405 and response.headers.getRawHeaders("allow") == ["GET, POST, DELETE"]


# -- guard ----------------------------------------------------------------------------------------


def test_foreign_origin_and_host_are_refused_before_mcp(client, app):
    response, _ = client.post(init_msg(), {"origin": "http://evil.example.com"})
    assert response.code == 403
    response, _ = client.post(init_msg(), {"host": "evil.example.com"})
    assert response.code == 403
    assert app.mcp.sessions == {}
    # A page on a loopback origin is a web page too.
    response, _ = client.post(init_msg(), {"origin": "http://localhost:7890"})
    assert response.code == 403 and app.mcp.sessions == {}


# -- hostile input --------------------------------------------------------------------------------


def test_bad_json_is_400_parse_error(client):
    sid = client.initialize()
    response, body = client.post(raw=b'{"jsonrpc": "2.0", "id": 1, "method": ', headers={"mcp-session-id": sid})
    assert response.code == 400 and json.loads(body)["error"]["code"] == jsonrpc.PARSE_ERROR


def test_wrong_types_are_jsonrpc_errors(client):
    sid = client.initialize()
    h = {"mcp-session-id": sid}
    _, body = client.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": [1, 2]}, h)
    assert json.loads(body)["error"]["code"] == jsonrpc.INVALID_PARAMS
    _, body = client.post({"jsonrpc": "2.0", "id": None, "method": "ping"}, h)
    assert json.loads(body)["error"]["code"] == jsonrpc.INVALID_REQUEST
    _, body = client.post({"jsonrpc": "2.0", "id": 2, "method": 7}, h)
    assert json.loads(body)["error"]["code"] == jsonrpc.INVALID_REQUEST
    response, body = client.post("just a string", h)
    assert response.code == 400 and json.loads(body)["error"]["code"] == jsonrpc.INVALID_REQUEST
    _, body = call(client, sid, 3, "tools/call", {"name": "observe", "arguments": {"what": 12}})
    assert json.loads(body)["result"]["isError"] is True


def test_huge_body_is_413_and_the_session_still_works(client):
    sid = client.initialize()
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * (6 * 1024 * 1024) + b'"}}'
    response, _ = client.post(raw=big, headers={"mcp-session-id": sid})
    assert response.code == 413
    assert call(client, sid, 2, "ping")[0].code == 200


def test_body_over_the_mcp_limit_is_413(client, app):
    sid = client.initialize()
    app.resource.handlers.api(McpHTTP).max_body = 1000
    big = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "a" * 2000}}
    response, body = client.post(big, {"mcp-session-id": sid})
    assert response.code == 413 and "1000 bytes" in json.loads(body)["error"]["message"]


def test_non_json_content_type_is_415(client):
    sid = client.initialize()
    response, _ = client.post(raw=b"ping", headers={"mcp-session-id": sid, "content-type": "text/plain"})
    assert response.code == 415


def test_notification_flood_does_not_disturb_another_session(client, app):
    a = client.initialize()
    b = client.initialize()
    app.store.add(CONSOLE, [{"level": "error", "message": "x"}])
    for i in range(300):
        response, _ = client.post({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {"i": i}},
                                  {"mcp-session-id": a})
        assert response.code == 202
    _, body = call(client, b, 1, "tools/call", {"name": "observe", "arguments": {"what": "errors"}})
    assert json.loads(json.loads(body)["result"]["content"][0]["text"].partition("\n")[2])["count"] == 1
    assert call(client, a, 2, "ping")[0].code == 200


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12))
def test_arbitrary_json_never_crashes_the_endpoint(client, payload):
    if not hasattr(client, "sid"):
        client.sid = client.initialize()  # one session for every example
    sid = client.sid
    response, body = client.post(payload, {"mcp-session-id": sid})
    assert response.code in (200, 202, 400)
    if response.code != 202:
        assert "error" in json.loads(body) or isinstance(json.loads(body), list)
    assert call(client, sid, "after", "ping")[0].code == 200


# -- batches --------------------------------------------------------------------------------------


def test_batch_is_answered_under_2025_03_26_and_refused_under_2025_11_25(client):
    old = client.initialize("2025-03-26")
    _, body = client.post([jsonrpc.request(1, "ping", {}), jsonrpc.request(2, "tools/list", {})],
                          {"mcp-session-id": old})
    assert [r["id"] for r in json.loads(body)] == [1, 2]
    new = client.initialize()
    _, body = client.post([jsonrpc.request(1, "ping", {})], {"mcp-session-id": new})
    assert json.loads(body)["error"]["code"] == jsonrpc.INVALID_REQUEST


# -- SSE answers and the GET stream ---------------------------------------------------------------


def test_client_accepting_only_sse_gets_an_sse_answer_with_priming_event(client):
    sid = client.initialize()
    response, chunks = client.stream("POST", jsonrpc.request(5, "ping", {}),
                                     {"mcp-session-id": sid, "accept": "text/event-stream"})
    assert response.headers.getRawHeaders("content-type") == ["text/event-stream"]
    assert response.headers.getRawHeaders("cache-control") == ["no-cache"]
    evs = events(chunks)
    assert evs[0]["data"] == "" and evs[0]["id"] and evs[0]["retry"] == "1000"
    assert json.loads(evs[1]["data"]) == {"jsonrpc": "2.0", "id": 5, "result": {}}
    assert response.done  # the stream ends after the answer


def _slow(app, clock):
    from twisted.internet.defer import Deferred
    from twisted.internet.task import deferLater

    async def slow(ctx, args):
        ctx.progress(1, 2)
        await deferLater(clock, 5, lambda: None)
        return {"content": [{"type": "text", "text": "slow done"}]}

    app.mcp.tools.add(Tool("slow", "slow", {"type": "object"},
                           lambda ctx, a: Deferred.fromCoroutine(slow(ctx, a))))


def test_slow_request_is_upgraded_to_sse_with_progress_then_the_answer(client, app, clock):
    _slow(app, clock)
    sid = client.initialize()
    response, chunks = client.stream("POST", jsonrpc.request(9, "tools/call", {
        "name": "slow", "arguments": {}, "_meta": {"progressToken": "p"}}), {"mcp-session-id": sid})
    assert response.headers.getRawHeaders("content-type") == ["text/event-stream"]
    assert messages(chunks)[0]["method"] == "notifications/progress"
    assert not response.done
    clock.advance(5)
    client.stub.flush()
    assert messages(chunks)[-1]["result"]["content"][0]["text"] == "slow done"
    assert response.done


def test_json_only_client_gets_progress_on_the_get_stream(client, app, clock):
    _slow(app, clock)
    sid = client.initialize()
    _, stream = client.stream("GET", headers={"mcp-session-id": sid, "accept": "text/event-stream"})
    out: list = []
    client.stub.request("POST", URL, data=json.dumps(jsonrpc.request(9, "tools/call", {
        "name": "slow", "_meta": {"progressToken": "p"}})).encode(),
        headers={**BASE, "accept": "application/json", "mcp-session-id": sid}).addCallback(out.append)
    client.stub.flush()
    assert messages(stream)[0]["params"]["progressToken"] == "p"
    clock.advance(5)
    client.stub.flush()
    body: list = []
    out[0].json().addCallback(body.append)
    client.stub.flush()
    assert body[0]["result"]["content"][0]["text"] == "slow done"


def test_a_json_answer_given_later_has_a_content_length_not_chunks(client, app, clock):
    # A tool that answers after the request was rendered (a proxied call, say): one JSON body
    # of known length, not Twisted's chunked fallback for responses finished later.
    _slow(app, clock)
    sid = client.initialize()
    out: list = []
    client.stub.request("POST", URL, data=json.dumps(jsonrpc.request(9, "tools/call", {
        "name": "slow"})).encode(),
        headers={**BASE, "accept": "application/json", "mcp-session-id": sid}).addCallback(out.append)
    client.stub.flush()
    assert out == []
    clock.advance(5)
    client.stub.flush()
    body: list = []
    out[0].content().addCallback(body.append)
    client.stub.flush()
    assert json.loads(body[0])["result"]["content"][0]["text"] == "slow done"
    # The client saw a Content-Length (a chunked body has UNKNOWN_LENGTH here).
    assert out[0].length == len(body[0])


def test_get_needs_accept_event_stream(client):
    sid = client.initialize()
    response, _ = client.request("GET", headers={"mcp-session-id": sid, "accept": "application/json"})
    assert response.code == 406


def test_get_stream_carries_event_ids_and_last_event_id_replays(client, app):
    sid = client.initialize()
    call(client, sid, 1, "resources/subscribe", {"uri": "gasoline://guide"})
    h = {"mcp-session-id": sid, "accept": "text/event-stream"}
    response, chunks = client.stream("GET", headers=h)
    assert response.code == 200
    app.mcp.resource_updated("gasoline://guide")
    app.mcp.resource_updated("gasoline://guide")
    client.stub.flush()
    evs = [e for e in events(chunks) if e.get("data")]
    assert [json.loads(e["data"])["method"] for e in evs] == ["notifications/resources/updated"] * 2
    first_id = evs[0]["id"]
    client.drop_connections()
    app.mcp.resource_updated("gasoline://guide")  # sent while the client is away
    _, again = client.stream("GET", headers={**h, "last-event-id": first_id})
    replayed = [e for e in events(again) if e.get("data")]
    assert len(replayed) == 2
    assert replayed[0]["id"] == evs[1]["id"]
    n = lambda event_id: int(event_id.rpartition("-")[2])  # noqa: E731
    assert n(replayed[1]["id"]) == n(evs[1]["id"]) + 1


def test_messages_queued_before_the_get_stream_opens_are_delivered(client, app):
    sid = client.initialize()
    call(client, sid, 1, "resources/subscribe", {"uri": "gasoline://guide"})
    app.mcp.resource_updated("gasoline://guide")
    _, chunks = client.stream("GET", headers={"mcp-session-id": sid, "accept": "text/event-stream"})
    assert messages(chunks)[0]["params"]["uri"] == "gasoline://guide"


def test_delete_ends_open_streams(client):
    sid = client.initialize()
    response, _ = client.stream("GET", headers={"mcp-session-id": sid, "accept": "text/event-stream"})
    client.request("DELETE", headers={"mcp-session-id": sid})
    client.stub.flush()
    assert response.done


# -- connector form -------------------------------------------------------------------------------


def conn(client_id, connection="c1"):
    """The connector form's headers for C{client_id}, with its proof (when it is a well-formed
    id: a malformed one is refused before any proof is read)."""
    try:
        proof = client_headers(_APP[0], client_id)
    except (IndexError, UnicodeError):
        proof = {"X-Gasoline-Client": client_id}
    return {**proof, "x-gasoline-connection": connection}


def test_connector_initialize_and_call_with_plain_json_and_no_session_header(client, app):
    h = conn("repo-a")
    response, body = client.post(init_msg(), h)
    assert response.code == 200 and response.headers.getRawHeaders("mcp-session-id") is None
    assert client.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, h)[0].code == 202
    app.store.add(CONSOLE, [{"level": "error", "message": "x"}])
    response, body = call(client, None, 2, "tools/call", {"name": "observe", "arguments": {"what": "errors"}}, h)
    assert response.headers.getRawHeaders("content-type") == ["application/json"]
    assert json.loads(json.loads(body)["result"]["content"][0]["text"].partition("\n")[2])["count"] == 1
    assert app.registry.get("repo-a").connections == 1


def test_connector_without_initialize_gets_404_then_recovers_by_initializing(client):
    h = conn("repo-b")
    response, body = call(client, None, 1, "tools/list", headers=h)
    assert response.code == 404 and json.loads(body)["error"]["code"] == jsonrpc.SESSION_NOT_FOUND
    client.initialize(headers=h)
    assert call(client, None, 2, "tools/list", headers=h)[0].code == 200


def test_connections_of_one_client_share_state_but_not_session(client, app):
    client.initialize(headers=conn("repo-c", "t1"))
    client.initialize(headers=conn("repo-c", "t2"))
    app.store.add(CONSOLE, [{"level": "error", "message": "x"}])
    args = {"name": "observe", "arguments": {"what": "errors"}}
    _, first = call(client, None, 1, "tools/call", args, conn("repo-c", "t1"))
    _, second = call(client, None, 1, "tools/call", args, conn("repo-c", "t2"))
    count = lambda b: json.loads(json.loads(b)["result"]["content"][0]["text"].partition("\n")[2])["count"]  # noqa: E731
    assert (count(first), count(second)) == (1, 0)
    call(client, None, 2, "logging/setLevel", {"level": "debug"}, conn("repo-c", "t1"))
    levels = {s.log_level for s in app.mcp.sessions.values() if s.client_id == "repo-c"}
    assert levels == {"debug", None}
    assert app.registry.get("repo-c").connections == 2


def test_connector_reinitialize_replaces_its_session(client, app):
    h = conn("repo-d")
    client.initialize(headers=h)
    client.initialize(headers=h)
    assert [s.client_id for s in app.mcp.sessions.values()] == ["repo-d"]
    assert app.registry.get("repo-d").connections == 1


def test_connector_get_streams_that_connections_notifications(client, app):
    h = conn("repo-e")
    client.initialize(headers=h)
    call(client, None, 1, "resources/subscribe", {"uri": "gasoline://guide"}, h)
    response, chunks = client.stream("GET", headers={**h, "accept": "text/event-stream"})
    assert response.code == 200
    app.mcp.resource_updated("gasoline://guide")
    client.stub.flush()
    evs = [e for e in events(chunks) if e.get("data")]
    assert evs and evs[0]["id"] and json.loads(evs[0]["data"])["params"]["uri"] == "gasoline://guide"


def test_connector_with_a_malformed_client_id_is_400(client):
    response, body = client.post(init_msg(), conn("../../etc"))
    assert response.code == 400 and "X-Gasoline-Client must be a client id" in \
        json.loads(body)["error"]["message"]


def test_too_many_clients_is_429(tmp_path, clock):
    app = build(Config(state_dir=tmp_path, persist=False, max_clients=1), clock)
    c = Client(app)
    app.registry.connect("busy")  # a live client (a connection, not a quiet session)
    response, body = c.post(init_msg())
    assert response.code == 429 and json.loads(body)["error"]["data"]["error"] == "too_many_clients"


def test_daemon_stop_closes_sessions_and_their_streams(client, app, clock):
    sid = client.initialize()
    response, _ = client.stream("GET", headers={"mcp-session-id": sid, "accept": "text/event-stream"})
    client.initialize(headers=conn("repo-z"))
    app.mcp.service.stopService()
    client.stub.flush()
    assert response.done and app.mcp.sessions == {} and app.resource.handlers.api(McpHTTP).connections == {}
    assert app.registry.get("repo-z").connections == 0
    assert clock.getDelayedCalls() == []


# -- a plain HTTP client with a fixed id ----------------------------------------------------------


def named(client_id):
    """A hand-wired HTTP client's headers: its id and proof, no X-Gasoline-Connection."""
    return client_headers(_APP[0], client_id)


def test_a_plain_client_with_a_fixed_id_gets_a_session_per_initialize_and_delete_ends_it(
        client, app, clock):
    h = named("fixed-a")
    first = client.initialize(headers=h)
    second = client.initialize(headers=h)
    # Each initialize has its own session id; the second did not replace the first.
    assert first and second and first != second
    assert {s.client_id for s in app.mcp.sessions.values()} == {"fixed-a"}
    assert app.registry.get("fixed-a").connections == 2
    # Both sessions work, and share the client's state (its cursors): one read consumes.
    app.store.add(CONSOLE, [{"level": "error", "message": "x"}])
    args = {"name": "observe", "arguments": {"what": "errors"}}
    count = lambda b: json.loads(json.loads(b)["result"]["content"][0]["text"].partition("\n")[2])["count"]  # noqa: E731
    response, body = call(client, first, 2, "tools/call", args, h)
    assert response.code == 200 and count(body) == 1
    assert count(call(client, second, 2, "tools/call", args, h)[1]) == 0
    # DELETE ends one session; the client is still connected through the other.
    assert client.request("DELETE", headers={**h, "mcp-session-id": first})[0].code == 204
    assert call(client, first, 3, "tools/list", headers=h)[0].code == 404
    assert call(client, second, 3, "tools/list", headers=h)[0].code == 200
    assert app.registry.get("fixed-a").connections == 1
    # The last DELETE: the client is shown idle (not connected), then gone after the TTL.
    assert client.request("DELETE", headers={**h, "mcp-session-id": second})[0].code == 204
    state = app.registry.get("fixed-a")
    assert state is not None and state.connections == 0
    listed = {c["id"]: c["connected"] for c in app.registry.summary()["list"]}
    assert listed["fixed-a"] is False
    app.registry.expire(clock.seconds() + app.registry.ttl)
    assert app.registry.get("fixed-a") is None


def test_a_fixed_id_session_is_not_usable_by_another_client_id_or_without_the_proof(client, app):
    sid = client.initialize(headers=named("fixed-b"))
    response, body = call(client, sid, 2, "tools/list", headers=named("fixed-c"))
    assert response.code == 403 and json.loads(body)["error"]["data"]["error"] == "session_owner"
    response, body = call(client, sid, 2, "tools/list", headers={"X-Gasoline-Client": "fixed-b"})
    assert response.code == 403 and json.loads(body)["error"]["data"]["error"] == "client_proof"
    assert client.request("DELETE", headers={**named("fixed-c"), "mcp-session-id": sid})[0].code \
        == 403
    assert app.registry.get("fixed-b").connections == 1


def test_a_fixed_id_request_without_a_session_stands_alone_as_that_client(client, app):
    response, body = call(client, None, 1, "tools/list",
                          headers={**named("fixed-d"), "MCP-Protocol-Version": "2026-07-28"})
    assert response.code == 200 and "result" in json.loads(body)
    assert app.registry.get("fixed-d") is not None

"""
The bounded stream writer (gasoline.stream.BoundedWriter) on its own, then every kind of stream
the daemon and the connector write, each shown to go through it: pause at the buffer limit, the
drain notice, the stall disconnect, memory released at close. A source scan fails for any new
direct write to a request, a transport or a WebSocket outside the writer.
"""

from __future__ import annotations

import ast
import gc
import re
import weakref
from pathlib import Path
from typing import Any, Callable

import attrs
import orjson
import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.resource import Resource

import gasoline
from gasoline.connect.protocol import STDOUT_LIMIT, STDOUT_STALL_SECONDS, StdioLines
from gasoline.http.events import EventsAPI
from gasoline.http.mcp_sse import MCP_STREAM_LIMIT
from gasoline.http.relay import cdp_client_resource, extension_link_resource
from gasoline.http.request import GasolineSite
from gasoline.relay.hub import Relay
from gasoline.stream import MESSAGE_LIMIT, SSE_LIMIT, STALL_SECONDS, BoundedWriter

# -- the writer alone -------------------------------------------------------------------------------


def _writer(limit: int = 100, **kw: Any) -> tuple[BoundedWriter, StringTransport, Clock]:
    clock, transport = Clock(), StringTransport()
    writer = BoundedWriter(clock, transport.write, transport.abortConnection, limit=limit,
                           notice=lambda n: b"<dropped %d>" % n, **kw)
    return writer.attach(transport), transport, clock


def test_the_writer_is_the_consumers_push_producer_and_writes_through_when_not_paused():
    writer, transport, _ = _writer()
    assert transport.producer is writer and transport.streaming is True
    assert writer.send(b"a" * 500)  # not paused: any unit is written whole, at once
    assert transport.value() == b"a" * 500 and writer.pending_bytes == 0


def test_a_paused_stream_keeps_at_most_its_limit_then_drops_and_counts():
    writer, transport, _ = _writer(limit=100)
    transport.producer.pauseProducing()  # what a transport does when its buffer is full
    assert [writer.send(b"x" * 40) for _ in range(5)] == [True, True, False, False, False]
    assert transport.value() == b"" and writer.pending_bytes == 80
    assert writer.dropped == 3 and writer.dropped_total == 3


def test_draining_writes_the_buffer_in_order_then_one_notice():
    writer, transport, _ = _writer(limit=100)
    writer.pauseProducing()
    for unit in (b"1" * 40, b"2" * 40, b"3" * 40, b"4" * 40):
        writer.send(unit)
    writer.resumeProducing()
    assert transport.value() == b"1" * 40 + b"2" * 40 + b"<dropped 2>"
    assert writer.dropped == 0 and writer.dropped_total == 2
    transport.clear()
    writer.pauseProducing()
    writer.send(b"5")
    writer.resumeProducing()  # nothing dropped this time: no notice
    assert transport.value() == b"5"


def test_a_pause_during_the_drain_keeps_the_rest_and_the_notice_for_later():
    clock, transport = Clock(), StringTransport()
    writes: list[bytes] = []

    def write(unit: bytes) -> None:
        writes.append(unit)
        if len(writes) == 1:
            writer.pauseProducing()  # the transport filled again on the first unit

    writer = BoundedWriter(clock, write, transport.abortConnection, limit=10,
                           notice=lambda n: b"N%d" % n).attach(transport)
    writer.pauseProducing()
    for unit in (b"a" * 5, b"b" * 5, b"c" * 5):
        writer.send(unit)
    writer.resumeProducing()
    assert writes == [b"aaaaa"] and writer.pending_bytes == 5
    writer.resumeProducing()
    assert writes == [b"aaaaa", b"bbbbb", b"N1"]


def test_a_reader_that_takes_nothing_for_the_stall_time_is_disconnected_and_freed():
    writer, transport, clock = _writer(limit=100)
    writer.pauseProducing()
    writer.send(b"x" * 50)
    clock.advance(STALL_SECONDS - 0.5)
    assert not transport.disconnecting
    clock.advance(1)
    assert transport.disconnecting and writer.closed and writer.stalled
    assert writer.pending_bytes == 0 and writer.pending_units == 0 and not writer._buffer
    assert transport.producer is None  # unregistered
    assert not writer.send(b"late") and clock.getDelayedCalls() == []


def test_any_progress_restarts_the_stall_time():
    writer, transport, clock = _writer()
    for _ in range(5):
        writer.pauseProducing()
        clock.advance(STALL_SECONDS - 1)
        writer.resumeProducing()  # the reader took something
    assert not transport.disconnecting and clock.getDelayedCalls() == []


def test_close_unregisters_and_releases_the_buffer_and_the_writer_itself():
    writer, transport, clock = _writer(limit=10_000_000)
    writer.pauseProducing()
    for _ in range(100):
        writer.send(b"y" * 10_000)
    assert writer.pending_bytes == 1_000_000
    writer.close()
    assert transport.producer is None and writer.pending_bytes == 0 and not writer._buffer
    assert clock.getDelayedCalls() == []
    ref = weakref.ref(writer)
    del writer
    gc.collect()
    assert ref() is None


def test_stop_producing_from_the_consumer_releases_everything():
    writer, transport, clock = _writer()
    writer.pauseProducing()
    writer.send(b"z" * 50)
    writer.stopProducing()  # the connection went away
    assert writer.closed and writer.pending_bytes == 0 and clock.getDelayedCalls() == []


def test_a_writer_attached_to_a_full_consumer_starts_paused():
    clock, transport = Clock(), StringTransport()
    writer = BoundedWriter(clock, transport.write, transport.abortConnection, limit=10)
    writer.attach(transport, paused=True)
    writer.send(b"a")
    assert transport.value() == b"" and writer.paused


# -- every stream kind goes through it --------------------------------------------------------------


@attrs.define
class OpenStream:
    """One open stream of some kind, its reader not reading yet."""

    transport: StringTransport
    writer: BoundedWriter
    #: Make the daemon (or the connector) send one unit of about C{n} bytes on this stream.
    push: Callable[[int], None]
    limit: int
    stall: float = STALL_SECONDS
    close: Callable[[], None] = lambda: None


def _http(site: GasolineSite, raw: bytes) -> tuple[Any, StringTransport]:
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
    transport = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", 7890),
                                peerAddress=IPv4Address("TCP", "127.0.0.1", 5555))
    transport.protocol = channel  # (as a real TCP transport has; autobahn's upgrade swaps it)
    channel.makeConnection(transport)
    channel.dataReceived(raw)
    return channel, transport


def _get(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1:7890", "Accept: text/event-stream",
             *headers, "", ""]
    return "\r\n".join(lines).encode()


def _request_writer(channel: Any) -> BoundedWriter:
    producer = channel.requests[-1].producer  # the open request's registered producer
    assert isinstance(producer, BoundedWriter), f"the stream is written without the writer: {producer}"
    return producer


def open_events(app: Any, clock: Clock) -> OpenStream:
    from tests.test_streaming import Agent

    Agent(app, "A").subscribe(["error"])
    channel, transport = _http(GasolineSite(app.resource, reactor=clock), _get(app.streaming.events_url("A")))
    assert b"200 OK" in transport.value(), transport.value()
    agent = app.streaming.agents["A"]
    seq = iter(range(1, 1 << 30))

    def push(n: int) -> None:
        item = {"seq": next(seq), "event_type": "error", "message": "m" * n}
        for listener in list(agent.listeners):
            listener(item)

    return OpenStream(transport, _request_writer(channel), push, SSE_LIMIT)


def open_mcp_get(app: Any, clock: Clock) -> OpenStream:
    session = app.mcp.open_session(None, "streamable")  # anonymous: its id is enough
    app.mcp.handle(session, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t",
                                                                             "version": "0"}}})
    channel, transport = _http(GasolineSite(app.resource, reactor=clock), _get(
        "/mcp", f"Mcp-Session-Id: {session.session_id}", "MCP-Protocol-Version: 2025-11-25"))
    assert b"200 OK" in transport.value(), transport.value()
    return OpenStream(transport, _request_writer(channel),
                      lambda n: session.standalone.push(orjson.dumps({"x": "m" * n})),
                      MCP_STREAM_LIMIT)


def open_mcp_post_sse(app: Any, clock: Clock) -> OpenStream:
    """A C{POST /mcp} tool call whose answer became an SSE stream (it sent progress first)."""
    from twisted.internet.defer import Deferred

    from gasoline.mcp.tools import Tool

    held: dict[str, Any] = {}

    def hold(ctx: Any, args: Any) -> Deferred:
        held["ctx"] = ctx
        ctx.notify_progress(0, 1)
        held["answer"] = Deferred()
        return held["answer"]

    app.mcp.tools.add(Tool("hold", "hold", {"type": "object"}, hold))
    session = app.mcp.open_session(None, "streamable")  # anonymous: its id is enough
    app.mcp.handle(session, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t",
                                                                             "version": "0"}}})
    body = orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "hold", "arguments": {}, "_meta": {"progressToken": "p"}}})
    raw = "\r\n".join(["POST /mcp HTTP/1.1", "Host: 127.0.0.1:7890",
                        "Accept: application/json, text/event-stream",
                        "Content-Type: application/json", f"Mcp-Session-Id: {session.session_id}",
                        "MCP-Protocol-Version: 2025-11-25", f"Content-Length: {len(body)}", "", ""]
                       ).encode() + body
    channel, transport = _http(GasolineSite(app.resource, reactor=clock), raw)
    assert b"text/event-stream" in transport.value(), transport.value()
    return OpenStream(transport, _request_writer(channel),
                      lambda n: held["ctx"].notify_progress(1, 2, "m" * n), MCP_STREAM_LIMIT)


def open_mcp_legacy_sse(app: Any, clock: Clock) -> OpenStream:
    channel, transport = _http(GasolineSite(app.resource, reactor=clock), _get("/mcp/sse"))
    sid = re.search(rb"/mcp/messages/([^\s]+)", transport.value()).group(1).decode()
    session = app.mcp.sessions[sid]
    return OpenStream(transport, _request_writer(channel),
                      lambda n: session.standalone.push(orjson.dumps({"x": "m" * n})),
                      MCP_STREAM_LIMIT)


_UPGRADE = ("Upgrade: websocket", "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13")


def _ws(clock: Clock, segment: bytes, resource: Resource, path: str, *headers: str):
    root = Resource()
    root.putChild(segment, resource)
    raw = "\r\n".join([f"GET {path} HTTP/1.1", "Host: 127.0.0.1:7890", *_UPGRADE, *headers,
                       "", ""]).encode()
    _, transport = _http(GasolineSite(root, reactor=clock), raw)
    assert b"101 Switching Protocols" in transport.value(), transport.value()
    writer = transport.producer
    assert isinstance(writer, BoundedWriter), f"the WebSocket is written without the writer: {writer}"
    return transport, writer


def open_cdp_client(app: Any, clock: Clock) -> OpenStream:
    relay = Relay(clock)
    transport, writer = _ws(clock, b"cdp", cdp_client_resource(relay, clock), "/cdp/client1")
    client = relay.clients["client1"]
    return OpenStream(transport, writer, lambda n: client.send({"method": "E", "params": {
        "x": "m" * n}}), MESSAGE_LIMIT, close=lambda: relay.client_lost(client))


def open_extension_link(app: Any, clock: Clock) -> OpenStream:
    relay = Relay(clock)
    transport, writer = _ws(clock, b"extension", extension_link_resource(relay, clock),
                            "/extension/cdp", "Origin: chrome-extension://abcdefghijklmnop")
    assert relay.extension is not None
    return OpenStream(transport, writer, lambda n: relay.extension.send({"method": "E", "params": {
        "x": "m" * n}}), MESSAGE_LIMIT, close=lambda: relay.extension_lost(relay.extension))


def open_connector_stdout(app: Any, clock: Clock) -> OpenStream:
    lines = StdioLines(lambda line: None, lambda head, limit: None, lambda: None, clock=clock)
    transport = StringTransport()
    lines.makeConnection(transport)
    assert isinstance(transport.producer, BoundedWriter)
    return OpenStream(transport, transport.producer, lambda n: lines.write_line(b"m" * n),
                      STDOUT_LIMIT, STDOUT_STALL_SECONDS)


#: Every kind of stream the daemon and the connector write. A new kind of stream
#: gets an opener here; the source scan below fails for one written any other way.
STREAM_KINDS: dict[str, Callable[[Any, Clock], OpenStream]] = {
    "GET /events": open_events,
    "GET /mcp": open_mcp_get,
    "POST /mcp answered as SSE": open_mcp_post_sse,
    "GET /mcp/sse (legacy)": open_mcp_legacy_sse,
    "CDP client WebSocket": open_cdp_client,
    "extension link WebSocket": open_extension_link,
    "connector stdout": open_connector_stdout,
}


def _pause(stream: OpenStream) -> None:
    """The transport's buffer is full: it pauses its producer (the HTTP channel passes it on)."""
    stream.transport.producer.pauseProducing()


def _resume(stream: OpenStream) -> None:
    stream.transport.producer.resumeProducing()


@pytest.mark.parametrize("kind", list(STREAM_KINDS))
def test_every_stream_pauses_at_its_limit_drops_counts_and_notices_once_drained(app, clock, kind):
    stream = STREAM_KINDS[kind](app, clock)
    stream.transport.clear()
    stream.push(100)
    assert len(stream.transport.value()) > 100  # not paused: written at once
    stream.transport.clear()
    _pause(stream)
    unit = 64 * 1024
    for _ in range(stream.limit // unit + 20):
        stream.push(unit)
    assert stream.transport.value() == b""  # nothing written while paused
    assert stream.writer.pending_bytes <= stream.limit
    assert stream.writer.dropped >= 10
    _resume(stream)
    out = stream.transport.value()
    assert len(out) >= stream.limit - 2 * unit
    assert out.count(b"dropped") >= 1
    tail = out[-400:]
    assert b"streaming_paused" in tail or b"streamingPaused" in tail \
        or b"were dropped" in tail, tail
    stream.close()
    for call in clock.getDelayedCalls():
        call.cancel()


@pytest.mark.parametrize("kind", list(STREAM_KINDS))
def test_every_stream_is_disconnected_when_its_reader_stalls_and_frees_its_buffer(app, clock, kind):
    stream = STREAM_KINDS[kind](app, clock)
    _pause(stream)
    for _ in range(20):
        stream.push(64 * 1024)
    assert stream.writer.pending_bytes > 0
    clock.advance(stream.stall + 1)
    assert stream.transport.disconnecting
    assert stream.writer.closed and stream.writer.pending_bytes == 0
    stream.close()
    for call in clock.getDelayedCalls():
        call.cancel()


# -- no stream written any other way ----------------------------------------------------------------

#: Calls that write to a request, a transport or a WebSocket. Each one outside the writer's own
#: sinks below is a stream (or an answer) that bypasses the bound.
_WRITES = {"write", "writeSequence", "sendMessage"}
_RECEIVERS = {"request", "transport", "protocol", "self", "channel", "self.request",
              "self.transport", "self.channel", "request.channel", "self.protocol"}
#: (module, enclosing function) -> why this direct write is not an unbounded stream.
ALLOWED = {
    ("gasoline/http/relay_ws.py", "write"): "the WebSocket writer's sink (stream_writer)",
    ("gasoline/connect/protocol.py", "connectionMade"): "stdout's writer's sink",
    ("gasoline/http/dispatch.py", "_write_whole"): "one whole answer (a Deferred's bytes), then "
                                                   "finish: not a stream (Klein writes the same way)",
    ("gasoline/core/workers.py", "write"): "a worker's stdin, one job at a time (the pool hands a "
                                           "job only to an idle worker; a stalled one is killed "
                                           "at the job's timeout): not a stream",
    ("gasoline/core/workers.py", "writeSequence"): "the same sink (AMP's writeSequence)",
    ("gasoline/http/request.py", "_answer_and_drop"): "one small refusal written on a "
                                                       "request's headers or mid-body, then the close",
}


class _Scan(ast.NodeVisitor):
    """Direct writes, each attributed to its innermost enclosing function."""

    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.stack = ["<module>"]
        self.found: list[tuple[str, str, int]] = []

    def _function(self, node: Any) -> None:
        self.stack.append(getattr(node, "name", None) or self.stack[-1])
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Call(self, node: ast.Call) -> None:
        if (isinstance(node.func, ast.Attribute) and node.func.attr in _WRITES
                and ast.unparse(node.func.value) in _RECEIVERS):
            self.found.append((self.rel, self.stack[-1], node.lineno))
        self.generic_visit(node)


def _direct_writes() -> list[tuple[str, str, int]]:
    root = Path(gasoline.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = "gasoline/" + path.relative_to(root).as_posix()
        if rel in ("gasoline/stream.py", "gasoline/testing.py") or "/proxy/" in rel:
            continue  # the writer itself; test fakes; the proxy writes to its children's stdin
        scan = _Scan(rel)
        scan.visit(ast.parse(path.read_text()))
        found += scan.found
    return found


#: The four headers of every server-sent-event answer (the MCP design's list).
SSE_HEADERS = (b"content-type: text/event-stream", b"cache-control: no-cache",
               b"x-accel-buffering: no", b"connection: keep-alive")


@pytest.mark.parametrize("kind", [k for k in STREAM_KINDS if "WebSocket" not in k
                                  and "stdout" not in k])
def test_every_sse_answer_carries_the_four_headers(app, clock, kind):
    stream = STREAM_KINDS[kind](app, clock)
    head = stream.transport.value().split(b"\r\n\r\n", 1)[0].lower()
    for header in SSE_HEADERS:
        assert header in head.split(b"\r\n"), (kind, header, head)


def test_no_stream_is_written_except_through_the_bounded_writer():
    writes = _direct_writes()
    outside = [w for w in writes if (w[0], w[1]) not in ALLOWED]
    assert outside == [], "write through gasoline.stream.BoundedWriter: " + repr(outside)
    assert {(rel, name) for rel, name, _ in writes} == set(ALLOWED)  # the scan sees the sinks


def test_the_scan_would_see_a_new_direct_stream_write(tmp_path):
    tree = ast.parse("def render(self, request):\n    request.write(b'data: x\\n\\n')\n")
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call))
    assert call.func.attr in _WRITES and ast.unparse(call.func.value) in _RECEIVERS


def test_a_stream_opened_while_the_transport_is_full_starts_paused(app, clock):
    """The connection's reader stopped reading before the stream opened: no C{pauseProducing}
    will come for the new writer, so the channel pauses it when it registers."""
    from tests.test_streaming import Agent

    Agent(app, "A").subscribe(["error"])
    channel, transport = _http(GasolineSite(app.resource, reactor=clock), b"")
    channel.pauseProducing()  # what the transport does when its buffer is full
    channel.dataReceived(_get(app.streaming.events_url("A")))
    writer = _request_writer(channel)
    assert writer.paused
    for listener in list(app.streaming.agents["A"].listeners):
        listener({"seq": 1, "event_type": "error", "message": "held"})
    assert b"held" not in transport.value() and writer.pending_units >= 1
    channel.resumeProducing()  # the reader took the buffer
    assert b"held" in transport.value() and not writer.paused and writer.pending_units == 0


def test_a_closed_events_stream_leaves_nothing_behind(app, clock):
    from twisted.internet.error import ConnectionDone
    from twisted.python.failure import Failure

    from tests.test_streaming import Agent

    Agent(app, "A").subscribe(["error"])
    channel, transport = _http(GasolineSite(app.resource, reactor=clock), _get(app.streaming.events_url("A")))
    writer = _request_writer(channel)
    resource = app.resource.handlers.api(EventsAPI)
    agent = app.streaming.agents["A"]
    assert writer in resource.open and len(agent.listeners) == 1
    writer.pauseProducing()
    for listener in list(agent.listeners):
        for seq in range(1, 200):
            listener({"seq": seq, "event_type": "error", "message": "m" * 10_000})
    assert writer.pending_bytes > SSE_LIMIT // 2
    channel.connectionLost(Failure(ConnectionDone()))
    assert writer.closed and writer.pending_bytes == 0
    assert writer not in resource.open and len(agent.listeners) == 0
    assert not writer._buffer  # the buffer itself is gone, not just counted as empty


# -- WebSocket messages: the structural JSON limit and a size cap -----------------------------------


def _client_frame(payload: bytes) -> bytes:
    """One masked text frame (mask key 0: the payload goes as is)."""
    n = len(payload)
    head = b"\x81" + (bytes([0x80 | n]) if n < 126 else
                      b"\xfe" + n.to_bytes(2, "big") if n < 65536 else
                      b"\xff" + n.to_bytes(8, "big"))
    return head + b"\0\0\0\0" + payload


def test_a_websocket_message_of_too_many_json_values_is_refused_without_decoding(clock):
    from gasoline.core.validate import MAX_JSON_TOKENS

    relay = Relay(clock)
    transport, _ = _ws(clock, b"cdp", cdp_client_resource(relay, clock), "/cdp/c1")
    transport.clear()
    body = b'{"id":1,"method":"Runtime.evaluate","params":{"x":[' + b",".join(
        [b"0"] * (MAX_JSON_TOKENS + 1)) + b"]}}"
    transport.protocol.dataReceived(_client_frame(body))
    out = transport.value()
    assert b"more than %d JSON values" % MAX_JSON_TOKENS in out
    assert relay.counts["command_errors"] == 1 and "c1" in relay.clients
    relay.client_lost(relay.clients["c1"])


def test_a_websocket_message_over_the_size_cap_closes_the_connection(clock):
    from gasoline.http.relay_wire import MAX_CLIENT_MESSAGE

    relay = Relay(clock)
    transport, _ = _ws(clock, b"cdp", cdp_client_resource(relay, clock), "/cdp/c2")
    transport.clear()
    head = b"\x81\xff" + (MAX_CLIENT_MESSAGE + 1).to_bytes(8, "big") + b"\0\0\0\0"
    transport.protocol.dataReceived(head + b" " * 1024)  # the length alone is refused
    out = transport.value()
    # Refused on its header: a close frame "message too big" (1009), or a dropped connection.
    assert (out[:1] == b"\x88" and int.from_bytes(out[2:4], "big") == 1009) \
        or transport.disconnecting, out
    assert "c2" not in relay.clients or transport.disconnecting
    for call in clock.getDelayedCalls():
        call.cancel()

"""Unit tests for ``gasoline connect``: stdio lines, the bridge state machine, HTTP and discovery.

No sockets, no real time: StringTransport for stdio, a fake daemon or StubTreq for HTTP, Clock for
backoff and bounds.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from treq.testing import StubTreq
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from gasoline.connect import main as connect_main
from gasoline.connect.bridge import (
    DAEMON_UNAVAILABLE,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    Bridge,
    sniff_id,
)
from gasoline.connect.client import DaemonHTTP, RegistrationRefused, Reply, SSEParser
from gasoline.connect.discovery import (
    DOWN,
    STARTING,
    UP,
    Discovery,
    Spawner,
    daemon_command,
    loopback_port,
)
from gasoline.connect.protocol import StdioLines
from gasoline.core.clients.registry import client_id_for_cwd

HEALTHY = {"service-name": "gasoline", "version": "test"}


# -- stdio lines ------------------------------------------------------------------------------------


def make_lines(max_length=64):
    got, too_long, eofs = [], [], []
    proto = StdioLines(got.append, lambda head, limit: too_long.append((head, limit)),
                       lambda: eofs.append(1), max_length=max_length, clock=Clock())
    transport = StringTransport()
    proto.makeConnection(transport)
    return proto, transport, got, too_long, eofs


def test_stdio_lines_are_split_on_newline():
    proto, _, got, _, _ = make_lines()
    proto.dataReceived(b'{"a":1}\n{"b"')
    proto.dataReceived(b":2}\r\n")
    assert got == [b'{"a":1}', b'{"b":2}\r']


def test_overlong_complete_line_is_reported_and_following_lines_still_read():
    proto, transport, got, too_long, _ = make_lines(max_length=64)
    proto.dataReceived(b'{"id":7,' + b"x" * 200 + b'}\n{"ok":1}\n{"ok":2}\n')
    assert [h[:8] for h, _ in too_long] == [b'{"id":7,']
    assert too_long[0][1] == 64
    assert got == [b'{"ok":1}', b'{"ok":2}']
    assert not transport.disconnecting


def test_overlong_partial_line_is_discarded_up_to_its_newline():
    proto, transport, got, too_long, _ = make_lines(max_length=64)
    proto.dataReceived(b'{"id":"big",' + b"y" * 100)
    proto.dataReceived(b"y" * 100)
    proto.dataReceived(b'y"}\n{"next":true}\n')
    assert len(too_long) == 1 and too_long[0][0].startswith(b'{"id":"big"')
    assert got == [b'{"next":true}']
    assert not transport.disconnecting


def test_stdin_eof_and_stdout_close_report_eof_once():
    proto, _, _, _, eofs = make_lines()
    proto.readConnectionLost()
    proto.writeConnectionLost()
    proto.connectionLost(None)
    assert eofs == [1]


def test_when_lost_fires_after_the_connection_is_lost():
    proto, *_ = make_lines()
    d = proto.when_lost()
    assert not d.called
    proto.connectionLost(None)
    assert d.called and proto.when_lost().called


def test_write_line_appends_the_delimiter():
    proto, transport, *_ = make_lines()
    proto.write_line(b'{"x":1}')
    assert transport.value() == b'{"x":1}\n'


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=150).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=80), max_size=40),
)
def test_any_chunking_of_stdin_gives_the_same_lines_and_too_long_reports(lines, cuts):
    events = []
    proto = StdioLines(lambda line: events.append(("line", line)),
                       lambda head, limit: events.append(("too_long", head[:64])),
                       lambda: None, max_length=64, clock=Clock())
    proto.makeConnection(StringTransport())
    data = b"".join(line + b"\n" for line in lines)
    pos = 0
    for cut in cuts:
        if pos >= len(data):
            break
        proto.dataReceived(data[pos:pos + cut])
        pos += cut
    if pos < len(data):
        proto.dataReceived(data[pos:])
    expected = [("line", line) if len(line) <= 64 else ("too_long", line[:64]) for line in lines]
    assert events == expected


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=30), max_size=30))
def test_sse_parser_is_independent_of_chunking(cuts):
    stream = (b"id: a-1\ndata: {\"x\":1}\n\n: keepalive\n\nevent: message\r\nid: a-2\r\n"
              b"data: [1,\r\ndata: 2]\r\n\r\n")
    whole = [(e.id, e.data) for e in SSEParser().feed(stream)]
    parser, got, pos = SSEParser(), [], 0
    for cut in cuts:
        got += [(e.id, e.data) for e in parser.feed(stream[pos:pos + cut])]
        pos += cut
    got += [(e.id, e.data) for e in parser.feed(stream[pos:])]
    assert got == whole == [("a-1", b'{"x":1}'), ("a-2", b"[1,\n2]")]


def test_sniff_id_finds_the_top_level_id_before_params():
    assert sniff_id(b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"id":99') == 12
    assert sniff_id(b'{"jsonrpc":"2.0","id":"a\\"b","method":"x"') == 'a"b'
    assert sniff_id(b'{"method":"x","params":{"id":5}') is None
    assert sniff_id(b"garbage") is None


# -- the bridge, with a fake daemon -----------------------------------------------------------------


class FakeStream:
    #: The daemon answered its GET /mcp with an event stream.
    streaming = True

    def __init__(self, on_message, last_event_id):
        self.on_message = on_message
        self.last_event_id_sent = last_event_id
        self.last_event_id = None
        self.opened = Deferred()
        self.done = Deferred()
        self.closed = False

    def close(self):
        self.closed = True
        if not self.done.called:
            self.done.callback(None)


class FakeDaemon:
    base_url = "http://127.0.0.1:7890"

    def __init__(self, up=True):
        self.up = up
        self.posts: list[tuple[dict, object, Deferred]] = []
        #: The C{stateless} flag of each post (the agent had not initialized).
        self.stateless_flags: list[bool] = []
        self.registrations = 0
        self.unregistrations = 0
        self.streams: list[FakeStream] = []
        self.register_error = None

    def health(self):
        return succeed(dict(HEALTHY) if self.up else None)

    def register(self, cwd=None):
        if not self.up:
            return fail(ConnectionRefusedError())
        if self.register_error is not None:
            return fail(self.register_error)
        self.registrations += 1
        return succeed({"client_id": "c1"})

    def unregister(self):
        self.unregistrations += 1
        return succeed(200)

    def ensure_proxy_session(self, cwd, capabilities=None):
        return succeed(None)  # a daemon without proxy servers

    def post_mcp(self, body, on_message, stateless=False):
        if not self.up:
            return fail(ConnectionRefusedError())
        self.stateless_flags.append(stateless)
        d = Deferred()
        self.posts.append((orjson.loads(body), on_message, d))
        return d

    def open_stream(self, on_message, last_event_id=None):
        s = FakeStream(on_message, last_event_id)
        self.streams.append(s)
        return s

    # helpers for tests
    def answer(self, index, message, status=200):
        _, on_message, d = self.posts[index]
        if message is not None:
            on_message(message)
        d.callback(Reply(status, "application/json"))

    def answer_auto(self, index):
        """Answer post C{index} the way the daemon would: result for requests, 202 otherwise."""
        msg, _, _ = self.posts[index]
        if "id" in msg and "method" in msg:
            self.answer(index, {"jsonrpc": "2.0", "id": msg["id"], "result": {"echo": msg["method"]}})
        else:
            self.answer(index, None, status=202)

    def crash(self):
        """The daemon dies: in-flight POSTs fail, the stream drops, nothing answers."""
        self.up = False
        for _, _, d in self.posts:
            if not d.called:
                d.errback(ConnectionRefusedError())
        for s in self.streams:
            if not s.done.called:
                s.done.errback(ConnectionRefusedError())

    def methods(self):
        return [m.get("method", "<response>") for m, _, _ in self.posts]


def make_bridge(daemon=None, spawner=None, bound=30.0, clock=None):
    clock = clock or Clock()
    daemon = daemon or FakeDaemon()
    out: list[bytes] = []
    discovery = Discovery(clock, daemon, spawner)
    bridge = Bridge(clock, daemon, discovery, out.append, cwd="/repo", bound=bound)
    return clock, daemon, bridge, out


def lines(out):
    return [json.loads(o) for o in out]


def answers(out, rid):
    """The lines written for request C{rid}."""
    return [m for m in lines(out) if m.get("id") == rid]


def assert_unavailable(out, rid, bridge=None):
    """Request C{rid} got exactly one C{DAEMON_UNAVAILABLE} error (and the bridge reconnects)."""
    (err,) = answers(out, rid)
    assert err["error"]["code"] == DAEMON_UNAVAILABLE
    if bridge is not None:
        assert bridge.state == "reconnecting"


def send(bridge, message):
    bridge.line_received(orjson.dumps(message))


INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def handshake(bridge, daemon):
    """Start the bridge and complete initialize + initialized."""
    bridge.start()
    send(bridge, INIT)
    daemon.answer(len(daemon.posts) - 1, {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25"}})
    send(bridge, INITIALIZED)
    daemon.answer(len(daemon.posts) - 1, None, status=202)


def finish(clock, bridge):
    bridge.stdin_closed()
    clock.advance(0)
    assert bridge.closed.called
    assert clock.getDelayedCalls() == []


def test_bridge_forwards_a_request_and_writes_the_reply_as_one_line():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    assert daemon.registrations == 1 and bridge.state == "connected"
    send(bridge, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert daemon.methods() == ["ping"]
    daemon.answer(0, {"jsonrpc": "2.0", "id": 1, "result": {"text": "a\nb"}})
    assert len(out) == 1 and b"\n" not in out[0]
    assert lines(out) == [{"jsonrpc": "2.0", "id": 1, "result": {"text": "a\nb"}}]
    finish(clock, bridge)
    assert daemon.unregistrations == 1


def test_bad_json_gets_a_parse_error_and_the_session_continues():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    bridge.line_received(b"{not json")
    bridge.line_received(b"7")
    bridge.line_received(b"[]")
    send(bridge, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
    daemon.answer_auto(0)
    got = lines(out)
    assert got[0]["error"]["code"] == PARSE_ERROR and got[0]["id"] is None
    assert got[1]["error"]["code"] == INVALID_REQUEST
    assert got[2]["error"]["code"] == INVALID_REQUEST
    assert got[3] == {"jsonrpc": "2.0", "id": 2, "result": {"echo": "ping"}}
    finish(clock, bridge)


def test_too_long_line_is_answered_with_the_sniffed_id():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    bridge.line_too_long(b'{"jsonrpc":"2.0","id":33,"method":"tools/call","params":{"x":"', 1024)
    (err,) = lines(out)
    assert err["id"] == 33 and err["error"]["code"] == INVALID_REQUEST
    assert err["error"]["data"] == {"error": "message_too_large", "limit": 1024}
    assert daemon.posts == []
    finish(clock, bridge)


def test_initialize_and_notifications_are_barriers_requests_run_concurrently():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    send(bridge, INIT)
    send(bridge, INITIALIZED)
    send(bridge, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert daemon.methods() == ["initialize"]  # the rest waits for initialize
    daemon.answer_auto(0)
    assert daemon.methods() == ["initialize", "notifications/initialized"]
    daemon.answer_auto(1)
    assert daemon.methods()[2] == "tools/list"
    send(bridge, {"jsonrpc": "2.0", "id": 2, "method": "tools/call"})
    assert daemon.methods()[3] == "tools/call"  # sent while tools/list is still in flight
    daemon.answer_auto(3)
    daemon.answer_auto(2)
    assert [m["id"] for m in lines(out)] == [0, 2, 1]
    finish(clock, bridge)


def test_server_stream_opens_after_initialize_and_its_messages_are_written():
    clock, daemon, bridge, out = make_bridge()
    handshake(bridge, daemon)
    clock.advance(0)
    (stream,) = daemon.streams
    stream.opened.callback(200)
    note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}}
    stream.on_message(note)
    assert lines(out)[-1] == note
    finish(clock, bridge)
    assert stream.closed


def test_daemon_down_without_autostart_answers_with_an_error_after_the_bound():
    clock, daemon, bridge, out = make_bridge(FakeDaemon(up=False), bound=30)
    bridge.start()
    send(bridge, {"jsonrpc": "2.0", "id": 5, "method": "tools/list"})
    clock.pump([1.0] * 29)
    assert out == []
    clock.pump([1.0] * 2)
    (err,) = lines(out)
    assert err["id"] == 5 and err["error"]["code"] == DAEMON_UNAVAILABLE
    assert "auto-start is off" in err["error"]["message"]
    assert err["error"]["data"]["error"] == "daemon_unavailable"
    finish(clock, bridge)
    assert daemon.unregistrations == 0  # never registered


def test_autostart_spawns_once_then_connects_when_the_daemon_answers():
    clock = Clock()
    daemon = FakeDaemon(up=False)
    spawned = []

    def spawner():
        spawned.append(clock.seconds())
        return Deferred()

    clock, daemon, bridge, out = make_bridge(daemon, spawner=spawner, clock=clock)
    bridge.start()
    send(bridge, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    clock.pump([0.1] * 5)
    assert spawned == [0.0]
    daemon.up = True
    clock.pump([0.1] * 3)
    assert bridge.state == "connected" and daemon.methods() == ["ping"]
    daemon.answer_auto(0)
    assert lines(out)[0]["id"] == 1
    finish(clock, bridge)


def test_daemon_restart_replays_session_and_unanswered_requests_answering_once():
    clock, daemon, bridge, out = make_bridge()
    handshake(bridge, daemon)
    send(bridge, {"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "debug"}})
    daemon.answer_auto(2)
    send(bridge, {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "observe"}})
    written_before = len(out)
    daemon.crash()
    assert bridge.state == "reconnecting"
    clock.pump([0.1, 0.2, 0.4])  # backoff while it is down
    daemon.up = True
    daemon.posts.clear()
    clock.pump([0.8] * 2)
    methods = daemon.methods()
    assert methods[0] == "initialize"
    replay_id = daemon.posts[0][0]["id"]
    assert isinstance(replay_id, str) and replay_id.startswith("gasoline-connect-replay-")
    daemon.answer(0, {"jsonrpc": "2.0", "id": replay_id, "result": {}})
    assert daemon.methods()[1] == "notifications/initialized"
    daemon.answer_auto(1)
    assert daemon.methods()[2] == "logging/setLevel"
    daemon.answer_auto(2)
    assert daemon.methods()[3] == "tools/call" and daemon.posts[3][0]["id"] == 9
    assert daemon.registrations == 2 and bridge.reconnects == 1
    assert len(out) == written_before  # replay answers are swallowed
    daemon.answer_auto(3)
    assert lines(out)[-1] == {"jsonrpc": "2.0", "id": 9, "result": {"echo": "tools/call"}}
    finish(clock, bridge)


def test_request_not_delivered_within_bound_is_answered_with_error_and_not_replayed():
    clock, daemon, bridge, out = make_bridge(bound=5)
    handshake(bridge, daemon)
    daemon.crash()
    send(bridge, {"jsonrpc": "2.0", "id": "late", "method": "tools/list"})
    clock.pump([0.5] * 11)
    err = lines(out)[-1]
    assert err["id"] == "late" and err["error"]["code"] == DAEMON_UNAVAILABLE
    daemon.up = True
    daemon.posts.clear()
    clock.pump([2.0] * 2)
    daemon.answer(0, {"jsonrpc": "2.0", "id": daemon.posts[0][0]["id"], "result": {}})
    daemon.answer_auto(1)
    assert "tools/list" not in daemon.methods()
    finish(clock, bridge)


def test_in_flight_request_at_crash_is_answered_with_error_if_bound_passed():
    clock, daemon, bridge, out = make_bridge(bound=5)
    handshake(bridge, daemon)
    send(bridge, {"jsonrpc": "2.0", "id": 4, "method": "tools/call"})
    clock.advance(6)  # the daemon is working on it; the connector waits
    assert answers(out, 4) == []
    daemon.crash()
    assert_unavailable(out, 4)
    finish(clock, bridge)


def test_hung_daemon_is_detected_when_a_request_outlives_the_bound():
    clock, daemon, bridge, out = make_bridge(bound=5)
    handshake(bridge, daemon)
    send(bridge, {"jsonrpc": "2.0", "id": 4, "method": "tools/call"})
    daemon.up = False  # stops answering /health, but the POST never fails by itself
    daemon.posts[-1][2].addErrback(lambda f: None)
    clock.advance(5)
    assert_unavailable(out, 4, bridge)
    finish(clock, bridge)


def test_slow_request_on_a_healthy_daemon_is_left_to_the_daemon():
    clock, daemon, bridge, out = make_bridge(bound=5)
    handshake(bridge, daemon)
    send(bridge, {"jsonrpc": "2.0", "id": 4, "method": "tools/call"})
    clock.advance(20)
    assert answers(out, 4) == []
    assert bridge.state == "connected"
    daemon.answer_auto(len(daemon.posts) - 1)
    assert [m["id"] for m in answers(out, 4)] == [4]
    finish(clock, bridge)


def test_request_stuck_behind_a_hung_notification_gets_an_error_and_reconnects():
    clock, daemon, bridge, out = make_bridge(bound=5)
    handshake(bridge, daemon)
    send(bridge, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    send(bridge, {"jsonrpc": "2.0", "id": 7, "method": "ping"})
    assert daemon.methods()[-1] == "notifications/cancelled"  # ping waits behind the barrier
    daemon.up = False  # hung: /health stops answering, the POST never returns
    clock.advance(5)
    assert_unavailable(out, 7, bridge)
    finish(clock, bridge)


def test_late_reply_after_error_is_not_written_twice():
    clock, daemon, bridge, out = make_bridge(bound=5)
    handshake(bridge, daemon)
    bridge.state = "reconnecting"  # pretend an outage began before the request was sent
    send(bridge, {"jsonrpc": "2.0", "id": 8, "method": "ping"})
    clock.advance(5)
    bridge.state = "connected"
    bridge._from_daemon({"jsonrpc": "2.0", "id": 8, "result": {}})
    assert [m["id"] for m in answers(out, 8)] == [8]
    finish(clock, bridge)


def test_unknown_session_404_recreates_the_session_and_resends():
    clock, daemon, bridge, out = make_bridge()
    handshake(bridge, daemon)
    send(bridge, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    _, _, d = daemon.posts[-1]
    d.callback(Reply(404, "text/plain", b"unknown connector session"))
    clock.advance(0.1)
    assert daemon.methods()[-1] == "initialize"
    daemon.answer(len(daemon.posts) - 1, {"jsonrpc": "2.0", "id": daemon.posts[-1][0]["id"], "result": {}})
    daemon.answer_auto(len(daemon.posts) - 1)
    assert daemon.methods()[-1] == "tools/list"
    daemon.answer_auto(len(daemon.posts) - 1)
    assert lines(out)[-1]["id"] == 3 and "result" in lines(out)[-1]
    finish(clock, bridge)


def test_http_error_without_jsonrpc_body_becomes_a_jsonrpc_error():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    send(bridge, {"jsonrpc": "2.0", "id": 6, "method": "ping"})
    daemon.posts[0][2].callback(Reply(413, "application/json", b'{"error":"body too large"}'))
    (err,) = lines(out)
    assert err["id"] == 6 and err["error"]["code"] == INTERNAL_ERROR
    assert "413" in err["error"]["message"] and err["error"]["data"]["status"] == 413
    finish(clock, bridge)


def test_daemon_jsonrpc_refusal_is_reported_with_the_request_id():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    send(bridge, {"jsonrpc": "2.0", "id": 6, "method": "ping"})
    daemon.posts[0][2].callback(Reply(413, "application/json",
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Payload Too Large"}}'))
    (err,) = lines(out)
    assert err["id"] == 6
    assert err["error"]["code"] == -32600 and err["error"]["message"] == "Payload Too Large"
    finish(clock, bridge)


def test_stream_end_triggers_reconnect():
    clock, daemon, bridge, out = make_bridge()
    handshake(bridge, daemon)
    clock.advance(0)
    stream = daemon.streams[0]
    stream.opened.callback(200)
    stream.done.errback(ConnectionRefusedError())
    assert bridge.state == "reconnecting"
    clock.advance(0.1)
    # Healthy again at once: re-register and replay initialize.
    assert daemon.registrations == 2 and daemon.methods()[-1] == "initialize"
    daemon.answer(len(daemon.posts) - 1, {"jsonrpc": "2.0", "id": daemon.posts[-1][0]["id"], "result": {}})
    daemon.answer_auto(len(daemon.posts) - 1)
    assert bridge.state == "connected"
    finish(clock, bridge)


def test_stream_not_offered_is_not_retried():
    clock, daemon, bridge, out = make_bridge()
    handshake(bridge, daemon)
    clock.advance(0)
    stream = daemon.streams[0]
    stream.opened.callback(405)
    stream.done.callback(405)
    assert bridge.state == "connected" and len(daemon.streams) == 1
    finish(clock, bridge)


def test_refused_registration_is_retried_and_requests_get_errors():
    clock, daemon, bridge, out = make_bridge(bound=3)
    daemon.register_error = RegistrationRefused(429, {"error": "too_many_clients",
                                                       "message": "10 clients are already connected"})
    bridge.start()
    send(bridge, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    clock.pump([1.0] * 4)
    (err,) = lines(out)
    assert "10 clients are already connected" in err["error"]["message"]
    daemon.register_error = None
    clock.pump([2.0] * 2)
    assert bridge.state == "connected"
    finish(clock, bridge)


def test_registration_refused_401_ends_the_bridge_at_once_with_the_error():
    clock, daemon, bridge, out = make_bridge(bound=30)
    ended = []
    bridge.on_permanent = ended.append
    daemon.register_error = RegistrationRefused(401, {"error": "unauthorized"})
    send(bridge, INIT)
    bridge.start()
    assert len(ended) == 1 and "--api-key" in ended[0]
    (err,) = answers(out, 0)
    assert err["error"]["data"]["error"] == "daemon_refused"
    assert bridge.closed.called and clock.getDelayedCalls() == []


def test_a_first_403_is_retried_a_second_ends_the_bridge():
    clock, daemon, bridge, out = make_bridge(bound=30)
    ended = []
    bridge.on_permanent = ended.append
    daemon.register_error = RegistrationRefused(403, {"error": "client_proof"})
    send(bridge, INIT)
    bridge.start()
    assert ended == [] and lines(out) == []
    clock.advance(0.1)
    assert len(ended) == 1 and "client key" in ended[0]
    assert answers(out, 0)[0]["error"]["data"]["error"] == "daemon_refused"


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_refusals_keep_retrying_within_the_bound(status):
    clock, daemon, bridge, out = make_bridge(bound=5)
    ended = []
    bridge.on_permanent = ended.append
    daemon.register_error = RegistrationRefused(status, {"error": "busy"})
    send(bridge, INIT)
    bridge.start()
    clock.pump([1.0] * 4)
    assert ended == [] and lines(out) == []
    daemon.register_error = None
    clock.pump([2.0] * 2)
    assert bridge.state == "connected" and ended == []


@pytest.mark.parametrize("health,permanent", [
    ({"_not_gasoline": True, "status": 404}, True),
    ({"_not_gasoline": True, "status": 200}, True),
    ({"_not_gasoline": True, "status": 401}, True),
    ({"_not_gasoline": True, "status": 502}, False),
    ({"_not_gasoline": True, "status": None}, False),  # no HTTP answer: may be a hung daemon
    (None, False),  # nothing listens
])
def test_what_answers_on_the_port_decides_whether_the_bridge_gives_up(health, permanent):
    clock = Clock()
    daemon = FakeDaemon()
    daemon.health = lambda: succeed(health)
    out: list[bytes] = []
    ended: list[str] = []
    bridge = Bridge(clock, daemon, Discovery(clock, daemon, None), out.append, bound=5,
                    on_permanent=ended.append)
    send(bridge, INIT)
    bridge.start()
    assert bool(ended) is permanent
    if permanent:
        assert "not a Gasoline daemon" in ended[0]
        assert answers(out, 0)[0]["error"]["data"]["error"] == "daemon_refused"
    else:
        assert lines(out) == []
        clock.pump([1.0] * 6)
        assert answers(out, 0)[0]["error"]["data"]["error"] == "daemon_unavailable"
        bridge.shutdown()


def test_stdin_eof_waits_for_pending_answers_then_unregisters():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    send(bridge, {"jsonrpc": "2.0", "id": 1, "method": "tools/call"})
    closed = bridge.stdin_closed()
    assert not closed.called and daemon.unregistrations == 0
    daemon.answer_auto(0)
    assert closed.called and daemon.unregistrations == 1
    assert lines(out)[0]["id"] == 1
    assert clock.getDelayedCalls() == []


def test_stdin_eof_gives_up_on_pending_after_the_bound():
    clock, daemon, bridge, out = make_bridge(bound=4)
    bridge.start()
    send(bridge, {"jsonrpc": "2.0", "id": 1, "method": "tools/call"})
    daemon.posts[0][2].addErrback(lambda f: None)
    closed = bridge.stdin_closed()
    clock.advance(4)
    assert closed.called
    assert lines(out)[0]["error"]["code"] == DAEMON_UNAVAILABLE
    assert clock.getDelayedCalls() == []


def test_batch_replies_drop_already_answered_entries():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    bridge.line_received(b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]')
    assert sorted(bridge.pending_ids) == [1, 2]
    bridge._answer_error(2, INTERNAL_ERROR, "gave up")
    daemon.answer(0, [{"jsonrpc": "2.0", "id": 1, "result": {}}, {"jsonrpc": "2.0", "id": 2, "result": {}}])
    assert lines(out)[-1] == [{"jsonrpc": "2.0", "id": 1, "result": {}}]
    finish(clock, bridge)


# -- discovery ------------------------------------------------------------------------------------


def test_discovery_reports_something_else_on_the_port_without_spawning():
    clock = Clock()
    daemon = FakeDaemon()
    daemon.health = lambda: succeed({"_not_gasoline": True, "status": 200})
    spawned = []
    discovery = Discovery(clock, daemon, lambda: spawned.append(1))
    assert discovery.check().result == DOWN
    assert "not a Gasoline daemon" in discovery.problem and spawned == []


def test_discovery_respawns_only_after_the_respawn_delay():
    clock = Clock()
    spawned = []
    discovery = Discovery(clock, FakeDaemon(up=False), lambda: spawned.append(1), respawn_after=10)
    assert discovery.check().result == STARTING
    clock.advance(5)
    assert discovery.check().result == STARTING
    clock.advance(5)
    discovery.check()
    assert spawned == [1, 1]
    discovery.daemon.up = True
    assert discovery.check().result == UP


class RecordingReactor:
    def __init__(self):
        self.spawned = []

    def spawnProcess(self, protocol, executable, args, env=None, path=None, childFDs=None):
        self.spawned.append((protocol, executable, args, path, childFDs))


def test_spawner_starts_a_detached_twistd_that_cannot_touch_our_stdout(tmp_path):
    reactor = RecordingReactor()
    Spawner(reactor, 7891, tmp_path / "state")()
    (proto, exe, args, path, fds) = reactor.spawned[0]
    assert args == daemon_command(7891, tmp_path / "state")
    assert "-n" not in args and "--nodaemon" not in args
    assert args[args.index("--listen") + 1] == "tcp:7891:interface=127.0.0.1"
    assert args[args.index("--pidfile") + 1] == str(tmp_path / "state" / "gasoline.pid")
    assert args[args.index("--logfile") + 1] == str(tmp_path / "state" / "daemon.log")
    assert fds == {0: "w", 1: "r", 2: "r"}  # never our fd 1
    assert Path(path).is_dir()


def test_loopback_port_only_for_local_http_urls():
    assert loopback_port("http://127.0.0.1:7890") == 7890
    assert loopback_port("http://localhost:1234/") == 1234
    assert loopback_port("http://example.com:7890") is None
    assert loopback_port("https://127.0.0.1:7890") is None


# -- identity and options ---------------------------------------------------------------------------


def test_connector_cwd_identity_matches_the_registry_rule(tmp_path):
    assert connect_main.client_id_for_cwd(str(tmp_path)) == client_id_for_cwd(tmp_path)


def test_identity_is_explicit_id_else_cwd_hash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert connect_main.resolve_client_id("mine") == ("mine", str(tmp_path))
    assert connect_main.resolve_client_id(None) == (client_id_for_cwd(tmp_path), str(tmp_path))


def test_options_build_the_url_and_refuse_bad_values():
    opts = connect_main.ConnectOptions()
    opts.parseOptions(["--port", "7999", "--client-id", "proj-a"])
    assert opts["base-url"] == "http://127.0.0.1:7999"
    for bad in (["--port", "0"], ["--client-id", "../x"], ["--port", "1", "--url", "http://x"],
                ["--url", "ftp://x"], ["--bound", "-1"]):
        with pytest.raises(Exception):
            connect_main.ConnectOptions().parseOptions(bad)


def test_main_reports_usage_errors_on_stderr_with_exit_2(capsys):
    assert connect_main.main(["--port", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "gasoline connect" in captured.err


# -- DaemonHTTP over StubTreq ---------------------------------------------------------------------


class FakeDaemonResource(Resource):
    isLeaf = True

    def __init__(self):
        super().__init__()
        self.requests = []
        self.mcp_status = 200
        self.mcp_body = None
        self.register_status = 200

    def render(self, request):
        path = request.path.decode()
        self.requests.append((request.method.decode(), path,
                              {k.decode().lower(): v[0].decode() for k, v in request.requestHeaders.getAllRawHeaders()}))
        request.setHeader(b"content-type", b"application/json")
        if path == "/health":
            return orjson.dumps(HEALTHY)
        if path == "/clients" and request.method == b"POST":
            request.setResponseCode(self.register_status)
            if self.register_status != 200:
                return orjson.dumps({"error": "too_many_clients", "message": "full"})
            return orjson.dumps({"client_id": "abc", "inherited": False})
        if path.startswith("/clients/"):
            return b'{"gone":true}'
        if path == "/mcp" and request.method == b"POST":
            msg = orjson.loads(request.content.read())
            request.setResponseCode(self.mcp_status)
            if self.mcp_body is not None:
                return self.mcp_body
            if "id" not in msg:
                request.setResponseCode(202)
                return b""
            return orjson.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
        if path == "/mcp" and request.method == b"GET" and getattr(self, "stream_json", False):
            return b'{"not":"a stream"}'
        if path == "/mcp" and request.method == b"GET":
            request.setHeader(b"content-type", b"text/event-stream")
            request.write(b': hi\n\nid: s-1\ndata: {"jsonrpc":"2.0","method":"notifications/message",')
            request.write(b'"params":{"level":"info","data":"x"}}\n\n')
            self.stream_request = request
            return NOT_DONE_YET
        request.setResponseCode(404)
        return b'{"error":"not found"}'


def make_http():
    resource = FakeDaemonResource()
    stub = StubTreq(resource)
    http = DaemonHTTP(stub, "http://127.0.0.1:7890", Clock(), "proj-a", "conn-1")
    return resource, stub, http


def test_daemon_http_health_register_unregister():
    resource, stub, http = make_http()
    h = http.health()
    stub.flush()
    assert h.result == HEALTHY
    r = http.register("/repo")
    stub.flush()
    assert r.result["client_id"] == "abc"
    u = http.unregister()
    stub.flush()
    assert u.result == 200
    assert [(m, p) for m, p, _ in resource.requests] == [
        ("GET", "/health"), ("POST", "/clients"), ("DELETE", "/mcp"), ("DELETE", "/clients/proj-a")]
    assert resource.requests[2][2]["x-gasoline-connection"] == "conn-1"


def test_daemon_http_register_refused_raises_with_the_daemon_message():
    resource, stub, http = make_http()
    resource.register_status = 429
    r = http.register()
    stub.flush()
    assert isinstance(r.result.value, RegistrationRefused)
    assert r.result.value.status == 429 and "full" in str(r.result.value)
    r.addErrback(lambda f: None)


def test_daemon_http_post_mcp_sends_connector_headers_and_passes_messages():
    resource, stub, http = make_http()
    got = []
    d = http.post_mcp(b'{"jsonrpc":"2.0","id":1,"method":"ping"}', got.append)
    stub.flush()
    assert d.result.status == 200 and d.result.text == b""
    assert got == [{"jsonrpc": "2.0", "id": 1, "result": {}}]
    headers = resource.requests[-1][2]
    assert headers["x-gasoline-client"] == "proj-a"
    assert headers["x-gasoline-connection"] == "conn-1"
    n = http.post_mcp(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', got.append)
    stub.flush()
    assert n.result.status == 202 and len(got) == 1


def test_daemon_http_post_mcp_returns_non_jsonrpc_error_text():
    resource, stub, http = make_http()
    resource.mcp_status = 404
    resource.mcp_body = b'{"error":"unknown session"}'
    got = []
    d = http.post_mcp(b'{"jsonrpc":"2.0","id":1,"method":"ping"}', got.append)
    stub.flush()
    assert d.result == Reply(404, "application/json", b'{"error":"unknown session"}')
    assert got == []


def test_daemon_http_post_mcp_keeps_unattached_jsonrpc_errors_for_the_caller():
    resource, stub, http = make_http()
    resource.mcp_status = 404
    resource.mcp_body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}'
    got = []
    d = http.post_mcp(b'{"jsonrpc":"2.0","id":1,"method":"ping"}', got.append)
    stub.flush()
    assert d.result.status == 404 and b"Session not found" in d.result.text
    assert got == []


def test_daemon_http_stream_delivers_sse_messages_and_tracks_event_ids():
    resource, stub, http = make_http()
    got = []
    stream = http.open_stream(got.append, last_event_id="s-0")
    stub.flush()
    assert stream.opened.result == 200
    assert got == [{"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "data": "x"}}]
    assert stream.last_event_id == "s-1"
    assert resource.requests[-1][2]["last-event-id"] == "s-0"
    assert resource.requests[-1][2]["accept"] == "text/event-stream"
    resource.stream_request.finish()
    stub.flush()
    assert stream.done.called


def test_sse_parser_handles_split_chunks_multiline_data_and_comments():
    p = SSEParser()
    assert p.feed(b": comment\nid: 1\nevent: message\ndata: {\"a\":") == []
    events = p.feed(b"\ndata: 1}\n\nevent: endpoint\ndata: /x\r\n\r\n")
    assert [(e.event, e.data, e.id) for e in events] == [("message", b'{"a":\n1}', "1"),
                                                         ("endpoint", b"/x", "1")]
    assert p.last_id == "1"


def test_daemon_http_sends_the_api_key_when_configured():
    resource = FakeDaemonResource()
    stub = StubTreq(resource)
    http = DaemonHTTP(stub, "http://127.0.0.1:7890", Clock(), "proj-a", "conn-1", api_key="s3cret")
    http.register()
    http.post_mcp(b'{"jsonrpc":"2.0","id":1,"method":"ping"}', lambda m: None)
    http.unregister()
    stub.flush()
    keyed = [(m, p) for m, p, h in resource.requests if h.get("x-gasoline-key") == "s3cret"]
    assert keyed == [("POST", "/clients"), ("POST", "/mcp"), ("DELETE", "/mcp"),
                     ("DELETE", "/clients/proj-a")]


def test_spawner_passes_the_api_key_to_the_daemon(tmp_path):
    reactor = RecordingReactor()
    Spawner(reactor, 7891, tmp_path, api_key="k1")()
    args = reactor.spawned[0][2]
    assert args[-2:] == ["--api-key", "k1"]


def test_api_key_option_defaults_to_the_environment(monkeypatch):
    monkeypatch.setenv("GASOLINE_API_KEY", "from-env")
    opts = connect_main.ConnectOptions()
    opts.parseOptions([])
    assert opts["api-key"] == "from-env"
    opts = connect_main.ConnectOptions()
    opts.parseOptions(["--api-key", "given"])
    assert opts["api-key"] == "given"


def test_stream_answered_without_sse_is_reported_as_not_streaming():
    resource, stub, http = make_http()
    resource.stream_json = True
    got = []
    stream = http.open_stream(got.append)
    stub.flush()
    assert stream.opened.result == 200 and stream.streaming is False
    assert stream.done.called and got == []


# -- a session opened by the first exchange (gasoline.connect.fast) -------------------------------


def test_adopted_initialize_is_replayed_silently_and_not_answered_twice():
    clock, daemon, bridge, out = make_bridge()
    bridge.adopt_initialize(INIT)
    bridge.start()
    assert daemon.methods() == ["initialize"]  # the replay, with an internal id
    replay, _, _ = daemon.posts[0]
    assert replay["id"] != INIT["id"] and replay["params"] == INIT["params"]
    daemon.answer_auto(0)
    assert out == []  # the agent already has its answer
    send(bridge, INITIALIZED)
    send(bridge, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    daemon.answer_auto(1)
    daemon.answer_auto(2)
    assert [m.get("id") for m in lines(out)] == [1]


def test_adopted_session_is_ended_even_if_stopped_before_connecting():
    """SIGTERM can come right after the fast answer, while registration is still on its way:
    the bridge unregisters after that registration, never before it."""
    clock, daemon, bridge, out = make_bridge()
    registered = Deferred()
    daemon.register = lambda cwd=None: registered
    bridge.adopt_initialize(INIT)
    bridge.start()
    closed = bridge.shutdown()
    assert daemon.unregistrations == 0 and not closed.called
    registered.callback({"client_id": "c1"})
    assert daemon.unregistrations == 1 and closed.called
    assert daemon.methods() == []  # no replay once closing


def test_the_connectors_stderr_log_drops_twisteds_factory_chatter():
    """Twisted logs "Starting factory" / "Stopping factory" per HTTP connection; the connector's
    stderr observer drops exactly those events (gasoline.common.is_factory_chatter, the daemon's
    server log's rule too), taken from a real Twisted factory."""
    from twisted.internet.protocol import Factory, Protocol
    from twisted.logger import PredicateResult, globalLogPublisher

    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        factory = Factory.forProtocol(Protocol)
        factory.doStart()
        factory.doStop()
    finally:
        globalLogPublisher.removeObserver(events.append)
    chatter = [e for e in events if "factory" in (e.get("log_format") or "")]
    keep = connect_main._NoFactoryChatter()
    assert len(chatter) == 2
    assert [keep(e) for e in chatter] == [PredicateResult.no, PredicateResult.no]
    assert keep({"log_format": "stdin closed; unregistering {client_id}"}) is \
        PredicateResult.maybe
    assert keep({"log_text": "no format"}) is PredicateResult.maybe

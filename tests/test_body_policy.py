"""One request-body policy, applied by the channel before the body is read (docs/security.md §3).

Every route of the table x every method it has, through Twisted's real HTTP parser and the
daemon's own root resource (a L{GasolineSite} on a L{Clock}):

 - slow headers (a header line a second, never finished) are cut at the header deadline;
 - a slow body (full headers, C{Content-Length: 1000000}, then a byte every 5 s) is cut once the
   grace period is over, stays evictable at the connection cap until then, and is never answered;
 - a body that keeps the minimum rate but never ends is cut at the absolute cap;
 - with C{--api-key}, a request without the key on a keyed route is answered 401 on its headers
   and its body is never read; a declared body over the route's limit is 413 on its headers.

C{test_the_matrix_finds_the_holes_with_the_policy_off} runs the same matrix with the body policy
off and requires it to fail. The same on real sockets: C{/health} is answered while connections
holding slow bodies fill the connection cap.
"""

from __future__ import annotations

import socket
import time

import pytest
import pytest_twisted
import treq
from twisted.internet import reactor
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionAborted
from twisted.internet.task import Clock, deferLater
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from gasoline.app import Config, build
from gasoline.http.request import (
    BODY_DEADLINE,
    BODY_GRACE,
    BODY_MIN_RATE,
    HEADER_DEADLINE,
    OFF,
    GasolineSite,
)
from gasoline.http.routes import ROUTES, Key, Route


def concrete(route: Route) -> bytes:
    """A path that names C{route} (its parameters filled in)."""
    path = route.pattern.replace("{*}", "a/b")
    for name in ("session", "client", "id"):
        path = path.replace("{" + name + "}", "x1")
    assert "{" not in path, route.pattern
    return path.encode()


CASES = [(route, method) for route in ROUTES for method in route.methods if method != "HEAD"]
IDS = [f"{m} {r.pattern}" for r, m in CASES]


class World:
    def __init__(self, tmp_path, api_key: str | None = None, **site_kw) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.app = build(Config(state_dir=tmp_path / "state", persist=False, api_key=api_key),
                         self.clock)
        self.site = GasolineSite(self.app.resource, reactor=self.clock, **site_kw)

    def connect(self):
        channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
        if channel is None:
            return None
        transport = StringTransport()
        channel.makeConnection(transport)
        return channel, transport


def lost(channel, transport) -> bool:
    """Is the connection closed (and, as the reactor would, tell the channel)?"""
    if transport.disconnecting or transport.disconnected:
        if channel.transport is not None:
            channel.connectionLost(Failure(ConnectionAborted()))
            channel.transport = None
        return True
    return False


def head(method: str, path: bytes, extra: bytes = b"") -> bytes:
    return (method.encode() + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nX-Gasoline-Client: gasoline-extension/t\r\n"
            + extra)


def slow_body_violations(w: World, route: Route, method: str) -> list[str]:
    """Full headers, a 1 MB body declared, a byte every 5 s: cut after the grace period,
    evictable until then, never answered. What went wrong, if anything."""
    bad = []
    where = f"{method} {route.pattern}"
    channel, transport = w.connect()
    channel.dataReceived(head(method, concrete(route), b"Content-Length: 1000000\r\n\r\n"))
    if transport.value():
        return [f"{where}: answered before its body ({transport.value()[:40]!r})"]
    waited = 0.0
    while waited < BODY_DEADLINE * 2 and not lost(channel, transport):
        if channel not in w.site._unproven:
            bad.append(f"{where}: a connection still sending its first body is not evictable")
            break
        w.clock.advance(5)
        waited += 5
        if transport.disconnecting:
            break
        channel.dataReceived(b" ")
    if not lost(channel, transport):
        bad.append(f"{where}: a body at a byte every 5 s still open after {waited:.0f} s")
        channel.connectionLost(Failure(ConnectionAborted()))
    elif waited > BODY_GRACE + 5:
        bad.append(f"{where}: cut only after {waited:.0f} s (grace {BODY_GRACE} s)")
    if transport.value():
        bad.append(f"{where}: a slow body got an answer")
    return bad


def slow_header_violations(w: World, route: Route, method: str) -> list[str]:
    where = f"{method} {route.pattern}"
    channel, transport = w.connect()
    channel.dataReceived(method.encode() + b" " + concrete(route) + b" HTTP/1.1\r\n")
    for i in range(int(HEADER_DEADLINE * 3)):
        w.clock.advance(1)
        if lost(channel, transport):
            break
        channel.dataReceived(b"X-Slow-%d: 1\r\n" % i)
    if not lost(channel, transport):
        channel.connectionLost(Failure(ConnectionAborted()))
        return [f"{where}: slow headers still open after {HEADER_DEADLINE * 3:.0f} s"]
    if w.clock.seconds() - 1_700_000_000 > 0 and transport.value():
        return [f"{where}: slow headers got an answer"]
    return []


def matrix(w: World) -> list[str]:
    bad: list[str] = []
    for route, method in CASES:
        start = w.clock.seconds()
        bad += slow_header_violations(w, route, method)
        bad += slow_body_violations(w, route, method)
        assert w.clock.seconds() >= start
    return bad


def test_every_route_cuts_slow_headers_and_slow_bodies(tmp_path):
    w = World(tmp_path)
    bad = matrix(w)
    assert not bad, "\n".join(bad)
    assert w.site.slow_bodies == len(CASES) and w.site.open_connections == 0


def test_the_matrix_finds_the_holes_with_the_policy_off(tmp_path):
    w = World(tmp_path)
    w.site.body_policy = OFF
    bad = matrix(w)
    assert sum("still open" in line for line in bad) == len(CASES), bad[:3]


def test_a_slow_body_is_evicted_at_the_connection_cap_and_a_complete_one_is_not(tmp_path):
    w = World(tmp_path, max_connections=2)
    slow, slow_t = w.connect()
    slow.dataReceived(head("POST", b"/logs", b"Content-Length: 1000000\r\n\r\n") + b"{")
    done, done_t = w.connect()
    done.dataReceived(head("POST", b"/logs", b"Content-Length: 2\r\n\r\n") + b"{}")
    assert done_t.value().startswith(b"HTTP/1.1 ")  # answered: proven
    newcomer = w.connect()
    assert newcomer is not None and w.site.evicted_connections == 1
    assert lost(slow, slow_t) and not done_t.disconnecting


def test_a_body_that_keeps_the_minimum_rate_is_cut_at_the_absolute_cap(tmp_path):
    w = World(tmp_path)
    channel, transport = w.connect()
    size = 10 * 1024 * 1024  # /logs' limit: at 1.5 x the minimum rate it needs ~100 s
    channel.dataReceived(head("POST", b"/logs", b"Content-Length: %d\r\n\r\n" % size))
    rate = int(BODY_MIN_RATE * 1.5)
    for second in range(int(BODY_DEADLINE) + 2):
        if lost(channel, transport):
            break
        channel.dataReceived(b" " * rate)
        w.clock.advance(1)
    assert lost(channel, transport) and BODY_DEADLINE <= second + 1 <= BODY_DEADLINE + 2
    assert transport.value() == b""


def test_a_body_at_the_minimum_rate_completes(tmp_path):
    w = World(tmp_path)
    channel, transport = w.connect()
    body = b'{"entries":[]}' + b" " * (BODY_MIN_RATE * 20)
    channel.dataReceived(head("POST", b"/logs", b"Content-Length: %d\r\n\r\n" % len(body)))
    for i in range(0, len(body), BODY_MIN_RATE * 2):  # twice the minimum rate, 20 s in all
        w.clock.advance(1)
        channel.dataReceived(body[i:i + BODY_MIN_RATE * 2])
    assert transport.value().startswith(b"HTTP/1.1 200"), transport.value()[:200]


def test_time_the_daemon_spent_not_reading_is_not_the_clients(tmp_path):
    """The reactor was busy for 30 s (a timer fires late): the body that was waiting in the
    socket is not cut for it."""
    w = World(tmp_path)
    channel, transport = w.connect()
    channel.dataReceived(head("POST", b"/logs", b"Content-Length: 20\r\n\r\n") + b"{")
    w.clock.advance(BODY_GRACE + 30)  # one late check
    assert not transport.disconnecting
    channel.dataReceived(b'"entries":[]}' + b" " * 6)
    assert transport.value().startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("route,method", [(r, m) for r, m in CASES if r.key is Key.ALWAYS],
                         ids=[f"{m} {r.pattern}" for r, m in CASES if r.key is Key.ALWAYS])
def test_without_the_key_a_body_is_refused_on_its_headers_and_never_read(tmp_path, route, method):
    w = World(tmp_path, api_key="k" * 32)
    channel, transport = w.connect()
    channel.dataReceived(head(method, concrete(route), b"Content-Length: 4000000\r\n\r\n"))
    answer = transport.value()
    assert answer.startswith(b"HTTP/1.1 401 ") and b"Connection: close" in answer, answer[:200]
    assert transport.disconnecting
    channel.dataReceived(b"x" * 100_000)  # the body, arriving anyway, is dropped
    request = channel.requests[-1] if channel.requests else None
    assert request is None or request.body_length == 0
    assert w.site.refused_on_headers == 1


@pytest.mark.parametrize("route,method", [(r, m) for r, m in CASES if r.pattern != "/logs"][:8])
def test_a_declared_body_over_the_limit_is_413_on_its_headers(tmp_path, route, method):
    w = World(tmp_path)
    channel, transport = w.connect()
    channel.dataReceived(head(method, concrete(route), b"Content-Length: 6000000\r\n\r\n"))
    assert transport.value().startswith(b"HTTP/1.1 413 ") and transport.disconnecting


# -- the same on real sockets -----------------------------------------------------------------

@pytest_twisted.ensureDeferred
async def test_health_is_answered_while_slow_bodies_fill_the_connection_cap(tmp_path):
    app = build(Config(state_dir=tmp_path / "state", persist=False), reactor)
    cap = 40
    site = GasolineSite(app.resource, reactor=reactor, max_connections=cap)
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    socks = []
    try:
        n = port.getHost().port
        for _ in range(cap):
            s = socket.create_connection(("127.0.0.1", n))
            s.sendall(head("POST", b"/logs", b"Content-Length: 1000000\r\n\r\n{"))
            socks.append(s)
        deadline = time.monotonic() + 10
        while site.open_connections < cap and time.monotonic() < deadline:
            await deferLater(reactor, 0.02, lambda: None)
        assert site.open_connections == cap and len(site._unproven) == cap
        for _ in range(5):
            response = await treq.get(f"http://127.0.0.1:{n}/health", persistent=False)
            assert response.code == 200
            await response.content()
        # The first evicts the oldest slow body; its slot serves the others.
        assert site.evicted_connections >= 1 and site.refused_connections == 0
    finally:
        for s in socks:
            s.close()
        await port.stopListening()
        app.extension.stop()
        app.store.notifier.stop()
        if app.router is not None:
            app.router.close()


def test_a_small_body_is_read_first_then_decided_and_still_has_the_deadline(tmp_path):
    """A body of at most 64 KiB is read before the checks run (on the whole request): without
    the key it is 401 once read; trickled, it is cut at the deadline like any other."""
    w = World(tmp_path, api_key="k" * 32)
    channel, transport = w.connect()
    body = b"{}" + b" " * 1000
    channel.dataReceived(head("POST", b"/clear", b"Content-Length: %d\r\n\r\n" % len(body)))
    assert transport.value() == b""  # not decided yet: its body is read first
    channel.dataReceived(body)
    assert transport.value().startswith(b"HTTP/1.1 401 ") and w.site.refused_on_headers == 0
    slow, slow_t = w.connect()
    slow.dataReceived(head("POST", b"/logs", b"Content-Length: 10000\r\n\r\n{"))
    for _ in range(int(BODY_GRACE / 5) + 2):
        if lost(slow, slow_t):
            break
        w.clock.advance(5)
        slow.dataReceived(b" ")
    assert lost(slow, slow_t) and slow_t.value() == b""

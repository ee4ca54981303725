"""
Connection-level limits: an absolute deadline for a request's headers
(slowloris), a connection cap that connections which never complete a request cannot hold.
"""

from __future__ import annotations

from twisted.internet.error import ConnectionAborted
from twisted.python.failure import Failure

from twisted.internet.task import Clock
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from gasoline.http.request import HEADER_DEADLINE, IDLE_TIMEOUT, GasolineSite
from support import connect, site_on_clock


def _deliver_aborts(connections) -> None:
    """What the reactor does soon after C{abortConnection}: the connection is lost."""
    for channel, transport in connections:
        if transport.disconnected and channel.transport is not None:
            channel.connectionLost(Failure(ConnectionAborted()))
            channel.transport = None


REQUEST = b"GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def test_headers_trickled_one_line_at_a_time_hit_an_absolute_deadline():
    site, clock = site_on_clock()
    channel, transport = connect(site)
    channel.dataReceived(b"GET /health HTTP/1.1\r\n")
    for i in range(int(HEADER_DEADLINE) - 1):  # a header line every second: the idle timer
        clock.advance(1)                          # never fires
        channel.dataReceived(b"X-Slow-%d: 1\r\n" % i)
    assert not transport.disconnecting
    clock.advance(1.5)
    assert transport.disconnecting and transport.disconnected  # aborted, not drained
    assert transport.value() == b""


def test_a_slowloris_at_the_idle_timeout_pace_is_cut_long_before_it():
    site, clock = site_on_clock()
    channel, transport = connect(site)
    channel.dataReceived(b"GET / HTTP/1.1\r\n")
    clock.advance(HEADER_DEADLINE + 0.1)  # one header line every 20 s would keep an idle timer
    assert transport.disconnecting and HEADER_DEADLINE < 20 < IDLE_TIMEOUT


def test_a_connection_that_sends_nothing_is_cut_at_the_header_deadline():
    site, clock = site_on_clock()
    _, transport = connect(site)
    clock.advance(HEADER_DEADLINE + 0.1)
    assert transport.disconnecting


def test_complete_requests_are_not_cut_and_each_later_request_gets_its_own_deadline():
    site, clock = site_on_clock()
    channel, transport = connect(site)
    channel.dataReceived(REQUEST)
    assert b"404" in transport.value()
    clock.advance(HEADER_DEADLINE * 3)  # idle between requests: the idle timeout governs
    assert not transport.disconnecting
    channel.dataReceived(b"GET /again HTTP/1.1\r\n")  # a second request starts trickling
    clock.advance(HEADER_DEADLINE + 0.1)
    assert transport.disconnecting


def test_a_request_completed_in_time_is_answered(monkeypatch):
    site, clock = site_on_clock()
    channel, transport = connect(site)
    channel.dataReceived(b"GET /nothing HTTP/1.1\r\n")
    clock.advance(HEADER_DEADLINE - 1)
    channel.dataReceived(b"Host: 127.0.0.1\r\n\r\n")
    clock.advance(5)
    assert b"404" in transport.value() and not transport.disconnecting


def test_connections_that_never_complete_a_request_cannot_hold_the_cap():
    site, clock = site_on_clock(max_connections=5)
    slow = []
    for _ in range(10):
        while site.open_connections < site.max_connections:  # the attacker fills the cap again
            channel, transport = connect(site)
            channel.dataReceived(b"GET / HTTP/1.1\r\n")  # and never more
            slow.append((channel, transport))
        got = connect(site)  # the extension, an agent, a CDP client: it always gets in
        assert got is not None
        _deliver_aborts(slow)
        got[0].dataReceived(REQUEST)
        assert b"404" in got[1].value()
        got[0].connectionLost(Failure(ConnectionAborted()))  # answered; the client goes
    assert site.evicted_connections == 10 and site.refused_connections == 0
    assert [t.disconnecting for _, t in slow[:10]] == [True] * 10  # oldest unproven first
    assert not any(t.disconnecting for _, t in slow[10:])


def test_at_the_cap_with_only_proven_connections_a_new_one_is_refused():
    site, clock = site_on_clock(max_connections=3)
    proven = [connect(site) for _ in range(3)]
    for channel, _ in proven:
        channel.dataReceived(REQUEST)
    assert connect(site) is None and site.refused_connections == 1
    assert not any(t.disconnecting for _, t in proven)


def test_the_evicted_connection_is_the_oldest_unproven_one_not_a_proven_one():
    site, clock = site_on_clock(max_connections=3)
    a = connect(site)
    a[0].dataReceived(REQUEST)
    b = connect(site)           # unproven, older
    clock.advance(1)
    c = connect(site)           # unproven, newer
    assert connect(site) is not None
    assert (a[1].disconnecting, b[1].disconnecting, c[1].disconnecting) == (False, True, False)


def test_header_deadlines_of_many_connections_are_each_exact_on_one_timer():
    """The site keeps every connection's header deadline on one timer (Deadlines): each
    connection is still cut exactly HEADER_DEADLINE after it started, whatever the others do,
    a connection whose headers came in time is never cut, and a later request on a connection
    starts its own deadline."""
    site, clock = site_on_clock()
    started = {}
    for i in range(6):  # connections opened a second apart; odd ones complete a request
        channel, transport = connect(site)
        started[i] = (clock.seconds(), channel, transport)
        if i % 2:
            channel.dataReceived(REQUEST)
        clock.advance(1)
    # One timer for all of their header deadlines, one for all of their idle timeouts.
    timers = [getattr(c.func, "__self__", None) for c in clock.getDelayedCalls()]
    assert sorted(map(id, timers)) == sorted(map(id, [site.header_deadlines,
                                                       site.idle_deadlines]))
    cut = {}
    while len(cut) < 3 and clock.seconds() < 20:
        clock.advance(0.25)
        for i, (t0, _, transport) in started.items():
            if transport.disconnecting and i not in cut:
                cut[i] = clock.seconds() - t0
    assert sorted(cut) == [0, 2, 4]  # the ones that never sent headers
    assert all(HEADER_DEADLINE <= after < HEADER_DEADLINE + 0.25 for after in cut.values()), cut
    assert not any(started[i][2].disconnecting for i in (1, 3, 5))
    # A later request on a connection that completed one: its own deadline, from its first byte.
    _, channel, transport = started[1]
    channel.dataReceived(b"GET /again HTTP/1.1\r\n")
    clock.advance(HEADER_DEADLINE - 0.5)
    assert not transport.disconnecting
    clock.advance(0.6)
    assert transport.disconnecting


def test_a_connection_lost_before_its_deadlines_leaves_them():
    site, clock = site_on_clock()
    channel, transport = connect(site)
    channel.dataReceived(b"GET /nothing HTTP/1.1\r\n")
    assert channel in site.header_deadlines.watched and channel in site.idle_deadlines.watched
    transport.loseConnection()
    channel.connectionLost(Failure(ConnectionAborted()))
    assert channel not in site.header_deadlines.watched
    assert channel not in site.idle_deadlines.watched
    clock.advance(IDLE_TIMEOUT + 1)  # the timers fire and find nothing to cut
    assert site.header_deadlines.watched == {} == site.idle_deadlines.watched
    assert clock.getDelayedCalls() == []  # and are not set again


class _Held(Resource):
    """Answers nothing until told (a request being handled, as a long poll is)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.held: list = []

    def render(self, request):
        self.held.append(request)
        return NOT_DONE_YET


def test_idle_connections_close_at_the_idle_timeout_on_one_timer_and_never_while_answered():
    """The idle timeout between requests (twisted.web's, kept on the site's shared timer):
    a connection idle since its last answer is closed IDLE_TIMEOUT later, not before; a new
    request restarts it; a request being handled is never timed out, however long it takes."""
    clock = Clock()
    held = _Held()
    site = GasolineSite(held, reactor=clock)
    idle, busy = connect(site), connect(site)
    for channel, _ in (idle, busy):
        channel.dataReceived(REQUEST)
    held.held.pop(0).finish()  # idle's request is answered; busy's is still being handled
    clock.advance(IDLE_TIMEOUT - 1)
    assert not idle[1].disconnecting
    idle[0].dataReceived(REQUEST)  # a new request, answered at once: the timeout starts again
    held.held.pop().finish()
    clock.advance(IDLE_TIMEOUT - 1)
    assert not idle[1].disconnecting
    clock.advance(1.5)
    assert idle[1].disconnecting  # closed (gracefully: twisted.web's timeoutConnection)
    clock.advance(IDLE_TIMEOUT * 3)
    assert not busy[1].disconnecting and len(held.held) == 1
    held.held.pop(0).finish()  # answered at last: from now on it is idle
    clock.advance(IDLE_TIMEOUT - 1)
    assert not busy[1].disconnecting
    clock.advance(1.5)
    assert busy[1].disconnecting
    idle_timers = [c for c in clock.getDelayedCalls()
                   if getattr(c.func, "__self__", None) is site.idle_deadlines]
    assert len(idle_timers) <= 1


def test_deadlines_keep_one_timer_when_an_expiry_starts_another_deadline():
    """A connection handed over at its deadline may start another one's (its end runs code):
    still one timer, and every deadline kept."""
    from gasoline.http.deadlines import Deadlines

    clock = Clock()
    ended: list[tuple[str, float]] = []

    def expired(channel):
        ended.append((channel, clock.seconds()))
        if channel == "a":
            deadlines.watch("c")  # type: ignore[arg-type]

    deadlines = Deadlines(clock, 10.0, expired)
    deadlines.watch("a")  # type: ignore[arg-type]
    clock.advance(3)
    deadlines.watch("b")  # type: ignore[arg-type]
    clock.advance(7)  # a's deadline: c starts now, b's is at 13
    assert ended == [("a", 10.0)] and len(clock.getDelayedCalls()) == 1
    clock.advance(3)
    assert ended == [("a", 10.0), ("b", 13.0)] and len(clock.getDelayedCalls()) == 1
    clock.advance(7)
    assert ended[-1] == ("c", 20.0) and clock.getDelayedCalls() == []

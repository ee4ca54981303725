"""
A twisted.web C{Request}/C{Site} that never buffers more request body than the largest route limit.

twisted.web's default request spools any body of 100 kB or more to a temporary file and keeps all
of it. L{GasolineRequest} keeps at most L{MAX_BODY} bytes in memory (the largest limit of any route,
C{/logs}' 10 MB, plus one byte so "over the limit" stays detectable); the rest of the body is read
off the connection and discarded, and C{body_length} counts every byte received. The guard
(L{gasoline.http.guards.Guard}) then answers 413 JSON using the limit of the route
(L{body_limit_for}), so a client always gets a JSON answer, never a dropped connection.

Connections (L{GasolineChannel}, L{GasolineSite}): a request's headers must all arrive within
L{HEADER_DEADLINE} seconds of the connection opening (or of the first byte of a later request on
it), however often bytes trickle in; a connection that never completes a request's headers is
aborted then.

One request-body policy, applied by the channel when a request's headers are in and before any of
its body is read (L{GasolineChannel.allHeadersReceived}; a body declared no longer than
L{POLICY_ON_HEADERS_FROM} is read first and decided by the same checks on the whole request):

 - the route policy and the guards (the root's L{gasoline.http.site.GasolineRoot.policy}: the
   canonical path, the route, its methods, C{Host}, C{Origin}, browser requests, the declared
   C{Content-Length} against the route's limit, C{--api-key}) are decided on the headers; a
   refusal is answered at once (the same JSON and headers the late check would give, plus
   C{Connection: close}) and the connection is closed without reading the body;
 - the body has a deadline (L{BodyPolicy}): after a grace period it must keep arriving at a
   minimum average rate, and it must be complete within an absolute cap, else the connection is
   aborted. Time the daemon itself spent not reading (its reactor was busy) is not counted
   against the client;
 - a connection is I{proven} only once its first request is complete, body included: at the
   connection cap, a new connection evicts the oldest connection that has not completed a
   request yet, so connections that trickle headers or bodies can never hold the cap
   (slowloris, slow POST).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from io import BytesIO

from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, server

import orjson
from gasoline.core.inflight import InFlight
from gasoline.http.deadlines import Deadlines
from gasoline.http.site import GasolineRoot
from gasoline.http.body_policy import (  # noqa: F401 (re-exported: tests and benches import them)
    BODY_CHECK_EVERY,
    BODY_DEADLINE,
    BODY_GRACE,
    BODY_MIN_RATE,
    OFF,
    POLICY_ON_HEADERS_FROM,
    BodyPolicy,
    Head,
)
from gasoline.stream import abort_transport

_log = Logger()

#: twisted.web's methods the overrides below extend, bound once: C{twisted.web.http} is a
#: deprecation proxy module, and each attribute read through it costs a dozen Python calls.
_channel_data_received = http.HTTPChannel.dataReceived
_channel_line_received = http.HTTPChannel.lineReceived
_channel_all_headers_received = http.HTTPChannel.allHeadersReceived
_channel_all_content_received = http.HTTPChannel.allContentReceived
_request_finish = server.Request.finish
_mixin_set_timeout = http.HTTPChannel.setTimeout
_mixin_reset_timeout = http.HTTPChannel.resetTimeout


MiB = 1024 * 1024
#: C{POST /logs} (extension-protocol.md §1).
LOGS_LIMIT = 10 * MiB
#: Every other route: other ingest routes (§1), MCP and admin routes.
DEFAULT_LIMIT = 5 * MiB
#: The most body any request keeps in memory.
MAX_BODY = LOGS_LIMIT + 1


def body_limit_for(path: bytes) -> int:
    """The body size limit, in bytes, of the route at C{path} (no query string)."""
    return LOGS_LIMIT if path == b"/logs" else DEFAULT_LIMIT


def body_length(request: server.Request | Head) -> int:
    """Bytes of body C{request} received (works for any twisted.web request, e.g. in StubTreq:
    its kept body is measured)."""
    if isinstance(request, GasolineRequest):  # (every request of the daemon's: one check)
        return request.body_length
    if isinstance(request, Head):
        return request.body_length
    content = request.content
    if content is None:
        return 0
    position = content.tell()
    content.seek(0, 2)
    size = content.tell()
    content.seek(position)
    return size


def no_delay(transport: object) -> None:
    """Turn off Nagle's algorithm on a new connection's C{transport} (where it has TCP options).

    Twisted leaves it on; a response larger than one TCP segment (an MCP result, C{/snapshot})
    then stalls about 40 ms at its tail, waiting for the peer's delayed ACK.
    """
    set_no_delay = getattr(transport, "setTcpNoDelay", None)
    if set_no_delay is not None:
        try:
            set_no_delay(True)
        except OSError:  # not a TCP socket (a UNIX endpoint), or already closed
            pass


class GasolineRequest(server.Request):
    """A request whose body buffer is capped at L{MAX_BODY}, and whose kept bytes count in the
    daemon's in-flight budget (L{gasoline.core.inflight}) until it is answered; see the module
    docstring."""

    #: Every body byte received, kept or discarded.
    body_length = 0
    #: The kept body (at most L{MAX_BODY} bytes), also C{content}; set when the length is known.
    kept_body: BytesIO | None = None
    #: A request body is dropped like any other holder when the budget needs room.
    inflight_exempt = False
    #: The body was dropped for the in-flight budget (a 503 was answered).
    inflight_dropped = False
    #: The site's in-flight budget (C{False}: not looked up yet; C{None}: none).
    _inflight: InFlight | None | bool = False
    #: What the headers declared (C{None}: chunked).
    _declared: int | None = None
    #: This body counts in the in-flight budget now.
    _counted = False

    def gotLength(self, length: int | None) -> None:
        self.body_length = 0
        self._declared = length
        self.content = self.kept_body = BytesIO()

    def handleContentChunk(self, data: bytes) -> None:
        received = self.body_length
        self.body_length = received + len(data)
        room = MAX_BODY - received
        kept = self.kept_body
        if room <= 0 or kept is None:  # (gotLength, which sets it, comes first)
            return
        piece = data if len(data) <= room else data[:room]
        if received or len(data) != self._declared:
            # A body still being read (it did not come whole in one read, which most do and which
            # is handed to its route before the reactor reads anything else): it counts.
            budget = self._budget()
            if budget is not None:
                if not budget.take(self, len(piece)):
                    budget.refuse(self)
                    return
                self._counted = True
        kept.write(piece)

    def _budget(self) -> InFlight | None:
        """The site's in-flight budget (C{channel.site} is set by twisted.web's
        C{Site.buildProtocol}; a request on a channel of another site has none)."""
        budget = self._inflight
        if budget is False:
            channel = self.channel
            site = channel.site if isinstance(channel, GasolineChannel) else None
            budget = self._inflight = site.inflight if site is not None else None
        return budget if isinstance(budget, InFlight) else None

    def _release(self) -> None:
        if self._counted:
            self._counted = False
            budget = self._budget()
            if budget is not None:
                budget.release(self)

    def inflight_drop(self, why: str) -> None:
        """The in-flight budget needs this body's room: drop what was kept, answer 503 at once
        and drop the rest of the body (L{GasolineChannel.refuse_now})."""
        self.inflight_dropped = True
        self.kept_body = None
        self.content = BytesIO()
        channel = self.channel
        if isinstance(channel, GasolineChannel):
            channel.refuse_now(503, orjson.dumps({"error": why, "code": "in_flight_budget"}))

    def finish(self) -> None:
        if self._counted:  # (most bodies come whole and are never counted)
            self._release()
        _request_finish(self)

    def connectionLost(self, reason: Failure) -> None:
        self._release()
        super().connectionLost(reason)

    @property
    def oversize(self) -> bool:
        """More body arrived than any route accepts (what was kept is truncated)."""
        return self.body_length > LOGS_LIMIT


#: Seconds a connection may sit idle between requests before it is closed (so idle
#: sockets cannot use up the daemon's file descriptors). A
#: request being answered (an SSE stream, a long-poll) is never idle in this sense.
IDLE_TIMEOUT = 60
#: Open connections accepted at once; more are closed at once (one log line per episode).
MAX_CONNECTIONS = 1000
#: Seconds from a connection's opening (or from the first byte of a later request on it) to the end
#: of the request's headers: an absolute deadline, not an idle timer that each byte resets.
HEADER_DEADLINE = 10.0


class GasolineChannel(http.HTTPChannel):
    """An C{HTTPChannel} with an absolute deadline for each request's headers
    (L{HEADER_DEADLINE}), Nagle's algorithm off (L{no_delay}), and a streaming producer registered
    while the transport's buffer is full starting paused; see the module docstring.

    @ivar proven: at least one request (headers and body) was received on this connection.
    @ivar transport_paused: the transport asked this channel to pause (its buffer is full) and
        has not resumed it yet.
    """

    header_deadline = HEADER_DEADLINE
    #: The body deadline (L{BodyPolicy}); the site sets its own.
    body_policy = BodyPolicy()
    #: Decide the route policy and the guards on the headers of a request with a body.
    policy_on_headers = True
    proven = False
    transport_paused = False
    #: The site that built this channel (twisted.web's C{Site.buildProtocol} sets it).
    site: GasolineSite | None = None
    #: The current request's line (method, target, version), as it came.
    _request_line = b""
    #: The site's header deadlines (L{Deadlines}) and the connections they watch.
    _deadlines: Deadlines[GasolineChannel] | None = None
    _watched: dict[GasolineChannel, float] | None = None
    #: The site's idle timeouts (L{Deadlines}; C{None}: twisted.web's own timer per connection),
    #: and whether this connection's timeout is on twisted.web's timer (another period).
    _idle: Deadlines[GasolineChannel] | None = None
    _own_timeout = False
    #: The body deadline's timer, when it is set: (delayed call, when it is due).
    _body_timer = None
    #: A request's body is being read (its headers are in, it is not complete).
    _body_waiting = False
    #: When the current body's headers ended, and how many body bytes have come since.
    _body_started = 0.0
    _body_received = 0
    #: A refusal was answered on the headers: everything else the client sends is dropped.
    _discarding = False
    #: Body bytes of the refused request still to come (C{None}: unknown, chunked).
    _discard_left: int | None = None
    #: The site's clock (its reactor), for the body deadline.
    _clock: IReactorTime | None = None
    #: Waiting for a request's first byte (between requests): the next byte arms the deadline.
    _between_requests = False
    #: Called once when the channel completes its first request's headers (the site's bookkeeping).
    on_proven: Callable[[GasolineChannel], None] | None = None
    #: Called once when the connection is lost, before the channel cleans up (the site's
    #: count of open connections).
    on_lost: Callable[[GasolineChannel], None] | None = None

    def __init__(self, *, header_deadline: float = HEADER_DEADLINE,
                 body_policy: BodyPolicy | None = None, policy_on_headers: bool = True,
                 clock: IReactorTime | None = None,
                 deadlines: Deadlines[GasolineChannel] | None = None,
                 idle: Deadlines[GasolineChannel] | None = None,
                 on_proven: Callable[[GasolineChannel], None] | None = None,
                 on_lost: Callable[[GasolineChannel], None] | None = None) -> None:
        """Everything the site decides for its channels is passed here (L{GasolineSite.protocol}).

        @param clock: the site's reactor, for the body deadline.
        @param deadlines: the site's header deadlines (shared by its channels); without it, a
            channel with a C{clock} keeps its own (C{header_deadline}); one with neither has none.
        @param idle: the site's idle timeouts (shared by its channels): the timeout
            (C{TimeoutMixin}'s C{timeOut}) is kept there when its period is theirs; without it,
            on twisted.web's timer.
        """
        super().__init__()
        self.header_deadline = header_deadline
        if deadlines is None and clock is not None:
            deadlines = Deadlines(clock, header_deadline, GasolineChannel.headers_too_slow)
        if deadlines is not None:
            self.header_deadline = deadlines.deadline
            self._deadlines = deadlines
            self._watched = deadlines.watched
        self._idle = idle
        if body_policy is not None:
            self.body_policy = body_policy
        self.policy_on_headers = policy_on_headers
        self._clock = clock
        self.on_proven = on_proven
        self.on_lost = on_lost
        #: (Bound once: installed as the instance's lineReceived before each request.)
        self._line_hook = self._request_line_received

    def connectionMade(self) -> None:
        super().connectionMade()
        no_delay(self.transport)
        self._arm()
        self.__dict__["lineReceived"] = self._line_hook

    # -- IPushProducer, as the transport's producer --------------------------------------------

    def pauseProducing(self) -> None:
        self.transport_paused = True
        super().pauseProducing()

    def resumeProducing(self) -> None:
        self.transport_paused = False
        super().resumeProducing()

    # -- IConsumer, for the requests' producers ------------------------------------------------

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        """As C{HTTPChannel}'s, but a streaming producer registered while the transport is paused
        is paused at once: no C{pauseProducing} would come for it until the transport's buffer
        fills again (an SSE stream opened on a connection whose reader has stopped reading)."""
        super().registerProducer(producer, streaming)
        if streaming and self.transport_paused:
            producer.pauseProducing()

    # (The overrides below run for every request: they call HTTPChannel's methods by name, not
    # through super(), and inline the checks of the common case, a body that came whole.)

    def dataReceived(self, data: bytes) -> None:
        if self._discarding:
            self._discard(data)
            return
        if self._between_requests:
            self._between_requests = False
            self._arm()
        _channel_data_received(self, data)
        if self._body_waiting and self._body_timer is None:
            # A body that did not come whole with its headers: now it has a deadline (most
            # bodies do come whole, and cost no timer).
            self._arm_body()

    def allHeadersReceived(self) -> None:
        watched = self._watched
        if watched is not None:  # (the headers are in: their deadline is met)
            watched.pop(self, None)
        _channel_all_headers_received(self)
        length = self.length
        if length == 0:
            return  # no body: the request is complete (allContentReceived comes next)
        self._body_waiting = True
        if self.policy_on_headers and (length is None or length > POLICY_ON_HEADERS_FROM):
            self._refused_on_headers()

    def allContentReceived(self) -> None:
        self._body_waiting = False
        if self._body_timer is not None:
            self._disarm_body()
        if self._discarding:
            return  # answered already (the in-flight budget dropped it): never processed
        self.__dict__["lineReceived"] = self._line_hook  # (for the next request's line)
        if not self.proven:
            self.proven = True
            if self.on_proven is not None:
                self.on_proven(self)
        _channel_all_content_received(self)

    def _request_line_received(self, line: bytes) -> None:
        """A request's first line, on its way to twisted.web (which keeps its own copy to
        itself): the route policy on the headers needs its method and target. Only that line
        comes here (the instance's lineReceived until then); the header lines go straight to
        twisted.web."""
        if line:  # (twisted.web skips one empty line before a request)
            self._request_line = line
            del self.__dict__["lineReceived"]
        _channel_line_received(self, line)

    def _body_bytes(self) -> int:
        """Body bytes received since the current request's headers ended (the refused ones
        dropped included)."""
        if self._discarding:
            return self._body_received
        request = self.requests[-1] if self.requests else None
        return request.body_length if isinstance(request, GasolineRequest) else 0

    # -- the request-body policy ----------------------------------------------------------------

    def _refused_on_headers(self) -> bool:
        """Run the root's route policy and guards on the headers of the request now being read;
        on a refusal answer it, close the connection and drop the body. True if refused."""
        site = self.site
        root = None if site is None else site.root
        parts = self._request_line.split(b" ")
        if site is None or root is None or len(parts) != 3 or not self.requests:
            return False
        method, target = parts[0], parts[1]
        if method == b"OPTIONS":
            return False
        head = Head(self.requests[-1], method, target, self.length)
        try:
            body = root.policy(head)  # type: ignore[arg-type]  # (a Head reads as a Request)
        except Exception:
            _log.failure("the route policy failed on a request's headers")
            return False
        if body is None:
            return False
        site.count_refused_on_headers()
        counted = root.on_response
        if counted is not None:  # /metrics counts it as the late check would have
            counted(head.path, head.code)
        self._answer_and_drop(head.code, list(head.responseHeaders.getAllRawHeaders()), body,
                              self.length)
        self._arm_body()
        return True

    def refuse_now(self, code: int, body: bytes) -> None:
        """Answer the request whose body is being read with C{code} and the JSON C{body} now,
        and drop the rest of its body (the in-flight budget needed its room)."""
        if self._discarding:
            return
        self._body_received = self._body_bytes()  # (what came before the refusal)
        self._answer_and_drop(code, [(b"Content-Type", [b"application/json"])], body, None)

    def _answer_and_drop(self, code: int, headers: Sequence[tuple[bytes, Sequence[bytes]]],
                         body: bytes, left: int | None) -> None:
        """Write one whole answer on the transport, then drop what the client still sends."""
        lines = [b"HTTP/1.1 %d %s" % (code, http.RESPONSES.get(code, b"Refused"))]
        for name, values in headers:
            lines.extend(name + b": " + value for value in values)
        lines += [b"Content-Length: %d" % len(body), b"Connection: close", b"", b""]
        self._discarding = True
        self._discard_left = left  # None: not known (chunked, or part already read)
        # What follows in the bytes being parsed now goes to _discard, not to twisted.web (it
        # would read it as the body, or the next request); dataReceived drops later reads.
        self.__dict__["rawDataReceived"] = self._discard
        transport = self.transport
        if transport is None:
            return
        transport.write(b"\r\n".join(lines) + body)
        # Close our side only, and read (and drop) the body the client is still sending:
        # closing at once would reset the connection under a client that writes its whole
        # body before reading, and it would never see the answer. The body deadline bounds
        # this as it bounds any body.
        lose_write = getattr(transport, "loseWriteConnection", None)
        if lose_write is not None:
            lose_write()
        else:
            transport.loseConnection()

    def _discard(self, data: bytes) -> None:
        """Drop body bytes of a request refused on its headers; close once all have come."""
        self._body_received += len(data)
        left = self._discard_left
        if left is None:
            return
        self._discard_left = left = left - len(data)
        if left <= 0 and self.transport is not None:
            self._disarm_body()
            self.transport.loseConnection()

    def _arm_body(self) -> None:
        """Start the body deadline (in the reactor turn that read the headers)."""
        self._disarm_body()
        first = self.body_policy.first_check()
        if first is None:
            return
        self._body_started = now = self._now()
        self._body_timer = (self.callLater(first, self._check_body), now + first)

    def _now(self) -> float:
        clock = self._clock
        return clock.seconds() if clock is not None else 0.0

    def _disarm_body(self) -> None:
        timer, self._body_timer = self._body_timer, None
        if timer is not None and timer[0].active():
            timer[0].cancel()

    def _check_body(self) -> None:
        timer = self._body_timer
        if timer is None:
            return
        now = self._now()
        late = now - timer[1]
        if late > self.body_policy.every:
            # The reactor was busy (not reading): that time is not the client's.
            self._body_started += late
        elapsed = now - self._body_started
        why = self.body_policy.too_slow(elapsed, self._body_bytes())
        transport = self.transport
        if why is not None:
            self._body_timer = None
            if transport is not None:
                site = self.site
                if site is not None:
                    site.count_slow_body()
                _log.debug("request body too slow ({why}): connection closed", why=why)
                abort_transport(transport)
            return
        every = self.body_policy.every
        self._body_timer = (self.callLater(every, self._check_body), now + every)

    def requestDone(self, request: Any) -> None:
        super().requestDone(request)
        if not self.requests and self.transport is not None:
            self._between_requests = True  # the keep-alive idle timer governs the wait

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.on_lost is not None:
            self.on_lost(self)
        self._disarm_body()
        super().connectionLost(reason)
        if self._deadlines is not None:
            self._deadlines.forget(self)
        if self._idle is not None:
            self._idle.forget(self)

    # -- the idle timeout (TimeoutMixin's), on the site's shared timer -------------------------

    def setTimeout(self, period: int | None) -> int | None:
        """C{TimeoutMixin.setTimeout}: twisted.web sets the idle timeout when a connection opens
        and after each request, and clears it while a request is handled. With the site's
        L{Deadlines} of that period it is kept there, not on a timer of its own."""
        idle = self._idle
        if idle is None or (period is not None and period != idle.deadline):
            idle_watched = idle.watched if idle is not None else None
            if idle_watched is not None:
                idle_watched.pop(self, None)
            self._own_timeout = period is not None
            return _mixin_set_timeout(self, period)
        if self._own_timeout:  # (it was on twisted.web's timer: cancel that one)
            self._own_timeout = False
            _mixin_set_timeout(self, None)
        previous = self.timeOut
        self.timeOut = period
        if period is None:
            idle.watched.pop(self, None)
        else:
            idle.watch(self)
        return previous

    def resetTimeout(self) -> None:
        """C{TimeoutMixin.resetTimeout} (every read): the idle timeout, if it is running,
        starts again."""
        idle = self._idle
        if idle is None or self._own_timeout:
            _mixin_reset_timeout(self)
            return
        watched = idle.watched
        if self in watched:  # running: it starts again, at the end (L{Deadlines.watch}, inlined:
            del watched[self]  # this runs for every read, and a watched dict has its timer set)
            watched[self] = idle.now()

    def _arm(self) -> None:
        """The header deadline starts now."""
        if self._deadlines is not None:
            self._deadlines.watch(self)

    def _disarm(self) -> None:
        if self._watched is not None:
            self._watched.pop(self, None)

    def headers_too_slow(self) -> None:
        """The header deadline passed (L{Deadlines}): abort the connection."""
        transport = self.transport
        if transport is not None:
            _log.debug("request headers not complete after {s} s: connection closed",
                       s=self.header_deadline)
            abort_transport(transport)


class GasolineSite(server.Site):
    """C{Site} with L{GasolineRequest}, no tracebacks in error pages, an access log of server
    errors only, an idle timeout (L{IDLE_TIMEOUT}) and a cap on open connections
    (L{MAX_CONNECTIONS}): past the cap a new connection evicts the oldest connection that has not
    completed a request (headers and body), or, if there is none, is closed as soon as it is
    accepted, so idle sockets can never use up the process's file descriptors, and connections
    that never complete a request can never hold the cap. Every request's headers and body have
    a deadline, and the route policy is decided on the headers (L{GasolineChannel})."""

    requestFactory = GasolineRequest
    displayTracebacks = False
    header_deadline = HEADER_DEADLINE
    #: The body deadline of every request (L{BodyPolicy}; L{OFF} turns it off).
    body_policy = BodyPolicy()
    #: Decide the route policy and the guards on a request's headers, before its body.
    policy_on_headers = True

    def protocol(self) -> GasolineChannel:  # type: ignore[override]
        # A plain HTTP/1.1 channel: no HTTP/2 (h2 is not installed), so no negotiating wrapper.
        return GasolineChannel(header_deadline=self.header_deadline, body_policy=self.body_policy,
                               policy_on_headers=self.policy_on_headers, clock=self.reactor,
                               deadlines=self._header_deadlines(), idle=self._idle_deadlines(),
                               on_proven=self._proven, on_lost=self._lost)

    def _header_deadlines(self) -> Deadlines[GasolineChannel]:
        """The header deadlines of this site's connections (one timer for all of them)."""
        deadlines = self.__dict__.get("header_deadlines")
        if deadlines is None or deadlines.deadline != self.header_deadline:
            deadlines = self.header_deadlines = Deadlines(
                self.reactor, self.header_deadline, GasolineChannel.headers_too_slow)
        return deadlines

    def _idle_deadlines(self) -> Deadlines[GasolineChannel] | None:
        """The idle timeouts of this site's connections (C{timeOut}; one timer for all)."""
        if not self.timeOut:
            return None
        deadlines: Deadlines[GasolineChannel] | None = self.__dict__.get("idle_deadlines")
        if deadlines is None or deadlines.deadline != self.timeOut:
            expired: Callable[[GasolineChannel], object] = GasolineChannel.timeoutConnection
            deadlines = self.idle_deadlines = Deadlines(self.reactor, self.timeOut, expired)
        return deadlines

    def __init__(self, resource: Any, *args: Any, max_connections: int = MAX_CONNECTIONS,
                 inflight: InFlight | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", IDLE_TIMEOUT)
        # Every route takes JSON. twisted.web would otherwise parse form and multipart bodies
        # into request.args, and answer a malformed multipart body with a bare 400 and a dropped
        # connection instead of our JSON. (Set on the site, which its requests read, rather than
        # passed by a constructor of GasolineRequest's: one Python call less per request.)
        kwargs.setdefault("parsePOSTFormSubmission", False)
        super().__init__(resource, *args, **kwargs)
        self.max_connections = max_connections
        #: The daemon-wide in-flight budget: the root's (shared with its WebSocket routes), else
        #: one of the site's own.
        #: The daemon's root resource (C{None}: the site serves another resource; the route
        #: policy is then not decided on a request's headers).
        self.root = resource if isinstance(resource, GasolineRoot) else None
        self.inflight = inflight or (self.root.inflight if self.root is not None else None) \
            or InFlight()
        self.open_connections = 0
        #: Connections refused at the cap since start.
        self.refused_connections = 0
        #: Connections evicted at the cap because they had not completed a request.
        self.evicted_connections = 0
        #: Requests refused on their headers, their bodies never read.
        self.refused_on_headers = 0
        #: Connections aborted because a request's body came too slowly (L{BodyPolicy}).
        self.slow_bodies = 0
        #: Open connections that have not completed a request yet, oldest first.
        self._unproven: dict[GasolineChannel, None] = {}
        self._at_cap = False

    def buildProtocol(self, addr: Any) -> Any:
        if self.open_connections >= self.max_connections and self._unproven:
            oldest = next(iter(self._unproven))
            del self._unproven[oldest]
            self.evicted_connections += 1
            abort_transport(oldest.transport)
            # Its slot frees when the abort completes; this connection takes it meanwhile.
        elif self.open_connections >= self.max_connections:
            self.refused_connections += 1
            if not self._at_cap:
                self._at_cap = True
                _log.warn(
                    "connection cap reached: {open} connections open (cap {cap}); closing new "
                    "connections until some end", open=self.open_connections,
                    cap=self.max_connections)
            return None  # the port closes the accepted socket at once
        channel = super().buildProtocol(addr)
        if channel is None:
            return None
        self.open_connections += 1
        self._unproven[channel] = None
        return channel

    def count_refused_on_headers(self) -> None:
        self.refused_on_headers += 1

    def count_slow_body(self) -> None:
        self.slow_bodies += 1

    def _proven(self, channel: GasolineChannel) -> None:
        self._unproven.pop(channel, None)

    def _lost(self, channel: GasolineChannel) -> None:
        """A channel this site built is gone: its slot is free."""
        self.open_connections -= 1
        self._unproven.pop(channel, None)
        if self._at_cap and self.open_connections < self.max_connections * 0.9:
            self._at_cap = False

    def getContentFile(self, length: int) -> BytesIO:
        return BytesIO()

    def log(self, request: Any) -> None:
        """Access-log only server errors: the extension makes hundreds of requests a second, and a
        line per request would cost more than ingesting it and grow the daemon's log without end."""
        if request.code >= 500:
            super().log(request)

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
aborted then. At the connection cap, a new connection evicts the oldest connection that has not
yet completed a request's headers, so such connections can never hold the cap (slowloris).
"""

from __future__ import annotations

from io import BytesIO

from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, server

from gasoline.stream import abort_transport

_log = Logger()

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


def body_length(request) -> int:
    """Bytes of body C{request} received (works for any twisted.web request, e.g. in StubTreq)."""
    n = getattr(request, "body_length", None)
    if n is not None:
        return n
    content = getattr(request, "content", None)
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
    """A request whose body buffer is capped at L{MAX_BODY}; see the module docstring."""

    #: Every body byte received, kept or discarded.
    body_length = 0
    #: The kept body (at most L{MAX_BODY} bytes), also C{content}; set when the length is known.
    kept_body: BytesIO | None = None

    def __init__(self, *args, **kwargs) -> None:
        # Every route takes JSON. twisted.web would otherwise parse form and multipart bodies
        # into request.args, and answer a malformed multipart body with a bare 400 and a dropped
        # connection instead of our JSON.
        kwargs.setdefault("parsePOSTFormSubmission", False)
        super().__init__(*args, **kwargs)

    def gotLength(self, length):
        self.body_length = 0
        self.content = self.kept_body = BytesIO()

    def handleContentChunk(self, data: bytes) -> None:
        received = self.body_length
        self.body_length = received + len(data)
        room = MAX_BODY - received
        kept = self.kept_body
        if room <= 0 or kept is None:  # (gotLength, which sets it, comes first)
            return
        kept.write(data if len(data) <= room else data[:room])

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

    @ivar proven: at least one request's headers were received on this connection.
    @ivar transport_paused: the transport asked this channel to pause (its buffer is full) and
        has not resumed it yet.
    """

    header_deadline = HEADER_DEADLINE
    proven = False
    transport_paused = False
    _deadline = None
    #: Waiting for a request's first byte (between requests): the next byte arms the deadline.
    _between_requests = False
    #: Called once when the channel completes its first request's headers (the site's bookkeeping).
    on_proven = None

    def connectionMade(self):
        super().connectionMade()
        no_delay(self.transport)
        self._arm()

    # -- IPushProducer, as the transport's producer --------------------------------------------

    def pauseProducing(self) -> None:
        self.transport_paused = True
        super().pauseProducing()

    def resumeProducing(self) -> None:
        self.transport_paused = False
        super().resumeProducing()

    # -- IConsumer, for the requests' producers ------------------------------------------------

    def registerProducer(self, producer, streaming) -> None:
        """As C{HTTPChannel}'s, but a streaming producer registered while the transport is paused
        is paused at once: no C{pauseProducing} would come for it until the transport's buffer
        fills again (an SSE stream opened on a connection whose reader has stopped reading)."""
        super().registerProducer(producer, streaming)
        if streaming and self.transport_paused:
            producer.pauseProducing()

    def dataReceived(self, data):
        if self._between_requests:
            self._between_requests = False
            self._arm()
        super().dataReceived(data)

    def allHeadersReceived(self):
        self._disarm()
        if not self.proven:
            self.proven = True
            if self.on_proven is not None:
                self.on_proven(self)
        super().allHeadersReceived()

    def requestDone(self, request):
        super().requestDone(request)
        if not self.requests and self.transport is not None:
            self._between_requests = True  # the keep-alive idle timer governs the wait

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._disarm()
        super().connectionLost(reason)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.callLater(self.header_deadline, self._too_slow)

    def _disarm(self) -> None:
        deadline, self._deadline = self._deadline, None
        if deadline is not None and deadline.active():
            deadline.cancel()

    def _too_slow(self) -> None:
        self._deadline = None
        transport = self.transport
        if transport is not None:
            _log.debug("request headers not complete after {s} s: connection closed",
                       s=self.header_deadline)
            abort_transport(transport)


class GasolineSite(server.Site):
    """C{Site} with L{GasolineRequest}, no tracebacks in error pages, an access log of server
    errors only, an idle timeout (L{IDLE_TIMEOUT}) and a cap on open connections
    (L{MAX_CONNECTIONS}): past the cap a new connection evicts the oldest connection that has not
    completed a request's headers, or, if there is none, is closed as soon as it is accepted, so
    idle sockets can never use up the process's file descriptors, and connections that never
    complete a request can never hold the cap. Every request's headers have a deadline
    (L{GasolineChannel})."""

    requestFactory = GasolineRequest
    displayTracebacks = False
    header_deadline = HEADER_DEADLINE

    def protocol(self):
        # A plain HTTP/1.1 channel: no HTTP/2 (h2 is not installed), so no negotiating wrapper.
        channel = GasolineChannel()
        channel.header_deadline = self.header_deadline
        return channel

    def __init__(self, resource, *args, max_connections: int = MAX_CONNECTIONS,
                 **kwargs) -> None:
        kwargs.setdefault("timeout", IDLE_TIMEOUT)
        super().__init__(resource, *args, **kwargs)
        self.max_connections = max_connections
        self.open_connections = 0
        #: Connections refused at the cap since start.
        self.refused_connections = 0
        #: Connections evicted at the cap because they had not completed a request's headers.
        self.evicted_connections = 0
        #: Open connections that have not completed a request's headers yet, oldest first.
        self._unproven: dict[GasolineChannel, None] = {}
        self._at_cap = False

    def buildProtocol(self, addr):
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
        channel.on_proven = self._proven
        lost = channel.connectionLost

        def connection_lost(reason, _lost=lost):
            self.open_connections -= 1
            self._unproven.pop(channel, None)
            if self._at_cap and self.open_connections < self.max_connections * 0.9:
                self._at_cap = False
            return _lost(reason)

        channel.connectionLost = connection_lost
        return channel

    def _proven(self, channel: GasolineChannel) -> None:
        self._unproven.pop(channel, None)

    def getContentFile(self, length):
        return BytesIO()

    def log(self, request) -> None:
        """Access-log only server errors: the extension makes hundreds of requests a second, and a
        line per request would cost more than ingesting it and grow the daemon's log without end."""
        if request.code >= 500:
            super().log(request)

"""
A twisted.web C{Request}/C{Site} that never buffers more request body than the largest route limit.

twisted.web's default request spools any body of 100 kB or more to a temporary file and keeps all
of it. L{GasolineRequest} keeps at most L{MAX_BODY} bytes in memory (the largest limit of any route,
``/logs``' 10 MB, plus one byte so "over the limit" stays detectable); the rest of the body is read
off the connection and discarded, and C{body_length} counts every byte received. The guard
(L{gasoline.http.guards.Guard}) then answers 413 JSON using the limit of the route
(L{body_limit_for}), so a client always gets a JSON answer, never a dropped connection.
"""

from __future__ import annotations

from io import BytesIO

from twisted.web import server

MiB = 1024 * 1024
#: ``POST /logs`` (extension-protocol.md §1).
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


def _no_delay(channel) -> None:
    """Turn off Nagle's algorithm once per connection.

    Twisted leaves it on; a response larger than one TCP segment (an MCP result, ``/snapshot``)
    then stalls about 40 ms at its tail, waiting for the peer's delayed ACK.
    """
    if channel is None or getattr(channel, "_gasoline_no_delay", False):
        return
    channel._gasoline_no_delay = True
    set_no_delay = getattr(channel.transport, "setTcpNoDelay", None)
    if set_no_delay is not None:
        try:
            set_no_delay(True)
        except OSError:  # not a TCP socket (a UNIX endpoint), or already closed
            pass


class GasolineRequest(server.Request):
    """A request whose body buffer is capped at L{MAX_BODY}; see the module docstring."""

    #: Every body byte received, kept or discarded.
    body_length = 0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Every route takes JSON. twisted.web would otherwise parse form and multipart bodies
        # into request.args, and answer a malformed multipart body with a bare 400 and a dropped
        # connection instead of our JSON.
        self._parsePOSTFormSubmission = False

    def gotLength(self, length):
        self.body_length = 0
        self.content = BytesIO()
        _no_delay(self.channel)

    def handleContentChunk(self, data: bytes) -> None:
        received = self.body_length
        self.body_length = received + len(data)
        room = MAX_BODY - received
        if room <= 0:
            return
        self.content.write(data if len(data) <= room else data[:room])

    @property
    def oversize(self) -> bool:
        """More body arrived than any route accepts (what was kept is truncated)."""
        return self.body_length > LOGS_LIMIT


class GasolineSite(server.Site):
    """C{Site} with L{GasolineRequest}, no tracebacks in error pages, and an access log of server
    errors only."""

    requestFactory = GasolineRequest
    displayTracebacks = False

    def getContentFile(self, length):
        return BytesIO()

    def log(self, request) -> None:
        """Access-log only server errors: the extension makes hundreds of requests a second, and a
        line per request would cost more than ingesting it and grow the daemon's log without end."""
        if request.code >= 500:
            super().log(request)

"""
Keep-alive comments on open server-sent-event streams (C{/mcp}'s and C{/events}'), so that proxies
and clients do not take a quiet stream for a dead one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gasoline.core.lifecycle import ClockedTimer

if TYPE_CHECKING:
    from twisted.web.server import Request

log = Logger()

#: Every open SSE stream gets a comment line this often, so idle streams are not cut by client
#: read timeouts (the Python SDK's legacy SSE client gives up after 300 s of silence) or proxies.
KEEPALIVE_SECONDS = 25.0
#: An SSE comment: clients ignore it.
COMMENT = b": keepalive\n\n"


def keepalive_service(clock: IReactorTime, streams: set[Any], name: str,
                      what: str) -> ClockedTimer:
    """A timer service that writes L{COMMENT} on every stream in C{streams} (each has
    C{write(bytes)}) every L{KEEPALIVE_SECONDS}.

    A stream whose write fails is logged (as C{what}) and dropped from C{streams}; the timer itself
    never dies of it.
    """

    def write_all() -> None:
        for stream in list(streams):
            try:
                stream.write(COMMENT)
            except Exception:
                log.failure("{what} keep-alive write failed", what=what)
                streams.discard(stream)

    service = ClockedTimer(KEEPALIVE_SECONDS, clock, write_all)
    service.setName(name)
    return service


def start_sse(request: Request) -> None:
    """Answer C{request} with an SSE stream: status 200 and the four stream headers
    (C{Content-Type: text/event-stream}, C{Cache-Control: no-cache}, C{X-Accel-Buffering: no},
    C{Connection: keep-alive}).

    C{Connection: keep-alive} is said only where it is true: an HTTP/1.1 request that did not ask
    to close (Twisted has then already answered C{Connection: close}, which stays); an HTTP/1.0
    connection ends with its stream.
    """
    request.setResponseCode(200)
    request.setHeader(b"content-type", b"text/event-stream")
    request.setHeader(b"cache-control", b"no-cache")
    request.setHeader(b"x-accel-buffering", b"no")
    if request.clientproto == b"HTTP/1.1" \
            and not request.responseHeaders.hasHeader(b"connection"):
        request.setHeader(b"connection", b"keep-alive")

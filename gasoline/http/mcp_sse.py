"""
The SSE side of the MCP HTTP transports (L{gasoline.http.mcp_http}): L{_Finisher}, which
finishes one streaming request at most once through a bounded writer, the event framing, and
L{_PostExchange}, one C{POST /mcp} carrying requests, answered as JSON or upgraded to an SSE
stream (a priming event, then the request's messages, resumable with C{Last-Event-ID}).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.server import NOT_DONE_YET

from gasoline.http.keepalive import start_sse
from gasoline.mcp import jsonrpc
from gasoline.mcp.session import EventStream, McpSession
from gasoline.stream import request_writer, sse_notice

if TYPE_CHECKING:
    from twisted.internet.interfaces import IReactorTime
    from twisted.web.server import Request

    from gasoline.http.mcp_http import McpHTTP

log = Logger()

#: Bytes a paused MCP SSE stream keeps for its reader (L{gasoline.stream.BoundedWriter}).
MCP_STREAM_LIMIT = 4 * 1024 * 1024
#: Reconnection delay suggested to SSE clients (the C{retry} field), in milliseconds.
RETRY_MS = 1000
_JSON = b"application/json"


def _notice(dropped: int) -> bytes:
    return sse_notice(dropped, "messages (they stay in the stream's replay log: reconnect with "
                      "Last-Event-ID)")


def _sse_event(event_id: str, payload: bytes, event: bytes | None = None) -> bytes:
    head = b"event: " + event + b"\n" if event else b""
    return head + b"id: " + event_id.encode() + b"\ndata: " + payload + b"\n\n"


def _start_sse(request: Request) -> None:
    start_sse(request)


class _Finisher:
    """Finishes one streaming request at most once, and never after the client went away.

    Everything it writes goes through a L{gasoline.stream.BoundedWriter} (the stream's bounded
    send buffer, paused with the connection, dropped when its reader stalls)."""

    __slots__ = ("request", "done", "writer")

    def __init__(self, request: Request, clock: IReactorTime,
                 limit: int = MCP_STREAM_LIMIT) -> None:
        self.request = request
        self.done = False
        self.writer = request_writer(request, clock, limit=limit, notice=_notice)
        request.notifyFinish().addBoth(self._gone)

    def _gone(self, _: Any) -> None:
        self.done = True

    def write(self, data: bytes) -> None:
        if not self.done:
            self.writer.send(data)

    def finish(self) -> None:
        if not self.done:
            self.done = True
            self.writer.close()
            self.request.finish()


class _PostExchange:
    """One C{POST /mcp} carrying requests: answered as JSON, or upgraded to an SSE stream."""

    def __init__(
        self, http: McpHTTP, request: Request, session: McpSession, sse_ok: bool,
        sse_only: bool
    ) -> None:
        self.http = http
        self.request = request
        self.session = session
        self.sse_ok = sse_ok
        #: The client accepts only SSE: even an immediate answer goes on a stream.
        self.sse_only = sse_only
        self.response: Any = None
        self.stream: EventStream | None = None
        self.finisher: _Finisher | None = None
        self.in_render = True
        self.sync_body: bytes | None = None
        self.deferred: Deferred[Any] | None = None

    # emit: messages tied to the request (progress, logs, server->client requests)
    def emit(self, message: dict[str, Any]) -> None:
        if self.stream is None and self.sse_ok and not self._answered:
            self.upgrade()
        if self.stream is not None:
            self.stream.push(jsonrpc.encode(message))
        else:
            self.session.send(message)

    @property
    def _answered(self) -> bool:
        return self.sync_body is not None or (self.finisher is not None and self.finisher.done)

    def upgrade(self) -> None:
        """Switch the answer to an SSE stream: headers, then a priming event (id, empty data)."""
        if self.stream is not None:
            return
        request = self.request
        _start_sse(request)
        self.stream = stream = self.session.new_stream()
        finisher = self.finisher or _Finisher(request, self.http.server.clock)
        self.finisher = finisher
        self.http.track(finisher)

        def writer(event_id: str, payload: bytes) -> None:
            finisher.write(_sse_event(event_id, payload))

        stream.attach(writer, closer=finisher.finish)
        finisher.write(b"retry: %d\n" % RETRY_MS)
        stream.push(b"")
        request.notifyFinish().addBoth(lambda _: stream.detach(writer))

    def close_stream(self) -> None:
        """End the HTTP response now; later events wait in the stream's replay log."""
        if not self.sse_ok:
            return
        self.upgrade()
        assert self.stream is not None and self.finisher is not None
        self.stream.end()  # (the closer is this finisher's: finished here)
        self.finisher.finish()

    def respond(self, response: Any) -> None:
        self.response = response
        if self.stream is None and self.sse_only:
            self.upgrade()
        stream = self.stream
        if stream is not None:
            if response is not None:
                stream.push(jsonrpc.encode(response))
            stream.complete()
            return
        request = self.request
        if response is None:
            request.setResponseCode(202)
            body = b""
        else:
            request.setHeader(b"content-type", _JSON)
            body = jsonrpc.encode(response)
        if self.in_render:
            self.sync_body = body
        elif self.finisher is not None and not self.finisher.done:
            # One body of known length: say so, rather than the chunked encoding Twisted
            # falls back to for a response finished later.
            request.setHeader(b"content-length", b"%d" % len(body))
            self.finisher.write(body)
            self.finisher.finish()

    def follow(self, d: Deferred[Any]) -> None:
        """Answer with what C{d} (the handling of the request's messages) fires with."""
        self.deferred = d
        d.addCallback(self.respond)
        d.addErrback(self.failed)

    def end_render(self) -> None:
        """The render of the request returns: an answer from now on is written, not returned."""
        self.in_render = False

    def render_result(self, upgrade: bool) -> bytes | int:
        """What the render returns: the body answered during it, else C{NOT_DONE_YET} with the
        answer to follow (on an SSE stream at once when C{upgrade}; the work cancelled if the
        client goes before a JSON answer)."""
        if self.sync_body is not None:
            return self.sync_body
        if self.finisher is None:
            self.finisher = _Finisher(self.request, self.http.server.clock)
            if upgrade:
                self.upgrade()
            self.request.notifyFinish().addErrback(self.client_gone)
        return NOT_DONE_YET

    def failed(self, failure: Failure) -> None:
        log.failure("MCP POST handling failed", failure)
        self.respond(jsonrpc.error(None, jsonrpc.INTERNAL_ERROR, "Internal error"))

    def client_gone(self, _: Any) -> None:
        # An SSE answer stays in the replay log (disconnection is not cancellation); a JSON
        # answer has nowhere to go, so the work is cancelled.
        if self.stream is None and self.deferred is not None and not self.deferred.called:
            self.deferred.cancel()

"""
What a method or tool handler of L{gasoline.mcp.server.McpServer} gets: L{RequestContext}, the
session, the caller's state and the ways to talk back on this request (progress, log messages,
requests to the client), and L{Emit}, how a transport carries those messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from gasoline.mcp import jsonrpc
from gasoline.mcp.progress import ProgressReporter
from gasoline.mcp.session import McpSession

if TYPE_CHECKING:
    from gasoline.mcp.server import McpServer

#: How long a tool waits for the client to answer a sampling/elicitation request.
CLIENT_REQUEST_TIMEOUT = 60.0

#: Sends a message tied to a request (progress, log, server→client request) to its transport.
Emit = Callable[[dict[str, Any]], object]


@attrs.define(eq=False)
class RequestContext:
    """What a method or tool handler gets: the session, the caller's state, and ways to talk back."""

    server: McpServer
    session: McpSession
    request_id: Any
    method: str
    params: dict[str, Any]
    #: Sends a message tied to this request (progress, log, server→client request).
    emit: Emit
    #: Transport hook: end this request's SSE stream now (the response is then replayed after
    #: the client reconnects with Last-Event-ID). None when the transport has no such stream.
    close_stream: Callable[[], None] | None = None
    #: The progress reporter of a tool call that asked for progress (L{start_progress}).
    reporter: ProgressReporter | None = None

    @property
    def state(self) -> Any:
        """The calling agent's client state (cursors, checkpoints, ...)."""
        return self.session.state

    @property
    def clock(self) -> IReactorTime:
        return self.server.clock

    @property
    def progress_token(self) -> Any:
        meta = self.params.get("_meta")
        return meta.get("progressToken") if isinstance(meta, dict) else None

    def progress(self, progress: float, total: float | None = None, message: str | None = None) -> bool:
        """Send C{notifications/progress} if the request asked for it (C{_meta.progressToken});
        during a tool call, through its L{gasoline.mcp.progress.ProgressReporter} (which also
        sends a heartbeat every second)."""
        if self.progress_token is None:
            return False
        if self.reporter is not None and self.reporter.running:
            self.reporter.update(progress, total, message)
        else:
            self.notify_progress(progress, total, message)
        return True

    def start_progress(self, label: str) -> ProgressReporter | None:
        """Start this request's progress reporter (a heartbeat every second) when the request
        asked for progress; None when it did not."""
        if self.progress_token is None:
            return None
        self.reporter = ProgressReporter(self.clock, self.notify_progress, label)
        return self.reporter.start()

    def working(self, message: str | None) -> None:
        """Say what the call is waiting for; the next progress heartbeat carries it."""
        if self.reporter is not None:
            self.reporter.working(message)

    def notify_progress(self, progress: float, total: float | None = None,
                        message: str | None = None) -> None:
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        self.emit(jsonrpc.notification("notifications/progress", params))

    def log(self, level: str, data: Any, logger: str = "gasoline") -> bool:
        """Send C{notifications/message} if the session's log level lets C{level} through."""
        if not self.session.wants_log(level):
            return False
        self.emit(
            jsonrpc.notification(
                "notifications/message", {"level": level, "logger": logger, "data": data}
            )
        )
        return True

    def request_client(
        self, method: str, params: dict[str, Any], timeout: float = CLIENT_REQUEST_TIMEOUT
    ) -> Deferred:
        """Send the client a request (e.g. C{sampling/createMessage}); fire with its result."""
        return self.server.request_client(self.session, method, params, self.emit, timeout)

"""
Progress of long tool calls: C{notifications/progress} at least once a second.

When a request carries C{_meta.progressToken}, L{gasoline.mcp.tools.ToolRegistry.call} starts one
L{ProgressReporter} for it. From then on, every second until the call answers, the caller gets a
notification with a message: what the handler last reported (C{3 of 12 links checked}, C{step 2 of
5: click}, C{waiting for the extension to answer dom}) and how long the call has run. Handlers
report with C{ctx.progress(n, total, message)} (sent at once) or C{ctx.working(message)} (carried
by the next heartbeat); a call that answers within the first second sends nothing it did not
report itself.

The MCP specification requires C{progress} to increase with every notification, even with no total.
A heartbeat after C{n of m} therefore reports a value between C{n} and C{n + 1} (half the remaining
distance each time); before any report, between 0 and 1 the same way, so that a handler's first
C{1 of m} is still an increase. The message, not the number, tells a person how long it has been.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from twisted.internet.interfaces import IDelayedCall, IReactorTime

if TYPE_CHECKING:
    from gasoline.mcp.context import RequestContext

#: Seconds between heartbeats.
INTERVAL = 1.0

Send = Callable[[float, "float | None", "str | None"], None]


class ProgressReporter:
    """Heartbeats and reports for one request; see the module docstring."""

    def __init__(self, clock: IReactorTime, send: Send, label: str,
                 interval: float = INTERVAL) -> None:
        self._clock = clock
        self._send = send
        self.label = label
        self.interval = interval
        self.started = clock.seconds()
        self._call: IDelayedCall | None = None
        self._done: float | None = None
        self._total: float | None = None
        self._message: str | None = None
        self._sent: float | None = None
        self._beats_since_report = 0
        self._beats = 0
        self.notifications = 0

    def start(self) -> "ProgressReporter":
        self._call = self._clock.callLater(self.interval, self._beat)
        return self

    def stop(self) -> None:
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()

    @property
    def running(self) -> bool:
        return self._call is not None

    # -- what handlers call ------------------------------------------------------------------------

    def update(self, progress: float, total: float | None = None,
               message: str | None = None) -> None:
        """The handler got somewhere: send it now."""
        self._done, self._total = float(progress), total
        if message is not None:
            self._message = message
        self._beats_since_report = 0
        self._emit(progress, total, message if message is not None else self._text())

    def working(self, message: str | None) -> None:
        """What the call is doing now (C{None}: back to the plain label); the next heartbeat
        says it."""
        self._message = message

    # -- heartbeats --------------------------------------------------------------------------------

    def _elapsed(self) -> float:
        return self._clock.seconds() - self.started

    def _text(self) -> str:
        what = self._message or f"{self.label}: working"
        return f"{what} ({self._elapsed():.0f} s)"

    def _beat(self) -> None:
        self._call = self._clock.callLater(self.interval, self._beat)
        self._beats += 1
        if self._done is None:
            value: float | None = 1.0 - 0.5 ** min(self._beats, 40)
        else:
            self._beats_since_report += 1
            value = self._done + 1.0 - 0.5 ** min(self._beats_since_report, 40)
            if self._total is not None and value >= self._total:
                value = self._total if self._sent is None or self._sent < self._total else None
        if value is None:
            return  # done with every unit: nothing truthful left to count up
        self._emit(value, self._total if self._done is not None else None, self._text())

    def _emit(self, value: float, total: float | None, message: str | None) -> None:
        if self._sent is not None and value <= self._sent:
            value = self._sent + 1e-6  # strictly increasing, as the specification requires
        self._sent = value
        self.notifications += 1
        self._send(value, total, message)


def start_for(ctx: RequestContext, label: str) -> ProgressReporter | None:
    """A running reporter for C{ctx} when its request asked for progress, else None
    (L{RequestContext.start_progress<gasoline.mcp.context.RequestContext.start_progress>})."""
    return ctx.start_progress(label)

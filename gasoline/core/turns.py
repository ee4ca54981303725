"""
Capture first: agents' tool calls run within a per-turn budget of the reactor, so the
extension's posts are never starved by reads.

The extension's routes (C{POST /logs}, bodies, WebSocket frames, C{/sync}) run as soon as the
reactor reads them. Agents' tool calls go through L{TurnBudget.submit}: a call runs at once while
the calls of the current reactor turn have used less than L{TURN_BUDGET} seconds; past that it
waits in a first-in-first-out queue that later turns drain, L{TURN_BUDGET} at a time, each drain
a C{callLater(0)}: between two drains the reactor polls its sockets and serves whatever the
extension posted. So under load, per turn, at most about L{TURN_BUDGET} of reads run (plus one
call that overshoots), and capture gets the rest.

Under overload (the oldest queued call has waited L{MAX_QUEUE_WAIT} seconds, or
L{MAX_QUEUED} calls wait) a new call is not queued: it is answered at once with a retryable
C{daemon_busy} error carrying C{retry_after_ms} (how long the queue takes to drain, measured),
so agents back off before capture ever waits behind them.

Time is measured with the injected reactor clock (C{seconds()}: the wall clock of the real
reactor, so the budget is the reactor's time whatever else the machine does; a test's
C{task.Clock} counts only what the test advances), and the turn boundaries with its
C{callLater(0)}.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline.core.errors import GasolineError

log = Logger()

#: Seconds of agents' tool calls one reactor turn runs before the rest wait for later turns.
TURN_BUDGET = 0.010
#: ... or, while nothing waits, per this many seconds (no timer runs while calls fit the budget).
TURN_WINDOW = 0.020
#: Past this wait of the oldest queued call (seconds), or this many queued calls, new calls are
#: answered C{daemon_busy} with C{retry_after_ms} instead of queued.
MAX_QUEUE_WAIT = 1.0
MAX_QUEUED = 500


class DaemonBusy(GasolineError):
    code = "daemon_busy"
    retryable = True
    retry = ("The daemon is serving the browser's capture first and its tool-call queue is "
             "full; call again after retry_after_ms.")


class TurnBudget:
    """Runs calls within a per-turn budget of the reactor (see the module docstring)."""

    def __init__(self, clock: IReactorTime, budget: float = TURN_BUDGET,
                 max_wait: float = MAX_QUEUE_WAIT, max_queued: int = MAX_QUEUED,
                 timer: Callable[[], float] | None = None) -> None:
        self.clock = clock
        self.budget = budget
        self.max_wait = max_wait
        self.max_queued = max_queued
        self.timer = timer if timer is not None else clock.seconds
        self._queue: deque[tuple[float, Callable[[], Any], Deferred]] = deque()
        self._spent = 0.0
        self._window_start = float("-inf")
        self._turn: Any = None  # the callLater(0) of the next drain
        #: Figures (C{/metrics}, the bench): calls run at once, queued, refused busy; the
        #: longest wait in the queue (seconds); a moving average of one call's cost.
        self.immediate = 0
        self.deferred = 0
        self.refused = 0
        self.max_waited = 0.0
        self.mean_cost = 0.001

    @property
    def queued(self) -> int:
        return len(self._queue)

    def submit(self, call: Callable[[], Any]) -> Deferred:
        """C{call()}'s result (a value or a Deferred) as a Deferred: run now, later in the
        turn order, or refused with L{DaemonBusy}."""
        if self.timer() - self._window_start >= TURN_WINDOW:
            self._window_start = self.timer()
            self._spent = 0.0
        if not self._queue and self._spent < self.budget:
            self.immediate += 1
            return self._run(call)
        now = self.clock.seconds()
        if self._queue and (len(self._queue) >= self.max_queued
                            or now - self._queue[0][0] >= self.max_wait):
            self.refused += 1
            backlog = len(self._queue) * self.mean_cost
            retry_ms = max(100, int(1000 * (backlog + (now - self._queue[0][0]))))
            raise DaemonBusy(
                f"the daemon is busy: {len(self._queue)} tool calls are waiting behind the "
                f"browser's capture", retry_after_ms=retry_ms)
        d: Deferred = Deferred(canceller=self._cancelled)
        self._queue.append((now, call, d))
        self.deferred += 1
        self._end_turn_later()
        return d

    def _cancelled(self, d: Deferred) -> None:
        """A queued call was cancelled (its request was): it never runs."""
        self._queue = deque(item for item in self._queue if item[2] is not d)

    def _run(self, call: Callable[[], Any]) -> Deferred:
        start = self.timer()
        try:
            return maybeDeferred(call)
        finally:
            cost = self.timer() - start
            self._spent += cost
            self.mean_cost += (cost - self.mean_cost) * 0.05

    def _end_turn_later(self) -> None:
        if self._turn is None:
            self._turn = self.clock.callLater(0, self._next_turn)

    def _next_turn(self) -> None:
        """A new reactor turn: the budget starts again; drain the queue within it."""
        self._turn = None
        self._spent = 0.0
        self._window_start = self.timer()
        now = self.clock.seconds()
        while self._queue and self._spent < self.budget:
            queued_at, call, d = self._queue.popleft()
            self.max_waited = max(self.max_waited, now - queued_at)
            self._run(call).chainDeferred(d)
        if self._queue:
            self._end_turn_later()

    def stop(self) -> None:
        """Cancel the pending turn and fail what still waits (daemon stop)."""
        if self._turn is not None and self._turn.active():
            self._turn.cancel()
        self._turn = None
        queue, self._queue = self._queue, deque()
        for _, _, d in queue:
            d.errback(Failure(DaemonBusy("the daemon is stopping")))

"""
In-process fan-out of telemetry events.

``publish`` only appends to a list and, if none is pending, schedules one flush on the injected
clock (``callLater(0, ...)``): ingest never waits for subscribers, whatever they do. Each flush
delivers the events queued since the last one, in order, to every subscriber; a subscriber that
raises is logged and skipped for that event. The pending list is bounded: if subscribers are so slow
that the reactor cannot even run a flush before ``max_pending`` events pile up, the oldest are
dropped and counted in ``dropped`` rather than letting memory grow.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from gasoline.interfaces import INotifier

log = Logger()


@implementer(INotifier)
class Notifier:
    def __init__(self, clock: IReactorTime, max_pending: int = 10_000) -> None:
        self._clock = clock
        self._subscribers: list[Callable[[Any], None]] = []
        self._pending: deque[Any] = deque(maxlen=max_pending)
        self._max_pending = max_pending
        self._call: IDelayedCall | None = None
        self.published = 0
        self.dropped = 0

    def subscribe(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            try:
                self._subscribers.remove(callback)
            except ValueError:
                pass

        return unsubscribe

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def publish(self, event: Any) -> None:
        if not self._subscribers:
            # Nobody listens: nothing to queue, nothing to schedule on the hot path.
            return
        self.published += 1
        if len(self._pending) == self._max_pending:
            self.dropped += 1
        self._pending.append(event)
        if self._call is None:
            self._call = self._clock.callLater(0, self._flush)

    def _flush(self) -> None:
        self._call = None
        pending, self._pending = self._pending, deque(maxlen=self._max_pending)
        subscribers = list(self._subscribers)
        for event in pending:
            for callback in subscribers:
                try:
                    callback(event)
                except Exception:
                    log.failure("notifier subscriber {callback!r} failed", callback=callback)

    def stop(self) -> None:
        """Cancel a scheduled flush (service shutdown; keeps tests free of leaked timers)."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

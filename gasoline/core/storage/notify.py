"""
In-process fan-out of telemetry events.

C{publish} only appends to a list and, if none is pending, schedules one flush on the injected
clock (C{callLater(0, ...)}): ingest never waits for subscribers, whatever they do. Each flush
delivers queued events, in order, to every subscriber; a subscriber that raises is logged and
skipped for that event (it stays subscribed). One flush delivers at most C{batch} events and then
yields the reactor (another C{callLater(0, ...)}) so that slow subscribers share the reactor with
ingest instead of starving it. The pending list is bounded: if subscribers are so slow that
C{max_pending} events pile up, the oldest are dropped and counted in C{dropped} rather than
letting memory grow. Unsubscribing takes effect from the next event, even in the middle of a flush.

Under a burst, flushes are spaced: with C{interval} set, an event published less than
C{interval} seconds after the last flush waits for the interval's end, so that a busy ingest hands
several events to each flush instead of paying a reactor turn (a timed call, its heap
operations) per event. An event published when the last flush is older than that is flushed on the
next turn, as without C{interval}; so is one published at the very instant of the last flush (a
clock that did not move: a test's C{Clock}, or a coarse clock between two calls). The delay
an event can get is bounded by C{interval}.

A subscriber may say which events it wants (C{subscribe(callback, wants=predicate)}): when no
subscriber wants an event, C{publish} drops it at once, with nothing queued or scheduled. The
predicate runs on the publisher's path, so it must be a few attribute reads (the streaming hub's
says "is any agent subscribed to what this buffer can carry"). A subscriber without one wants
everything.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger


log = Logger()


class Notifier:
    """In-process fan-out of events to subscribers; see the module docstring."""

    def __init__(self, clock: IReactorTime, max_pending: int = 10_000, batch: int = 1_000,
                 interval: float = 0.0) -> None:
        if max_pending < 1 or batch < 1:
            raise ValueError("max_pending and batch must be at least 1")
        if not interval >= 0:
            raise ValueError("interval must be zero or more")
        self._clock = clock
        #: Minimum spacing of flushes under a burst (seconds; see the module docstring).
        self._interval = interval
        #: Clock time of the last flush.
        self._last = float("-inf")
        # Copy-on-write: (un)subscribing replaces the tuple, so a flush in progress always sees
        # the current subscribers without copying the list for every event.
        self._subscribers: tuple[Callable[[Any], None], ...] = ()
        #: (callback, wants) per subscription, in subscription order.
        self._entries: tuple[tuple[Callable[[Any], None], Callable[[Any], bool] | None], ...] = ()
        #: One entry per subscriber: its C{wants} predicate, or None (wants everything).
        self._wants: tuple[Callable[[Any], bool] | None, ...] = ()
        #: True when every subscriber has a predicate (else C{publish} skips asking).
        self._selective = False
        self._pending: deque[Any] = deque(maxlen=max_pending)
        self._max_pending = max_pending
        self._batch = batch
        self._call: IDelayedCall | None = None
        self.published = 0
        self.dropped = 0
        #: Events no subscriber wanted (dropped at publish time, never queued).
        self.unwanted = 0

    def subscribe(self, callback: Callable[[Any], None],
                  wants: Callable[[Any], bool] | None = None) -> Callable[[], None]:
        """Call C{callback(event)} for every event published from now on.

        @param wants: C{wants(event) -> bool}, asked at publish time: an event no subscriber
            wants is dropped at once (a subscriber still receives events others wanted).
        @return: a zero-argument callable that unsubscribes.
        """
        entry = (callback, wants)
        self._set_entries(self._entries + (entry,))
        done = False

        def unsubscribe() -> None:
            nonlocal done
            if done:
                return
            done = True
            self._set_entries(tuple(e for e in self._entries if e is not entry))

        return unsubscribe

    def _set_entries(self, entries: tuple) -> None:
        self._entries = entries
        self._subscribers = tuple(callback for callback, _ in entries)
        self._wants = tuple(wants for _, wants in entries)
        self._selective = bool(entries) and None not in self._wants

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def publish(self, event: Any) -> None:
        if not self._subscribers:
            # Nobody listens: nothing to queue, nothing to schedule on the hot path.
            return
        if self._selective and not self._wanted(event):
            self.unwanted += 1
            return
        self.published += 1
        if len(self._pending) == self._max_pending:
            self.dropped += 1
        self._pending.append(event)
        if self._call is None:
            delay = 0.0
            if self._interval:
                since = self._clock.seconds() - self._last
                if 0 < since < self._interval:
                    delay = self._interval - since
            self._call = self._clock.callLater(delay, self._flush)

    def _wanted(self, event: Any) -> bool:
        for wants in self._wants:
            try:
                if wants is None or wants(event):  # None: wants every event
                    return True
            except Exception:
                # Never into the publisher: a broken predicate counts as "wanted".
                log.failure("notifier predicate {wants!r} failed", wants=wants)
                return True
        return False

    @property
    def pending(self) -> int:
        """Events queued and not yet delivered."""
        return len(self._pending)

    def _flush(self) -> None:
        self._call = None
        if self._interval:
            self._last = self._clock.seconds()
        pending = self._pending
        for _ in range(min(self._batch, len(pending))):
            event = pending.popleft()
            for callback in self._subscribers:
                try:
                    callback(event)
                except Exception:
                    log.failure("notifier subscriber {callback!r} failed", callback=callback)
        if pending and self._call is None:
            # More is waiting: let the reactor run (ingest, other I/O) before the next batch.
            self._call = self._clock.callLater(0, self._flush)

    def stop(self) -> None:
        """Cancel a scheduled flush (service shutdown; keeps tests free of leaked timers)."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

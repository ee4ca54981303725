"""
Per-key rate limiting on the injected clock (the tools' default: 100 calls per minute per client).

A sliding window: each key keeps the times of its calls inside the last C{window} seconds; a call is
allowed while fewer than C{limit} remain. Keys are independent, so one client's flood never affects
another. The table of keys is bounded (least recently used keys are forgotten first).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

from twisted.internet.interfaces import IReactorTime

from gasoline.core.errors import GasolineError

DEFAULT_LIMIT = 100
DEFAULT_WINDOW = 60.0
MAX_KEYS = 10_000


class RateLimited(GasolineError):
    code = "rate_limited"


class SlidingWindowLimiter:
    """At most C{limit} events per C{window} seconds per key. C{limit <= 0} disables it."""

    def __init__(self, clock: IReactorTime, limit: int = DEFAULT_LIMIT,
                 window: float = DEFAULT_WINDOW, max_keys: int = MAX_KEYS) -> None:
        self.clock = clock
        self.limit = int(limit)
        self.window = float(window)
        self.max_keys = max_keys
        self._events: OrderedDict[str, deque[float]] = OrderedDict()
        #: Refusals per key (telemetry).
        self.refused: dict[str, int] = {}

    def _prune(self, key: str, now: float) -> deque[float]:
        events = self._events.get(key)
        if events is None:
            events = self._events[key] = deque()
            while len(self._events) > self.max_keys:
                old, _ = self._events.popitem(last=False)
                self.refused.pop(old, None)
        else:
            self._events.move_to_end(key)
        horizon = now - self.window
        while events and events[0] <= horizon:
            events.popleft()
        return events

    def check(self, key: str) -> float:
        """Record one event for C{key}; return 0.0 if allowed, else the seconds until the next
        event would be allowed (nothing is recorded then)."""
        if self.limit <= 0:
            return 0.0
        now = self.clock.seconds()
        events = self._prune(key, now)
        if len(events) >= self.limit:
            self.refused[key] = self.refused.get(key, 0) + 1
            return max(0.001, events[len(events) - self.limit] + self.window - now)
        events.append(now)
        return 0.0

    def acquire(self, key: str) -> None:
        """L{check}, raising L{RateLimited} (with C{retry_after_seconds}) when refused."""
        wait = self.check(key)
        if wait:
            seconds = math.ceil(wait * 1000) / 1000  # waiting this long always suffices
            raise RateLimited(
                f"rate limit: at most {self.limit} tool calls per {self.window:g} s per client",
                retry=f"Wait {seconds:g} s before calling again.",
                retry_after_ms=math.ceil(wait * 1000),
                retry_after_seconds=seconds, limit=self.limit, window_seconds=self.window,
            )

    def usage(self, key: str) -> dict[str, float | int]:
        """How many events C{key} has in the current window, and the limit."""
        events = self._prune(key, self.clock.seconds()) if key in self._events else ()
        return {"used": len(events), "limit": self.limit, "window_seconds": self.window,
                "refused": self.refused.get(key, 0)}

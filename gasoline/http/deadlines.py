"""
Deadlines shared by a site's connections: one timer for each deadline, not one per connection.

L{gasoline.http.request.GasolineSite} keeps two, each on one timer for all its connections: the
header deadline (from a connection's opening, or a request's first byte, to the end of its
headers) and the idle timeout between requests. A request then costs an insertion and a removal
in a dict, not a timer set and cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

_log = Logger()

#: What is watched: a connection (L{gasoline.http.request.GasolineChannel}).
_C = TypeVar("_C", bound=Hashable)


class Deadlines(Generic[_C]):
    """One deadline, the same for many connections of a site, on one timer.

    A connection is watched from when its deadline starts (L{watch}, again when it restarts)
    until it is met (the channel removes itself from L{watched}); one still watched L{deadline}
    seconds after it started is handed to C{expired}. The watched connections are kept in the
    order they started (a dict, in insertion order: a connection watched again goes to the end),
    so the one timer is due at the oldest one's deadline, and each time it fires it hands over
    those past theirs, oldest first, and is set again for the next one's. A request costs an
    insertion and a removal in a dict, not a timer set and cancelled; each deadline is as exact
    as one timer per connection would keep it.

    A site has two (L{gasoline.http.request.GasolineSite}): the header deadline
    (L{gasoline.http.request.HEADER_DEADLINE}, from a connection's opening or a request's first
    byte to the end of its headers) and the idle timeout between requests
    (L{gasoline.http.request.IDLE_TIMEOUT}, twisted.web's C{TimeoutMixin} timeout, which
    L{gasoline.http.request.GasolineChannel} keeps here).
    """

    def __init__(self, clock: IReactorTime, deadline: float,
                 expired: Callable[[_C], object]) -> None:
        self._clock = clock
        #: The clock's time now (bound once).
        self.now = clock.seconds
        self.deadline = deadline
        self.expired = expired
        #: Watched connections -> when their deadline started.
        self.watched: dict[_C, float] = {}
        self._timer: Any = None

    def watch(self, channel: _C) -> None:
        """C{channel}'s deadline starts now (or starts again)."""
        watched = self.watched
        if channel in watched:
            del watched[channel]  # (to the end: the order is the order they started)
        watched[channel] = self._clock.seconds()
        if self._timer is None:
            self._timer = self._clock.callLater(self.deadline, self._expire)

    def forget(self, channel: _C) -> None:
        """C{channel} is gone (its connection was lost): not watched any more, and with nothing
        left to watch the timer is cancelled (a request's own end only removes it from
        L{watched}: the timer then fires once for nothing, instead of being cancelled and set
        again for every request)."""
        self.watched.pop(channel, None)
        timer = self._timer
        if not self.watched and timer is not None:
            self._timer = None
            if timer.active():
                timer.cancel()

    def _expire(self) -> None:
        self._timer = None
        now = self._clock.seconds()
        watched = self.watched
        while watched:
            channel = next(iter(watched))
            due = watched[channel] + self.deadline
            if due > now:
                timer = self._timer  # (set again by a watch from an expired connection's end)
                if timer is not None and timer.active():
                    timer.cancel()
                self._timer = self._clock.callLater(due - now, self._expire)
                return
            del watched[channel]
            try:
                self.expired(channel)
            except Exception:
                _log.failure("ending a connection past its deadline failed")

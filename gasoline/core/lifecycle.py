"""
The daemon's own graceful stop, as C{POST /shutdown} and C{configure {what:"restart"}} ask for it,
and L{StopHook}, the service a collaborator hands the daemon so that its stop runs at shutdown.

L{Shutdown} is built by the composition root with the C{stop} callable that C{tap.makeService}
provides (one that stops the reactor); a daemon built without one (unit tests, embedding) answers
that it cannot stop itself.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.application.internet import TimerService
from twisted.application.service import Service
from twisted.logger import Logger

log = Logger()

#: Delay between the request and the stop, so the answer that asked for it still goes out.
SHUTDOWN_DELAY = 0.1


@attrs.define(eq=False)
class Shutdown:
    """Schedules the daemon's graceful stop once, however many callers ask."""

    clock: IReactorTime
    #: Stops the daemon (C{tap} passes one that stops the reactor); C{None}: not available.
    stop: Callable[[], Any] | None = None
    _call: IDelayedCall | None = attrs.field(default=None, init=False)

    @property
    def available(self) -> bool:
        """This daemon can stop itself."""
        return self.stop is not None

    @property
    def stopping(self) -> bool:
        """A graceful stop has been scheduled."""
        return self._call is not None

    def request(self, why: str) -> bool:
        """Schedule the stop C{SHUTDOWN_DELAY} seconds from now.

        @param why: who asked, for the log.
        @return: C{False} when there is no stop hook; C{True} otherwise (also when already
            scheduled).
        """
        if self.stop is None:
            return False
        if self._call is None:
            log.info("shutdown requested through {why}", why=why)
            self._call = self.clock.callLater(SHUTDOWN_DELAY, self._do_stop)
        return True

    def _do_stop(self) -> None:
        assert self.stop is not None  # request() schedules only with a hook
        try:
            self.stop()
        except Exception:
            log.failure("stopping the daemon failed")


class StopHook(Service):
    """A service whose stop calls C{stop} (a collaborator's own stop: timers cancelled, waiters
    released); add it to the daemon's services."""

    def __init__(self, stop: Callable[[], Any], name: str | None = None) -> None:
        self._stop = stop
        self.setName(name)

    def stopService(self) -> None:
        super().stopService()
        self._stop()


class ClockedTimer(TimerService):
    """A C{TimerService} on the clock it is given: C{ClockedTimer(period, clock, f, *args)} calls
    C{f(*args)} every C{period} seconds of C{clock} while running, instead of the global reactor's
    (C{TimerService} reads its C{clock} attribute, which would otherwise be set from outside
    after construction)."""

    def __init__(self, step: float, clock: IReactorTime, callable: Callable[..., Any],
                 *args: Any, **kwargs: Any) -> None:
        super().__init__(step, callable, *args, **kwargs)
        self.clock = clock

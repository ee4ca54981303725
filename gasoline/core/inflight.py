"""
One daemon-wide budget for bytes held in flight: request bodies being read, and WebSocket messages
not yet complete (the CDP clients' C{/cdp}, the extension's link).

Every holder takes bytes as they arrive (L{InFlight.take}) and gives them back when its message or
request is done or its connection ends (L{InFlight.release}). Past the budget, room is made by
dropping the I{largest} holder if it holds more than the one asking (so a flood of big unfinished
messages cannot starve small requests: the flood's own connections are the ones cut); if no holder
is larger, the one asking is refused. A dropped or refused holder is told why
(L{IInFlightHolder.inflight_drop}) and answers with a clear error: 503 for a request body, close code
4013 ("try again later") for a WebSocket. The extension's paired link is counted but never dropped
(C{exempt}): its messages are bounded by their own limit.

With the buffers' byte budgets this makes the daemon's memory bound (docs/operations.md, "Memory").
"""

from __future__ import annotations

from typing import Protocol

MiB = 1024 * 1024
#: The default budget.
IN_FLIGHT_LIMIT = 64 * MiB


class IInFlightHolder(Protocol):
    #: Never dropped to make room (it is counted all the same).
    inflight_exempt: bool

    def inflight_drop(self, why: str) -> None:
        """Stop holding: free what is held, answer the error C{why}, close."""


class InFlight:
    """See the module docstring."""

    def __init__(self, limit: int = IN_FLIGHT_LIMIT) -> None:
        self.limit = limit
        #: Bytes held now, and the most ever held.
        self.held = 0
        self.peak = 0
        #: Holders refused or dropped to make room, since start.
        self.refused = 0
        self._holders: dict[IInFlightHolder, int] = {}

    def take(self, holder: IInFlightHolder, n: int) -> bool:
        """Count C{n} more bytes for C{holder}. C{False}: refused (past the budget, and no
        larger holder to drop); the caller then drops C{holder} itself (L{refuse})."""
        if self.held + n > self.limit and not holder.inflight_exempt:
            self._make_room(holder, n)
            if self.held + n > self.limit:
                return False
        self._holders[holder] = self._holders.get(holder, 0) + n
        self.held += n
        if self.held > self.peak:
            self.peak = self.held
        return True

    def release(self, holder: IInFlightHolder) -> None:
        """C{holder} holds nothing any more (its message or request is done, or it is gone)."""
        n = self._holders.pop(holder, 0)
        self.held -= n

    def holding(self, holder: IInFlightHolder) -> int:
        return self._holders.get(holder, 0)

    def refuse(self, holder: IInFlightHolder) -> None:
        """C{holder} was refused by L{take}: release it and tell it why."""
        self.release(holder)
        self.refused += 1
        holder.inflight_drop(self.why())

    def why(self) -> str:
        return (f"the daemon holds its limit of {self.limit // MiB} MiB of request bodies and "
                "WebSocket messages in progress; try again later")

    def _make_room(self, holder: IInFlightHolder, n: int) -> None:
        mine = self._holders.get(holder, 0) + n
        while self.held + n > self.limit:
            victim, size = None, 0
            for other, held in self._holders.items():
                if held > size and other is not holder and not other.inflight_exempt:
                    victim, size = other, held
            if victim is None or size <= mine:
                return
            self.refuse(victim)

"""
The command queue: what the extension is asked to do, delivered through C{/sync}.

A command C{q-<n>} is queued by its owner (a client id), handed out on every sync until the
extension acknowledges it (C{last_command_ack} acknowledges that command *and every command queued
before it*) or it expires, and stays *outstanding* until its result arrives (C{resolve}), it
expires, it is cancelled, or the extension disconnects (C{fail_all}).

Results are not routed here: listeners registered with L{CommandQueue.on_result} receive every
result dict (the query router, when it lands, owns the routing to the owner's Deferred). Expiry is
read from the injected clock lazily (on every enqueue / deliverable / expire call), so the queue
owns no timers except the ones behind pending L{CommandQueue.wait} long polls, and every one of those
is cancelled when its Deferred fires or is cancelled.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

if TYPE_CHECKING:
    from gasoline.core.errors import GasolineError

from gasoline.core.hooks import add_hook

log = Logger()

#: Seconds an unresolved command lives before it expires (the reference's async queue uses 30 s
#: for its waits; commands outlive a wait so a slow result can still be collected).
DEFAULT_COMMAND_TTL = 60.0


def command_number(command_id: Any) -> int | None:
    """C{"q-12"} -> 12; anything else -> C{None}."""
    if isinstance(command_id, str) and command_id.startswith("q-"):
        digits = command_id[2:]
        if digits.isdecimal() and len(digits) < 19:
            return int(digits)
    return None


@attrs.frozen
class Command:
    """One command for the extension (a value: never mutated once queued)."""

    id: str
    type: str
    params: dict[str, Any]
    owner: str | None
    tab_id: int | None
    correlation_id: str | None
    created_at: float
    expires_at: float

    @property
    def number(self) -> int:
        return int(self.id[2:])

    def to_json(self) -> dict[str, Any]:
        """The wire shape of extension-protocol.md §3 (C{commands[]} item)."""
        out: dict[str, Any] = {"id": self.id, "type": self.type, "params": self.params}
        if self.tab_id is not None:
            out["tab_id"] = self.tab_id
        if self.correlation_id is not None:
            out["correlation_id"] = self.correlation_id
        return out


@attrs.define(eq=False)
class _Waiter:
    deferred: Deferred
    timer: IDelayedCall | None = None

    def arm(self, timer: IDelayedCall) -> None:
        """C{timer} answers the long poll when nothing came before it."""
        self.timer = timer

    def disarm(self) -> None:
        """The long poll is answered or dropped: its timer goes (cancelled unless it fired)."""
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None


@attrs.define(eq=False)
class CommandQueue:
    """Commands waiting for the extension; see the module docstring."""

    clock: IReactorTime
    ttl: float = DEFAULT_COMMAND_TTL
    #: Outstanding (unresolved, unexpired) commands by id, in queue order.
    _outstanding: OrderedDict[str, Command] = attrs.field(factory=OrderedDict, init=False)
    #: C{(expires_at, number, id)} of every queued command, soonest first; entries of commands
    #: that are no longer outstanding are skipped when they surface (and dropped in bulk when they
    #: outnumber the live ones), so expiry costs O(log n) per command instead of a scan per call.
    _deadlines: list[tuple[float, int, str]] = attrs.field(factory=list, init=False)
    #: Every command numbered <= this has been acknowledged (delivered).
    acked_upto: int = attrs.field(default=0, init=False)
    _next: int = attrs.field(default=1, init=False)
    _waiters: list[_Waiter] = attrs.field(factory=list, init=False)
    _listeners: list[Callable[[dict[str, Any]], None]] = attrs.field(factory=list, init=False)

    # -- queueing -------------------------------------------------------------------------------

    def enqueue(
        self,
        type: str,
        params: dict[str, Any] | None = None,
        owner: str | None = None,
        tab_id: int | None = None,
        correlation_id: str | None = None,
        ttl: float | None = None,
    ) -> Command:
        now = self.clock.seconds()
        self.expire(now)
        n = self._next
        self._next = n + 1
        command = Command(
            id=f"q-{n}",
            type=type,
            params=dict(params or {}),
            owner=owner,
            tab_id=tab_id,
            correlation_id=correlation_id,
            created_at=now,
            expires_at=now + (self.ttl if ttl is None else ttl),
        )
        self._outstanding[command.id] = command
        heapq.heappush(self._deadlines, (command.expires_at, n, command.id))
        self._wake()
        return command

    def get(self, command_id: str) -> Command | None:
        """The outstanding command C{command_id}, or C{None}."""
        return self._outstanding.get(command_id)

    def outstanding(self) -> list[Command]:
        """Every command still waiting for a result (delivered or not)."""
        return list(self._outstanding.values())

    def deliverable(self) -> list[Command]:
        """Unacknowledged, unexpired commands, oldest first: what the next sync hands out."""
        self.expire(self.clock.seconds())
        upto = self.acked_upto
        # Queue order is number order: walk back from the newest to the first acknowledged one.
        fresh = []
        for command in reversed(self._outstanding.values()):
            if command.number <= upto:
                break
            fresh.append(command)
        fresh.reverse()
        return fresh

    def ack(self, command_id: str) -> None:
        """C{command_id} and every command queued before it are delivered: stop re-sending them."""
        n = command_number(command_id)
        if n is None:
            return
        # Never acknowledge commands that were not queued yet (a stale id from a previous daemon).
        n = min(n, self._next - 1)
        if n > self.acked_upto:
            self.acked_upto = n

    # -- results ---------------------------------------------------------------------------------

    def on_result(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call C{callback(result_dict)} once per resolved, expired or failed command.

        The dict has C{id}, C{status} (C{complete}/C{error}/C{timeout}/C{cancelled}/
        C{expired}), C{result} and/or C{error}, C{correlation_id} when known, and C{owner} (the
        command's owner). @return: a zero-argument callable that unregisters.
        """
        return add_hook(self._listeners, callback)

    def resolve(self, result: dict[str, Any]) -> bool:
        """A result for an outstanding command: notify listeners once. Unknown ids are ignored.

        @return: True if this resolved an outstanding command.
        """
        if not isinstance(result, dict):
            return False
        command_id = result.get("id")
        if not isinstance(command_id, str):
            return False
        command = self._outstanding.pop(command_id, None)
        if command is None:
            return False
        out = dict(result)
        out.setdefault("status", "error" if "error" in result else "complete")
        if command.correlation_id is not None:
            out.setdefault("correlation_id", command.correlation_id)
        out["owner"] = command.owner
        out["type"] = command.type
        self._notify(out)
        return True

    def cancel(self, command_id: str) -> bool:
        """Drop an outstanding command without notifying anyone (its caller gave up)."""
        return self._outstanding.pop(command_id, None) is not None

    def expire(self, now: float | None = None) -> list[Command]:
        """Drop commands whose deadline has passed; listeners get an C{expired} result each."""
        if now is None:
            now = self.clock.seconds()
        deadlines = self._deadlines
        outstanding = self._outstanding
        expired = []
        while deadlines and deadlines[0][0] <= now:
            command = outstanding.pop(heapq.heappop(deadlines)[2], None)
            if command is not None:
                expired.append(command)
        if len(deadlines) > 2 * len(outstanding) + 64:
            self._deadlines = [(c.expires_at, c.number, c.id) for c in outstanding.values()]
            heapq.heapify(self._deadlines)
        for command in expired:
            self._notify(self._failure(command, "expired", "command_expired",
                                       "the extension did not answer before the command expired"))
        return expired

    def fail_all(self, error: GasolineError) -> list[Command]:
        """Fail every outstanding command at once (the extension went away)."""
        failed = list(self._outstanding.values())
        self._outstanding.clear()
        self._deadlines.clear()
        code = error.code
        for command in failed:
            self._notify(self._failure(command, "error", code, str(error)))
        return failed

    def _failure(self, command: Command, status: str, code: str, message: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": command.id,
            "status": status,
            "error": code,
            "message": message,
            "owner": command.owner,
            "type": command.type,
        }
        if command.correlation_id is not None:
            out["correlation_id"] = command.correlation_id
        return out

    def _notify(self, result: dict[str, Any]) -> None:
        for callback in list(self._listeners):
            try:
                callback(result)
            except Exception:
                log.failure("command result listener {callback!r} failed", callback=callback)

    # -- long poll -------------------------------------------------------------------------------

    def wait(self, timeout: float) -> Deferred:
        """Fire with C{None} when a command is queued, or after C{timeout} seconds.

        Cancelling the Deferred removes the waiter and its timer (nothing is left behind).
        """
        waiter: _Waiter

        def cancel(_d: Deferred) -> None:
            self._drop(waiter)

        waiter = _Waiter(Deferred(cancel))
        waiter.arm(self.clock.callLater(timeout, self._timed_out, waiter))
        self._waiters.append(waiter)
        return waiter.deferred

    def wake(self) -> None:
        """Answer every waiting long poll now (with whatever is deliverable, maybe nothing): the
        extension then syncs again at once, with its current settings (C{launch_browser}), or
        takes what else changed (the DOM watches the answer carries)."""
        self._wake()

    @property
    def waiting(self) -> int:
        """How many long polls are waiting (for tests and /health)."""
        return len(self._waiters)

    def _drop(self, waiter: _Waiter) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
        waiter.disarm()

    def _timed_out(self, waiter: _Waiter) -> None:
        self._drop(waiter)  # (its timer fired: no longer active, nothing to cancel)
        waiter.deferred.callback(None)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.disarm()
            waiter.deferred.callback(None)

"""
The query router: extension-bound requests of many agents, each answered to the agent that asked.

An agent's extension-bound call (C{analyze dom}, C{interact click}, a screenshot, ...) becomes a
command C{q-<n>} in the L{CommandQueue}, owned by the calling client. The extension picks it up
through C{/sync} and answers it in a later sync's C{command_results} (or through
C{POST /query-result}, C{/dom-result}, or C{POST /screenshots} with C{query_id}); every one of
those paths ends in L{CommandQueue.resolve}, whose listener here routes the result **by command id
only** to the one L{_Pending} record that created it. A result therefore fires its owner's
Deferred and nothing else, and another client has no way to read it.

One cleanup path
================
Each command's Deferred is created with a canceller (L{_Pending.cleanup}) that removes the command
from the queue (it is not delivered any more) and from the owner's pending set. The three ways a
caller can give up all go through C{Deferred.cancel()}:

 - timeout: C{Deferred.addTimeout(t, clock)} cancels it, and the failure becomes
   L{ExtensionTimeout};
 - cancellation (MCP C{notifications/cancelled}): L{QueryRouter.cancel};
 - the client going away: L{QueryRouter.client_gone}.

When the extension answers, or the link declares it disconnected (every pending command fails with
L{ExtensionDisconnected}), the same record is detached first and then its Deferred fires; the
timeout's delayed call is cancelled by C{addTimeout} when it fires, so nothing leaks.

Async mode
==========
L{QueryRouter.submit} starts the same command and returns a C{correlation_id} at once; the outcome
is kept per owner (bounded, and dropped after C{result_ttl}; an outcome past that answers
C{expired} for another C{result_ttl}) and L{QueryRouter.command_result} returns it only to its
owner. Any other client, and any unknown id, gets the same C{no_data} error.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Callable

import attrs
from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gasoline.core.extension.commands import Command, CommandQueue, command_number
from gasoline.core.errors import (  # CommandCancelled, ExtensionError re-exported
    EXTENSION_CODES,
    CommandCancelled,
    ExtensionDisconnected,
    ExtensionError,
    ExtensionTimeout,
    GasolineError,
    InvalidParam,
    QueueFull,
)
from gasoline.core.interfaces import IClientState, IQueryRouter
from gasoline.core.lifecycle import StopHook

if TYPE_CHECKING:
    from gasoline.core.clients.registry import ClientRegistry
    from gasoline.core.extension.link import ExtensionLink

log = Logger()

#: Seconds a synchronous call waits for the extension (tool-surface.md: "up to ~15 s").
DEFAULT_TIMEOUT = 15.0
#: Seconds an async (background) command waits for the extension.
DEFAULT_ASYNC_TIMEOUT = 60.0
#: Commands one client may have waiting at once.
PER_CLIENT_LIMIT = 100
#: Commands all clients together may have waiting at once.
TOTAL_LIMIT = 1000
#: Seconds a finished async outcome is kept (then it answers C{expired} as long again).
RESULT_TTL = 300.0
#: Async outcomes kept per client (the oldest finished ones go first).
MAX_OUTCOMES_PER_CLIENT = 200
#: Recently failed commands remembered per client for C{failed_commands}.
MAX_FAILED_PER_CLIENT = 50
#: The longest timeout a caller may ask for.
MAX_TIMEOUT = 600.0
#: Extra seconds the queue keeps a command past the router's own timeout, so the router's
#: timeout (not the queue's lazy expiry) is what normally ends a command.
QUEUE_GRACE = 5.0

PENDING = "pending"
COMPLETE = "complete"
ERROR = "error"
TIMEOUT = "timeout"
EXPIRED = "expired"
CANCELLED = "cancelled"
NO_DATA = "no_data"




def _no_data(correlation_id: Any) -> GasolineError:
    return GasolineError(
        f"no command result for correlation_id {repr(correlation_id)[:100]} "
        "(unknown, or not yours)",
        code=NO_DATA,
        retry="Use the correlation_id a background call returned to you; results are kept "
        f"{RESULT_TTL:g} s.",
    )


@attrs.define(eq=False)
class _Pending:
    """One command a caller is waiting for (a sync call or an async submit)."""

    router: "QueryRouter"
    command: Command
    owner: str
    timeout: float
    #: Fires with the command's result; cancelling it forgets the command (L{cleanup}).
    deferred: Deferred = attrs.field(init=False)
    detached: bool = False

    def __attrs_post_init__(self) -> None:
        self.deferred = Deferred(self.cleanup)

    def cleanup(self, _deferred: Deferred | None = None) -> None:
        """The canceller (the one cleanup path): forget the command everywhere. Idempotent."""
        if self.detached:
            return
        self.detached = True
        self.router._forget(self)


@attrs.define(eq=False)
class _Outcome:
    """The outcome of an async command, as its owner will read it."""

    correlation_id: str
    command_id: str
    type: str
    created_at: float
    status: str = PENDING
    result: Any = None
    error: dict[str, Any] | None = None
    completed_at: float | None = None
    expired_at: float | None = None

    def complete(self, result: Any, at: float) -> None:
        """The command answered C{result} at clock time C{at}."""
        self.status, self.result, self.completed_at = COMPLETE, result, at

    def fail(self, status: str, error: dict[str, Any], at: float) -> None:
        """The command ended at C{at} without a result (C{status}: why; C{error}: its fields)."""
        self.status, self.error, self.completed_at = status, error, at

    def expire(self, error: dict[str, Any], at: float) -> None:
        """The result was dropped at C{at}: a tombstone (C{expired}, with C{error}) remains."""
        self.status, self.result, self.error, self.expired_at = EXPIRED, None, error, at

    def to_json(self, now: float) -> dict[str, Any]:
        out: dict[str, Any] = {
            "correlation_id": self.correlation_id,
            "command_id": self.command_id,
            "type": self.type,
            "status": self.status,
            "created_at": self.created_at,
        }
        if self.completed_at is not None:
            out["completed_at"] = self.completed_at
            out["elapsed_ms"] = round((self.completed_at - self.created_at) * 1000.0, 3)
        else:
            out["age_ms"] = round((now - self.created_at) * 1000.0, 3)
        if self.status == COMPLETE:
            out["result"] = self.result
        elif self.error is not None:
            out.update(self.error)
        return out


def _error_fields(failure: Failure) -> dict[str, Any]:
    value = failure.value
    if isinstance(value, GasolineError):
        return value.contract()
    return {"error": "internal_error", "message": failure.getErrorMessage(), "retryable": True}


def _status_of(failure: Failure) -> str:
    if failure.check(ExtensionTimeout):
        return TIMEOUT
    if failure.check(CancelledError, CommandCancelled):
        return CANCELLED
    return ERROR


@implementer(IQueryRouter)
@attrs.define(eq=False)
class QueryRouter:
    """Routes extension-bound commands to their owners; see the module docstring.

    C{extension_link} is the L{gasoline.core.extension.link.ExtensionLink} (C{connected},
    C{commands}, C{on_disconnect}). C{registry}, when given, mirrors each owner's pending command
    ids into its C{ClientState.pending_commands}.
    """

    clock: IReactorTime
    extension_link: ExtensionLink
    default_timeout: float = attrs.field(default=DEFAULT_TIMEOUT, kw_only=True)
    async_timeout: float = attrs.field(default=DEFAULT_ASYNC_TIMEOUT, kw_only=True)
    per_client_limit: int = attrs.field(default=PER_CLIENT_LIMIT, kw_only=True)
    total_limit: int = attrs.field(default=TOTAL_LIMIT, kw_only=True)
    result_ttl: float = attrs.field(default=RESULT_TTL, kw_only=True)
    max_outcomes: int = attrs.field(default=MAX_OUTCOMES_PER_CLIENT, kw_only=True)
    max_failed: int = attrs.field(default=MAX_FAILED_PER_CLIENT, kw_only=True)
    registry: ClientRegistry | None = attrs.field(default=None, kw_only=True)
    #: Called as C{on_latency(type, seconds)} for each answer the extension sends (C{/metrics}).
    on_latency: Callable[[str, float], None] | None = attrs.field(default=None, kw_only=True)

    #: Every command waiting for the extension, by command id.
    _by_id: dict[str, _Pending] = attrs.field(factory=dict, init=False)
    #: owner -> {command id -> pending}, in queue order.
    _owned: dict[str, dict[str, _Pending]] = attrs.field(factory=dict, init=False)
    #: owner -> {correlation id -> outcome}, oldest first.
    _outcomes: dict[str, OrderedDict[str, _Outcome]] = attrs.field(factory=dict, init=False)
    #: owner -> recently failed commands.
    _failed: dict[str, deque] = attrs.field(factory=dict, init=False)
    _next_correlation: int = attrs.field(default=1, init=False)
    _last_sweep: float = attrs.field(default=float("-inf"), init=False)
    _unsubscribe: list[Callable[[], None]] = attrs.field(factory=list, init=False)
    #: Counters for /health and /metrics.
    stats: dict[str, int] = attrs.field(init=False, factory=lambda: {
        "calls": 0, "complete": 0, "error": 0, "timeout": 0, "cancelled": 0,
        "disconnected": 0, "queue_full": 0, "unrouted_results": 0,
    })

    def __attrs_post_init__(self) -> None:
        self._unsubscribe.append(self.commands.on_result(self._on_result))
        self._unsubscribe.append(self.extension_link.on_disconnect(self._on_disconnect))

    @property
    def commands(self) -> CommandQueue:
        return self.extension_link.commands

    def close(self) -> None:
        """Shut down: cancel every pending command (its caller gets C{CancelledError}) and stop
        listening to the queue and the link (tests, daemon shutdown)."""
        for owner in list(self._owned):
            self.client_gone(owner)
        for remove in self._unsubscribe:
            remove()
        self._unsubscribe.clear()

    def service(self) -> Service:
        """A service whose stop runs L{close} (add it to the daemon's services)."""
        return StopHook(self.close)

    # -- starting commands ------------------------------------------------------------------------

    def call(
        self,
        owner: str,
        type: str,
        params: dict[str, Any] | None = None,
        tab_id: int | None = None,
        timeout: float | None = None,
    ) -> Deferred:
        """Ask the extension to run one command for C{owner}; wait for its result.

        @return: a Deferred firing with the extension's C{result} value; failing with
            C{ExtensionDisconnected} at once when the extension is not connected (and later, if it
            goes away), C{QueueFull} past the per-client or total limit, C{ExtensionTimeout} after
            C{timeout} seconds, or a C{GasolineError} carrying the extension's error text.
            Cancelling it removes the command (it is not delivered any more). Every refusal comes
            back as a failed Deferred.
        """
        try:
            pending = self._start(owner, type, params, tab_id, timeout, self.default_timeout, None)
        except GasolineError as e:
            return fail(e)
        return pending.deferred

    def submit(
        self,
        owner: str,
        type: str,
        params: dict[str, Any] | None = None,
        tab_id: int | None = None,
        timeout: float | None = None,
    ) -> str:
        """Async mode: queue the command and return its correlation id at once.

        @raise ExtensionDisconnected: the extension is not connected.
        @raise QueueFull: past the per-client or total limit.
        """
        correlation_id = f"{type}-{self._next_correlation}-{secrets.token_hex(4)}"
        self._next_correlation += 1
        pending = self._start(owner, type, params, tab_id, timeout, self.async_timeout,
                              correlation_id)
        now = self.clock.seconds()
        self._purge(owner, now)
        outcome = _Outcome(correlation_id, pending.command.id, type, now)
        outcomes = self._outcomes.setdefault(owner, OrderedDict())
        outcomes[correlation_id] = outcome
        self._cap(outcomes)

        def done(result: Any) -> None:
            outcome.complete(result, self.clock.seconds())

        def failed(failure: Failure) -> None:
            outcome.fail(_status_of(failure), _error_fields(failure), self.clock.seconds())

        pending.deferred.addCallbacks(done, failed)
        return correlation_id

    def _start(
        self,
        owner: str,
        type: str,
        params: dict[str, Any] | None,
        tab_id: int | None,
        timeout: float | None,
        default_timeout: float,
        correlation_id: str | None,
    ) -> _Pending:
        if not isinstance(owner, str) or not owner:
            raise InvalidParam("a command needs the calling client's id as its owner")
        if not isinstance(type, str) or not type:
            raise InvalidParam("a command needs a type (dom, a11y, execute, ...)")
        if params is not None and not isinstance(params, dict):
            raise InvalidParam("command params must be an object")
        if tab_id is not None and (isinstance(tab_id, bool) or not isinstance(tab_id, int)):
            raise InvalidParam("tab_id must be an integer browser tab id")
        if timeout is None:
            timeout = default_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            0 < timeout <= MAX_TIMEOUT
        ):
            raise InvalidParam(f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}]")
        self._sweep(self.clock.seconds())
        if not self.extension_link.connected:
            self.stats["disconnected"] += 1
            self.extension_link.require_connected()  # says why (waiting to pair, or not connected)
            raise ExtensionDisconnected("the browser extension is not connected to this daemon")
        mine = self._owned.get(owner)
        if mine is not None and len(mine) >= self.per_client_limit:
            self.stats["queue_full"] += 1
            log.info("command queue limit hit: {owner} already has {n} commands waiting",
                     owner=owner, n=len(mine))
            raise QueueFull(
                f"you already have {len(mine)} commands waiting for the extension "
                f"(limit {self.per_client_limit})",
                limit=self.per_client_limit, scope="client",
            )
        if len(self._by_id) >= self.total_limit:
            self.stats["queue_full"] += 1
            log.info("command queue limit hit: {n} commands of all clients waiting",
                     n=len(self._by_id))
            raise QueueFull(
                f"{len(self._by_id)} commands of all clients are waiting for the extension "
                f"(limit {self.total_limit})",
                limit=self.total_limit, scope="total",
            )
        command = self.commands.enqueue(
            type, params, owner=owner, tab_id=tab_id, correlation_id=correlation_id,
            ttl=timeout + QUEUE_GRACE,
        )
        pending = _Pending(self, command, owner, float(timeout))
        self._by_id[command.id] = pending
        self._owned.setdefault(owner, {})[command.id] = pending
        state = self._state(owner)
        if state is not None:
            state.command_queued(command.id)
        self.stats["calls"] += 1

        def timed_out(result: Any, seconds: float) -> Failure:
            self.stats["timeout"] += 1
            return Failure(ExtensionTimeout(
                f"the extension did not answer {type} command {command.id} within {seconds:g} s",
                command_id=command.id,
            ))

        pending.deferred.addTimeout(timeout, self.clock, onTimeoutCancel=timed_out)
        pending.deferred.addErrback(self._note_failure, pending)
        return pending

    # -- giving up (all through Deferred.cancel -> _Pending.cleanup) ------------------------------

    def cancel(self, owner: str, command_id: str) -> bool:
        """The owner gave up on one command (C{notifications/cancelled}); C{command_id} may be a
        C{q-<n>} id or an async correlation id. Another client's id is ignored.

        @return: True if one of C{owner}'s commands was cancelled.
        """
        mine = self._owned.get(owner)
        if not mine or not isinstance(command_id, str):
            return False
        pending = mine.get(command_id)
        if pending is None:
            outcome = self._outcomes.get(owner, OrderedDict()).get(command_id)
            if outcome is not None:
                pending = mine.get(outcome.command_id)
        if pending is None:
            return False
        pending.deferred.cancel()
        return True

    def client_gone(self, owner: str) -> int:
        """The client went away: cancel every command it is waiting for. @return: how many."""
        mine = list(self._owned.get(owner, {}).values())
        for pending in mine:
            pending.deferred.cancel()
        return len(mine)

    def _forget(self, pending: _Pending) -> None:
        """Remove C{pending} from the queue, the id index and its owner's set."""
        command_id = pending.command.id
        self.commands.cancel(command_id)
        self._by_id.pop(command_id, None)
        mine = self._owned.get(pending.owner)
        if mine is not None:
            mine.pop(command_id, None)
            if not mine:
                del self._owned[pending.owner]
        state = self._state(pending.owner)
        if state is not None:
            state.command_ended(command_id)

    def _note_failure(self, failure: Failure, pending: _Pending) -> Failure:
        status = _status_of(failure)
        if status == CANCELLED:
            self.stats["cancelled"] += 1
        elif status == ERROR:
            self.stats["error"] += 1
        failed = self._failed.get(pending.owner)
        if failed is None:
            failed = self._failed[pending.owner] = deque(maxlen=self.max_failed)
        entry = {
            "command_id": pending.command.id,
            "type": pending.command.type,
            "status": status,
            "created_at": pending.command.created_at,
            "failed_at": self.clock.seconds(),
            **_error_fields(failure),
        }
        if pending.command.correlation_id is not None:
            entry["correlation_id"] = pending.command.correlation_id
        failed.append(entry)
        return failure

    # -- results ----------------------------------------------------------------------------------

    def _on_result(self, result: dict[str, Any]) -> None:
        """A queue listener: route one result dict to the pending record of its command id."""
        command_id = result.get("id")
        pending = self._by_id.get(command_id) if isinstance(command_id, str) else None
        if pending is None:
            # Not one of ours (queued by someone else, or already given up on): nobody to tell.
            self.stats["unrouted_results"] += 1
            return
        pending.cleanup()
        if self.on_latency is not None:
            self.on_latency(pending.command.type,
                            self.clock.seconds() - pending.command.created_at)
        status = result.get("status")
        if status == COMPLETE and "error" not in result:
            self.stats["complete"] += 1
            pending.deferred.callback(result.get("result"))
            return
        pending.deferred.errback(Failure(self._error_for(pending, result)))

    def _error_for(self, pending: _Pending, result: dict[str, Any]) -> GasolineError:
        command = pending.command
        code = result.get("error")
        text = code if isinstance(code, str) else repr(code)
        message = result.get("message")
        inner = result.get("result")
        if not (isinstance(message, str) and message) and isinstance(inner, dict):
            message = inner.get("message")  # the extension's {error, message} result
        if isinstance(message, str) and message and message != text:
            text = f"{text}: {message}"
        text = text[:2000]
        status = result.get("status")
        if code == ExtensionDisconnected.code:
            self.stats["disconnected"] += 1
            return ExtensionDisconnected(
                message if isinstance(message, str) else "the browser extension disconnected",
                command_id=command.id,
            )
        if status == EXPIRED:
            return ExtensionTimeout(
                f"{command.type} command {command.id} expired before the extension answered",
                command_id=command.id,
            )
        if status == TIMEOUT:
            return ExtensionTimeout(
                f"the extension timed out running {command.type} command {command.id}: {text}",
                command_id=command.id,
            )
        if status == CANCELLED:
            return CommandCancelled(
                f"the extension cancelled {command.type} command {command.id}: {text}",
                command_id=command.id,
            )
        known = EXTENSION_CODES.get(code) if isinstance(code, str) else None
        if known is not None:
            retryable, hint = known
            extra = {k: v for k, v in inner.items() if k in ("selector", "options", "dialog")} \
                if isinstance(inner, dict) else {}
            return ExtensionError(
                f"{command.type} command {command.id} failed in the extension: {text}",
                code=code, retry=hint, retryable=retryable, command_id=command.id,
                extension_error=text, **extra,
            )
        return ExtensionError(
            f"the extension reported an error for {command.type} command {command.id}: {text}",
            command_id=command.id, extension_error=text,
        )

    def _on_disconnect(self) -> None:
        """The link declared the extension gone: fail whatever is still waiting."""
        waiting = list(self._by_id.values())
        for pending in waiting:
            pending.cleanup()
            self.stats["disconnected"] += 1
            pending.deferred.errback(Failure(ExtensionDisconnected(
                "the browser extension disconnected before answering "
                f"{pending.command.type} command {pending.command.id}",
                command_id=pending.command.id,
            )))

    # -- reading (only the caller's own) ----------------------------------------------------------

    def command_result(self, owner: str, correlation_id: str) -> dict[str, Any]:
        """The outcome of C{owner}'s async command: a dict with C{status} (pending, complete,
        error, timeout, expired, cancelled) and C{result} or C{error}.

        @raise GasolineError: code C{no_data} for an unknown id I{and} for another client's id
            (the same answer, so ids cannot be probed).
        """
        now = self.clock.seconds()
        self._purge(owner, now)
        outcome = None
        if isinstance(correlation_id, str):
            outcome = self._outcomes.get(owner, OrderedDict()).get(correlation_id)
        if outcome is None:
            raise _no_data(correlation_id)
        return outcome.to_json(now)

    def pending_commands(self, owner: str) -> list[dict[str, Any]]:
        """The caller's own commands still waiting for the extension (list of dicts)."""
        now = self.clock.seconds()
        acked = self.commands.acked_upto
        out = []
        for pending in self._owned.get(owner, {}).values():
            command = pending.command
            entry = {
                "command_id": command.id,
                "type": command.type,
                "status": PENDING,
                "delivered": (command_number(command.id) or 0) <= acked,
                "created_at": command.created_at,
                "age_ms": round((now - command.created_at) * 1000.0, 3),
                "timeout_s": pending.timeout,
            }
            if command.correlation_id is not None:
                entry["correlation_id"] = command.correlation_id
            out.append(entry)
        return out

    def failed_commands(self, owner: str) -> list[dict[str, Any]]:
        """The caller's own recently failed commands, kept for C{result_ttl}, newest last."""
        failed = self._failed.get(owner)
        if not failed:
            return []
        horizon = self.clock.seconds() - self.result_ttl
        while failed and failed[0]["failed_at"] < horizon:
            failed.popleft()
        if not failed:
            del self._failed[owner]
            return []
        return [dict(entry) for entry in failed]

    def pending_count(self, owner: str | None = None) -> int:
        """Commands waiting: of C{owner}, or of everyone."""
        if owner is None:
            return len(self._by_id)
        return len(self._owned.get(owner, ()))

    def health(self) -> dict[str, Any]:
        """Counters for C{/health} (no client's data)."""
        return {"pending": len(self._by_id), "clients_waiting": len(self._owned), **self.stats}

    # -- retention ---------------------------------------------------------------------------------

    def _purge(self, owner: str, now: float) -> None:
        """Age C{owner}'s finished outcomes: results past C{result_ttl} become C{expired}
        tombstones, tombstones past C{result_ttl} go."""
        outcomes = self._outcomes.get(owner)
        if not outcomes:
            return
        horizon = now - self.result_ttl
        for key, outcome in list(outcomes.items()):
            if outcome.expired_at is not None:
                if outcome.expired_at <= horizon:
                    del outcomes[key]
            elif outcome.completed_at is not None and outcome.completed_at <= horizon:
                outcome.expire({"error": "result_expired", "retryable": False,
                                "message": f"the result was dropped after {self.result_ttl:g} s"},
                               now)
        if not outcomes:
            del self._outcomes[owner]

    def _sweep(self, now: float) -> None:
        """Every C{result_ttl / 10} seconds (checked on each new command): age every owner's
        outcomes and failures, so clients that never read theirs again leave nothing behind."""
        if now - self._last_sweep < self.result_ttl / 10:
            return
        self._last_sweep = now
        for owner in list(self._outcomes):
            self._purge(owner, now)
        for owner in list(self._failed):
            self.failed_commands(owner)

    def _cap(self, outcomes: OrderedDict[str, _Outcome]) -> None:
        """Drop the oldest finished outcomes past C{max_outcomes} (pending ones are bounded by
        the per-client limit)."""
        excess = len(outcomes) - self.max_outcomes
        if excess <= 0:
            return
        for key in [k for k, o in outcomes.items() if o.status != PENDING][:excess]:
            del outcomes[key]

    def _state(self, owner: str) -> IClientState | None:
        if self.registry is None:
            return None
        return self.registry.get(owner)


__all__ = [
    "QueryRouter",
    "ExtensionError",
    "CommandCancelled",
    "DEFAULT_TIMEOUT",
    "PER_CLIENT_LIMIT",
    "TOTAL_LIMIT",
]

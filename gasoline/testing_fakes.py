"""
In-memory fakes of the core's client-state interfaces (L{gasoline.core.interfaces}).

Tests of the layers above the core (tools, the MCP server, HTTP APIs) build their layer on these
to test that layer alone: no state dir, no timers, no extension link, and each fake records what
its caller asked of it. They keep the contract their interface states (an id's state is its own,
a command's result goes to its owner only, the client limit refuses a client once nothing frees a
slot), and nothing more: no persistence, no expiry, no eviction from the buffers, no timeouts.

 - L{MemoryClientState}, L{MemoryClientRegistry}: L{IClientState}, L{IClientRegistry}.
 - L{MemoryTelemetryStore}: L{ITelemetryStore}, over unbounded L{MemoryLog}s.
 - L{FakeQueryRouter}: L{IQueryRouter}; the test answers each command (L{FakeQueryRouter.answer},
   L{FakeQueryRouter.fail}).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any, Callable, Iterator, Sequence

import attrs
import orjson
from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from gasoline.core.storage.boundaries import TestBoundaries
from gasoline.core.trust.clientkey import ClientKey
from gasoline.core.clients.registry import ClientStateEdits
from gasoline.core.errors import (
    ExtensionDisconnected,
    GasolineError,
    QueueFull,
    TooManyClients,
    UnknownClient,
)
from gasoline.core.interfaces import IClientRegistry, IClientState, IQueryRouter, ITelemetryStore
from gasoline.core.storage.notify import Notifier
from gasoline.core.redaction.once import ReadCache
from gasoline.core.storage.ring import ReadResult
from gasoline.core.storage.store import DEFAULT_BUFFERS, Added, BufferWrite


# -- client state ---------------------------------------------------------------------------------

@implementer(IClientState)
@attrs.define(eq=False)
class MemoryClientState(ClientStateEdits):
    """One client's state, in memory; counts the persistence requests it gets (C{dirty})."""

    client_id: str
    connected_at: float = 0.0
    last_seen: float = 0.0
    cursors: dict[str, int] = attrs.field(factory=dict)
    checkpoints: dict[str, Any] = attrs.field(factory=dict)
    noise_rules: Any = attrs.field(factory=list)
    kv: dict[str, Any] = attrs.field(factory=dict)
    tab_filters: list[str] = attrs.field(factory=list)
    subscriptions: dict[str, Any] = attrs.field(factory=dict)
    pending_commands: set[str] = attrs.field(factory=set)
    connections: int = 0
    inherited: bool = False
    cwd: str | None = None
    #: True once the client went away (its last connection ended, or it unregistered).
    gone: bool = False
    #: How many times the state was marked for writing (L{mark_dirty}, L{touch}).
    dirty: int = 0

    @property
    def live(self) -> bool:
        return not self.gone

    def touch(self, now: float) -> None:
        self.last_seen = now
        self.dirty += 1

    def mark_dirty(self) -> None:
        self.dirty += 1

    def come_back(self, now: float, cwd: str | None) -> None:
        """Registered again: live, inheriting what it had if it had gone."""
        self.inherited = self.inherited or self.gone
        self.gone = False
        self.touch(now)
        self.cwd = cwd or self.cwd

    def opened(self) -> None:
        """One more connection uses this id."""
        self.connections += 1

    def closed(self) -> None:
        """One connection ended; with none left the client is gone."""
        self.connections = max(0, self.connections - 1)
        self.leave()

    def leave(self) -> None:
        """The client is leaving: gone once no connection uses the id."""
        if self.connections == 0:
            self.gone = True

    def to_json(self) -> dict[str, Any]:
        return {"client_id": self.client_id, "cursors": dict(self.cursors),
                "checkpoints": self.checkpoints, "noise_rules": self.noise_rules, "kv": self.kv,
                "tab_filters": list(self.tab_filters), "subscriptions": self.subscriptions}

    def summary(self) -> dict[str, Any]:
        return {"id": self.client_id, "connected_at": self.connected_at,
                "last_seen": self.last_seen, "connected": self.live,
                "connections": self.connections}


@implementer(IClientRegistry)
class MemoryClientRegistry:
    """Client ids -> L{MemoryClientState}: the limit on live clients and its reclaimers, no disk,
    no expiry (a gone client's state stays until the test drops it from C{clients})."""

    def __init__(self, max_clients: int = 100, ttl: float = 3600.0,
                 clock: Any = None) -> None:
        self.max_clients = max_clients
        self.ttl = ttl
        self.client_key = ClientKey.random()
        self.clients: dict[str, MemoryClientState] = {}
        self.reclaimers: list[Callable[[], bool]] = []
        #: Ids whose state L{save_now} was asked to write, in order.
        self.saved: list[str] = []
        #: What L{save_now} answers: None (written), or why the disk refused it.
        self.save_error: str | None = None
        self._clock = clock
        self._anonymous = 0

    def _now(self, now: float | None) -> float:
        if now is not None:
            return now
        return self._clock.seconds() if self._clock is not None else 0.0

    def anonymous_client_id(self) -> str:
        self._anonymous += 1
        return f"anon-fake{self._anonymous}"

    def live_count(self) -> int:
        return sum(1 for s in self.clients.values() if s.live)

    def register(self, client_id: str | None = None, now: float | None = None, *,
                 cwd: str | None = None) -> MemoryClientState:
        now = self._now(now)
        if client_id is None:
            client_id = self.anonymous_client_id()
        state = self.clients.get(client_id)
        if (state is None or not state.live) and self.live_count() >= self.max_clients:
            if not any(reclaim() for reclaim in list(self.reclaimers)) \
                    or self.live_count() >= self.max_clients:
                raise TooManyClients(
                    f"{self.max_clients} clients are already connected (the maximum)",
                    max_clients=self.max_clients)
        if state is None:
            state = self.clients[client_id] = MemoryClientState(
                client_id, connected_at=now, last_seen=now, cwd=cwd)
            return state
        state.come_back(now, cwd)
        return state

    def get(self, client_id: str) -> MemoryClientState | None:
        return self.clients.get(client_id)

    def connect(self, client_id: str, now: float | None = None) -> MemoryClientState:
        state = self.clients.get(client_id)
        if state is None or not state.live:
            state = self.register(client_id, now)
        else:
            state.touch(self._now(now))
        state.opened()
        return state

    def disconnect(self, client_id: str, now: float | None = None) -> None:
        state = self.clients.get(client_id)
        if state is None:
            return
        state.closed()

    def unregister(self, client_id: str, now: float | None = None) -> MemoryClientState:
        state = self.clients.get(client_id)
        if state is None:
            raise UnknownClient(f"no client {client_id!r}", client_id=client_id)
        state.leave()
        return state

    def add_reclaimer(self, reclaim: Callable[[], bool]) -> None:
        self.reclaimers.append(reclaim)

    def save_now(self, client_id: str) -> str | None:
        self.saved.append(client_id)
        return self.save_error

    def list(self) -> Sequence[MemoryClientState]:
        return list(self.clients.values())

    def summary(self) -> dict[str, Any]:
        states = sorted(self.clients.values(), key=lambda s: (s.connected_at, s.client_id))
        return {"active": sum(1 for s in states if s.live), "total": len(states),
                "max": self.max_clients, "list": [s.summary() for s in states]}


# -- telemetry ------------------------------------------------------------------------------------

class MemoryLog:
    """An unbounded list with ring-buffer sequence numbers and reads (what callers of
    C{ITelemetryStore.buffers} use of L{gasoline.core.storage.ring.RingBuffer}); nothing is evicted
    except by L{clear}, so C{missed} is only ever counted after a clear."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.tail = 0

    @property
    def head(self) -> int:
        return self.tail + len(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.items)

    def extend(self, items: list[bytes]) -> tuple[int, int]:
        first = self.head
        self.items.extend(items)
        return first, self.head

    def read(self, cursor: int = 0, limit: int | None = None) -> ReadResult[bytes]:
        start = max(cursor, self.tail)
        stop = self.head if limit is None else min(self.head, start + max(0, limit))
        return ReadResult(items=self.items[start - self.tail:stop - self.tail], first_seq=start,
                          next_cursor=stop, missed=max(0, self.tail - cursor),
                          has_more=stop < self.head)

    def read_last(self, n: int) -> ReadResult[bytes]:
        return self.read(max(self.tail, self.head - max(0, n)))

    def get(self, seq: int) -> bytes | None:
        if self.tail <= seq < self.head:
            return self.items[seq - self.tail]
        return None

    def clear(self) -> int:
        removed = len(self.items)
        self.tail = self.head
        self.items = []
        return removed

    def stats(self) -> dict[str, int]:
        return {"capacity": 0, "used": len(self.items), "head": self.head, "tail": self.tail,
                "bytes": sum(len(b) for b in self.items)}


@implementer(ITelemetryStore)
class MemoryTelemetryStore:
    """The shared buffers as unbounded L{MemoryLog}s of JSON bytes (the buffer names of
    L{gasoline.core.storage.store}); each write publishes one L{BufferWrite} to C{notifier}."""

    def __init__(self, clock: IReactorTime, notifier: Notifier | None = None) -> None:
        self._clock = clock
        self.buffers: dict[str, Any] = {name: MemoryLog() for name in DEFAULT_BUFFERS}
        self.performance: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.test_boundaries = TestBoundaries()
        self.notifier = notifier if notifier is not None else Notifier(clock)
        self.last_write: dict[str, float | None] = dict.fromkeys(self.buffers)
        self._read_caches: dict[str, ReadCache] = {}
        self.websockets: dict[str, dict[str, Any]] = {}
        #: Buffer names as clients read them, in order.
        self.reads: list[str] = []

    def _now(self) -> float:
        return self._clock.seconds()

    def add(self, buffer_name: str, entries: list[dict[str, Any]]) -> Added:
        log = self.buffers[buffer_name]
        if not entries:
            return Added(log.head, log.head)
        first, head = log.extend([orjson.dumps(e) for e in entries])
        now = self._now()
        self.last_write[buffer_name] = now
        self.notifier.publish(BufferWrite(buffer_name, first, head, tuple(entries), now))
        return Added(first, head)  # (in memory only: nothing to persist)

    def read_counts(self) -> dict[str, int]:
        return dict(Counter(self.reads))

    def add_performance(self, snapshots: list[dict[str, Any]]) -> int:
        for snap in snapshots:
            url = str(snap.get("url", ""))
            self.performance.pop(url, None)
            self.performance[url] = snap
        if snapshots:
            self.last_write["performance"] = self._now()
        return len(snapshots)

    def read(self, buffer_name: str, cursor: int = 0,
             limit: int | None = None) -> ReadResult[dict[str, Any]]:
        raw = self.buffers[buffer_name].read(cursor, limit)
        self.note_read(buffer_name)
        return ReadResult(items=[orjson.loads(b) for b in raw.items], first_seq=raw.first_seq,
                          next_cursor=raw.next_cursor, missed=raw.missed,
                          has_more=raw.has_more)

    def read_cache(self, buffer_name: str) -> ReadCache:
        """A L{ReadCache} per buffer (its slots are sequence numbers modulo its size; a slot
        another entry took is redacted again: correct, only not cached)."""
        cache = self._read_caches.get(buffer_name)
        if cache is None:
            cache = self._read_caches[buffer_name] = ReadCache(1024)
        return cache

    def note_read(self, buffer_name: str) -> None:
        self.reads.append(buffer_name)

    def websocket_status(self) -> dict[str, Any]:
        """C{websockets} (set by the test: id -> connection JSON) by their C{state}."""
        conns = list(self.websockets.values())
        return {"active": [c for c in conns if c.get("state", "open") == "open"],
                "closed": [c for c in conns if c.get("state", "open") != "open"]}

    def clear(self, buffer_name: str | None = None) -> int:
        names = [buffer_name] if buffer_name is not None else list(self.buffers)
        removed = sum(self.buffers[name].clear() for name in names)
        if buffer_name is None:
            removed += self.clear_performance()
        return removed

    def clear_performance(self) -> int:
        removed = len(self.performance)
        self.performance.clear()
        return removed

    def stats(self) -> dict[str, dict[str, int]]:
        return {name: log.stats() for name, log in self.buffers.items()}


# -- query routing --------------------------------------------------------------------------------

@attrs.define(eq=False)
class FakeCommand:
    """One command a caller asked the fake router to run."""

    id: str
    owner: str
    type: str
    params: dict[str, Any]
    tab_id: int | None
    timeout: float | None
    deferred: Deferred[Any]
    correlation_id: str | None = None
    #: C{pending}, C{complete}, C{error} or C{cancelled}.
    status: str = "pending"
    result: Any = None
    error: dict[str, Any] | None = None

    def settle(self, status: str, result: Any = None,
               error: dict[str, Any] | None = None) -> None:
        """The command ended with C{status} (and its C{result} or C{error})."""
        self.status, self.result, self.error = status, result, error


@implementer(IQueryRouter)
class FakeQueryRouter:
    """Records each command (C{commands}); the test answers it with L{answer} or L{fail}.
    Outcomes are per owner, as the real router keeps them: another client's id reads as unknown.
    With C{connected} false every call fails at once, as with no extension."""

    def __init__(self, per_client_limit: int = 100) -> None:
        self.commands: list[FakeCommand] = []
        self.per_client_limit = per_client_limit
        self.connected = True
        self.stats: dict[str, int] = {"calls": 0, "complete": 0, "error": 0, "cancelled": 0}

    def _start(self, owner: str, type: str, params: dict[str, Any] | None, tab_id: int | None,
               timeout: float | None, correlation_id: str | None) -> FakeCommand:
        if not self.connected:
            raise ExtensionDisconnected("the browser extension is not connected")
        if self.pending_count(owner) >= self.per_client_limit:
            raise QueueFull(f"{self.per_client_limit} commands are already waiting")
        self.stats["calls"] += 1
        number = len(self.commands) + 1

        def cancelled(_: Deferred[Any]) -> None:
            command.settle("cancelled")
            self.stats["cancelled"] += 1

        command = FakeCommand(f"q-{number}", owner, type, dict(params or {}), tab_id, timeout,
                              Deferred(cancelled), correlation_id)
        self.commands.append(command)
        return command

    def call(self, owner: str, type: str, params: dict[str, Any] | None = None,
             tab_id: int | None = None, timeout: float | None = None) -> Deferred[Any]:
        try:
            return self._start(owner, type, params, tab_id, timeout, None).deferred
        except GasolineError as e:
            return fail(e)

    def submit(self, owner: str, type: str, params: dict[str, Any] | None = None,
               tab_id: int | None = None, timeout: float | None = None) -> str:
        command = self._start(owner, type, params, tab_id, timeout,
                              f"{type}-{len(self.commands) + 1}-fake")
        command.deferred.addErrback(lambda _: None)  # the outcome is read with command_result
        assert command.correlation_id is not None
        return command.correlation_id

    def waiting(self, owner: str | None = None) -> list[FakeCommand]:
        """Commands still pending (of C{owner}, or of everyone), oldest first."""
        return [c for c in self.commands if c.status == "pending"
                and (owner is None or c.owner == owner)]

    def answer(self, result: Any = None, command: FakeCommand | None = None) -> FakeCommand:
        """The extension answers C{command} (default: the oldest pending one) with C{result}."""
        command = command if command is not None else self.waiting()[0]
        command.settle("complete", result=result)
        self.stats["complete"] += 1
        command.deferred.callback(result)
        return command

    def fail(self, error: GasolineError, command: FakeCommand | None = None) -> FakeCommand:
        """The extension's C{error} for C{command} (default: the oldest pending one)."""
        command = command if command is not None else self.waiting()[0]
        command.settle("error", error=error.to_json())
        self.stats["error"] += 1
        command.deferred.errback(error)
        return command

    def _mine(self, owner: str, command_id: str) -> FakeCommand | None:
        for c in self.commands:
            if c.owner == owner and command_id in (c.id, c.correlation_id):
                return c
        return None

    def cancel(self, owner: str, command_id: str) -> bool:
        command = self._mine(owner, command_id)
        if command is None or command.status != "pending":
            return False
        command.deferred.cancel()
        return True

    def client_gone(self, owner: str) -> int:
        mine = self.waiting(owner)
        for command in mine:
            command.deferred.cancel()
        return len(mine)

    def command_result(self, owner: str, correlation_id: str) -> dict[str, Any]:
        command = self._mine(owner, correlation_id)
        if command is None or command.correlation_id != correlation_id:
            raise GasolineError(f"no command result with id {correlation_id!r}", code="no_data")
        out: dict[str, Any] = {"correlation_id": correlation_id, "status": command.status}
        if command.status == "complete":
            out["result"] = command.result
        elif command.error is not None:
            out["error"] = command.error
        return out

    def pending_commands(self, owner: str) -> list[dict[str, Any]]:
        return [{"command_id": c.id, "type": c.type, "status": "pending",
                 **({"correlation_id": c.correlation_id} if c.correlation_id else {})}
                for c in self.waiting(owner)]

    def failed_commands(self, owner: str) -> list[dict[str, Any]]:
        return [{"command_id": c.id, "type": c.type, "status": c.status, **(c.error or {})}
                for c in self.commands if c.owner == owner and c.status in ("error", "cancelled")]

    def pending_count(self, owner: str | None = None) -> int:
        return len(self.waiting(owner))

    def health(self) -> dict[str, Any]:
        return {"pending": self.pending_count(),
                "clients_waiting": len({c.owner for c in self.waiting()}), **self.stats}

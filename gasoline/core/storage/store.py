"""
The shared telemetry store: one ring buffer per kind of telemetry, plus two derived views.

Entries arrive as validated dicts (validation is the ingest layer's job), are stored as compact JSON
C{bytes} (about a third of the memory of the dicts), and are decoded again when read. Every write
publishes one L{BufferWrite} per batch to the notifier; an optional journal (see
L{gasoline.core.storage.journal}) receives the same bytes for the console buffer.

Derived views, updated on write:
 - C{performance}: the latest snapshot per URL (bounded, least recently updated URL leaves first);
 - C{websocket_connections}: open connections and recently closed ones, with message counts and
   rates, built from the WebSocket lifecycle events.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Iterable, Protocol

import attrs
import orjson
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from gasoline.core.storage.boundaries import TestBoundaries
from gasoline.core.interfaces import ITelemetryStore
from gasoline.core.storage.notify import Notifier
from gasoline.core.redaction.once import ReadCache
from gasoline.core.storage.ring import ReadResult, RingBuffer

#: Buffer names, as used in cursors, C{/health} and tool arguments.
CONSOLE = "console"
NETWORK_BODIES = "network_bodies"
WEBSOCKET_EVENTS = "websocket_events"
ACTIONS = "actions"
WATERFALL = "network_waterfall"
EXTENSION_LOGS = "extension_logs"

MiB = 1024 * 1024


@attrs.frozen
class BufferSpec:
    entries: int
    max_bytes: int


#: Documented defaults (docs/operations.md). C{--max-entries} overrides the console entry count.
DEFAULT_BUFFERS: dict[str, BufferSpec] = {
    CONSOLE: BufferSpec(10_000, 64 * MiB),
    NETWORK_BODIES: BufferSpec(1_000, 32 * MiB),
    WEBSOCKET_EVENTS: BufferSpec(5_000, 16 * MiB),
    ACTIONS: BufferSpec(2_000, 8 * MiB),
    WATERFALL: BufferSpec(2_000, 8 * MiB),
    EXTENSION_LOGS: BufferSpec(2_000, 4 * MiB),
}
MAX_PERFORMANCE_URLS = 200
MAX_CLOSED_CONNECTIONS = 100


@attrs.frozen
class BufferWrite:
    """Published once per batch written to a buffer."""

    buffer: str
    first_seq: int
    head: int
    entries: tuple[dict[str, Any], ...]
    at: float


class Journal(Protocol):
    """Receives the encoded entries of one buffer as they are written (append-only persistence).

    C{append} returns C{None} once the batch is handed to the OS, else why it could not be.
    """

    def append(self, encoded: list[bytes], first_seq: int) -> str | None: ...

    def cleared(self) -> None: ...


@attrs.define
class WebSocketConnection:
    id: str
    url: str | None
    tab_id: Any
    opened_at: float
    state: str = "open"
    closed_at: float | None = None
    close_code: Any = None
    close_reason: Any = None
    incoming: int = 0
    outgoing: int = 0
    errors: int = 0
    last_message_at: float | None = None

    def saw(self, kind: Any, event: dict[str, Any], now: float) -> None:
        """The capture's C{event} of this connection (C{kind}: message, error, close, open),
        at clock time C{now}."""
        if kind == "message":
            if event.get("direction") == "outgoing":
                self.outgoing += 1
            else:
                self.incoming += 1
            self.last_message_at = now
        elif kind == "error":
            self.errors += 1
        elif kind == "close":
            self.state = "closed"
            self.closed_at = now
            self.close_code = event.get("code")
            self.close_reason = event.get("reason")
        elif kind == "open" and event.get("url"):
            self.url = event.get("url")

    def to_json(self, now: float) -> dict[str, Any]:
        end = self.closed_at if self.closed_at is not None else now
        # At least one second: a connection seen a millisecond ago with one message is not
        # running at a thousand messages per second.
        elapsed = max(end - self.opened_at, 1.0)
        total = self.incoming + self.outgoing
        return {
            "id": self.id,
            "url": self.url,
            "tab_id": self.tab_id,
            "state": self.state,
            "opened_at": self.opened_at,
            "closed_at": self.closed_at,
            "close_code": self.close_code,
            "close_reason": self.close_reason,
            "messages": {"incoming": self.incoming, "outgoing": self.outgoing, "total": total},
            "errors": self.errors,
            "rate_per_second": round(total / elapsed, 3),
            "last_message_at": self.last_message_at,
        }


@attrs.frozen
class Added:
    """What one L{TelemetryStore.add} wrote: the first sequence number and the buffer's head
    after it, and whether the batch reached the journal."""

    first: int
    head: int
    #: Why the journal could not take the batch (kept in memory all the same, but it would not
    #: survive a restart), or None: persisted, or no journal for this buffer.
    persist_error: str | None = None


@implementer(ITelemetryStore)
class TelemetryStore:
    """The shared telemetry buffers every client reads. Entries are JSON objects, kept as
    compact JSON C{bytes} in ring buffers (L{gasoline.core.storage.ring.RingBuffer}) and decoded on read;
    each write publishes one L{BufferWrite} to the notifier. All methods run on the reactor
    thread; none blocks."""

    def __init__(
        self,
        clock: IReactorTime,
        buffers: dict[str, BufferSpec] | None = None,
        notifier: Notifier | None = None,
        offload: Callable[[ReadCache, int, list[bytes]], None] | None = None,
    ) -> None:
        self._clock = clock
        specs = dict(DEFAULT_BUFFERS)
        specs.update(buffers or {})
        self.specs = specs
        self.buffers: dict[str, RingBuffer[bytes]] = {
            name: RingBuffer(spec.entries, spec.max_bytes) for name, spec in specs.items()
        }
        #: Per buffer, the redacted form of each entry read and its noise verdicts, kept so a
        #: stored entry is redacted once, not once per agent and read (L{ReadCache}; made on the
        #: first read of the buffer).
        self.read_caches: dict[str, ReadCache] = {}
        self.notifier = notifier if notifier is not None else Notifier(clock)
        self.journals: dict[str, Journal] = {}
        self.last_write: dict[str, float | None] = {name: None for name in specs}
        self.performance: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.websocket_connections: dict[str, WebSocketConnection] = {}
        #: CI test boundaries: console entries ingested while a test runs carry its id.
        self.test_boundaries = TestBoundaries()
        self._closed_connections: OrderedDict[str, WebSocketConnection] = OrderedDict()
        #: Told C{(read cache, first_seq, encoded)} after each network-bodies write: redacts
        #: the large ones in a worker process ahead of their first read
        #: (L{gasoline.core.redaction.once.Offload}; C{None}: no worker pool).
        self.offload = offload
        #: Reads per buffer (C{gasoline_client_reads_total} on C{/metrics}).
        self.reads: dict[str, int] = dict.fromkeys(specs, 0)
        #: Why the journal could not take the latest L{add}'s batch (C{None}: durable, or no
        #: journal). Set by every L{add}; the ingest routes read it right after their call.

    # -- writing -------------------------------------------------------------------------------

    def add(self, buffer_name: str, entries: list[dict[str, Any]]) -> Added:
        ring = self.buffers[buffer_name]
        if not entries:
            return Added(ring.head, ring.head)
        # Each entry as compact JSON, in one list comprehension (no Python call per entry: a
        # batch of the extension's holds 50). orjson hands back a bytes object whose allocation
        # is about 4 KiB however short the JSON (measured with tracemalloc: 4,098 B for a 246 B
        # entry). Entries live long in the rings, so keep an exact-size copy: ~0.2 us per entry,
        # and 100 000 console entries cost ~35 MB, not 400.
        dumps = orjson.dumps
        encoded = [bytes(memoryview(dumps(e))) for e in entries]
        first, head = ring.extend(encoded)
        now = self._clock.seconds()
        self.last_write[buffer_name] = now
        journal = self.journals.get(buffer_name)
        # Handed to the OS here, before the caller answers: an acknowledged entry survives a crash.
        persist_error = journal.append(encoded, first) if journal is not None else None
        if buffer_name == WEBSOCKET_EVENTS:
            self._track_websocket(entries, now)
        elif buffer_name == NETWORK_BODIES and self.offload is not None:
            self.offload(self.read_cache(buffer_name), first, encoded)
        self.notifier.publish(BufferWrite(buffer_name, first, head, tuple(entries), now))
        return Added(first, head, persist_error)

    def restore(self, buffer_name: str, encoded: Iterable[bytes], end_seq: int | None = None) -> int:
        """Load previously persisted encoded entries (at start-up; no events, no journal).

        With C{end_seq} (the buffer's C{head} when they were saved) the entries keep their old
        sequence numbers, the newest being C{end_seq - 1}, and numbering continues from there.
        """
        ring = self.buffers[buffer_name]
        items = list(encoded)
        if end_seq is not None and len(ring) == 0:
            ring.start_at(max(0, end_seq - len(items)))
        for item in items:
            ring.append(item)
        if buffer_name == WEBSOCKET_EVENTS and items:
            # The connections view is derived from the events: rebuild it from what came back.
            self._track_websocket([e for e in (orjson.loads(b) for b in items)
                                   if isinstance(e, dict)], self._clock.seconds())
        return len(items)

    def attach_journal(self, buffer_name: str, journal: Journal) -> None:
        """From now on every write to C{buffer_name} is appended to C{journal} too (at
        start-up, after L{restore})."""
        self.journals[buffer_name] = journal

    def add_performance(self, snapshots: list[dict[str, Any]]) -> int:
        """Keep the latest snapshot per URL; publish a C{performance} write."""
        now = self._clock.seconds()
        for snap in snapshots:
            url = str(snap.get("url", ""))
            self.performance.pop(url, None)
            self.performance[url] = snap
            while len(self.performance) > MAX_PERFORMANCE_URLS:
                self.performance.popitem(last=False)
        if snapshots:
            self.last_write["performance"] = now
            self.notifier.publish(BufferWrite("performance", 0, 0, tuple(snapshots), now))
        return len(snapshots)

    def _track_websocket(self, events: list[dict[str, Any]], now: float) -> None:
        for ev in events:
            conn_id = ev.get("id")
            if not isinstance(conn_id, str) or not conn_id:
                continue
            kind = ev.get("event")
            conn = self.websocket_connections.get(conn_id)
            if conn is None:
                conn = self._closed_connections.get(conn_id)
            if conn is None:
                conn = WebSocketConnection(
                    id=conn_id, url=ev.get("url"), tab_id=ev.get("tab_id"), opened_at=now
                )
                self.websocket_connections[conn_id] = conn
            conn.saw(kind, ev, now)
            if kind == "close":
                self.websocket_connections.pop(conn_id, None)
                self._closed_connections.pop(conn_id, None)
                self._closed_connections[conn_id] = conn
                while len(self._closed_connections) > MAX_CLOSED_CONNECTIONS:
                    self._closed_connections.popitem(last=False)

    # -- reading -------------------------------------------------------------------------------

    def read(
        self, buffer_name: str, cursor: int = 0, limit: int | None = None
    ) -> ReadResult[dict[str, Any]]:
        raw = self.buffers[buffer_name].read(cursor, limit)
        self.note_read(buffer_name)
        return ReadResult(
            items=[orjson.loads(b) for b in raw.items],
            first_seq=raw.first_seq,
            next_cursor=raw.next_cursor,
            missed=raw.missed,
            has_more=raw.has_more,
        )

    def read_cache(self, buffer_name: str) -> ReadCache:
        """The L{ReadCache} of C{buffer_name} (its slots follow the ring's)."""
        cache = self.read_caches.get(buffer_name)
        if cache is None:
            cache = self.read_caches[buffer_name] = ReadCache(self.buffers[buffer_name].capacity)
        return cache

    def note_read(self, buffer_name: str) -> None:
        """A client read C{buffer_name} (tools that read the rings directly say so here)."""
        self.reads[buffer_name] = self.reads.get(buffer_name, 0) + 1

    def read_counts(self) -> dict[str, int]:
        return dict(self.reads)

    def websocket_status(self) -> dict[str, Any]:
        now = self._clock.seconds()
        return {
            "active": [c.to_json(now) for c in self.websocket_connections.values()],
            "closed": [c.to_json(now) for c in reversed(self._closed_connections.values())],
        }

    # -- clearing and stats --------------------------------------------------------------------

    def clear(self, buffer_name: str | None = None) -> int:
        names = [buffer_name] if buffer_name is not None else list(self.buffers)
        removed = 0
        for name in names:
            removed += self.buffers[name].clear()
            self.read_caches.pop(name, None)
            journal = self.journals.get(name)
            if journal is not None:
                journal.cleared()
            if name == WEBSOCKET_EVENTS:
                self.websocket_connections.clear()
                self._closed_connections.clear()
        if buffer_name is None:
            removed += self.clear_performance()
        return removed

    def clear_performance(self) -> int:
        """Empty the performance view only; how many snapshots went."""
        removed = len(self.performance)
        self.performance.clear()
        return removed

    def stats(self) -> dict[str, dict[str, int]]:
        out = {name: ring.stats() for name, ring in self.buffers.items()}
        out["performance"] = {
            "capacity": MAX_PERFORMANCE_URLS,
            "used": len(self.performance),
            "head": len(self.performance),
        }
        return out

"""
Durable state: the state dir prepared and checked, one journal per telemetry buffer wired to the store.

L{wire_journals} prepares the state dir (L{gasoline.core.storage.files.prepare_state_dir}), builds one
L{gasoline.core.storage.journal.BufferJournal} per ring buffer, reloads them at start-up and attaches them
to the store; L{Persistence} is what it returns (the daemon's durable side: state dir warnings,
disk health, the journals). C{sequence.json} (every journaled buffer's head) is written here too;
it only matters for a journal written before sequence markers existed.

The file primitives and L{gasoline.core.storage.files.DiskHealth} live in L{gasoline.core.storage.files}, the
journals in L{gasoline.core.storage.journal}.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import attrs
from twisted.application.internet import TimerService
from twisted.application.service import MultiService
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

import orjson

from gasoline.common import read_nofollow
from gasoline.core.storage.files import (
    DiskHealth,
    describe,
    prepare_state_dir,
    set_aside,
    unreadable,
    thread_runner,
    write_atomic,
)
from gasoline.core.storage.journal import MiB, BufferJournal

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from gasoline.core.storage.atrest import AtRest
    from gasoline.core.storage.store import TelemetryStore

__all__ = ["SEQUENCE_FILE", "Persistence", "wire_journals"]

log = Logger()

SEQUENCE_FILE = "sequence.json"



class _SequenceService(TimerService):
    """Writes C{sequence.json} (every journaled buffer's head) when it changed, and at stop.

    It only matters for a journal written before markers existed; the markers are exact.
    """

    def __init__(self, persistence: "Persistence", interval: float = 2.0) -> None:
        super().__init__(interval, self._tick)
        self.clock = persistence.clock
        self._p = persistence
        self._written: bytes | None = None

    def _tick(self) -> None:
        body = orjson.dumps({n: self._p.store.buffers[n].head for n in self._p.journals},
                            option=orjson.OPT_SORT_KEYS)
        if body == self._written:
            return
        path = self._p.state_dir / SEQUENCE_FILE
        try:
            write_atomic(path, body)
        except OSError as e:
            self._p.health.failed("sequence file", path, e)
            return
        self._written = body
        self._p.health.succeeded("sequence file")

    def stopService(self) -> Deferred[None] | None:
        d = super().stopService()
        self._tick()
        return d


@attrs.define(eq=False)
class Persistence:
    """The daemon's durable side: state dir checks, disk health, one journal per buffer."""

    state_dir: Path
    clock: IReactorTime
    store: "TelemetryStore"
    health: DiskHealth
    journals: dict[str, BufferJournal] = attrs.field(factory=dict)
    #: C{--state-key-file}'s sealing (L{gasoline.core.storage.atrest.AtRest}), or None.
    at_rest: "AtRest | None" = None

    def stats(self) -> dict[str, Any]:
        return {name: j.stats() for name, j in self.journals.items()}


_SEQUENCE_LOST = ("the buffers' saved heads (each journal's own markers still number its "
                  "entries)")


def _saved_heads(path: Path) -> dict[str, int]:
    try:
        raw = read_nofollow(path)
    except FileNotFoundError:
        return {}
    except OSError as e:
        unreadable(path, describe(e), _SEQUENCE_LOST)
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        set_aside(path, "not valid JSON", _SEQUENCE_LOST)
        return {}
    if not isinstance(value, dict):
        set_aside(path, "not a JSON object", _SEQUENCE_LOST)
        return {}
    return {k: v for k, v in value.items()
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def _ring_bounds(ring: Any) -> tuple[int, int]:
    return ring.tail, ring.head


def wire_journals(
    state_dir: Path | str,
    clock: IReactorTime,
    store: "TelemetryStore",
    services: MultiService,
    *,
    persist: bool = True,
    buffers: Sequence[str] | None = None,
    health: DiskHealth | None = None,
    at_rest: Any = None,
) -> Persistence:
    """Prepare the state dir and make every ring buffer of C{store} durable.

    For each buffer: read its journal (blocking: start-up only, before the reactor runs), put the
    newest entries back in the ring under their old sequence numbers, attach the journal to the
    store and its service to C{services}. With C{persist} false only the state dir is prepared.
    With C{at_rest} (L{gasoline.core.storage.atrest.AtRest}) every entry is sealed on disk.
    """
    state_dir = Path(state_dir)
    health = health if health is not None else DiskHealth(clock)
    health.warn(prepare_state_dir(state_dir))
    if not persist:
        return Persistence(state_dir, clock, store, health, at_rest=at_rest)
    journals: dict[str, BufferJournal] = {}
    saved = _saved_heads(state_dir / SEQUENCE_FILE)
    runner = thread_runner(clock)
    for name in buffers if buffers is not None else list(store.buffers):
        ring = store.buffers[name]
        journal = BufferJournal(
            state_dir, clock, partial(list, ring), buffer=name, max_entries=ring.capacity,
            sequence=partial(_ring_bounds, ring),
            max_file_bytes=max(2 * ring.max_bytes, 16 * MiB),
            run_in_thread=runner, health=health, at_rest=at_rest,
        )
        entries = journal.load()
        ends = [e for e in (journal.end_seq, saved.get(name)) if e is not None]
        end = max(ends) if ends else None
        if end is not None and end < len(entries):
            end = len(entries)
        store.restore(name, entries, end_seq=end)
        store.attach_journal(name, journal)
        journal.setServiceParent(services)
        journals[name] = journal
    p = Persistence(state_dir, clock, store, health, journals, at_rest=at_rest)
    seq = _SequenceService(p)
    seq.setName("sequence-file")
    seq.setServiceParent(services)
    return p

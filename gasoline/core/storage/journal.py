"""
One append-only journal per telemetry buffer: L{BufferJournal}.

L{BufferJournal} persists one ring buffer (console, network bodies, waterfall, WebSocket events,
actions, extension logs); L{gasoline.core.storage.persist.wire_journals} builds one per buffer, reloads
them at start-up and attaches them to the store. Its files are written with the primitives of
L{gasoline.core.storage.files}.

A journal file (C{<state_dir>/<buffer>.jsonl}, C{console.jsonl} for the console) holds one
compact JSON object per line, oldest first: the bytes the ring buffer stores. Before each batch
comes a marker line C{#seq <first> <count>}: the batch's first sequence number and its number of
entries, so that a restart gives every reloaded entry the number it had (the newest marker gives the
buffer's head) and clients' saved cursors keep their meaning. A file written before markers existed
(today's C{console.jsonl}) still loads: its entries are numbered from C{sequence.json}.

Durability (see docs/persistence.md, "Durability"):

 - L{BufferJournal.append} hands each batch to the OS with C{write(2)} (one call, the file opened
   C{O_APPEND}) before it returns, that is before the HTTP response is written: an acknowledged
   entry survives C{kill -9} of the daemon. A write that fails is undone (the file is truncated
   back) and reported to the caller.
 - Every C{fsync_interval} seconds (1 s), a journal written to since the last sync is C{fsync}ed in
   a thread (a duplicated descriptor, so closing the journal meanwhile is harmless). Power loss or a
   kernel crash may lose what was acknowledged within that last interval.
 - Compaction (a timer check every 5 s; two comparisons) rewrites a journal as the entries its ring
   still retains, in a thread, off the request path; it is what keeps each file bounded.

The thread runner is injectable (L{gasoline.core.storage.files.thread_runner}), so unit tests on
C{task.Clock} run compaction and syncs synchronously and deterministically.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Sequence

from twisted.application.service import IService, MultiService
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

import orjson

from gasoline.core.storage.atrest import LINE_MARK, AtRest, LineSealer
from gasoline.core.lifecycle import ClockedTimer
from gasoline.common import CLOEXEC, NOFOLLOW
from gasoline.core.storage.files import (
    DiskHealth,
    ThreadRunner,
    describe,
    make_private_dir,
    open_private,
    run_synchronously,
    unlink_quietly,
    write_all,
)

log = Logger()

FILENAME = "console.jsonl"
COMPACT_SUFFIX = ".compact"
MiB = 1024 * 1024
#: Default byte bound that triggers a compaction (twice the console buffer's default byte budget).
DEFAULT_MAX_FILE_BYTES = 128 * MiB
#: Seconds between fsyncs of a journal that was written to (the power-loss window).
DEFAULT_FSYNC_INTERVAL = 1.0
DEFAULT_COMPACT_INTERVAL = 5.0
_READ_BLOCK = 1 * MiB
_WRITE_CHUNK = 4096  # lines joined per write when compacting
_MARKER = re.compile(rb"^#seq (\d{1,18}) (\d{1,18})$")
#: Entries per sealed line when compaction rewrites a sealed journal.
_SEALED_BATCH = 1000
#: What a sealed line that does not open counts as (never an entry).
_BAD = b"\x00"


# -- journals -----------------------------------------------------------------------------------


def _is_entry(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


def _marker(first_seq: int, count: int) -> bytes:
    return b"#seq %d %d\n" % (first_seq, count)


def _segments_newest_first(f: BinaryIO, size: int, block: int | None = None) -> Iterator[bytes]:
    """The file's newline-separated segments, last first, reading backwards in blocks.

    C{block} defaults to C{_READ_BLOCK}, read at each call (so a test can shrink it).

    The first segment yielded is what follows the last newline: C{b""} for a well-formed file, a
    partial line if a write was cut short.
    """
    if block is None:
        block = _READ_BLOCK
    pos = size
    carry = b""
    while pos > 0:
        step = min(block, pos)
        pos -= step
        f.seek(pos)
        parts = (f.read(step) + carry).split(b"\n")
        carry = parts[0]
        yield from reversed(parts[1:])
    yield carry


def _write_snapshot(path: str, header: bytes, lines: Sequence[bytes],
                    seal: Callable[[bytes], bytes] | None = None) -> int:
    """Write C{header} then C{lines} (newline-terminated; each sealed with C{seal} if given) to a
    fresh private file, sync it.

    Runs in a thread: it touches nothing but its arguments and the file (C{seal} is a sealer of
    its own generation). Returns bytes written.
    """
    if seal is not None:
        # Sealed in batches, as appends are (one AES-GCM call per batch of entries).
        lines = [seal(b"\n".join(lines[i:i + _SEALED_BATCH]))
                 for i in range(0, len(lines), _SEALED_BATCH)]
    unlink_quietly(path)
    fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    written = 0
    try:
        with os.fdopen(fd, "wb", buffering=MiB) as f:
            f.write(header)
            written += len(header)
            for i in range(0, len(lines), _WRITE_CHUNK):
                data = b"\n".join(lines[i : i + _WRITE_CHUNK]) + b"\n"
                f.write(data)
                written += len(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        unlink_quietly(path)
        raise
    return written


def _error(failure: Failure) -> BaseException:
    """C{failure}'s exception (Twisted types C{Failure.value} as optional; a built Failure has one)."""
    value = failure.value
    return value if value is not None else Exception(failure.getErrorMessage())


def _fsync_dup(fd: int, directory: str | None) -> None:
    """Sync a duplicated journal descriptor (and the directory, after a rename); close it."""
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if directory is not None:
        dfd = os.open(directory, os.O_RDONLY | CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


@implementer(IService)
class BufferJournal(MultiService):
    """One ring buffer's append-only journal (implements the store's C{Journal} protocol).

    @param state_dir: directory of the journal file (created 0700 when missing).
    @param clock: drives the sync and compaction timers.
    @param snapshot: returns the entries the ring retains right now, oldest first (a list copy of
        C{bytes}); compaction writes exactly these.
    @param buffer: the buffer's name; the file is C{<buffer>.jsonl}.
    @param sequence: returns the ring's C{(tail, head)}; with it, compaction and clearing write the
        sequence marker that keeps reloaded entries' numbers exact.
    @param max_entries: the buffer's capacity: L{load} returns at most this many entries, and
        compaction is due once the file holds more than twice as many.
    @param max_file_bytes: compaction is also due once the file is larger than this.
    @param fsync_interval: seconds between syncs of a written journal (the power-loss window).
    @param run_in_thread: C{run_in_thread(f, *args) -> Deferred}; see L{thread_runner}.
    @param health: where failing writes are reported (one per daemon; a private one by default).

    @ivar lines: entries the file holds (as far as this process knows).
    @ivar size: bytes the file holds.
    @ivar end_seq: after L{load}, the buffer's head when the file was last written (from its
        newest marker), or C{None} for a file without markers.
    """

    def __init__(
        self,
        state_dir: Path | str,
        clock: IReactorTime,
        snapshot: Callable[[], list[bytes]],
        *,
        max_entries: int,
        buffer: str = "console",
        sequence: Callable[[], tuple[int, int]] | None = None,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        fsync_interval: float = DEFAULT_FSYNC_INTERVAL,
        compact_interval: float = DEFAULT_COMPACT_INTERVAL,
        run_in_thread: ThreadRunner = run_synchronously,
        health: DiskHealth | None = None,
        at_rest: AtRest | None = None,
    ) -> None:
        super().__init__()
        #: C{--state-key-file}: every entry line is sealed (L{gasoline.core.storage.atrest}).
        self.at_rest = at_rest
        self._purpose = f"journal:{buffer}".encode()
        self._sealer: LineSealer | None = None
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.setName(f"{buffer}-journal")
        self.buffer = buffer
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / f"{buffer}.jsonl"
        self.compact_path = self.state_dir / (self.path.name + COMPACT_SUFFIX)
        self.max_entries = max_entries
        self.max_file_bytes = max_file_bytes
        self.what = f"{buffer} journal"
        self._clock = clock
        self._snapshot = snapshot
        self._sequence = sequence
        self._run_in_thread = run_in_thread
        self.health = health if health is not None else DiskHealth(clock)
        self._fd: int | None = None
        #: Why the file could not be opened (appends then fail with this), else None.
        self._open_error: str | None = None
        self.lines = 0
        self.size = 0
        self.end_seq: int | None = None
        self.corrupt_skipped = 0
        self.compactions = 0
        self.write_errors = 0
        self.syncs = 0
        #: Entries handed to L{append} before the journal was started (or after it stopped).
        self.unjournaled = 0
        self._dirty = False
        self._sync_dir = False
        self._syncing: defer.Deferred[Any] | None = None
        self._byte_threshold = max_file_bytes
        self._needs_compaction = False
        self._compacting: defer.Deferred[Any] | None = None
        self._waiters: list[defer.Deferred[None]] = []
        #: Blobs appended since the running compaction took its snapshot (None: not compacting),
        #: and the entries they hold.
        self._during: list[bytes] | None = None
        self._during_entries = 0
        for period, fn, what in (
            (fsync_interval, self.sync, "sync"),
            (compact_interval, self.maybe_compact, "compaction check"),
        ):
            ClockedTimer(period, clock, self._guarded, fn, what).setServiceParent(self)

    # -- start-up ---------------------------------------------------------------------------

    def load(self, max_entries: int | None = None) -> list[bytes]:
        """The newest C{max_entries} good entries, oldest first. Blocking: call only at start-up.

        Sets L{end_seq} from the newest sequence marker. Corrupt lines and a last line without its
        newline are skipped, counted in C{corrupt_skipped} and logged. A file holding more than it
        returns (or anything corrupt) is compacted at the first compaction check.
        """
        n = self.max_entries if max_entries is None else max_entries
        try:
            f = open(self.path, "rb", opener=lambda p, fl: os.open(p, fl | NOFOLLOW | CLOEXEC))
        except FileNotFoundError:
            return []
        except OSError as e:
            self.health.failed(self.what, self.path, e)
            log.warn("{what} {path}: cannot read ({why}); starting empty (new entries are not "
                     "persisted until it is readable: fix its permissions or remove it)",
                     what=self.what, path=str(self.path), why=describe(e))
            return []
        kept: list[bytes] = []
        corrupt = 0
        older = False
        end: int | None = None
        newer = 0  # entries after the newest marker
        with f:
            size = os.fstat(f.fileno()).st_size
            segments = _segments_newest_first(f, size)
            if next(segments):
                corrupt += 1  # the last write was cut short
            clear_seen: list[int] = [0]
            for line in self._opened(segments, clear_seen):
                if line[:1] == b"#":
                    m = _MARKER.match(line)
                    if m is None:
                        corrupt += 1
                    elif end is None:
                        first, count = int(m.group(1)), int(m.group(2))
                        end = first + max(count, newer)
                        if older:
                            break
                    continue
                if not line.strip():
                    continue
                if end is None:
                    newer += 1
                if len(kept) >= n:
                    older = True
                    if end is not None:
                        break
                    continue  # only looking for the newest marker now
                if _is_entry(line):
                    kept.append(line)
                else:
                    corrupt += 1
        kept.reverse()
        clear = clear_seen[0]
        self.end_seq = end
        self.corrupt_skipped += corrupt
        self.size = size
        self.lines = len(kept) + corrupt + (1 if older else 0)
        # With a key, entries written in clear before are rewritten sealed at the first check.
        self._needs_compaction = older or corrupt > 0 or (clear > 0 and self.at_rest is not None)
        if corrupt:
            log.warn("{what} {path}: skipped {corrupt} corrupt or partial lines (the next "
                     "compaction rewrites the file without them; nothing to do)",
                     what=self.what, path=str(self.path), corrupt=corrupt)
        if kept:
            log.info("{what} {path}: restored {count} entries", what=self.what,
                     path=str(self.path), count=len(kept))
        return kept

    def _opened(self, segments: Iterator[bytes], clear: list[int]) -> Iterator[bytes]:
        """The file's lines newest first, each sealed batch opened into its entries (newest
        first); one that does not open is one L{_BAD} line. C{clear[0]} counts the entry lines
        written in clear."""
        at_rest, purpose = self.at_rest, self._purpose
        for line in segments:
            if line[:1] == LINE_MARK:
                opened = at_rest.open_line(line, purpose) if at_rest is not None else None
                if opened is None:
                    yield _BAD
                    continue
                yield from reversed(opened.split(b"\n"))
                continue
            if line[:1] not in (b"#", b""):
                clear[0] += 1
            yield line

    def startService(self) -> None:
        self._try_open()
        super().startService()  # starts the sync and compaction timers

    def _try_open(self) -> bool:
        try:
            make_private_dir(self.state_dir)
            # A compaction interrupted by a crash leaves its temporary file behind; the journal
            # itself is intact (the rename is atomic), so the leftover is simply dropped.
            unlink_quietly(self.compact_path)
            self._open()
        except OSError as e:
            # The daemon still serves everyone from memory; every append says it is not durable.
            self._open_error = self.health.failed(self.what, self.path, e)
            return False
        if self._open_error is not None:
            self._open_error = None
            self._needs_compaction = True  # appends were missed meanwhile: rewrite from the ring
            self.health.succeeded(self.what)
        return True

    def _open(self) -> None:
        if self.at_rest is not None:
            # A new generation of the file for this process: its own salt and nonce counter.
            self._sealer = self.at_rest.line_sealer(self._purpose)
        fd = open_private(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            self.size = self._drop_partial_tail(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _drop_partial_tail(self, fd: int) -> int:
        """Cut a last line without its newline, so the next append starts on a line of its own."""
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        with open(self.path, "rb", opener=lambda p, fl: os.open(p, fl | NOFOLLOW | CLOEXEC)) as f:
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return size
            partial = next(_segments_newest_first(f, size))
        os.ftruncate(fd, size - len(partial))
        log.warn("{what} {path}: dropped a partial last line ({n} bytes)", what=self.what,
                 path=str(self.path), n=len(partial))
        return size - len(partial)

    # -- the Journal protocol (called by the store on the reactor) --------------------------

    def append(self, encoded: Sequence[bytes], first_seq: int) -> str | None:
        """Hand one batch to the OS in one C{write(2)}; return why it failed, else C{None}.

        Never raises. When this returns C{None} the batch is in the kernel: it survives the
        death of the process (not power loss before the next sync).
        """
        if not encoded:
            return None
        sealer = self._sealer  # set by _open: without it, nothing is written (no descriptor)
        if sealer is not None:
            # One sealed line for the whole batch: one AES-GCM call per request, not per entry.
            data = b"#seq %d %d\n%s\n" % (first_seq, len(encoded),
                                           sealer.seal(b"\n".join(encoded)))
        else:
            # One join, one copy: b"#seq <first> <n>\n" + the entries, one per line.
            data = b"\n".join((b"#seq %d %d" % (first_seq, len(encoded)), *encoded, b""))
        if self._during is not None:
            self._during.append(data)
            self._during_entries += len(encoded)
        fd = self._fd
        if fd is None:
            if self._open_error is not None:
                self.write_errors += 1
                return self._open_error
            self.unjournaled += len(encoded)
            return None
        try:
            write_all(fd, data)
        except OSError as e:
            return self._write_failed(e, fd)
        self.lines += len(encoded)
        self.size += len(data)
        self._dirty = True
        if self.write_errors:
            self.health.succeeded(self.what)
        return None

    def cleared(self) -> None:
        """The buffer was cleared: truncate the file (and drop a running compaction)."""
        self._during = None  # a running compaction's snapshot is stale now: it will be dropped
        self.lines = 0
        self.size = 0
        self._needs_compaction = False
        self._byte_threshold = self.max_file_bytes
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)  # O_APPEND: the next write starts at 0
            if self._sequence is not None:
                marker = _marker(self._sequence()[1], 0)
                write_all(self._fd, marker)
                self.size = len(marker)
            self._dirty = True
        except OSError as e:
            self._write_failed(e, self._fd)

    # -- timers -------------------------------------------------------------------------------

    def sync(self) -> defer.Deferred[None] | None:
        """C{fsync} the journal in a thread if it was written since the last sync."""
        if self._fd is None or self._syncing is not None or not (self._dirty or self._sync_dir):
            return None
        self._dirty = False
        directory, self._sync_dir = (str(self.state_dir) if self._sync_dir else None), False
        try:
            fd = os.dup(self._fd)
        except OSError as e:
            self.health.failed(self.what, self.path, e)
            return None
        d = self._run_in_thread(_fsync_dup, fd, directory)
        self._syncing = d

        def done(result: object) -> None:
            self._syncing = None
            if isinstance(result, Failure):
                self._dirty = True
                self.write_errors += 1
                self.health.failed(self.what, self.path, _error(result))
            else:
                self.syncs += 1

        d.addBoth(done)
        return d

    def compaction_due(self) -> bool:
        return (
            self._needs_compaction
            or self.lines > 2 * self.max_entries
            or self.size > self._byte_threshold
        )

    def maybe_compact(self) -> defer.Deferred[None] | None:
        """Start a compaction if one is due and none is running (the compaction timer's job).

        A journal that could not be opened is retried here first.
        """
        if self._fd is None and self._open_error is not None and not self._try_open():
            return None
        if self._fd is None or self._compacting is not None or not self.compaction_due():
            return None
        return self.compact()

    def compact(self) -> defer.Deferred[None]:
        """Rewrite the journal as the retained entries, off the reactor; fires when done.

        A failure is reported and leaves the journal as it was; the Deferred never fails.
        """
        if self._compacting is not None or self._fd is None:
            return self._wait()
        snapshot = self._snapshot()
        if self._sequence is not None:
            tail, _ = self._sequence()
            header = _marker(tail, len(snapshot))
        else:
            header = b""
        self._during = []
        self._during_entries = 0
        started = self._clock.seconds()
        seal = self.at_rest.line_sealer(self._purpose).seal if self.at_rest is not None else None
        d = self._run_in_thread(_write_snapshot, str(self.compact_path), header, snapshot, seal)
        self._compacting = d
        d.addCallback(self._install_compacted, len(snapshot), started)
        d.addErrback(self._compaction_failed)
        d.addBoth(self._compaction_done)
        return self._wait()

    def _install_compacted(self, written: int, count: int, started: float) -> None:
        during, self._during = self._during, None
        if during is None or self._fd is None:
            # Cleared while compacting: the truncated journal is right, the snapshot is stale.
            unlink_quietly(self.compact_path)
            return
        tail = b"".join(during)
        if tail:
            # Only what arrived while the thread wrote the snapshot: small and bounded.
            fd = open_private(self.compact_path, os.O_WRONLY | os.O_APPEND)
            try:
                write_all(fd, tail)
            finally:
                os.close(fd)
        os.replace(self.compact_path, self.path)
        old, self._fd = self._fd, None
        try:
            os.close(old)
        except OSError:
            pass  # its lines are all in the compacted file
        self._open()
        self._dirty = bool(tail)
        self._sync_dir = True  # make the rename itself durable at the next sync
        self.lines = count + self._during_entries
        self.size = written + len(tail)
        # Never chase a bound the retained entries alone exceed (one huge entry, say).
        self._byte_threshold = max(self.max_file_bytes, 2 * self.size)
        self._needs_compaction = False
        self.compactions += 1
        self.health.succeeded(self.what)
        log.info(
            "{what} {path}: compacted to {lines} entries ({size} bytes) in {took:.3f}s",
            what=self.what, path=str(self.path), lines=self.lines, size=self.size,
            took=self._clock.seconds() - started,
        )

    def _compaction_failed(self, failure: Failure) -> None:
        self._during = None
        unlink_quietly(self.compact_path)
        if self._fd is None:
            # _install_compacted failed between closing and reopening: reopen what is there.
            try:
                self._open()
            except OSError as e:
                self._open_error = self.health.failed(self.what, self.path, e)
        if isinstance(failure.value, OSError):
            self.health.failed(self.what, self.compact_path, failure.value)
        else:
            log.failure("{what} {path}: compaction failed", failure, what=self.what,
                        path=str(self.path))

    def _compaction_done(self, _: object) -> None:
        self._compacting = None
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            w.callback(None)

    def _wait(self) -> defer.Deferred[None]:
        if self._compacting is None:
            return defer.succeed(None)
        w: defer.Deferred[None] = defer.Deferred()
        self._waiters.append(w)
        return w

    def _guarded(self, fn: Callable[[], Any], what: str) -> None:
        # A LoopingCall stops for good on its first exception: log and carry on instead.
        try:
            fn()
        except Exception:
            log.failure("{journal} {what} failed", journal=self.what, what=what)

    # -- shutdown -------------------------------------------------------------------------------

    def stopService(self) -> defer.Deferred[None]:
        """Stop the timers, let a running compaction and sync finish, then sync and close."""
        d = defer.maybeDeferred(super().stopService)
        d.addCallback(lambda _: self._wait())
        d.addCallback(lambda _: self._syncing)
        d.addCallback(lambda _: self._close())
        return d

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.fsync(fd)
        except OSError as e:
            self.health.failed(self.what, self.path, e)
        finally:
            try:
                os.close(fd)
            except OSError:
                pass

    # -- health -----------------------------------------------------------------------------------

    def _write_failed(self, error: OSError, fd: int) -> str:
        self.write_errors += 1
        # Undo a partial write so the next batch starts on a line of its own; the entries are in
        # the ring, and the next compaction rewrites the file from it once the disk takes writes.
        try:
            os.ftruncate(fd, self.size)
        except OSError:
            pass
        self._needs_compaction = True
        return self.health.failed(self.what, self.path, error)

    def stats(self) -> dict[str, Any]:
        """For C{/health}: the file, its size and entry count, and what went wrong."""
        return {
            "path": str(self.path),
            "size": self.size,
            "lines": self.lines,
            "compactions": self.compactions,
            "compacting": self._compacting is not None,
            "syncs": self.syncs,
            "corrupt_skipped": self.corrupt_skipped,
            "write_errors": self.write_errors,
            "unjournaled": self.unjournaled,
            "failing": self.health.failing(self.what),
        }


class ConsoleJournal(BufferJournal):
    """The console buffer's journal (C{console.jsonl}): a L{BufferJournal} for C{console}."""

    def __init__(self, state_dir: Path | str, clock: IReactorTime,
                 snapshot: Callable[[], list[bytes]], **kwargs: Any) -> None:
        kwargs.setdefault("buffer", "console")
        super().__init__(state_dir, clock, snapshot, **kwargs)


"""
Persistence of the console buffer: an append-only JSON-lines journal, compacted off the request path.

The file is ``<state_dir>/console.jsonl``: one compact JSON object per line, oldest first (mode
0600; the state dir is created 0700). It is what the telemetry store kept, in the order it kept it:

 - L{ConsoleJournal.append} (called by L{gasoline.core.store.TelemetryStore.add} for every batch)
   hands the batch's already-encoded lines to a buffered file object in one ``write`` call. Nothing
   is ``fsync``ed per request; a timer flushes the buffer at least every second, and stopping the
   service flushes, syncs and closes the file.
 - L{ConsoleJournal.cleared} truncates the file (``DELETE /logs``, ``/clear``).
 - L{ConsoleJournal.load} reads the newest C{max_entries} good lines at start-up, reading the file
   backwards in blocks, skipping (counting and logging) corrupt lines and a last line cut short by a
   crash. It is a blocking read, called once by C{app.build()} before the reactor runs; that is the
   only blocking file access, and it is acceptable there only.
 - Compaction keeps the file from growing without bound, without ever rewriting it on the request
   path: a timer (every 5 s by default; the check is two comparisons) checks whether the file
   holds more than twice C{max_entries} lines or more than a byte bound; if so it takes a
   snapshot of the entries the ring
   buffer still retains (a cheap list copy of C{bytes} references, on the reactor), writes them to
   ``console.jsonl.compact`` in a thread, then, back on the reactor, appends whatever arrived in
   the meantime, atomically renames the temporary file over the journal and reopens it for
   appending.

The thread runner is injectable: C{run_in_thread(f, *args) -> Deferred}. L{thread_runner} gives
the reactor's thread pool when the clock is a real reactor and L{run_synchronously} otherwise, so
unit tests on C{task.Clock} run compaction synchronously and deterministically.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Sequence

import orjson
from twisted.application.internet import TimerService
from twisted.application.service import IService, MultiService
from twisted.internet import defer
from twisted.internet.interfaces import IReactorThreads, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

log = Logger()

FILENAME = "console.jsonl"
COMPACT_SUFFIX = ".compact"
MiB = 1024 * 1024
#: Default byte bound that triggers a compaction (twice the console buffer's default byte budget).
DEFAULT_MAX_FILE_BYTES = 128 * MiB
#: Size of the in-process write buffer; bigger batches go straight to the OS.
DEFAULT_BUFFER_SIZE = 256 * 1024
_READ_BLOCK = 1 * MiB
_WRITE_CHUNK = 4096  # lines joined per write when compacting

ThreadRunner = Callable[..., "defer.Deferred[Any]"]


def run_synchronously(f: Callable[..., Any], *args: Any, **kwargs: Any) -> defer.Deferred[Any]:
    """A thread runner that runs C{f} right here (tests, and clocks without a thread pool)."""
    return defer.maybeDeferred(f, *args, **kwargs)


def thread_runner(reactor: Any) -> ThreadRunner:
    """Run in C{reactor}'s thread pool when it has one, else synchronously (a C{task.Clock})."""
    if not IReactorThreads.providedBy(reactor):
        return run_synchronously
    from twisted.internet.threads import deferToThreadPool  # noqa: PLC0415

    def run(f: Callable[..., Any], *args: Any, **kwargs: Any) -> defer.Deferred[Any]:
        return deferToThreadPool(reactor, reactor.getThreadPool(), f, *args, **kwargs)

    return run


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_CLOEXEC, 0o600)


def _is_entry(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


def _segments_newest_first(f: BinaryIO, size: int, block: int = _READ_BLOCK) -> Iterator[bytes]:
    """The file's newline-separated segments, last first, reading backwards in blocks.

    The first segment yielded is what follows the last newline: C{b""} for a well-formed file, a
    partial line if a write was cut short.
    """
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


def _write_snapshot(path: str, lines: Sequence[bytes]) -> int:
    """Write C{lines} (newline-terminated) to a fresh private file, sync it; return bytes written.

    Runs in a thread: it touches nothing but its arguments and the file.
    """
    written = 0
    try:
        with open(path, "wb", buffering=MiB, opener=_private_opener) as f:
            os.fchmod(f.fileno(), 0o600)
            for i in range(0, len(lines), _WRITE_CHUNK):
                data = b"\n".join(lines[i : i + _WRITE_CHUNK]) + b"\n"
                f.write(data)
                written += len(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink_quietly(Path(path))
        raise
    return written


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        log.failure("could not remove {path}", path=str(path))


@implementer(IService)
class ConsoleJournal(MultiService):
    """The console buffer's append-only journal (implements the store's C{Journal} protocol).

    @param state_dir: directory of the journal file (created 0700 when missing).
    @param clock: drives the flush and compaction timers.
    @param snapshot: returns the entries the console ring buffer retains right now, oldest first
        (a list copy of C{bytes}); compaction writes exactly these.
    @param max_entries: the console buffer's capacity: L{load} returns at most this many entries,
        and compaction is due once the file holds more than twice as many lines.
    @param max_file_bytes: compaction is also due once the file is larger than this.
    @param run_in_thread: C{run_in_thread(f, *args) -> Deferred}; see L{thread_runner}.

    @ivar lines: lines the file holds (as far as this process knows; approximate after L{load}).
    @ivar size: bytes the file holds, counting bytes still in the write buffer.
    """

    name = "console-journal"

    def __init__(
        self,
        state_dir: Path | str,
        clock: IReactorTime,
        snapshot: Callable[[], list[bytes]],
        *,
        max_entries: int,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        flush_interval: float = 1.0,
        compact_interval: float = 5.0,
        run_in_thread: ThreadRunner = run_synchronously,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
    ) -> None:
        super().__init__()
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / FILENAME
        self.compact_path = self.state_dir / (FILENAME + COMPACT_SUFFIX)
        self.max_entries = max_entries
        self.max_file_bytes = max_file_bytes
        self._clock = clock
        self._snapshot = snapshot
        self._run_in_thread = run_in_thread
        self._buffer_size = buffer_size
        self._file: BinaryIO | None = None
        self.lines = 0
        self.size = 0
        self.corrupt_skipped = 0
        self.compactions = 0
        self.write_errors = 0
        #: Entries handed to L{append} while the file was not open (before start, after stop).
        self.unjournaled = 0
        self._failing = False
        self._byte_threshold = max_file_bytes
        self._needs_compaction = False
        self._compacting: defer.Deferred[Any] | None = None
        self._waiters: list[defer.Deferred[None]] = []
        #: Lines appended since the running compaction took its snapshot (None: not compacting).
        self._during: list[bytes] | None = None
        for period, fn, what in (
            (flush_interval, self.flush, "flush"),
            (compact_interval, self.maybe_compact, "compaction check"),
        ):
            timer = TimerService(period, self._guarded, fn, what)
            timer.clock = clock
            timer.setServiceParent(self)

    # -- start-up ---------------------------------------------------------------------------

    def load(self, max_entries: int | None = None) -> list[bytes]:
        """The newest C{max_entries} good lines, oldest first. Blocking: call only at start-up.

        Corrupt lines (not a JSON object) and a last line without its newline are skipped, counted
        in C{corrupt_skipped} and logged. A file holding more than it returns (or anything
        corrupt) is compacted at the first compaction check.
        """
        n = self.max_entries if max_entries is None else max_entries
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return []
        except OSError:
            log.failure("console journal {path}: cannot read; starting empty", path=str(self.path))
            return []
        kept: list[bytes] = []
        corrupt = 0
        older = False
        with f:
            size = os.fstat(f.fileno()).st_size
            segments = _segments_newest_first(f, size)
            if next(segments):
                corrupt += 1  # the last write was cut short
            for line in segments:
                if not line.strip():
                    continue
                if len(kept) >= n:
                    older = True
                    break
                if _is_entry(line):
                    kept.append(line)
                else:
                    corrupt += 1
        kept.reverse()
        self.corrupt_skipped += corrupt
        self.size = size
        self.lines = len(kept) + corrupt + (1 if older else 0)
        self._needs_compaction = older or corrupt > 0
        if corrupt:
            log.warn(
                "console journal {path}: skipped {corrupt} corrupt or partial lines",
                path=str(self.path),
                corrupt=corrupt,
            )
        log.info(
            "console journal {path}: restored {count} entries", path=str(self.path), count=len(kept)
        )
        return kept

    def startService(self) -> None:
        try:
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            # A compaction interrupted by a crash leaves its temporary file behind; the journal
            # itself is intact (the rename is atomic), so the leftover is simply dropped.
            _unlink_quietly(self.compact_path)
            self._drop_partial_tail()
            self._open()
        except OSError:
            # The daemon still serves everyone; it just cannot remember the console buffer.
            log.failure(
                "console journal {path}: cannot open; console entries will not be persisted",
                path=str(self.path),
            )
        super().startService()  # starts the flush and compaction timers

    def _drop_partial_tail(self) -> None:
        """Cut a last line without its newline, so the next append starts on a line of its own."""
        try:
            f = open(self.path, "r+b")
        except FileNotFoundError:
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            partial = next(_segments_newest_first(f, size))
            f.truncate(size - len(partial))
            log.warn(
                "console journal {path}: dropped a partial last line ({n} bytes)",
                path=str(self.path),
                n=len(partial),
            )

    def _open(self) -> None:
        f = open(self.path, "ab", buffering=self._buffer_size, opener=_private_opener)
        os.fchmod(f.fileno(), 0o600)
        self.size = os.fstat(f.fileno()).st_size
        self._file = f  # type: ignore[assignment]

    # -- the Journal protocol (called by the store on the reactor) --------------------------

    def append(self, encoded: Sequence[bytes], first_seq: int) -> None:
        """Append one batch of encoded entries in one buffered write; never raises."""
        if not encoded:
            return
        if self._during is not None:
            self._during.extend(encoded)
        if self._file is None:
            self.unjournaled += len(encoded)
            return
        data = b"\n".join(encoded) + b"\n"
        self.lines += len(encoded)
        self.size += len(data)
        try:
            self._file.write(data)
        except (OSError, ValueError):
            self._write_failed()
        else:
            self._write_ok()

    def cleared(self) -> None:
        """The console buffer was cleared: truncate the file (and drop a running compaction)."""
        self._during = None  # a running compaction's snapshot is stale now: it will be dropped
        self.lines = 0
        self.size = 0
        self._needs_compaction = False
        self._byte_threshold = self.max_file_bytes
        if self._file is not None:
            try:
                self._file.truncate(0)  # flushes the write buffer first; O_APPEND keeps appending
            except (OSError, ValueError):
                self._write_failed()

    # -- timers -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Hand buffered lines to the OS (no fsync). Runs every C{flush_interval} seconds."""
        if self._file is None:
            return
        try:
            self._file.flush()
        except (OSError, ValueError):
            self._write_failed()

    def compaction_due(self) -> bool:
        return (
            self._needs_compaction
            or self.lines > 2 * self.max_entries
            or self.size > self._byte_threshold
        )

    def maybe_compact(self) -> defer.Deferred[None] | None:
        """Start a compaction if one is due and none is running (the compaction timer's job)."""
        if self._file is None or self._compacting is not None or not self.compaction_due():
            return None
        return self.compact()

    def compact(self) -> defer.Deferred[None]:
        """Rewrite the journal as the retained entries, off the reactor; fires when done.

        A failure is logged and leaves the journal as it was; the returned Deferred never fails.
        """
        if self._compacting is not None or self._file is None:
            return self._wait()
        snapshot = self._snapshot()
        self._during = []
        started = self._clock.seconds()
        d = self._run_in_thread(_write_snapshot, str(self.compact_path), snapshot)
        self._compacting = d
        d.addCallback(self._install_compacted, len(snapshot), started)
        d.addErrback(self._compaction_failed)
        d.addBoth(self._compaction_done)
        return self._wait()

    def _install_compacted(self, written: int, count: int, started: float) -> None:
        during, self._during = self._during, None
        if during is None or self._file is None:
            # Cleared while compacting: the truncated journal is right, the snapshot is stale.
            _unlink_quietly(self.compact_path)
            return
        tail = b"\n".join(during) + b"\n" if during else b""
        if tail:
            # Only what arrived while the thread wrote the snapshot: small and bounded.
            with open(self.compact_path, "ab") as f:
                f.write(tail)
        old, self._file = self._file, None
        try:
            old.close()
        except OSError:
            pass  # its lines are all in the compacted file
        try:
            os.replace(self.compact_path, self.path)
        finally:
            self._open()
        self.lines = count + len(during)
        self.size = written + len(tail)
        # Never chase a bound the retained entries alone exceed (one huge entry, say).
        self._byte_threshold = max(self.max_file_bytes, 2 * self.size)
        self._needs_compaction = False
        self.compactions += 1
        log.info(
            "console journal {path}: compacted to {lines} lines ({size} bytes) in {took:.3f}s",
            path=str(self.path),
            lines=self.lines,
            size=self.size,
            took=self._clock.seconds() - started,
        )

    def _compaction_failed(self, failure: Failure) -> None:
        self._during = None
        _unlink_quietly(self.compact_path)
        if self._file is None:
            # _install_compacted failed between closing and reopening: reopen what is there.
            try:
                self._open()
            except OSError:
                log.failure("console journal {path}: cannot reopen", path=str(self.path))
        log.failure("console journal {path}: compaction failed", failure, path=str(self.path))

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
            log.failure("console journal {what} failed", what=what)

    # -- shutdown -------------------------------------------------------------------------------

    def stopService(self) -> defer.Deferred[None]:
        """Stop the timers, let a running compaction finish, then flush, sync and close."""
        d = defer.maybeDeferred(super().stopService)
        d.addCallback(lambda _: self._wait())
        d.addCallback(lambda _: self._close())
        return d

    def _close(self) -> None:
        f, self._file = self._file, None
        if f is None:
            return
        try:
            f.flush()
            os.fsync(f.fileno())
        except (OSError, ValueError):
            self._write_failed()
        finally:
            try:
                f.close()
            except OSError:
                pass

    # -- health -----------------------------------------------------------------------------------

    def _write_failed(self) -> None:
        self.write_errors += 1
        # The file may now lack lines or end in a partial one: rewrite it from the ring.
        self._needs_compaction = True
        if not self._failing:
            self._failing = True
            log.failure("console journal {path}: write failed (ingest goes on)", path=str(self.path))

    def _write_ok(self) -> None:
        if self._failing:
            self._failing = False
            log.info("console journal {path}: writing again", path=str(self.path))

    def stats(self) -> dict[str, Any]:
        """For ``/health``: the file, its size and line count, and what went wrong."""
        return {
            "path": str(self.path),
            "size": self.size,
            "lines": self.lines,
            "compactions": self.compactions,
            "compacting": self._compacting is not None,
            "corrupt_skipped": self.corrupt_skipped,
            "write_errors": self.write_errors,
            "unjournaled": self.unjournaled,
        }

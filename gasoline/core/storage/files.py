"""
Private files in the state dir: the primitives every write goes through, and disk health.

Everything the daemon writes to its state dir goes through this module:

 - L{write_atomic} (a small document: write a private temporary file, then rename it over the
   old one), L{write_new} (a file that must not exist yet, e.g. a screenshot) and L{open_private}
   (the one place files are opened for writing). All of them refuse a symbolic link where the file
   should be (C{O_NOFOLLOW}; never followed, never C{chmod}-ed), create files 0600 and put an
   existing file back to 0600 through its descriptor, never through its path.
 - L{prepare_state_dir} creates the state dir 0700 and warns when an existing one is writable by
   the group or by everyone.
 - L{DiskHealth} is told about every write that fails and every one that works again: it logs a
   failing write once (then again with a doubling back-off, with the count, never a traceback per
   tick), remembers what is failing for C{configure doctor}, and logs the recovery.

The thread runner is injectable: C{run_in_thread(f, *args) -> Deferred}. L{thread_runner} gives
the reactor's thread pool when the clock is a real reactor and L{run_synchronously} otherwise, so
unit tests on C{task.Clock} run file work (journal compaction and syncs, artefacts) synchronously
and deterministically.

The buffers' journals are in L{gasoline.core.storage.journal}; L{gasoline.core.storage.persist} wires them.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any, Callable

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IReactorThreads, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

from gasoline.common import make_private_dir, open_private

log = Logger()

#: First back-off (seconds) between two log reports of the same failing write; it doubles up to
#: L{MAX_REPORT_INTERVAL}.
FIRST_REPORT_INTERVAL = 60.0
MAX_REPORT_INTERVAL = 3600.0

ThreadRunner = Callable[..., "defer.Deferred[Any]"]


def run_synchronously(f: Callable[..., Any], *args: Any, **kwargs: Any) -> defer.Deferred[Any]:
    """A thread runner that runs C{f} right here (tests, and clocks without a thread pool)."""
    return defer.maybeDeferred(f, *args, **kwargs)


def thread_runner(reactor: Any) -> ThreadRunner:
    """Run in C{reactor}'s thread pool when it has one, else synchronously (a C{task.Clock})."""
    if not IReactorThreads.providedBy(reactor):
        return run_synchronously
    def run(f: Callable[..., Any], *args: Any, **kwargs: Any) -> defer.Deferred[Any]:
        return deferToThreadPool(reactor, reactor.getThreadPool(), f, *args, **kwargs)

    return run


# -- private files ------------------------------------------------------------------------------


def describe(error: BaseException) -> str:
    """A one-line reason for a failed file operation ("No space left on device")."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of C{data} to C{fd}, however many C{write(2)} calls it takes."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:  # pragma: no cover - a regular file never returns 0 for a non-empty write
            raise OSError(errno.EIO, "short write")
        view = view[n:]


def unlink_quietly(path: Path | str) -> None:
    """Remove C{path} if it is there; a failure is logged, never raised."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warn("could not remove {path}: {why}", path=str(path), why=describe(e))


def write_atomic(path: Path | str, data: bytes, *, fsync: bool = False) -> None:
    """Replace C{path} with C{data} atomically: a private temporary file, then a rename.

    The temporary file is C{.<name>.tmp} beside C{path} (a leftover is removed first; it is
    created C{O_EXCL}, so a link planted there is not followed either). A symbolic link at C{path}
    is refused. With C{fsync} the data is synced before the rename. Raises C{OSError} (the old
    file is then untouched and the temporary file removed).
    """
    path = Path(path)
    if path.is_symlink():
        raise OSError(errno.ELOOP, "is a symbolic link; refusing to replace it", str(path))
    tmp = path.with_name(f".{path.name}.tmp")
    unlink_quietly(tmp)
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        try:
            write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise


def write_new(path: Path | str, data: bytes) -> None:
    """Create C{path} (which must not exist: C{FileExistsError}) holding C{data}, mode 0600.

    All or nothing: when the write fails (disk full), the file is removed before the error is
    raised, so no empty or truncated file is left behind.
    """
    fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
    except BaseException:
        unlink_quietly(path)
        raise


class StateFileError(Exception):
    """A state file the daemon cannot start with (its identity, the pinned extension, the client
    key): C{str()} is one line naming the file and the fix; the start stops with it."""


def set_aside(path: Path | str, why: str, lost: str) -> str:
    """A state file the daemon can do without is not usable (C{why}: "not valid JSON", ...):
    it is moved to C{<name>.corrupt} beside it (kept for the user; an older one is replaced)
    and one line is logged naming it, what the daemon goes on without (C{lost}) and the fix.
    Returns the line. Blocking: a rename (start-up, or a client's first request)."""
    path = Path(path)
    aside = path.with_name(path.name + ".corrupt")
    try:
        os.replace(path, aside)
        moved = f"moved to {aside}"
    except OSError as e:
        moved = f"could not be moved aside ({describe(e)}); remove it"
    line = (f"state file {path} is not usable ({why}): {moved}; the daemon goes on without "
            f"{lost}. Restore it from there if you need it, else remove {aside.name}")
    log.warn("{line}", line=line)
    return line


def unreadable(path: Path | str, why: str, lost: str) -> str:
    """A state file the daemon can do without cannot be read (a symbolic link, not a regular
    file, no permission): one line naming it, what the daemon goes on without and the fix; the
    file is left where it is (a link is never followed, moved or written through). Returns the
    line."""
    line = (f"state file {path} cannot be read ({why}): the daemon goes on without {lost}; "
            "remove it, or fix its permissions")
    log.warn("{line}", line=line)
    return line


def prepare_state_dir(path: Path | str) -> list[str]:
    """Create the state dir 0700 if missing; return warnings about an existing one (logged too).

    An existing directory writable by its group or by everyone lets other local users replace the
    daemon's files: the daemon still starts (refusing would break shared setups), but says so here,
    in the log and in C{configure doctor}.
    """
    path = Path(path)
    warnings: list[str] = []
    try:
        make_private_dir(path)
        info = os.stat(path)
    except OSError as e:
        warnings.append(f"state dir {path}: {describe(e)}")
    else:
        if info.st_mode & 0o022:
            warnings.append(
                f"state dir {path} is writable by "
                f"{'everyone' if info.st_mode & 0o002 else 'its group'} "
                f"(mode {stat.S_IMODE(info.st_mode):04o}): other local users could replace the "
                f"daemon's files; run chmod 700 {path}"
            )
    for w in warnings:
        log.warn("{warning}", warning=w)
    return warnings


# -- disk health --------------------------------------------------------------------------------


@attrs.define
class _Failing:
    path: str
    error: str
    since: float
    failures: int = 1
    reported: int = 1
    next_report: float = 0.0
    interval: float = FIRST_REPORT_INTERVAL

    def again(self, path: str, why: str, now: float) -> bool:
        """One more failed write (to C{path}, because C{why}); true when it is time to report
        it again (the next report then comes twice as late, at most L{MAX_REPORT_INTERVAL})."""
        self.failures += 1
        self.error, self.path = why, path
        if now < self.next_report:
            return False
        self.reported = self.failures
        self.interval = min(self.interval * 2, MAX_REPORT_INTERVAL)
        self.next_report = now + self.interval
        return True


class DiskHealth:
    """What is failing to reach the disk right now, logged once per run with a back-off.

    Components call L{failed} for every failed write and L{succeeded} after every one that worked
    (cheap: a dict lookup). The first failure of a C{what} is logged (one line, no traceback); later
    ones only after a back-off that doubles from L{FIRST_REPORT_INTERVAL} up to
    L{MAX_REPORT_INTERVAL}, with how many failed meanwhile; the recovery is logged once.

    @ivar warnings: lasting warnings about the state dir (L{prepare_state_dir}).
    """

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._failing: dict[str, _Failing] = {}
        self.warnings: list[str] = []

    def warn(self, warnings: list[str]) -> None:
        """The lasting warnings about the state dir (L{prepare_state_dir}'s), shown by
        C{configure doctor} while the daemon runs."""
        self.warnings = list(warnings)

    def failed(self, what: str, path: Path | str, error: BaseException) -> str:
        """Record a failed write of C{what}; return the sentence to show the caller."""
        now = self._clock.seconds()
        why = describe(error)
        message = f"{what}: could not write {path}: {why}"
        f = self._failing.get(what)
        if f is None:
            f = self._failing[what] = _Failing(str(path), why, now,
                                               next_report=now + FIRST_REPORT_INTERVAL)
            log.error("{message} (while this lasts it is reported again after {every:.0f} s, "
                      "then half as often each time)", message=message, every=FIRST_REPORT_INTERVAL)
            return message
        if f.again(str(path), why, now):
            log.error("{message} (still failing: {n} failures since {since:.0f} s ago)",
                      message=message, n=f.failures, since=now - f.since)
        return message

    def succeeded(self, what: str) -> None:
        if self._failing:
            f = self._failing.pop(what, None)
            if f is not None:
                log.info("{what}: writing to {path} works again (after {n} failed writes)",
                         what=what, path=f.path, n=f.failures)

    def failing(self, what: str) -> str | None:
        f = self._failing.get(what)
        return None if f is None else f"{what}: could not write {f.path}: {f.error}"

    def problems(self) -> list[dict[str, Any]]:
        """For C{configure doctor} and C{/health}: every write failing now, oldest first."""
        now = self._clock.seconds()
        return [
            {"what": what, "path": f.path, "error": f.error, "failures": f.failures,
             "failing_for_seconds": round(now - f.since, 3)}
            for what, f in sorted(self._failing.items(), key=lambda kv: kv[1].since)
        ]


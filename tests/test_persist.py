"""The console journal: append, flush timer, reload, corrupt lines, compaction, modes, shutdown."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import orjson
import pytest
import pytest_twisted
from twisted.application.service import IService
from twisted.internet import defer, task
from twisted.internet.threads import deferToThreadPool
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface.verify import verifyObject

from gasoline.app import Config, build
from gasoline.core.storage.files import run_synchronously, thread_runner
from gasoline.core.storage.journal import FILENAME, ConsoleJournal
from gasoline.core.storage.ring import RingBuffer
from gasoline.core.storage.store import CONSOLE, BufferSpec, TelemetryStore


def entry(i: int) -> dict:
    return {"ts": f"2026-01-01T00:00:{i % 60:02d}Z", "level": "error", "message": f"boom {i}",
            "type": "console", "url": "http://localhost:3000/", "tabId": 7}


def enc(i: int) -> bytes:
    return orjson.dumps(entry(i))


def messages(lines) -> list[str]:
    return [orjson.loads(b)["message"] for b in lines]


def file_lines(path: Path) -> list[bytes]:
    """The entry lines of a journal (without its ``#seq`` markers)."""
    return [b for b in path.read_bytes().splitlines() if not b.startswith(b"#")]


class Rig:
    """A journal wired to a real TelemetryStore on a Clock, with a controllable thread runner."""

    def __init__(self, state_dir: Path, max_entries: int = 10, runner=run_synchronously,
                 **kwargs) -> None:
        self.clock = task.Clock()
        self.store = TelemetryStore(self.clock, {CONSOLE: BufferSpec(max_entries, 0)})
        ring = self.store.buffers[CONSOLE]
        self.journal = ConsoleJournal(state_dir, self.clock, lambda: list(ring),
                                      max_entries=max_entries, run_in_thread=runner, **kwargs)

    def restore_and_start(self) -> list[bytes]:
        loaded = self.journal.load()
        self.store.restore(CONSOLE, loaded)
        self.store.journals[CONSOLE] = self.journal
        self.journal.startService()
        return loaded

    def add(self, start: int, stop: int) -> None:
        self.store.add(CONSOLE, [entry(i) for i in range(start, stop)])

    def stop(self) -> None:
        d = self.journal.stopService()
        results: list = []
        d.addBoth(results.append)
        assert results == [None]
        assert self.clock.getDelayedCalls() == []


class ManualRunner:
    """Runs thread work when the test says so, to put events 'during' a compaction."""

    def __init__(self) -> None:
        self.queued: list = []

    def __call__(self, f, *args):
        d: defer.Deferred = defer.Deferred()
        self.queued.append((f, args, d))
        return d

    def run_all(self) -> None:
        queued, self.queued = self.queued, []
        for f, args, d in queued:
            try:
                result = f(*args)
            except Exception:
                d.errback()
            else:
                d.callback(result)


def test_console_journal_provides_iservice(tmp_path):
    rig = Rig(tmp_path)
    assert verifyObject(IService, rig.journal)


def test_each_batch_is_in_the_file_when_append_returns_written_before_the_ack(tmp_path):
    rig = Rig(tmp_path, max_entries=100)
    rig.restore_and_start()
    rig.add(0, 5)
    path = tmp_path / FILENAME
    # No timer tick needed: the batch was handed to the OS before store.add returned (today's
    # buffered journal left the file empty until the next flush tick).
    assert messages(file_lines(path)) == [f"boom {i}" for i in range(5)]
    rig.add(5, 8)
    assert messages(file_lines(path)) == [f"boom {i}" for i in range(8)]
    assert path.read_bytes().startswith(b"#seq 0 5\n")
    assert b"#seq 5 3\n" in path.read_bytes()
    assert rig.journal.lines == 8
    assert rig.journal.size == path.stat().st_size
    rig.stop()


def test_each_batch_is_one_write_call(tmp_path, monkeypatch):
    rig = Rig(tmp_path, max_entries=100)
    rig.restore_and_start()
    writes: list[bytes] = []
    real_write = os.write

    def spy(fd, data):
        writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", spy)
    rig.add(0, 50)
    monkeypatch.undo()
    assert len(writes) == 1
    assert writes[0].count(b"\n") == 51  # the marker and 50 entries
    rig.stop()


def test_written_journal_is_fsynced_by_the_next_sync_tick_in_the_thread_runner(tmp_path):
    calls: list = []

    def runner(f, *args):
        calls.append(f.__name__)
        return run_synchronously(f, *args)

    rig = Rig(tmp_path, max_entries=100, runner=runner)
    rig.restore_and_start()
    rig.clock.advance(1.0)
    assert calls == []  # nothing written: nothing to sync
    rig.add(0, 3)
    rig.clock.advance(1.0)
    assert calls == ["_fsync_dup"]
    assert rig.journal.syncs == 1
    rig.clock.advance(1.0)
    assert calls == ["_fsync_dup"]
    rig.stop()


def test_state_dir_is_created_0700_and_file_is_0600(tmp_path):
    state = tmp_path / "new" / "state"
    rig = Rig(state)
    rig.restore_and_start()
    rig.add(0, 1)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / FILENAME).stat().st_mode) == 0o600
    rig.stop()


def test_existing_file_with_loose_mode_is_made_0600(tmp_path):
    (tmp_path / FILENAME).write_bytes(enc(1) + b"\n")
    os.chmod(tmp_path / FILENAME, 0o644)
    rig = Rig(tmp_path)
    rig.restore_and_start()
    assert stat.S_IMODE((tmp_path / FILENAME).stat().st_mode) == 0o600
    rig.stop()


def test_stop_flushes_and_closes(tmp_path):
    rig = Rig(tmp_path, max_entries=100)
    rig.restore_and_start()
    rig.add(0, 3)
    rig.stop()
    assert messages(file_lines(tmp_path / FILENAME)) == ["boom 0", "boom 1", "boom 2"]
    assert rig.journal._fd is None


def test_restart_reloads_the_newest_max_entries(tmp_path):
    rig = Rig(tmp_path, max_entries=1000)
    rig.restore_and_start()
    rig.add(0, 25)
    rig.stop()
    again = Rig(tmp_path, max_entries=10)
    loaded = again.restore_and_start()
    assert messages(loaded) == [f"boom {i}" for i in range(15, 25)]
    assert messages(list(again.store.buffers[CONSOLE])) == [f"boom {i}" for i in range(15, 25)]
    again.stop()


def test_load_reads_backwards_across_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr("gasoline.core.storage.journal._READ_BLOCK", 37)  # lines straddle blocks
    (tmp_path / FILENAME).write_bytes(b"".join(enc(i) + b"\n" for i in range(40)))
    journal = Rig(tmp_path, max_entries=7).journal
    assert messages(journal.load()) == [f"boom {i}" for i in range(33, 40)]


def test_load_of_missing_file_is_empty_and_creates_nothing(tmp_path):
    state = tmp_path / "absent"
    journal = Rig(state).journal
    assert journal.load() == []
    assert not state.exists()


def test_corrupt_and_partial_lines_are_skipped_and_counted(tmp_path):
    good = [enc(i) for i in range(6)]
    body = (good[0] + b"\n" + b"not json\n" + good[1] + b"\n" + b"[1, 2]\n" + b"\n"
            + good[2] + b"\n" + b'{"cut": "short' + b"\n" + good[3] + b"\n" + good[4] + b"\n"
            + good[5][:20])  # the last write was cut short by a crash
    (tmp_path / FILENAME).write_bytes(body)
    rig = Rig(tmp_path, max_entries=100)
    loaded = rig.restore_and_start()
    assert messages(loaded) == [f"boom {i}" for i in range(5)]
    assert rig.journal.corrupt_skipped == 4
    # A file with corrupt lines is compacted at the first check: only good lines remain.
    assert rig.journal.compactions == 1
    rig.add(10, 11)
    rig.stop()
    again = Rig(tmp_path, max_entries=100)
    assert messages(again.journal.load()) == [f"boom {i}" for i in range(5)] + ["boom 10"]
    assert again.journal.corrupt_skipped == 0


def test_partial_last_line_is_cut_before_appending(tmp_path):
    (tmp_path / FILENAME).write_bytes(enc(0) + b"\n" + b"not json\n" + enc(1)[:20])
    # No compaction during this test: the append must land on a fresh line by itself.
    rig = Rig(tmp_path, max_entries=100, compact_interval=1000.0)
    rig.journal.startService()
    rig.journal.compact = lambda: defer.succeed(None)  # type: ignore[method-assign]
    rig.store.journals[CONSOLE] = rig.journal
    rig.add(10, 11)
    rig.stop()
    lines = file_lines(tmp_path / FILENAME)
    assert lines[0] == enc(0) and lines[1] == b"not json"
    assert messages(lines[2:]) == ["boom 10"]


def test_a_complete_object_without_its_newline_is_still_a_cut_write(tmp_path):
    (tmp_path / FILENAME).write_bytes(enc(0) + b"\n" + enc(1))
    journal = Rig(tmp_path).journal
    assert messages(journal.load()) == ["boom 0"]
    assert journal.corrupt_skipped == 1


def test_newest_n_counts_only_good_lines(tmp_path):
    body = enc(0) + b"\n" + enc(1) + b"\n" + b"garbage\n" + enc(2) + b"\n"
    (tmp_path / FILENAME).write_bytes(body)
    journal = Rig(tmp_path, max_entries=2).journal
    assert messages(journal.load()) == ["boom 1", "boom 2"]


def test_cleared_truncates_the_file(tmp_path):
    rig = Rig(tmp_path, max_entries=100)
    rig.restore_and_start()
    rig.add(0, 5)
    rig.clock.advance(1.0)
    rig.store.clear(CONSOLE)
    assert (tmp_path / FILENAME).read_bytes() == b""
    assert rig.journal.lines == 0 and rig.journal.size == 0
    rig.add(5, 7)
    rig.stop()
    assert messages(file_lines(tmp_path / FILENAME)) == ["boom 5", "boom 6"]


def test_compaction_is_not_due_below_twice_max_entries(tmp_path):
    rig = Rig(tmp_path, max_entries=10)
    rig.restore_and_start()
    rig.add(0, 20)
    rig.clock.pump([1.0] * 12)  # two compaction checks
    assert rig.journal.compactions == 0
    assert len(file_lines(tmp_path / FILENAME)) == 20
    rig.stop()


def test_compaction_timer_keeps_the_newest_retained_entries(tmp_path):
    rig = Rig(tmp_path, max_entries=10)
    rig.restore_and_start()
    for start in range(0, 25, 5):
        rig.add(start, start + 5)
    rig.clock.pump([1.0] * 4)
    assert rig.journal.compactions == 0  # due, but only the timer compacts
    rig.clock.advance(1.0)  # the 5 s compaction check
    assert rig.journal.compactions == 1
    assert messages(file_lines(tmp_path / FILENAME)) == [f"boom {i}" for i in range(15, 25)]
    assert rig.journal.lines == 10
    assert rig.journal.size == (tmp_path / FILENAME).stat().st_size
    assert not (tmp_path / (FILENAME + ".compact")).exists()
    assert stat.S_IMODE((tmp_path / FILENAME).stat().st_mode) == 0o600
    # Appends go to the new file.
    rig.add(25, 27)
    rig.stop()
    assert messages(file_lines(tmp_path / FILENAME))[-3:] == ["boom 24", "boom 25", "boom 26"]


def test_compaction_is_due_above_the_byte_bound(tmp_path):
    rig = Rig(tmp_path, max_entries=1000, max_file_bytes=2000)
    rig.restore_and_start()
    rig.add(0, 30)  # ~100 B each: over 2000 B, far below 2 x 1000 lines
    assert rig.journal.compaction_due()
    rig.clock.pump([1.0] * 5)
    assert rig.journal.compactions == 1
    # All 30 are still retained by the ring, so all 30 stay; the bound is raised, not chased.
    assert len(file_lines(tmp_path / FILENAME)) == 30
    assert not rig.journal.compaction_due()
    rig.stop()


def _over_the_cap(tmp_path):
    """A started rig whose journal holds 25 entries over a cap of 10, compactions run by hand:
    C{(rig, runner)}."""
    runner = ManualRunner()
    rig = Rig(tmp_path, max_entries=10, runner=runner)
    rig.restore_and_start()
    rig.add(0, 25)
    return rig, runner


def test_entries_arriving_during_compaction_are_kept(tmp_path):
    rig, runner = _over_the_cap(tmp_path)
    finished: list = []
    rig.journal.compact().addBoth(finished.append)
    assert finished == [] and len(runner.queued) == 1
    # Ingest goes on while the thread writes the snapshot of boom 15..24.
    rig.add(25, 28)
    rig.clock.advance(1.0)
    runner.run_all()
    assert finished == [None]
    expected = [f"boom {i}" for i in range(15, 28)]
    assert messages(file_lines(tmp_path / FILENAME)) == expected
    rig.add(28, 29)
    rig.stop()
    assert messages(Rig(tmp_path, max_entries=100).journal.load()) == expected + ["boom 28"]


def test_clear_during_compaction_wins(tmp_path):
    rig, runner = _over_the_cap(tmp_path)
    rig.journal.compact()
    rig.store.clear(CONSOLE)
    rig.add(100, 101)
    runner.run_all()
    rig.stop()
    assert messages(file_lines(tmp_path / FILENAME)) == ["boom 100"]
    assert not (tmp_path / (FILENAME + ".compact")).exists()
    assert rig.journal.compactions == 0


def test_failed_compaction_leaves_the_journal_intact(tmp_path):
    def failing(f, *args):
        return defer.fail(OSError("disk full"))

    rig = Rig(tmp_path, max_entries=10, runner=failing)
    rig.restore_and_start()
    rig.add(0, 25)
    finished: list = []
    rig.journal.compact().addBoth(finished.append)
    assert finished == [None]  # the returned Deferred does not fail
    rig.add(25, 26)
    rig.stop()
    assert len(file_lines(tmp_path / FILENAME)) == 26
    assert rig.journal.compactions == 0


def test_stop_waits_for_a_running_compaction(tmp_path):
    rig, runner = _over_the_cap(tmp_path)
    rig.journal.compact()
    stopped: list = []
    rig.journal.stopService().addBoth(stopped.append)
    assert stopped == [] and rig.journal._fd is not None
    runner.run_all()
    assert stopped == [None] and rig.journal._fd is None
    assert rig.clock.getDelayedCalls() == []
    assert messages(file_lines(tmp_path / FILENAME)) == [f"boom {i}" for i in range(15, 25)]


def test_leftover_compaction_temp_file_is_dropped_at_start(tmp_path):
    (tmp_path / FILENAME).write_bytes(enc(1) + b"\n")
    (tmp_path / (FILENAME + ".compact")).write_bytes(b"half written")
    rig = Rig(tmp_path)
    assert messages(rig.restore_and_start()) == ["boom 1"]
    assert not (tmp_path / (FILENAME + ".compact")).exists()
    rig.stop()


def test_oversized_file_is_compacted_at_the_first_check(tmp_path):
    (tmp_path / FILENAME).write_bytes(b"".join(enc(i) + b"\n" for i in range(50)))
    rig = Rig(tmp_path, max_entries=10)
    rig.restore_and_start()  # the compaction timer checks at once
    assert rig.journal.compactions == 1
    assert messages(file_lines(tmp_path / FILENAME)) == [f"boom {i}" for i in range(40, 50)]
    rig.stop()


def test_write_errors_are_counted_reported_and_do_not_break_ingest(tmp_path, monkeypatch):
    rig = Rig(tmp_path, max_entries=100)
    rig.restore_and_start()
    rig.add(0, 1)
    real_write = os.write

    def full(fd, data):
        real_write(fd, bytes(data)[:7])  # a partial write, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with capturedLogs() as events:
        added = rig.store.add(CONSOLE, [entry(1)])
        again = rig.store.add(CONSOLE, [entry(2)])
    monkeypatch.undo()
    assert (added.first, added.head) == (1, 2)  # in the ring all the same
    assert added.persist_error is not None and "No space left on device" in added.persist_error
    assert again.persist_error is not None
    assert rig.journal.write_errors == 2
    # Reported once (no traceback), not once per failed write.
    reports = [e for e in events if "could not write" in e.get("log_format", "")
               or "could not write" in str(e.get("message", ""))]
    assert len(reports) == 1 and "log_failure" not in reports[0]
    # The partial write was undone: the file still ends on a whole line.
    assert messages(file_lines(tmp_path / FILENAME)) == ["boom 0"]
    assert rig.store.add(CONSOLE, [entry(3)]).persist_error is None
    # The next compaction check repairs the file from the ring, lost entries included.
    assert rig.journal.compaction_due()
    rig.clock.pump([1.0] * 5)
    assert rig.journal.compactions == 1
    rig.stop()
    assert messages(file_lines(tmp_path / FILENAME)) == ["boom 0", "boom 1", "boom 2", "boom 3"]


def test_appends_before_start_are_counted_not_written(tmp_path):
    rig = Rig(tmp_path)
    rig.store.journals[CONSOLE] = rig.journal
    rig.add(0, 3)
    assert rig.journal.unjournaled == 3
    assert not (tmp_path / FILENAME).exists()


def test_unusable_state_dir_is_logged_and_ingest_goes_on(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state dir should be")
    rig = Rig(blocker)
    with capturedLogs() as events:
        assert rig.restore_and_start() == []
    assert any("could not write" in str(e.get("message", "")) for e in events)
    added = rig.store.add(CONSOLE, [entry(1)])
    assert (added.first, added.head) == (0, 1)
    # Kept in memory, and the caller is told it is not on disk.
    assert added.persist_error is not None and "could not write" in added.persist_error
    assert rig.journal.write_errors == 1
    rig.stop()


def test_thread_runner_is_synchronous_on_a_clock():
    assert thread_runner(task.Clock()) is run_synchronously


def test_app_build_restores_and_journals_the_console_buffer(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / FILENAME).write_bytes(b"".join(enc(i) + b"\n" for i in range(8)))
    clock = task.Clock()
    app = build(Config(state_dir=state, max_entries=5), clock)
    assert app.journal is app.store.journals[CONSOLE]
    assert app.journal.parent is app.services
    assert messages(list(app.store.buffers[CONSOLE])) == [f"boom {i}" for i in range(3, 8)]
    app.services.startService()
    app.store.add(CONSOLE, [entry(8)])
    stopped: list = []
    app.services.stopService().addBoth(stopped.append)
    assert len(stopped) == 1 and not isinstance(stopped[0], Failure)
    assert app.journal._fd is None
    assert messages(file_lines(state / FILENAME))[-1] == "boom 8"


def test_app_build_without_persist_has_no_journal(tmp_path):
    app = build(Config(state_dir=tmp_path, persist=False), task.Clock())
    assert app.journal is None
    assert CONSOLE not in app.store.journals
    assert not (tmp_path / FILENAME).exists()


@pytest.fixture
def threadpool():
    pool = ThreadPool(minthreads=1, maxthreads=1, name="test-journal")
    pool.start()
    yield pool
    pool.stop()


@pytest_twisted.ensureDeferred
async def test_compaction_in_a_real_thread_keeps_concurrent_appends(tmp_path, threadpool):
    from twisted.internet import reactor

    store = TelemetryStore(reactor, {CONSOLE: BufferSpec(2000, 0)})
    ring: RingBuffer[bytes] = store.buffers[CONSOLE]
    journal = ConsoleJournal(
        tmp_path, reactor, lambda: list(ring), max_entries=2000,
        run_in_thread=lambda f, *a: deferToThreadPool(reactor, threadpool, f, *a),
    )
    store.journals[CONSOLE] = journal
    journal.startService()
    try:
        store.add(CONSOLE, [entry(i) for i in range(5000)])
        done = journal.compact()
        assert not done.called  # the rewrite happens off the reactor thread
        store.add(CONSOLE, [entry(i) for i in range(5000, 5010)])
        await done
        assert journal.compactions == 1
    finally:
        await journal.stopService()
    got = messages(file_lines(tmp_path / FILENAME))
    assert got == [f"boom {i}" for i in range(3000, 5010)]


@pytest.mark.integration
def test_real_daemon_restores_and_compacts_its_journal_in_a_thread(tmp_path):
    from support import DaemonProcess

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / FILENAME).write_bytes(b"".join(enc(i) + b"\n" for i in range(30)) + b'{"cut')
    (state / FILENAME).chmod(0o644)
    daemon = DaemonProcess(state_dir=state, args=["--max-entries", "10"])
    daemon.start()
    try:
        # More than the 10 entries kept: compacted at the first check, off the reactor thread.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if len(file_lines(state / FILENAME)) == 10:
                break
            time.sleep(0.05)
    finally:
        daemon.stop()  # SIGTERM: twistd stops its services, then exits with the signal
    log = daemon.log()
    assert "Server Shut Down." in log
    assert "restored 10 entries" in log
    assert "compacted to 10 entries" in log
    assert messages(file_lines(state / FILENAME)) == [f"boom {i}" for i in range(20, 30)]
    assert stat.S_IMODE((state / FILENAME).stat().st_mode) == 0o600
    assert not (state / (FILENAME + ".compact")).exists()


def _http(daemon, method: str, path: str, body=None) -> tuple[int, dict]:
    import json
    import urllib.request

    from gasoline.testing import EXTENSION_HEADERS

    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(daemon.url + path, data=data, method=method,
                                 headers=EXTENSION_HEADERS)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


@pytest.mark.integration
def test_real_daemon_reloads_posted_console_entries_after_a_restart(tmp_path):
    from support import DaemonProcess

    state = tmp_path / "state"
    args = ["--max-entries", "30"]
    with DaemonProcess(state_dir=state, args=args) as daemon:
        for b in range(3):
            status, body = _http(daemon, "POST", "/logs", {"entries": [entry(b * 20 + i)
                                                                       for i in range(20)]})
            assert (status, body["received"]) == (200, 20)
    assert "Server Shut Down." in daemon.log()
    with DaemonProcess(state_dir=state, args=args) as daemon:
        _, health = _http(daemon, "GET", "/health")
        assert health["logs"]["entries"] == 30
        assert health["logs"]["log_file"] == str(state / FILENAME)
        _, snapshot = _http(daemon, "GET", "/snapshot")
        assert [e["message"] for e in snapshot["logs"]] == [f"boom {i}" for i in range(30, 60)]
        _, cleared = _http(daemon, "DELETE", "/logs")
        assert cleared == {"cleared": True}
        assert file_lines(state / FILENAME) == []  # only the marker of the cleared head
    assert "restored 30 entries" in daemon.log()
    with DaemonProcess(state_dir=state, args=args) as daemon:
        _, health = _http(daemon, "GET", "/health")
        assert health["logs"]["entries"] == 0


def test_sequence_numbers_continue_across_a_restart_so_saved_cursors_keep_their_meaning(tmp_path):
    from twisted.internet.task import Clock

    from gasoline.app import Config, build

    clock = Clock()
    first = build(Config(state_dir=tmp_path, persist=True, max_entries=100), clock)
    first.services.startService()
    first.store.add(CONSOLE, [{"level": "log", "message": f"m{i}"} for i in range(250)])
    head = first.store.buffers[CONSOLE].head
    assert head == 250
    clock.advance(5)
    first.services.stopService()
    assert orjson.loads((tmp_path / "sequence.json").read_bytes())[CONSOLE] == 250

    again = build(Config(state_dir=tmp_path, persist=True, max_entries=100), clock)
    ring = again.store.buffers[CONSOLE]
    # The newest 100 come back under their old numbers (150..249); numbering goes on from 250.
    assert (ring.tail, ring.head) == (150, 250)
    assert orjson.loads(ring.get(249))["message"] == "m249"
    # A client that had read up to 240 before the restart sees exactly what it had not read.
    unread = ring.read(240)
    assert [orjson.loads(b)["message"] for b in unread.items] == [f"m{i}" for i in range(240, 250)]
    again.store.add(CONSOLE, [{"level": "log", "message": "new"}])
    assert ring.head == 251


def test_a_missing_or_bad_sequence_file_numbers_from_zero(tmp_path):
    from twisted.internet.task import Clock

    from gasoline.app import Config, build

    (tmp_path / "sequence.json").write_text('{"console": "many"}')
    app = build(Config(state_dir=tmp_path, persist=True), Clock())
    assert app.store.buffers[CONSOLE].head == 0

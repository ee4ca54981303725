"""Durability: write-before-ack, kill -9,
every buffer surviving a restart with its sequence numbers, private state files that never follow a
symlink, and a full or read-only disk that every caller hears about."""

from __future__ import annotations

import errno
import http.client
import json
import os
import signal
import stat
import threading
from pathlib import Path

import orjson
import pytest
from twisted.internet.task import Clock
from twisted.logger import capturedLogs

from gasoline.app import Config, build
from gasoline.core.storage.files import (
    DiskHealth,
    open_private,
    prepare_state_dir,
    write_atomic,
    write_new,
)
from gasoline.core.storage.journal import DEFAULT_FSYNC_INTERVAL
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    EXTENSION_LOGS,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)
from gasoline.mcp import jsonrpc
from gasoline.testing import EXTENSION_HEADERS
from gasoline.testing import stub_request
from treq.testing import StubTreq
from support import DaemonProcess

URL = "http://127.0.0.1:7890"
PNG = "data:image/png;base64,iVBORw0KGgpmYWtlIGltYWdlIGJ5dGVz"

#: route, body field, buffer, one entry
ROUTES = [
    ("/logs", "entries", CONSOLE, lambda i: {"level": "log", "message": f"log {i}",
                                              "ts": "2026-11-26T01:00:00.000Z", "type": "console"}),
    ("/network-bodies", "bodies", NETWORK_BODIES,
     lambda i: {"url": f"http://app.test/api/{i}", "method": "GET", "status": 200,
                "response_body": "x" * 50}),
    ("/network-waterfall", "entries", WATERFALL,
     lambda i: {"url": f"http://app.test/asset/{i}.js", "duration": 12}),
    ("/websocket-events", "events", WEBSOCKET_EVENTS,
     lambda i: {"id": "ws-1", "event": "message", "direction": "incoming", "data": f"m{i}",
                "url": "wss://app.test/live"}),
    ("/enhanced-actions", "actions", ACTIONS,
     lambda i: {"type": "click", "selector": f"#b{i}", "timestamp": 1764118800000}),
]


def marker(entry: dict) -> str:
    return orjson.dumps(entry).decode()


def visible(lines) -> list[str]:
    return [orjson.loads(b).get("message") or orjson.loads(b).get("url")
            or orjson.loads(b).get("selector") or orjson.loads(b).get("data") for b in lines]


class Rig:
    """A daemon built on a Clock with persistence on, driven through StubTreq."""

    def __init__(self, state_dir: Path, clock: Clock | None = None, **config) -> None:
        self.clock = clock or Clock()
        self.state_dir = state_dir
        self.app = build(Config(state_dir=state_dir, persist=True, **config), self.clock)
        self.treq = StubTreq(self.app.resource)
        self.app.services.startService()

    def call(self, method, path, body=None, headers=EXTENSION_HEADERS):
        data = json.dumps(body) if body is not None else None
        r, b = stub_request(self.treq, method, URL + path, data=data, headers=headers)
        return r.code, json.loads(b), r

    def crash(self) -> None:
        """Forget the process without stopping its services (what kill -9 leaves behind): the
        journals' descriptors are closed, nothing is flushed or written at stop."""
        for j in self.app.store.journals.values():
            fd = getattr(j, "_fd", None)
            if fd is None and getattr(j, "_file", None) is not None:  # a buffered journal
                fd = j._file.fileno()  # closed under it: its buffer is lost, as in a crash
            if fd is not None:
                os.close(fd)
                j._fd = None


# -- write before the acknowledgement -----------------------------------------------------------


@pytest.mark.parametrize("route,field,buffer,make", ROUTES)
def test_every_buffer_is_on_disk_when_the_post_is_answered(tmp_path, route, field, buffer, make):
    rig = Rig(tmp_path)
    code, body, r = rig.call("POST", route, {field: [make(i) for i in range(3)]})
    assert code == 200 and "persisted" not in body
    # No timer has run: the batch reached the kernel before the answer was written.
    lines = (tmp_path / f"{buffer}.jsonl").read_bytes().splitlines()
    assert lines[0] == b"#seq 0 3"
    assert [orjson.loads(b) for b in lines[1:]] == [orjson.loads(x) for x in
                                                    rig.app.store.buffers[buffer]]


def test_restart_after_a_crash_keeps_every_buffer_and_every_sequence_number(tmp_path):
    rig = Rig(tmp_path)
    for route, field, buffer, make in ROUTES:
        for start in (0, 3):
            code, _, _ = rig.call("POST", route, {field: [make(i) for i in range(start, start + 3)]})
            assert code == 200
    rig.app.extension.add_extension_logs([{"level": "info", "message": "ext 1"}])
    heads = {name: ring.head for name, ring in rig.app.store.buffers.items()}
    before = {name: list(ring) for name, ring in rig.app.store.buffers.items()}
    # Crash before the next timer tick: sequence.json still holds the heads of start-up (today
    # the restart then numbered everything from 0, so saved cursors skipped reloaded entries).
    rig.crash()
    assert orjson.loads((tmp_path / "sequence.json").read_bytes())[CONSOLE] == 0
    again = build(Config(state_dir=tmp_path, persist=True), Clock())
    for name, ring in again.store.buffers.items():
        assert ring.head == heads[name], name
        assert list(ring) == before[name], name
    assert len(again.store.buffers[EXTENSION_LOGS]) == 1
    # The WebSocket connection view is rebuilt from the reloaded events.
    (conn,) = again.store.websocket_status()["active"]
    assert conn["id"] == "ws-1" and conn["messages"]["incoming"] == 6


def test_a_restart_never_moves_a_client_cursor_past_entries_it_has_not_read(tmp_path):
    rig = Rig(tmp_path)
    for i in range(10):
        rig.call("POST", "/logs", {"entries": [{"level": "log", "message": f"m{i}"}]})
    ring = rig.app.store.buffers[CONSOLE]
    cursor = ring.read(0, limit=4).next_cursor  # the client read m0..m3
    rig.clock.advance(2.5)  # sequence.json written now (head 10) ...
    for i in range(10, 15):  # ... and these arrive after it: it is stale when the daemon dies
        rig.call("POST", "/logs", {"entries": [{"level": "log", "message": f"m{i}"}]})
    rig.crash()
    again = build(Config(state_dir=tmp_path, persist=True), Clock())
    unread = again.store.read(CONSOLE, cursor)
    assert [e["message"] for e in unread.items] == [f"m{i}" for i in range(4, 15)]
    assert unread.missed == 0


def test_sequence_numbers_survive_compaction_and_clear(tmp_path):
    rig = Rig(tmp_path, max_entries=5)
    for i in range(4):
        rig.call("POST", "/logs", {"entries": [{"level": "log", "message": f"m{4 * i + k}"}
                                               for k in range(4)]})
    rig.clock.advance(5.0)  # compaction check: 16 lines > 2 x 5
    journal = rig.app.journal
    assert journal.compactions == 1
    rig.call("POST", "/logs", {"entries": [{"level": "log", "message": "m16"}]})
    rig.crash()
    again = Rig(tmp_path, clock=Clock(), max_entries=5)
    ring = again.app.store.buffers[CONSOLE]
    assert (ring.tail, ring.head) == (12, 17)
    assert orjson.loads(ring.get(16))["message"] == "m16"
    again.call("DELETE", "/logs")
    again.crash()
    third = build(Config(state_dir=tmp_path, persist=True, max_entries=5), Clock())
    ring = third.store.buffers[CONSOLE]
    assert (len(ring), ring.head) == (0, 17)


def test_a_journal_from_before_markers_still_loads_with_sequence_json(tmp_path):
    (tmp_path / "console.jsonl").write_bytes(
        b"".join(orjson.dumps({"level": "log", "message": f"m{i}"}) + b"\n" for i in range(6)))
    (tmp_path / "sequence.json").write_bytes(b'{"console":40}')
    app = build(Config(state_dir=tmp_path, persist=True), Clock())
    ring = app.store.buffers[CONSOLE]
    assert (ring.tail, ring.head) == (34, 40)
    assert orjson.loads(ring.get(39))["message"] == "m5"


def test_written_journals_are_fsynced_on_the_interval(tmp_path, monkeypatch):
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    rig = Rig(tmp_path)
    rig.call("POST", "/logs", {"entries": [{"level": "log", "message": "a"}]})
    assert synced == []  # never on the request path
    rig.clock.advance(DEFAULT_FSYNC_INTERVAL)
    assert len(synced) == 1
    rig.clock.advance(DEFAULT_FSYNC_INTERVAL)
    assert len(synced) == 1  # nothing new written: nothing to sync


# -- kill -9 of the real daemon -----------------------------------------------------------------


def _post(port: int, path: str, body: dict) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(body), EXTENSION_HEADERS)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def _get(port: int, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=EXTENSION_HEADERS)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


@pytest.mark.integration
def test_every_acknowledged_entry_survives_kill_9_of_the_real_daemon(tmp_path):
    state = tmp_path / "state"
    acked: dict[str, set[str]] = {route: set() for route, *_ in ROUTES}
    lock = threading.Lock()
    stop = threading.Event()
    daemon = DaemonProcess(state_dir=state).start()

    def writer(route: str, field: str, make, worker: int) -> None:
        i = 0
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
        while not stop.is_set():
            entries = [make(f"{worker}-{i}-{k}") for k in range(5)]
            try:
                conn.request("POST", route, json.dumps({field: entries}), EXTENSION_HEADERS)
                r = conn.getresponse()
                r.read()
            except (OSError, http.client.HTTPException):
                return  # the daemon died under us: this batch was never acknowledged
            if r.status == 200:
                with lock:
                    acked[route].update(marker(e) for e in entries)
            i += 1

    threads = [threading.Thread(target=writer, args=(route, field, make, w))
               for route, field, _, make in ROUTES for w in range(2)]
    try:
        for t in threads:
            t.start()
        # Let them run until every route has acknowledged something, then kill in mid-stream.
        deadline = 200
        while deadline and not all(len(v) >= 50 for v in acked.values()):
            stop.wait(0.05)
            deadline -= 1
        daemon.process.send_signal(signal.SIGKILL)
        daemon.process.wait(10)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        daemon.stop()
    assert all(acked.values()), {k: len(v) for k, v in acked.items()}

    again = DaemonProcess(state_dir=state).start()
    try:
        snapshot = _get(again.port, "/snapshot")
        health = _get(again.port, "/health")
    finally:
        again.stop()
    # What the daemon has after the restart (read from its journals through the same code).
    app = build(Config(state_dir=state, persist=True, max_entries=1_000_000), Clock())
    for route, _, buffer, _ in ROUTES:
        kept = {orjson.dumps(orjson.loads(b)).decode() for b in app.store.buffers[buffer]}
        missing = acked[route] - kept
        assert not missing, f"{route}: {len(missing)} of {len(acked[route])} acknowledged lost"
    assert len(snapshot["logs"]) == health["logs"]["entries"] >= len(acked["/logs"])


# -- private state files ------------------------------------------------------------------------


def test_a_symlinked_journal_is_refused_never_followed_or_chmoded(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    target.chmod(0o644)
    (state / "console.jsonl").symlink_to(target)
    with capturedLogs() as events:
        rig = Rig(state)
        code, body, _ = rig.call("POST", "/logs", {"entries": [{"level": "log", "message": "x"}]})
    assert code == 200 and body["persisted"] is False
    assert "symbolic link" in body["warning"]
    assert target.read_text() == "keep me"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # today: chmod-ed to 0600
    assert (state / "console.jsonl").is_symlink()
    assert any("symbolic link" in str(e.get("message", "")) for e in events)


def test_open_private_and_write_atomic_refuse_symlinks_and_make_files_0600(tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"original")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(OSError) as e:
        open_private(link, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    assert e.value.errno == errno.ELOOP
    with pytest.raises(OSError) as e:
        write_atomic(link, b"new")
    assert e.value.errno == errno.ELOOP
    assert target.read_bytes() == b"original" and link.is_symlink()
    loose = tmp_path / "loose.json"
    loose.write_bytes(b"{}")
    loose.chmod(0o666)
    write_atomic(loose, b'{"a":1}')
    assert loose.read_bytes() == b'{"a":1}'
    assert stat.S_IMODE(loose.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "loose.json", "target"]


def test_write_atomic_leaves_the_old_file_and_no_temp_when_the_disk_is_full(tmp_path, monkeypatch):
    path = tmp_path / "doc.json"
    write_atomic(path, b"old")
    monkeypatch.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OSError):
        write_atomic(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]


def test_the_state_dir_is_created_0700_and_a_loose_one_is_warned_about(tmp_path):
    fresh = tmp_path / "a" / "state"
    assert prepare_state_dir(fresh) == []
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    with capturedLogs() as events:
        app = build(Config(state_dir=loose, persist=True), Clock())
    (warning,) = app.persistence.health.warnings
    assert "writable by everyone" in warning and "chmod 700" in warning
    assert any("writable by everyone" in str(e.get("warning", "")) for e in events)
    session = app.mcp.open_session("me", "streamable")
    app.mcp.handle(session, jsonrpc.request(0, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}))
    checks = _doctor(app, session)
    assert checks["state_dir_permissions"]["status"] == "warn"


def test_daemon_json_is_0600(tmp_path):
    from gasoline.tap import DaemonInfoService

    class Port:
        def getHost(self):
            from twisted.internet.address import IPv4Address

            return IPv4Address("TCP", "127.0.0.1", 4242)

    DaemonInfoService(None, tmp_path / "state", "tcp:0")._write(Port())
    info = tmp_path / "state" / "daemon.json"
    assert json.loads(info.read_text())["port"] == 4242
    assert stat.S_IMODE(info.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700


def test_client_state_files_never_follow_a_symlink(tmp_path):
    from gasoline.core.clients.registry import ClientRegistry

    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    target.chmod(0o644)
    (tmp_path / "clients").mkdir(mode=0o700)
    (tmp_path / "clients" / "me.json").symlink_to(target)
    registry = ClientRegistry(Clock(), 3600, 10, tmp_path)
    registry.register("me")
    assert registry.flush() == 0
    assert target.read_text() == "{}" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert registry.health.problems()[0]["what"] == "client state"


# -- a full or read-only disk -------------------------------------------------------------------


def _enospc(monkeypatch, when=lambda fd: True):
    real = os.write

    def write(fd, data):
        if when(fd):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def _doctor(app, session) -> dict[str, dict]:
    out: list = []
    app.mcp.handle(session, jsonrpc.request(1, "tools/call", {
        "name": "configure", "arguments": {"what": "doctor"}})).addCallback(out.append)
    text = out[0]["result"]["content"][0]["text"]
    return {c["check"]: c for c in json.loads(text.partition("\n")[2])["checks"]}


def _configure(app, session, **args):
    out: list = []
    app.mcp.handle(session, jsonrpc.request(1, "tools/call", {
        "name": "configure", "arguments": args})).addCallback(out.append)
    result = out[0]["result"]
    return result["isError"], result["content"][0]["text"]


def test_ingest_says_when_the_disk_refused_the_batch(tmp_path, monkeypatch):
    rig = Rig(tmp_path)
    _enospc(monkeypatch)
    code, body, r = rig.call("POST", "/logs", {"entries": [{"level": "log", "message": "x"}]})
    monkeypatch.undo()
    assert code == 200 and body["received"] == 1  # kept in memory: no duplicate on retry
    assert body["persisted"] is False and "No space left on device" in body["warning"]
    assert r.headers.getRawHeaders(b"x-gasoline-persisted") == [b"false"]
    code, body, _ = rig.call("POST", "/logs", {"entries": [{"level": "log", "message": "y"}]})
    assert "persisted" not in body


def test_configure_store_does_not_answer_stored_when_the_state_cannot_be_written(tmp_path):
    rig = Rig(tmp_path)
    (tmp_path / "clients").rmdir() if (tmp_path / "clients").exists() else None
    (tmp_path / "clients").write_text("a file where the clients dir should be")
    session = rig.app.mcp.open_session("me", "streamable")
    rig.app.mcp.handle(session, jsonrpc.request(0, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}))
    is_error, text = _configure(rig.app, session, what="store", key="k", value=1)
    assert is_error
    assert not text.startswith("stored")
    assert "NOT persisted" in text
    checks = _doctor(rig.app, session)
    assert checks["disk_writes"]["status"] == "fail"
    assert "client state" in checks["disk_writes"]["detail"]
    (tmp_path / "clients").unlink()
    is_error, text = _configure(rig.app, session, what="store", key="k", value=2)
    assert not is_error and text.startswith("stored")
    assert _doctor(rig.app, session)["disk_writes"]["status"] == "ok"


def test_checkpoints_and_noise_rules_do_not_answer_done_when_they_cannot_be_written(tmp_path):
    """Every write an agent asks for says so when the disk refused it: checkpoints and client
    noise rules (the client's state file), global noise rules (noise-global.json)."""
    rig = Rig(tmp_path)
    (tmp_path / "clients").rmdir() if (tmp_path / "clients").exists() else None
    (tmp_path / "clients").write_text("a file where the clients dir should be")
    (tmp_path / "noise-global.json").mkdir()  # the rename over it fails
    session = rig.app.mcp.open_session("me", "streamable")
    rig.app.mcp.handle(session, jsonrpc.request(0, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}))
    calls = [
        dict(what="checkpoint", name="before"),
        dict(what="noise_rule", noise_action="add", pattern="chatty", scope="client"),
        dict(what="noise_rule", noise_action="add", pattern="chatty", scope="global"),
    ]
    for args in calls:
        is_error, text = _configure(rig.app, session, **args)
        assert is_error and "NOT persisted" in text, (args, text)
    (tmp_path / "clients").unlink()
    (tmp_path / "noise-global.json").rmdir()
    for args, answer in zip(calls, ("checkpoint before replaced", "noise rule", "noise rule")):
        is_error, text = _configure(rig.app, session, **{**args, "pattern": "other"}
                                    if "pattern" in args else args)
        assert not is_error and text.startswith(answer), (args, text)
    assert (tmp_path / "noise-global.json").is_file()


def test_doctor_reports_a_failing_journal(tmp_path, monkeypatch):
    rig = Rig(tmp_path)
    session = rig.app.mcp.open_session("me", "streamable")
    rig.app.mcp.handle(session, jsonrpc.request(0, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}))
    journal_fd = rig.app.journal._fd
    _enospc(monkeypatch, lambda fd: fd == journal_fd)
    rig.call("POST", "/logs", {"entries": [{"level": "log", "message": "x"}]})
    monkeypatch.undo()
    check = _doctor(rig.app, session)["disk_writes"]
    assert check["status"] == "fail"
    assert "console journal" in check["detail"] and "No space left" in check["detail"]
    _, health, _ = rig.call("GET", "/health", headers={})
    assert health["persistence"]["failing"][0]["what"] == "console journal"


def test_a_failing_state_write_is_logged_once_with_back_off_not_every_tick(tmp_path):
    clock = Clock()
    rig = Rig(tmp_path, clock=clock)
    (tmp_path / "noise-global.json").mkdir()  # the rename over it fails, every time
    rig.app.daemon.noise_file.mark_dirty()
    with capturedLogs() as events:
        for _ in range(20):  # 40 s of ticks
            rig.app.daemon.noise_file.mark_dirty()
            clock.advance(2.0)
    failures = [e for e in events if "noise-global.json" in str(e.get("message", ""))]
    assert len(failures) == 1
    assert not any("log_failure" in e for e in events)  # no traceback
    with capturedLogs() as events:
        for _ in range(15):  # past the 60 s back-off
            rig.app.daemon.noise_file.mark_dirty()
            clock.advance(2.0)
    again = [e for e in events if "noise-global.json" in str(e.get("message", ""))]
    assert len(again) == 1 and "still failing" in again[0]["log_format"]
    (tmp_path / "noise-global.json").rmdir()
    with capturedLogs() as events:
        clock.advance(2.0)
    assert any("works again" in e.get("log_format", "") for e in events)


def test_disk_health_backs_off_doubling_and_forgets_on_success():
    clock = Clock()
    health = DiskHealth(clock)
    err = OSError(errno.EROFS, "Read-only file system")
    with capturedLogs() as events:
        for _ in range(400):
            health.failed("x", "/state/x", err)
            clock.advance(1.0)
    # Reported at 0 s, 60 s and 180 s: the gaps double (60, 120, 240 s ...).
    assert len(events) == 3
    assert health.problems()[0]["failures"] == 400
    health.succeeded("x")
    assert health.problems() == []


def test_a_screenshot_that_cannot_be_written_leaves_no_zero_byte_file(tmp_path, monkeypatch):
    rig = Rig(tmp_path)
    _enospc(monkeypatch)
    code, body, _ = rig.call("POST", "/screenshots", {"dataUrl": PNG, "url": "http://app.test/"})
    monkeypatch.undo()
    rig.clock.advance(1.5)  # one screenshot per second
    assert code == 507
    assert body["error"] == "screenshot_failed" and "No space left" in body["message"]
    assert list((tmp_path / "screenshots").iterdir()) == []  # today: a zero-byte .png
    code, body, _ = rig.call("POST", "/screenshots", {"dataUrl": PNG, "url": "http://app.test/"})
    assert code == 200 and Path(body["path"]).stat().st_size > 0


def test_write_new_removes_a_partial_file(tmp_path, monkeypatch):
    _enospc(monkeypatch)
    with pytest.raises(OSError):
        write_new(tmp_path / "shot.png", b"data")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []

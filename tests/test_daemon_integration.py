"""The real daemon: ``twistd -n gasoline``, ``twistd -ny gasoline.tac``, daemonized ``twistd gasoline``.

Real processes on 127.0.0.1 port 0 with temporary state dirs; every process started here is
stopped here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gasoline.testing import EXTENSION_HEADERS, client_headers
from support import DaemonProcess, twistd_path

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent


def http(method: str, url: str, body: bytes | dict | None = None, headers=None, timeout=10.0):
    """(status, parsed JSON body, headers) of one request; HTTP errors are answers too."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null"), resp.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), e.headers


def stopped_by_sigterm(d: DaemonProcess) -> None:
    """Stop C{d} with SIGTERM and check it shut down gracefully (twistd re-raises the signal after
    a clean shutdown, so the exit status is -SIGTERM)."""
    rc = d.stop()
    assert rc in (0, -signal.SIGTERM), rc
    assert "Server Shut Down." in d.log()


def console_batch(n: int, start: int = 0) -> dict:
    """``n`` console entries shaped like the extension's (about 270 bytes each)."""
    return {"entries": [
        {"ts": "2026-11-26T01:00:00.000Z", "url": "http://localhost:3000/checkout",
         "message": f"entry {start + i}: cart total recalculated", "source": "app.js:120:7",
         "level": "error" if i % 10 == 0 else "log", "type": "console",
         "args": [f"entry {start + i}: cart total recalculated"], "tabId": 1234567}
        for i in range(n)
    ]}


def test_extension_batches_are_ingested_and_reported_by_health(daemon):
    status, body, _ = http("POST", f"{daemon.url}/logs", console_batch(50), EXTENSION_HEADERS)
    assert status == 200 and body == {"received": 50, "rejected": 0, "entries": 50}
    status, body, _ = http("POST", f"{daemon.url}/logs", console_batch(50, 50), EXTENSION_HEADERS)
    assert body["entries"] == 100
    status, body, _ = http("POST", f"{daemon.url}/network-bodies",
                           {"bodies": [{"method": "GET", "url": "http://x/api", "status": 500}]},
                           EXTENSION_HEADERS)
    assert (status, body) == (200, {"status": "ok", "count": 1, "rejected": 0})
    status, health, headers = http("GET", f"{daemon.url}/health",
                                   headers={"Origin": "chrome-extension://abcdef"})
    assert status == 200
    assert headers["Access-Control-Allow-Origin"] == "chrome-extension://abcdef"
    assert health["service-name"] == "gasoline"
    assert health["logs"]["entries"] == 100
    assert health["buffers"]["console"]["used"] == 100
    assert health["buffers"]["network_bodies"]["used"] == 1
    assert health["extension"]["connected"] is False


def test_sync_round_trip_marks_the_extension_connected(daemon):
    sync = {"ext_session_id": "ext_1_a", "extension_version": "0.7.9", "settings": {
        "tracked_tab_id": 3, "pilot_enabled": False}, "in_progress": []}
    started = time.monotonic()
    # Nothing queued: the daemon holds the long poll for 5 s, then answers with no commands and
    # asks for the next poll at once (it will be held the same way).
    status, body, _ = http("POST", f"{daemon.url}/sync", sync, EXTENSION_HEADERS)
    assert time.monotonic() - started >= 4.5
    assert status == 200
    assert body["ack"] is True and body["commands"] == [] and body["next_poll_ms"] == 0
    assert body["capture_overrides"] == {} and body["server_version"].startswith("0.7.")
    health = http("GET", f"{daemon.url}/health")[1]
    assert health["extension"]["connected"] is True
    assert health["capture"]["tracked_tab_id"] == 3


def test_bad_input_over_real_sockets_gets_json_errors(daemon):
    status, body, _ = http("POST", f"{daemon.url}/logs", b"{broken", EXTENSION_HEADERS)
    assert status == 400 and "invalid JSON" in body["error"]
    status, body, _ = http("POST", f"{daemon.url}/logs", console_batch(1), {"X-Gasoline-Client": "x"})
    assert status == 403
    big = b'{"bodies":[{"response_body":"' + b"x" * (6 * 1024 * 1024) + b'"}]}'
    status, body, _ = http("POST", f"{daemon.url}/network-bodies", big, EXTENSION_HEADERS)
    assert status == 413 and "too large" in body["error"]
    status, body, _ = http("GET", f"{daemon.url}/nope")
    assert status == 404 and body["error"] == "not found"
    assert http("GET", f"{daemon.url}/health")[0] == 200


def test_shutdown_route_stops_the_daemon_gracefully(tmp_path):
    d = DaemonProcess(state_dir=tmp_path / "state")
    d.start()
    try:
        status, body, _ = http("POST", f"{d.url}/shutdown", {}, EXTENSION_HEADERS)
        assert (status, body) == (200, {"status": "shutting_down"})
        assert d.process.wait(10) == 0
        assert not d.info_path.exists()  # the listener removed daemon.json on its way out
    finally:
        d.stop()


def test_port_in_use_gives_one_clear_line_and_fails(daemon, tmp_path):
    proc = subprocess.run(
        [twistd_path(), "-n", "--pidfile=", "gasoline", "--listen",
         f"tcp:{daemon.port}:interface=127.0.0.1", "--state-dir", str(tmp_path / "second")],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    lines = [line for line in output.splitlines() if "cannot listen" in line]
    assert len(lines) == 1, output
    assert str(daemon.port) in lines[0]
    assert "a Gasoline daemon" in lines[0] and "already running" in lines[0]
    assert "Traceback" not in output
    assert http("GET", f"{daemon.url}/health")[0] == 200  # the first daemon is unharmed


def test_daemonized_start_on_a_taken_port_exits_at_once_and_removes_its_pid_file(daemon, tmp_path):
    """twistd without -n forks; the child's listen failure must reach the parent (its status
    pipe), which exits non-zero with the line, and leave no pid file behind."""
    pidfile = tmp_path / "g.pid"
    started = time.monotonic()
    proc = subprocess.run(
        [twistd_path(), "--pidfile", str(pidfile), "--logfile", str(tmp_path / "d.log"),
         "gasoline", "--listen", f"tcp:{daemon.port}:interface=127.0.0.1",
         "--state-dir", str(tmp_path / "second")],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )
    assert time.monotonic() - started < 20
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "cannot listen" in output and str(daemon.port) in output
    assert not pidfile.exists()
    assert not (tmp_path / "second" / "daemon.json").exists()
    assert http("GET", f"{daemon.url}/health")[0] == 200


def test_tac_file_runs_the_daemon_from_the_environment(tmp_path):
    state = tmp_path / "tac-state"
    d = DaemonProcess(
        state_dir=state,
        app_args=["-y", str(REPO / "gasoline.tac")],
        env={"GASOLINE_LISTEN": "tcp:0:interface=127.0.0.1", "GASOLINE_STATE_DIR": str(state)},
    )
    d.start()
    try:
        status, body, _ = http("POST", f"{d.url}/logs", console_batch(3), EXTENSION_HEADERS)
        assert status == 200 and body["received"] == 3
        health = http("GET", f"{d.url}/health")[1]
        assert health["service-name"] == "gasoline" and health["logs"]["entries"] == 3
    finally:
        stopped_by_sigterm(d)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_daemonized_twistd_writes_its_pid_file_and_stops_on_sigterm(tmp_path):
    state = tmp_path / "state"
    pidfile = tmp_path / "gasoline.pid"
    proc = subprocess.run(
        [twistd_path(), "--pidfile", str(pidfile), "--logfile", str(tmp_path / "daemon.log"),
         "gasoline", "--listen", "tcp:0:interface=127.0.0.1", "--state-dir", str(state)],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    info_path = state / "daemon.json"
    pid = None
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (info_path.exists() and pidfile.exists()):
            time.sleep(0.05)
        pid = int(pidfile.read_text().strip())
        info = json.loads(info_path.read_text())
        assert info["pid"] == pid
        assert http("GET", f"http://127.0.0.1:{info['port']}/health")[0] == 200
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        assert not _alive(pid)
        assert not pidfile.exists()
    finally:
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    "args,fragment",
    [(["--max-entries", "-5"], "max-entries"), (["--max-entries", "lots"], "max-entries"),
     (["--client-ttl", "0"], "client-ttl"), (["--listen", "nonsense:endpoint"], "--listen"),
     (["--no-such-option"], "no-such-option")],
)
def test_invalid_option_values_give_a_usage_error_not_a_traceback(tmp_path, args, fragment):
    proc = subprocess.run(
        [twistd_path(), "-n", "--pidfile=", "gasoline", "--state-dir", str(tmp_path), *args],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert fragment in output
    assert "Traceback" not in output


def test_console_entries_survive_restart(tmp_path):
    state = tmp_path / "state"
    first = DaemonProcess(state_dir=state)
    first.start()
    try:
        for i in range(3):
            status, _, _ = http("POST", f"{first.url}/logs", console_batch(50, 50 * i),
                                EXTENSION_HEADERS)
            assert status == 200
    finally:
        stopped_by_sigterm(first)
    second = DaemonProcess(state_dir=state)
    second.start()
    try:
        health = http("GET", f"{second.url}/health")[1]
        assert health["logs"]["entries"] == 150
        snapshot = http("GET", f"{second.url}/snapshot", headers=EXTENSION_HEADERS)[1]
        messages = [e["message"] for e in snapshot["logs"]]
        assert messages[0] == "entry 0: cart total recalculated"
        assert messages[-1] == "entry 149: cart total recalculated"
    finally:
        second.stop()


def test_log_dir_holds_the_seed_layout_as_plain_json_lines(tmp_path):
    """server.log (plain JSON objects a person can read, no factory chatter), clients/<id>.log
    with the tool call and its result, shared/console.log with an ingested entry; all 0600."""
    log_dir = tmp_path / "logs"
    d = DaemonProcess(state_dir=tmp_path / "state", args=["--log-dir", str(log_dir)])
    d.start()
    try:
        status, _, _ = http("GET", f"{d.url}/health")
        assert status == 200
        status, _, _ = http("POST", f"{d.url}/logs", {"entries": [
            {"level": "error", "message": "logged to shared", "ts": "2026-01-01T00:00:00Z"}]},
            headers=EXTENSION_HEADERS)
        assert status == 200
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
                   **client_headers(d, "log-agent")}
        status, _, answer = http("POST", f"{d.url}/mcp", {
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}, headers=headers)
        assert status == 200
        if answer.get("mcp-session-id"):
            headers["mcp-session-id"] = answer["mcp-session-id"]
        status, body, _ = http("POST", f"{d.url}/mcp", {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "observe", "arguments": {"what": "errors", "token": "hunter2"}}},
            headers=headers)
        assert status == 200, body
    finally:
        d.stop()
    server = log_dir / "server.log"
    assert server.stat().st_mode & 0o777 == 0o600
    assert (log_dir / "clients").stat().st_mode & 0o777 == 0o700
    events = [json.loads(line) for line in server.read_text().splitlines() if line.strip()]
    assert events, "no log events were written"
    assert all(set(e) >= {"ts", "level", "source", "text"} and "log_format" not in e
               for e in events)
    texts = [e["text"] for e in events]
    assert any("MCP session" in t and "opened for client log-agent" in t for t in texts), texts
    assert not any(t.startswith(("Starting factory", "Stopping factory")) for t in texts)
    # The daemon's stop closed the session: the client's log was rotated on disconnect.
    (client_log,) = (log_dir / "clients").glob("log-agent.*.log")
    lines = [json.loads(line) for line in client_log.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["tool_call", "tool_result"]
    assert lines[0]["args"]["what"] == "errors" and "hunter2" not in json.dumps(lines)
    assert lines[1]["entries"] == 1 and lines[1]["bytes"] > 0
    assert "logged to shared" not in json.dumps(lines)
    shared = (log_dir / "shared" / "console.log").read_text()
    assert "logged to shared" in shared
    assert (log_dir / "shared" / "console.log").stat().st_mode & 0o777 == 0o600

"""C{--log-dir} (gasoline.logs): the seed's layout, per-client tool-call lines (arguments redacted,
sizes not bodies), rotation at a small configured size and on disconnect, hourly shared-log
rotation, retention on a fake clock, 0600 files, plain JSON server log without factory chatter,
and the worker thread writing in order."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from twisted.internet.task import Clock
from twisted.logger import LogLevel, LogPublisher, Logger

from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE, NETWORK_BODIES, WEBSOCKET_EVENTS
from gasoline.durations import parse_duration, parse_size
from gasoline.logs import LogFiles, LogLimits, LogService, ServerLogObserver

sys.path.insert(0, str(Path(__file__).parent))
from test_tools_http import Agent


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def daemon(tmp_path, limits=LogLimits(), publisher=None):
    clock = Clock()
    clock.advance(1_700_000_000)
    service = LogService(tmp_path / "logs", clock, limits=limits, publisher=publisher,
                         thread=False)
    app = build(Config(state_dir=tmp_path / "state", persist=False, tool_rate_limit=0), clock,
                log_files=service.files)
    service.startService()
    return app, service, tmp_path / "logs"


def test_tool_calls_and_results_land_in_the_clients_own_log_redacted_and_without_bodies(tmp_path):
    app, service, logs = daemon(tmp_path)
    app.store.add(CONSOLE, [{"level": "error", "message": "the page body text"}])
    a, b = Agent(app, "agent-a"), Agent(app, "agent-b")
    a.tool("observe", what="errors", password="hunter2")
    b.tool("observe", what="logs")
    records = lines(logs / "clients" / "agent-a.log")
    assert [r["type"] for r in records] == ["tool_call", "tool_result"]
    call, result = records
    assert call["client"] == "agent-a" and call["tool"] == "observe" and call["what"] == "errors"
    assert call["args"]["what"] == "errors"
    assert "hunter2" not in json.dumps(records)
    assert result["outcome"] == "ok" and result["entries"] == 1 and result["bytes"] > 0
    assert "the page body text" not in json.dumps(records)
    assert call["ts"].endswith("Z")
    assert [r["client"] for r in lines(logs / "clients" / "agent-b.log")] == ["agent-b"] * 2
    service.stopService()


def test_failed_calls_are_logged_with_their_error_code(tmp_path):
    app, service, logs = daemon(tmp_path)
    Agent(app, "agent-e").tool("observe", what="nope")
    result = lines(logs / "clients" / "agent-e.log")[-1]
    assert result["type"] == "tool_result" and result["outcome"] == "unknown_mode"
    service.stopService()


def test_client_log_rotates_at_a_small_configured_size(tmp_path):
    app, service, logs = daemon(tmp_path, LogLimits(client_max_bytes=600))
    agent = Agent(app, "rotating")
    for _ in range(10):
        agent.tool("observe", what="errors")
    files = sorted((logs / "clients").glob("rotating*.log"))
    rotated = [f for f in files if f.name != "rotating.log"]
    assert len(rotated) >= 3
    assert all(f.stat().st_size <= 600 for f in files)
    kept = [r for f in rotated + [logs / "clients" / "rotating.log"] for r in lines(f)]
    assert len(kept) == 20  # nothing lost across rotations
    service.stopService()


def test_client_log_rotates_when_its_last_session_closes(tmp_path):
    app, service, logs = daemon(tmp_path)
    agent = Agent(app, "leaving")
    agent.tool("observe", what="errors")
    for session in list(app.mcp.sessions.values()):
        app.mcp.close_session(session)
    assert not (logs / "clients" / "leaving.log").exists()
    (rotated,) = (logs / "clients").glob("leaving.*.log")
    assert [r["type"] for r in lines(rotated)] == ["tool_call", "tool_result"]
    service.stopService()


def test_shared_logs_get_the_buffers_and_rotate_hourly(tmp_path):
    app, service, logs = daemon(tmp_path)
    app.store.add(CONSOLE, [{"level": "log", "message": "first"}])
    app.store.add(NETWORK_BODIES, [{"url": "http://x/", "status": 200}])
    app.store.add(WEBSOCKET_EVENTS, [{"id": "w1", "event": "open", "url": "ws://x/"}])
    app.clock.advance(0)  # the notifier delivers on the next reactor turn
    (console,) = lines(logs / "shared" / "console.log")
    assert console["entry"]["message"] == "first" and console["buffer"] == CONSOLE
    assert console["seq"] == 0
    assert lines(logs / "shared" / "network.log")[0]["entry"]["status"] == 200
    assert lines(logs / "shared" / "websocket.log")[0]["entry"]["id"] == "w1"
    app.clock.advance(3599)
    app.store.add(CONSOLE, [{"level": "log", "message": "same hour"}])
    app.clock.advance(0)
    assert list((logs / "shared").glob("console.*.log")) == []
    app.clock.advance(2)
    app.store.add(CONSOLE, [{"level": "log", "message": "next hour"}])
    app.clock.advance(0)
    (rotated,) = (logs / "shared").glob("console.*.log")
    assert [r["entry"]["message"] for r in lines(rotated)] == ["first", "same hour"]
    assert [r["entry"]["message"] for r in lines(logs / "shared" / "console.log")] == ["next hour"]
    service.stopService()


def test_nothing_is_written_once_the_service_stopped(tmp_path):
    """The log files are given to build() (hooks at construction, nothing detached at stop):
    once the service stopped, what the daemon still reports is dropped, not written."""
    app, service, logs = daemon(tmp_path)
    app.store.add(CONSOLE, [{"level": "log", "message": "before"}])
    app.clock.advance(0)
    service.stopService()
    app.store.add(CONSOLE, [{"level": "log", "message": "after"}])
    app.clock.advance(0)
    Agent(app, "agent-a").tool("observe", what="logs")
    assert [r["entry"]["message"] for r in lines(logs / "shared" / "console.log")] == ["before"]
    assert not (logs / "clients" / "agent-a.log").exists()


def test_retention_deletes_rotated_files_older_than_the_limit(tmp_path):
    limits = LogLimits(retention=7 * 86400, sweep_interval=3600)
    app, service, logs = daemon(tmp_path, limits)
    now = app.clock.seconds()
    (logs / "clients").mkdir(parents=True)
    old = logs / "clients" / "gone.20231101T000000.log"
    recent = logs / "clients" / "gone.20231113T000000.log"
    live = logs / "clients" / "current.log"
    other = logs / "notes.txt"
    for path, age in ((old, 8 * 86400), (recent, 6 * 86400), (live, 30 * 86400),
                      (other, 30 * 86400)):
        path.write_text("x\n")
        os.utime(path, (now - age, now - age))
    app.clock.advance(3600)  # the hourly sweep
    assert not old.exists()
    assert recent.exists() and live.exists() and other.exists()
    app.clock.advance(86400)  # a day later, the second file is past the limit too
    for _ in range(24):
        app.clock.advance(3600)
    assert not recent.exists() and live.exists()
    service.stopService()
    app.extension.stop()


def test_files_are_private(tmp_path):
    app, service, logs = daemon(tmp_path)
    Agent(app, "private").tool("observe", what="errors")
    app.store.add(CONSOLE, [{"level": "log", "message": "x"}])
    app.clock.advance(0)
    for path in (logs / "clients" / "private.log", logs / "shared" / "console.log"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for folder in (logs / "clients", logs / "shared"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    service.stopService()


def test_server_log_is_plain_json_a_person_reads_and_drops_factory_chatter(tmp_path):
    clock = Clock()
    files = LogFiles(tmp_path, clock)
    publisher = LogPublisher()
    publisher.addObserver(ServerLogObserver(files))
    log = Logger(namespace="gasoline.test", observer=publisher)
    log.info("MCP session {sid} opened for client {cid}", sid="abc", cid="agent-1")
    log.info("Starting factory {factory!r}", factory=object())
    log.debug("too detailed")
    try:
        1 / 0
    except ZeroDivisionError:
        log.failure("tool {name} raised", name="observe")
    records = lines(tmp_path / "server.log")
    assert [r["text"] for r in records] == ["MCP session abc opened for client agent-1",
                                            "tool observe raised"]
    assert records[0] == {"ts": records[0]["ts"], "level": "info", "source": "gasoline.test",
                          "text": "MCP session abc opened for client agent-1"}
    assert records[1]["level"] == "critical" and "ZeroDivisionError" in records[1]["error"]


def test_server_log_rotates_at_its_size(tmp_path):
    clock = Clock()
    files = LogFiles(tmp_path, clock, LogLimits(server_max_bytes=200))
    observer = ServerLogObserver(files)
    for i in range(10):
        observer({"log_level": LogLevel.info, "log_namespace": "t", "log_format": f"line {i}"})
        clock.advance(1)
    assert len(list(tmp_path.glob("server.*.log"))) >= 3
    assert all(p.stat().st_size <= 200 for p in tmp_path.glob("server*.log"))


def test_the_worker_thread_writes_everything_in_order(tmp_path):
    clock = Clock()
    service = LogService(tmp_path, clock, thread=True)
    service.startService()
    for i in range(500):
        service.files.write("clients/t.log", {"i": i})
    service.stopService()  # joins the worker after its queue is written
    assert [r["i"] for r in lines(tmp_path / "clients" / "t.log")] == list(range(500))


@pytest.mark.parametrize("text, seconds", [
    ("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("1h", 3600.0), ("1h30m", 5400.0),
    ("7d", 604800.0), ("250ms", 0.25), ("2.5", 2.5), (" 1H ", 3600.0),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "1x", "m", "1h 30m", "inf", "nan", "5s1"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_sizes():
    assert parse_size("512") == 512
    assert parse_size("64k") == 64_000
    assert parse_size("10MB") == 10_000_000
    assert parse_size("10MiB") == 10 * 1024 * 1024
    for bad in ("", "0", "ten", "5TB"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_client_ttl_option_takes_a_duration():
    from gasoline.tap import Options

    options = Options()
    options.parseOptions(["--client-ttl", "15m", "--log-retention", "2d",
                          "--log-client-max-bytes", "1MB"])
    config = options.config()
    assert config.client_ttl == 900.0
    from gasoline.tap import log_limits

    assert log_limits(options).retention == 172800.0
    assert log_limits(options).client_max_bytes == 1_000_000

"""Every Linux-only call has a portable path, and each path is forced here, on Linux (where the
suite runs): the watchdog without prctl and /proc, the lifecycle commands without /proc, the
browser found off PATH (macOS app bundles, Windows program folders), the DevTools pipe refused
with one line where it cannot be given (Windows), the fd limit where there is none, the
connector's state dir without its Linux shortcut (docs/operations.md, "Platforms")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gasoline import admin_cli
from gasoline.launch import chromium

WATCHDOG = Path(__file__).resolve().parent.parent / "gasoline" / "proxy" / "_watchdog.py"

#: A server that forks a grandchild in its own process group (its pid in argv[1]), then waits.
FORKS = """
import os, sys, time
if os.fork() == 0:
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # our own zombie child has ended too
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


@pytest.mark.integration
def test_the_watchdogs_portable_path_ends_the_server_and_its_group(tmp_path):
    """`portable`: no prctl, no /proc (the path of macOS and the BSDs); SIGTERM still ends the
    server and what it forked in its group, through the group kill and the grace SIGKILL."""
    marker = tmp_path / "grandchild.pid"
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(WATCHDOG), str(os.getpid()), "0.5",
                             "portable", "--", sys.executable, "-c", FORKS, str(marker)])
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchild = int(marker.read_text())
        assert _alive(grandchild)
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        deadline = time.monotonic() + 10
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(grandchild)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if marker.exists() and _alive(int(marker.read_text())):
            os.kill(int(marker.read_text()), signal.SIGKILL)


def test_the_watchdog_reads_no_process_table_on_its_portable_path(monkeypatch):
    sys.path.insert(0, str(WATCHDOG.parent))
    try:
        import _watchdog  # the script, as a module
    finally:
        sys.path.remove(str(WATCHDOG.parent))
    assert _watchdog._table() is not None  # Linux: read
    monkeypatch.setattr(_watchdog, "PROC", None)
    assert _watchdog._table() is None and _watchdog._left_behind(os.getpgid(0)) is None
    monkeypatch.setattr(_watchdog, "PROC", "/nonexistent-proc")
    assert _watchdog._table() is None


def test_lifecycle_commands_without_proc_trust_kill_0_and_the_daemons_health(monkeypatch,
                                                                            tmp_path):
    monkeypatch.setattr(admin_cli, "PROC", tmp_path / "no-proc")
    assert admin_cli._alive(os.getpid()) is True
    assert admin_cli._looks_like_gasoline(os.getpid()) is True  # trust /health's pid
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(10)  # reaped: the pid is free
    assert admin_cli._alive(done.pid) is False


def test_the_browser_is_found_where_macos_and_windows_install_it(monkeypatch, tmp_path):
    mac = [str(p) for p in chromium.known_locations("darwin", {"HOME": "/Users/u"})]
    assert "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome" in mac
    assert "/Users/u/Applications/Chromium.app/Contents/MacOS/Chromium" in mac
    win = chromium.known_locations("win32", {"PROGRAMFILES": r"C:\Program Files"})
    assert any(p.name == "chrome.exe" and "Google" in str(p) for p in win)
    assert chromium.known_locations("linux", {}) == []
    monkeypatch.setattr(chromium.shutil, "which", lambda name: None)  # nothing on PATH
    app = tmp_path / "Chromium.app" / "Contents" / "MacOS" / "Chromium"
    app.parent.mkdir(parents=True)
    app.write_text("#!/bin/sh\n")
    app.chmod(0o755)
    assert chromium.find_chromium(locations=[tmp_path / "missing", app]) == str(app)
    with pytest.raises(chromium.LaunchError, match="install one or pass --chromium"):
        chromium.find_chromium(locations=[tmp_path / "missing"])


def test_without_the_devtools_pipe_gasoline_browser_says_so_in_one_line(monkeypatch, capsys):
    from gasoline.launch import main as launch_main
    from gasoline.launch.main import main

    assert chromium.pipe_supported("linux") and chromium.pipe_supported("darwin")
    assert not chromium.pipe_supported("win32")
    monkeypatch.setattr(launch_main, "pipe_supported", lambda: False)
    assert main(["--headless", "http://example.test/"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "DevTools pipe" in err and "popup" in err


def test_the_fd_limit_is_left_alone_where_there_is_none(monkeypatch):
    from gasoline.tap import raise_nofile_limit

    assert raise_nofile_limit() is not None  # POSIX: raised (or already high)
    monkeypatch.setitem(sys.modules, "resource", None)  # as on Windows: no such module
    assert raise_nofile_limit() is None


def test_the_connectors_state_dir_off_linux_is_platformdirs(monkeypatch):
    import platformdirs

    from gasoline import client_rules
    from gasoline.common import default_state_dir
    from gasoline.connect import fast

    monkeypatch.delenv("GASOLINE_STATE_DIR", raising=False)
    monkeypatch.setattr(client_rules.sys, "platform", "darwin")  # skips the Linux shortcut
    expected = platformdirs.user_state_dir("gasoline", appauthor=False)
    assert fast.state_dir({}) == str(default_state_dir()) == expected

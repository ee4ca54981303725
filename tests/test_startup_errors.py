"""Every start-up failure a user's input causes is one line naming the option (or environment
variable) and the fix: no traceback, no twistd help dump, no truncated bytes repr."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from gasoline.tap import OptionError, Options
from gasoline.testing import EXTENSION_HEADERS
from support import DaemonProcess, twistd_path

REPO = Path(__file__).resolve().parent.parent


def start(args: list[str], tmp_path: Path, env: dict | None = None, daemonize: bool = False):
    head = ["--pidfile", str(tmp_path / "g.pid"), "--logfile", str(tmp_path / "twistd.log")] \
        if daemonize else ["-n", "--pidfile="]
    return subprocess.run([twistd_path(), *head, *args], capture_output=True, text=True,
                          timeout=30, cwd=tmp_path, env={**os.environ, **(env or {})})


def one_line(proc) -> str:
    output = (proc.stdout + proc.stderr).strip()
    assert proc.returncode != 0, output
    assert "Traceback" not in output and "Usage:" not in output and "Unhandled" not in output, output
    assert "An error has occurred" not in output, output  # twistd's truncated repr of the child's
    lines = output.splitlines()
    assert len(lines) == 1, output
    return lines[0]


def _file(tmp_path: Path) -> str:
    (tmp_path / "a-file").write_text("x")
    return str(tmp_path / "a-file")


LOOP = ["--listen", "tcp:0:interface=127.0.0.1"]

CASES = {
    # id: (argv builder, what the line must name, a word of the fix)
    "state-dir-on-proc": (lambda t: ["--state-dir", "/proc/gasoline-state", *LOOP],
                          "--state-dir '/proc/gasoline-state'", "can write"),
    "state-dir-is-a-file": (lambda t: ["--state-dir", _file(t), *LOOP], "is not a directory",
                            "point it at a directory"),
    "max-entries-negative": (lambda t: ["--max-entries=-5", *LOOP], "--max-entries '-5'",
                             "at least 1"),
    "max-entries-words": (lambda t: ["--max-entries", "lots", *LOOP], "--max-entries 'lots'",
                          "whole number"),
    "max-clients-zero": (lambda t: ["--max-clients", "0", *LOOP], "--max-clients '0'",
                         "at least 1"),
    "client-ttl-garbage": (lambda t: ["--client-ttl", "soon", *LOOP], "--client-ttl 'soon'",
                           "duration"),
    "tool-rate-limit-negative": (lambda t: ["--tool-rate-limit=-1", *LOOP],
                                 "--tool-rate-limit '-1'", "0 for no limit"),
    "log-size-garbage": (lambda t: ["--log-server-max-bytes", "big", *LOOP],
                         "--log-server-max-bytes 'big'", "512k"),
    "listen-everywhere": (lambda t: ["--listen", "tcp:0:interface=0.0.0.0"],
                          "--listen 'tcp:0:interface=0.0.0.0' listens on every interface",
                          "interface=127.0.0.1"),
    "listen-no-interface": (lambda t: ["--listen", "tcp:0"], "--listen 'tcp:0'",
                            "interface=127.0.0.1"),
    "listen-lan-address": (lambda t: ["--listen", "tcp:0:interface=192.0.2.1"],
                           "listens on 192.0.2.1", "SSH tunnel"),
    "listen-bogus": (lambda t: ["--listen", "nonsense:1"], "--listen 'nonsense:1'",
                     "tcp:7890:interface=127.0.0.1"),
    "unknown-option": (lambda t: ["--max-entrys", "5"], "max-entrys", "--help"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_option_is_one_line_naming_it_and_the_fix(case, tmp_path):
    build, names, fix = CASES[case]
    argv = build(tmp_path)
    if "--state-dir" not in argv:
        argv += ["--state-dir", str(tmp_path / "state")]
    line = one_line(start(["gasoline", *argv], tmp_path))
    assert line.startswith("gasoline: ") and names in line and fix in line, line


def test_options_refuse_the_same_in_process(tmp_path):
    """The class in process: each case is an L{OptionError} at parse time (or, for the state
    dir, when the service is made) — never a twistd UsageError, which prints the whole help."""
    from gasoline.tap import makeService
    from twisted.internet.testing import MemoryReactorClock

    for case, (build, names, _fix) in CASES.items():
        argv = build(tmp_path)
        if "--state-dir" not in argv:
            argv += ["--state-dir", str(tmp_path / "state")]
        with pytest.raises(OptionError) as raised:
            options = Options()
            options.parseOptions(argv)
            makeService(options, MemoryReactorClock())
        assert names in raised.value.message, (case, raised.value.message)


@pytest.mark.parametrize("env, names", [
    ({"GASOLINE_MAX_ENTRIES": "lots"}, "GASOLINE_MAX_ENTRIES (as --max-entries) 'lots'"),
    ({"GASOLINE_STATE_DIR": "/proc/gasoline-state"}, "GASOLINE_STATE_DIR (as --state-dir)"),
    ({"GASOLINE_LISTEN": "tcp:0:interface=0.0.0.0"}, "GASOLINE_LISTEN (as --listen)"),
])
def test_the_tac_file_names_the_environment_variable(env, names, tmp_path):
    env = {"GASOLINE_LISTEN": "tcp:0:interface=127.0.0.1",
           "GASOLINE_STATE_DIR": str(tmp_path / "state"), **env}
    line = one_line(start(["-y", str(REPO / "gasoline.tac")], tmp_path, env=env))
    assert names in line, line


@pytest.mark.integration
@pytest.mark.parametrize("daemonize", [False, True], ids=["foreground", "daemonized"])
def test_a_taken_port_is_one_whole_line_and_the_live_daemons_state_is_not_replayed(
        daemonize, tmp_path):
    """A second start on a live daemon's port and state dir: the whole sentence (also from a
    daemonizing start, whose child's error twistd would truncate), before anything is built:
    the live daemon's journals are not replayed and its daemon.json is untouched."""
    state = tmp_path / "state"
    live = DaemonProcess(state_dir=state).start()
    try:
        req = urllib.request.Request(live.url + "/logs", data=json.dumps({"entries": [
            {"level": "error", "message": "kept", "ts": "2026-01-01T00:00:00Z"}]}).encode(),
            headers={**EXTENSION_HEADERS, "Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(req, timeout=10).read()
        info = live.info_path.read_text()
        proc = start(["gasoline", "--listen", f"tcp:{live.port}:interface=127.0.0.1",
                      "--state-dir", str(state)], tmp_path, daemonize=daemonize)
        line = one_line(proc)
        assert f"cannot listen on 127.0.0.1:{live.port}" in line
        assert "a Gasoline daemon" in line and f"gasoline stop --port {live.port}" in line
        assert line.endswith("choose another port (--listen tcp:PORT:interface=127.0.0.1).")
        assert "restored" not in proc.stdout + proc.stderr
        assert not (tmp_path / "g.pid").exists()
        twistd_log = tmp_path / "twistd.log"
        assert not twistd_log.exists() or "restored" not in twistd_log.read_text()
        assert live.info_path.read_text() == info
        assert live.process.poll() is None
    finally:
        live.stop()

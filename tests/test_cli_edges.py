"""The command line's edges a new user meets first: a closed pipe, a bad --listen, help and
version texts (each as a real process, as the user runs it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def gasoline(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gasoline", *args], capture_output=True,
                          text=True, timeout=60, **kw)


@pytest.mark.parametrize("command", [["doctor"], ["status"], ["--help"], ["pair", "--help"]])
def test_a_reader_that_goes_away_gets_no_traceback(command, tmp_path):
    """`gasoline doctor | head`: the reader closes the pipe before the command writes."""
    proc = subprocess.Popen([sys.executable, "-m", "gasoline", *command,
                             *(["--state-dir", str(tmp_path)] if command[0] in ("doctor",
                                                                                "status") else [])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # head has read its lines and gone
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.wait(60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


@pytest.mark.parametrize("listen,shown", [
    ("tcp:notaport", "'notaport'"),
    ("tcp:port=x:interface=127.0.0.1", "'x'"),
    ("tcp:70000:interface=127.0.0.1", "'70000'"),
])
def test_a_listen_port_that_is_not_a_number_is_one_clear_line(listen, shown, tmp_path):
    done = gasoline("serve", "--listen", listen, "--state-dir", str(tmp_path))
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert f"the port {shown} is not a number from 0 to 65535" in lines[0]
    assert "invalid literal" not in done.stderr and "Traceback" not in done.stderr


def test_help_texts_say_usage_once_and_browser_version_is_gasolines():
    from gasoline import __version__

    for command in (["pair", "--help"], ["client-proof", "--help"]):
        done = gasoline(*command)
        assert done.returncode == 0 and done.stdout.count("usage:") == 1, done.stdout
        assert "usage: usage:" not in done.stdout
    done = gasoline("browser", "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"gasoline {__version__}", done

"""
The real daemon as a subprocess, for the test suite and the benchmarks alike: L{DaemonProcess}
(C{twistd} on port 0 in its own state dir, started and stopped from this process),
L{twistd_path} and L{reap}. The in-memory fakes live in L{gasoline.testing}.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import attrs


def reap(process: subprocess.Popen, timeout: float = 10.0) -> int:
    """Wait up to C{timeout} seconds for C{process} to exit, then kill it; its exit status."""
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(timeout)


def twistd_path() -> str:
    return str(Path(sys.executable).with_name("twistd"))


@attrs.define
class DaemonProcess:
    """A real daemon subprocess. Use as a context manager or call L{start}/L{stop}."""

    state_dir: Path
    args: Sequence[str] = ()
    #: C{["gasoline"]} for the plugin, or C{["-y", "gasoline.tac"]} for the tac file.
    app_args: Sequence[str] = ("gasoline",)
    env: dict[str, str] | None = None
    cwd: Path | None = None
    startup_timeout: float = 20.0
    process: subprocess.Popen | None = None
    port: int | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def info_path(self) -> Path:
        return Path(self.state_dir) / "daemon.json"

    def start(self) -> "DaemonProcess":
        state_dir = Path(self.state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.info_path.unlink()
        except FileNotFoundError:
            pass
        self.log_path = state_dir / "twistd-test.log"
        cmd = [twistd_path(), "-n", "--pidfile=", "--logfile", str(self.log_path)]
        cmd += list(self.app_args)
        if list(self.app_args) == ["gasoline"]:
            cmd += ["--listen", "tcp:0:interface=127.0.0.1", "--state-dir", str(state_dir)]
        cmd += list(self.args)
        env = dict(os.environ)
        env.update(self.env or {})
        self.process = subprocess.Popen(
            cmd,
            cwd=str(self.cwd or state_dir),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"daemon exited with {self.process.returncode}: {err}\n{self.log()}")
            try:
                info = json.loads(self.info_path.read_text())
                if info.get("pid") == self.process.pid:
                    self.port = int(info["port"])
                    return self
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"daemon did not start within {self.startup_timeout}s\n{self.log()}")

    def log(self) -> str:
        try:
            return Path(self.log_path).read_text() if self.log_path else ""
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            reap(self.process, timeout)
        if self.process.stderr:
            self.process.stderr.close()
        rc = self.process.returncode
        self.process = None
        return rc

    def kill(self) -> None:
        """Stop abruptly (SIGKILL), as a crash would."""
        self.stop(signal.SIGKILL)

    def __enter__(self) -> "DaemonProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

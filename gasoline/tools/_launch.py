"""
C{interact {what:"launch_browser"}}: an agent asks the daemon for a browser (docs/browser.md).

Off unless the daemon was started with C{--allow-launch-browser} (C{Config.allow_launch_browser}):
launching a browser is the user's decision, not an agent's. When on, the daemon runs
C{gasoline browser --detach} for itself (this daemon's port and state dir, so the new browser pins
this daemon's identity) and answers with what that command printed. The browser then outlives the
call; the background C{gasoline browser} process ends it and removes its profile when it is closed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


from gasoline.connect.discovery import CollectOutput
from gasoline.core.errors import GasolineError

#: Seconds the detached launch may take (daemon check, browser start, pairing) before it fails.
LAUNCH_TIMEOUT = 120.0


class LaunchDisabled(GasolineError):
    code = "launch_disabled"
    retryable = False
    retry = ("Ask the user: they can start the daemon with --allow-launch-browser, or run "
             "`gasoline browser` themselves.")


class LaunchFailed(GasolineError):
    code = "launch_failed"
    retryable = False


class BrowserLauncher:
    """Runs C{gasoline browser --detach} for this daemon. C{reactor} provides C{spawnProcess} and
    the clock; C{port} is read from C{<state_dir>/daemon.json} (written once the daemon listens)."""

    def __init__(self, reactor: Any, state_dir: Path, timeout: float = LAUNCH_TIMEOUT) -> None:
        self.reactor = reactor
        self.state_dir = Path(state_dir)
        self.timeout = timeout

    def port(self) -> int:
        try:
            port = json.loads((self.state_dir / "daemon.json").read_text()).get("port")
        except (OSError, ValueError) as e:
            raise LaunchFailed(f"this daemon's port is not known yet (daemon.json: {e})")
        if not isinstance(port, int):
            raise LaunchFailed("this daemon's port is not known (daemon.json has none)")
        return port

    def argv(self, url: str, *, headless: bool, pilot: bool, track_all: bool) -> list[str]:
        argv = [sys.executable, "-m", "gasoline", "browser", "--detach", "--port", str(self.port()),
                "--state-dir", str(self.state_dir)]
        argv += ["--headless"] * headless + ["--pilot"] * pilot + ["--track-all"] * track_all
        return argv + ["--", url]

    async def launch(self, url: str, *, headless: bool, pilot: bool, track_all: bool) -> str:
        """Run the command; what it printed. @raise LaunchFailed: it failed or took too long."""
        argv = self.argv(url, headless=headless, pilot=pilot, track_all=track_all)
        proto = CollectOutput()
        self.reactor.spawnProcess(proto, argv[0], argv, env=dict(os.environ),
                                  path=str(self.state_dir))
        try:
            code = await proto.ended.addTimeout(self.timeout, self.reactor)
        except Exception:
            raise LaunchFailed(f"gasoline browser did not finish within {self.timeout:g} s")
        text = proto.output.decode("utf-8", "replace").strip()
        if code != 0:
            raise LaunchFailed(f"gasoline browser failed (exit {code}): {text[-1500:]}")
        return text

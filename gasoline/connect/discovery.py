"""
Finding the daemon, and starting one when none runs.

L{Discovery.check} asks C{GET /health} whether a Gasoline daemon answers (C{service-name:
gasoline}). When nothing answers and auto-start is on, it starts one in the background with the
reactor's C{spawnProcess} (never a blocking call on a running reactor)::

    twistd --pidfile <state>/gasoline.pid --logfile <state>/daemon.log \\
        gasoline --listen tcp:<port>:interface=127.0.0.1 --state-dir <state>

C{twistd} without C{-n} daemonizes (double fork, C{setsid}, stdio on C{/dev/null}), so the daemon
outlives the connector and never touches the connector's stdout. The launcher's own stdout/stderr
are pipes whose text is logged to the connector's stderr if it fails. Two connectors starting at
once is harmless: the loser fails to listen (or finds the pid file taken) and both then find the
winner through C{/health}.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.interfaces import IReactorProcess, IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline.common import make_private_dir, make_private_file
from gasoline.connect.options import DEFAULT_PORT  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from gasoline.connect.client import DaemonHTTP

log = Logger()

#: Do not start another daemon sooner than this after the previous attempt.
RESPAWN_AFTER = 10.0

UP, DOWN, STARTING = "up", "down", "starting"


def loopback_port(url: str) -> int | None:
    """The port of C{url} if it names this machine (so a daemon can be started for it)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    return parts.port or 80


def twistd_command() -> list[str]:
    """How to run twistd with this interpreter."""
    script = Path(sys.executable).with_name("twistd")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; run()"]


def daemon_command(port: int, state_dir: Path, api_key: str | None = None) -> list[str]:
    argv = twistd_command() + [
        "--pidfile", str(state_dir / "gasoline.pid"),
        "--logfile", str(state_dir / "daemon.log"),
        "gasoline",
        "--listen", f"tcp:{port}:interface=127.0.0.1",
        "--state-dir", str(state_dir),
    ]
    if api_key:
        argv += ["--api-key", api_key]
    return argv


class CollectOutput(ProcessProtocol):
    """Collects a launcher process's last 8 KiB of output (stdin closed at once); fires C{ended}
    with its exit code. Also used by the C{launch_browser} tool (L{gasoline.tools._launch})."""

    def __init__(self) -> None:
        self.ended: Deferred = Deferred()
        self.output = b""

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        self.output = (self.output + data)[-8192:]

    errReceived = outReceived

    def processEnded(self, reason: Failure) -> None:
        code = getattr(reason.value, "exitCode", None)
        self.ended.callback(code)


class Spawner:
    """Starts a detached daemon through C{reactor.spawnProcess}."""

    def __init__(self, reactor: IReactorProcess, port: int, state_dir: Path,
                 env: dict[str, str] | None = None, api_key: str | None = None) -> None:
        self.reactor = reactor
        self.api_key = api_key
        self.port = port
        self.state_dir = Path(state_dir)
        self.env = env

    @staticmethod
    def _pid_file_usable(path: Path) -> None:
        """twistd refuses to start over a pid file that holds no number ("contains non-numeric
        value"): such a file is moved to C{gasoline.pid.corrupt}, with one line saying so (a
        number, live or stale, is twistd's to judge)."""
        try:
            text = path.read_bytes()[:64]
        except OSError:
            return
        if text.strip().isdigit():
            return
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
        except OSError as e:
            log.warn("the daemon's pid file {path} holds no process id and cannot be moved aside "
                     "({why}): remove it", path=str(path), why=e.strerror or str(e))
            return
        log.warn("the daemon's pid file {path} held no process id: moved to {aside} so the "
                 "daemon can start; remove that file", path=str(path), aside=str(aside))

    def __call__(self) -> Deferred:
        # The state dir and the daemon's log, private before twistd opens the log (it keeps the
        # mode of the file it finds, for its rotated files too; daemonized, it sets umask 077
        # only after opening it).
        make_private_dir(self.state_dir)
        make_private_file(self.state_dir / "daemon.log")
        self._pid_file_usable(self.state_dir / "gasoline.pid")
        argv = daemon_command(self.port, self.state_dir, self.api_key)
        launcher = CollectOutput()
        shown = argv[:-2] + ["--api-key", "***"] if self.api_key else argv
        log.info("starting a Gasoline daemon: {argv}", argv=" ".join(shown))
        self.reactor.spawnProcess(
            launcher, argv[0], argv,
            env=dict(os.environ if self.env is None else self.env),
            path=str(self.state_dir),
            childFDs={0: "w", 1: "r", 2: "r"},
        )

        def ended(code: int | None) -> int | None:
            if code:
                log.warn("starting the daemon failed (exit {code}): {out} (see {logfile})",
                         code=code, out=launcher.output.decode("utf-8", "replace").strip(),
                         logfile=self.state_dir / "daemon.log")
            return code

        return launcher.ended.addCallback(ended)


class Discovery:
    """Is the daemon there? If not, maybe start it."""

    def __init__(
        self,
        clock: IReactorTime,
        daemon: DaemonHTTP,
        spawner: Callable[[], Deferred] | None = None,
        respawn_after: float = RESPAWN_AFTER,
    ) -> None:
        self.clock = clock
        self.daemon = daemon
        self.spawner = spawner
        self.respawn_after = respawn_after
        self.problem = "not checked yet"
        #: The last check found something that will not change by waiting (an HTTP server that
        #: is not Gasoline answers on the port): L{problem} says what.
        self.permanent = False
        self.last_spawn: float | None = None
        self.spawns = 0

    @inlineCallbacks
    def check(self) -> Generator[Deferred[Any], Any, str]:
        """Fire with L{UP}, L{DOWN}, or L{STARTING} (a daemon was just started); never fails."""
        url = self.daemon.base_url
        health = yield self.daemon.health()
        self.permanent = False
        if health is not None and health.get("service-name") == "gasoline":
            self.problem = ""
            return UP
        if health is not None:
            status = health.get("status")
            # An HTTP answer that is not Gasoline's (a 404 from another web server) is final; no
            # answer at all (a hung process, a non-HTTP service) or a 5xx may pass.
            self.permanent = isinstance(status, int) and 200 <= status < 500
            shown = f"HTTP {status}" if isinstance(status, int) else "no HTTP answer"
            self.problem = (f"something that is not a Gasoline daemon answers at {url} "
                            f"({shown}); use --port/--url")
            return DOWN
        self.problem = f"no Gasoline daemon answers at {url}"
        if self.spawner is None:
            self.problem += " (auto-start is off: start one with `twistd gasoline` or `gasoline serve`)"
            return DOWN
        now = self.clock.seconds()
        if self.last_spawn is not None and now - self.last_spawn < self.respawn_after:
            return STARTING
        self.last_spawn = now
        self.spawns += 1
        try:
            d = self.spawner()
            if isinstance(d, Deferred):
                d.addErrback(lambda f: log.failure("starting the daemon failed", f))
        except Exception:
            log.failure("starting the daemon failed")
            return DOWN
        return STARTING

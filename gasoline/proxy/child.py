"""
One child MCP server over stdio: its process, its JSON-RPC client side, its restarts.

The process runs under L{gasoline.proxy._watchdog} (own process group, dies with the daemon) with
C{cwd} set to the session's directory and a minimal environment (L{ENV_ALLOWLIST} plus the server's
own C{env}). Its stderr goes to a bounded buffer that error messages quote.

The protocol side (ids, cancellation, requests from the child, restarts) is
L{gasoline.proxy.peer.ServerPeer}'s; this module adds the process and its stdio framing.

Shutdown (L{ChildServer.stop}): close stdin, SIGTERM to the group after C{grace}, SIGKILL to the
group after another C{grace}; the Deferred fires once the process is reaped.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Callable

import orjson
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ProcessDone
from twisted.internet.interfaces import IReactorProcess
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline.proxy.peer import (  # noqa: F401  (re-exported: the names tests and docs use)
    BACKOFF_FIRST,
    BACKOFF_MAX,
    BACKOFF_RESET_AFTER,
    CHILD_PROTOCOL,
    MAX_FAILED_STARTS,
    STDERR_KEEP,
    ChildDown,
    ServerPeer,
)

log = Logger()

#: What a child inherits from the daemon's environment (the official SDKs' list).
ENV_ALLOWLIST = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
#: Longest line accepted from a child's stdout (a larger one kills the child).
MAX_LINE = 16 * 1024 * 1024
#: Seconds between closing stdin and SIGTERM, and between SIGTERM and SIGKILL.
GRACE = 2.0
#: After the final SIGKILL to a stopped child's group, how often and how many times to check that
#: the group is gone before L{ChildServer.stop} fires (at most 1 s).
GROUP_WAIT_STEP = 0.01
GROUP_WAIT_TRIES = 100

WATCHDOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_watchdog.py")


def child_env(extra: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """The allowlisted part of C{environ} (the daemon's), then the server's C{extra}."""
    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    env = {k: environ[k] for k in ENV_ALLOWLIST if k in environ}
    env.update(extra)
    return env


class _ChildProtocol(ProcessProtocol):
    def __init__(self, child: "ChildServer") -> None:
        self.child = child
        self._buf = bytearray()

    def outReceived(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = bytes(buf[start:nl])
            start = nl + 1
            if line.strip():
                self.child._line(line)
        del buf[:start]
        if len(buf) > MAX_LINE:
            buf.clear()
            self.child._fatal(f"sent a line longer than {MAX_LINE} bytes")

    def errReceived(self, data: bytes) -> None:
        self.child._stderr(data)

    def processEnded(self, reason: Failure) -> None:
        self.child._process_ended(self, reason)


class ChildServer(ServerPeer):
    """A child MCP server process and the daemon's client side of its stdio connection.

    @param reactor: provides C{IReactorProcess} and C{IReactorTime}.
    @param on_request: C{(child, method, params) -> Deferred | value} for requests the child
        sends (the value is the result; raise L{JsonRpcError} to answer an error).
    @param on_notification: C{(child, method, params) -> None}.
    @param on_state: C{(child) -> None} after a start, a crash or a stop.
    """

    def __init__(self, reactor: Any, name: str, command: str, args: tuple[str, ...],
                 env: dict[str, str], cwd: str, *, timeout: float, start_timeout: float,
                 capabilities: dict[str, Any],
                 on_request: Callable[..., Any], on_notification: Callable[..., None],
                 on_state: Callable[["ChildServer"], None] | None = None,
                 restart: bool = True, grace: float = GRACE) -> None:
        super().__init__(reactor, name, timeout=timeout, start_timeout=start_timeout,
                         capabilities=capabilities, on_request=on_request,
                         on_notification=on_notification, on_state=on_state, restart=restart)
        self.command = command
        self.args = args
        self.env = env
        self.cwd = cwd
        self.grace = grace
        self._proto: _ChildProtocol | None = None
        self._ended_waiters: list[Deferred] = []
        self._kill_calls: list[Any] = []

    @property
    def connected(self) -> bool:
        return self._proto is not None

    def stop(self) -> Deferred:
        """Stop for good: close stdin, SIGTERM the group, SIGKILL it; fire once reaped."""
        self.restart_enabled = False
        self._cancel_restart()
        was = self.state
        self.state = "closed"
        if self._proto is None:
            if was != "closed" and self.on_state is not None:
                self.on_state(self)
            return succeed(None)
        d: Deferred = Deferred()
        self._ended_waiters.append(d)
        if was == "closed":  # already stopping: wait with the others
            return d
        transport = self._proto.transport
        try:
            transport.closeStdin()
        except Exception:
            pass
        pid = self.pid
        self._kill_calls = [
            self.reactor.callLater(self.grace, self._killpg, pid, signal.SIGTERM),
            self.reactor.callLater(2 * self.grace, self._killpg, pid, signal.SIGKILL),
        ]
        return d

    def kill_now(self) -> None:
        """SIGKILL the group at once (daemon shutdown fallback)."""
        self._killpg(self.pid, signal.SIGKILL)

    # -- process -------------------------------------------------------------------------------

    def _open(self) -> None:
        argv = [sys.executable, "-I", "-S", WATCHDOG, str(os.getpid()), f"{self.grace:g}", "--",
                self.command, *self.args]
        proto = _ChildProtocol(self)
        if not IReactorProcess.providedBy(self.reactor):
            raise RuntimeError("this reactor cannot start processes")
        transport = self.reactor.spawnProcess(
            proto, sys.executable, argv, env=self.env, path=self.cwd)
        self._proto = proto
        self.pid = transport.pid

    def _abort(self) -> None:
        self._killpg(self.pid, signal.SIGKILL)

    def _killpg(self, pid: int | None, sig: int) -> None:
        if pid is None:
            return
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _fatal(self, why: str) -> None:
        self._run_error = self.last_error = why
        log.warn("proxy server {name} {why}: killed", name=self.name, why=why)
        self._killpg(self.pid, signal.SIGKILL)

    def _send(self, message: dict[str, Any]) -> None:
        proto = self._proto
        if proto is None or proto.transport is None:
            return
        proto.transport.write(orjson.dumps(message) + b"\n")

    def _process_ended(self, proto: _ChildProtocol, reason: Failure) -> None:
        if proto is not self._proto:
            return
        pid = self.pid
        self._proto = None
        for call in self._kill_calls:
            if call.active():
                call.cancel()
        self._kill_calls = []
        # Anything the server left in its group goes too.
        self._killpg(pid, signal.SIGKILL)
        error = None
        if self.state != "closed":
            code = getattr(reason.value, "exitCode", None)
            sig = getattr(reason.value, "signal", None)
            error = self._run_error or (
                f"exited with status {code}" if sig is None else f"killed by signal {sig}")
            if not reason.check(ProcessDone) or self.state == "ready":
                log.warn("proxy server {name} (pid {pid}) ended: {err}", name=self.name, pid=pid,
                         err=error)
        self._ended(error)
        if self.state == "closed":
            # Stopped for good: answer once nothing of the group is left (the SIGKILL above
            # takes a moment to reach what the server left behind).
            self._after_group_gone(pid, self._stopped, GROUP_WAIT_TRIES)

    def _stopped(self) -> None:
        waiters, self._ended_waiters = self._ended_waiters, []
        if self.on_state is not None:
            self.on_state(self)
        for d in waiters:
            d.callback(None)

    def _after_group_gone(self, pgid: int | None, then: Callable[[], None], tries: int) -> None:
        alive = pgid is not None
        if alive:
            try:
                os.killpg(pgid, 0)
            except OSError:  # ProcessLookupError: gone; PermissionError: not ours any more
                alive = False
        if not alive or tries <= 0:
            then()
            return
        self.reactor.callLater(GROUP_WAIT_STEP, self._after_group_gone, pgid, then, tries - 1)

    # -- messages from the child ---------------------------------------------------------------

    def _line(self, line: bytes) -> None:
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            self._stderr(b"[stdout, not JSON] " + line[:500] + b"\n")
            return
        self._message(msg)

"""
One child MCP server over stdio: its process, its JSON-RPC client side, its restarts.

The process runs under L{gasoline.proxy._watchdog} (own process group, dies with the daemon) with
C{cwd} set to the session's directory and a minimal environment (L{ENV_ALLOWLIST} plus the server's
own C{env}). Its stderr goes to a bounded buffer that error messages quote.

The protocol side (ids, cancellation, requests from the child, restarts) is
L{gasoline.proxy.peer.ServerPeer}'s; this module adds the process and its stdio framing.

Shutdown (L{ChildServer.stop}): close stdin, SIGTERM to the group after C{grace} (the watchdog
passes it on to every descendant and SIGKILLs them C{grace} later), SIGKILL to the group after
C{3 * grace}; the Deferred fires once the process is reaped.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import deque
from collections.abc import Mapping
from typing import Any, Callable

import orjson
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IReactorFDSet, IReactorProcess, IWriteDescriptor
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

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


def child_env(extra: dict[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowlisted part of C{environ} (the daemon's), then the server's C{extra}."""
    source = os.environ if environ is None else environ
    env = {k: source[k] for k in ENV_ALLOWLIST if k in source}
    env.update(extra)
    return env


@implementer(IWriteDescriptor)
class _Stdin:
    """The daemon's end of a child's stdin: a pipe it owns (non-blocking), not a process
    transport's writer.

    A message goes out in one C{write} the moment it is sent when nothing is queued before it:
    no reactor turn and no poll registration in between (a transport's writer always waits for
    the reactor's next turn, and registers and unregisters the descriptor each time). What the
    pipe cannot take at once (it holds 64 KiB) is queued, in order, and written as the pipe
    drains (the reactor's C{addWriter}, public C{IReactorFDSet} API). A child that closed its
    stdin (C{EPIPE}) drops what is queued: its exit is reported by the process, as before.
    """

    def __init__(self, reactor: IReactorFDSet, fd: int) -> None:
        self._reactor = reactor
        self._fd = fd
        self._queue: deque[bytes] = deque()
        #: Bytes of C{_queue[0]} already written.
        self._offset = 0
        self._writing = False
        self._closing = False

    @property
    def closed(self) -> bool:
        return self._fd < 0

    @property
    def queued(self) -> int:
        """Bytes waiting for the pipe to drain."""
        return sum(len(chunk) for chunk in self._queue) - self._offset

    def fileno(self) -> int:
        return self._fd

    def logPrefix(self) -> str:
        return "gasoline-proxy-stdin"

    def write(self, data: bytes) -> None:
        if self._fd < 0 or self._closing or not data:
            return
        if not self._queue:
            n = self._write(data)
            if n is None or n == len(data):
                return
            self._offset = n
        self._queue.append(data)
        if not self._writing:
            self._writing = True
            self._reactor.addWriter(self)

    def doWrite(self) -> None:
        queue = self._queue
        while queue:
            chunk = queue[0]
            n = self._write(memoryview(chunk)[self._offset:])
            if n is None:  # the pipe is gone (dropped)
                return None
            self._offset += n
            if self._offset < len(chunk):  # full: the rest on a later turn
                return None
            queue.popleft()
            self._offset = 0
        self._stop_writing()
        if self._closing:
            self.abort()
        return None

    def connectionLost(self, reason: Failure) -> None:
        self.abort()

    def close(self) -> None:
        """Close once what is queued is written (the child then reads end-of-file)."""
        if self._queue:
            self._closing = True
        else:
            self.abort()

    def abort(self) -> None:
        """Close now, dropping what is queued."""
        self._queue.clear()
        self._offset = 0
        self._stop_writing()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def _write(self, data: Any) -> int | None:
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0
        except OSError:  # EPIPE: the child closed its stdin or is gone
            self.abort()
            return None

    def _stop_writing(self) -> None:
        if self._writing:
            self._writing = False
            self._reactor.removeWriter(self)


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
                 restart: bool = True, grace: float = GRACE, cpu_seconds: int | None = None,
                 memory_mb: int | None = None, network: str = "any",
                 on_restart: Callable[["ChildServer"], None] | None = None) -> None:
        super().__init__(reactor, name, timeout=timeout, start_timeout=start_timeout,
                         capabilities=capabilities, on_request=on_request,
                         on_notification=on_notification, on_state=on_state, restart=restart,
                         on_restart=on_restart)
        self.command = command
        self.args = args
        self.env = env
        self.cwd = cwd
        self.grace = grace
        #: The server's own process limits (C{cpuSeconds}, C{memoryMB}), set by the watchdog.
        self.cpu_seconds = cpu_seconds
        self.memory_mb = memory_mb
        #: The server's C{network} policy (C{any}, C{loopback}, C{none}; the watchdog applies it).
        self.network = network
        self._proto: _ChildProtocol | None = None
        self._stdin: _Stdin | None = None
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
        if self._stdin is not None:
            self._stdin.close()
        pid = self.pid
        self._kill_calls += [
            self.reactor.callLater(self.grace, self._killpg, pid, signal.SIGTERM),
            # Later than the watchdog's own SIGKILL (at most 2 * grace after it ends the
            # server): the watchdog must outlive what it ends (the detached descendants it is
            # the subreaper of); this one is the fallback of systems without /proc.
            self.reactor.callLater(3 * self.grace, self._killpg, pid, signal.SIGKILL),
        ]
        return d

    # -- process -------------------------------------------------------------------------------

    def _open(self) -> None:
        limits = []
        if self.cpu_seconds:
            limits.append(f"cpu={self.cpu_seconds}")
        if self.memory_mb:
            limits.append(f"mem={self.memory_mb * 1024 * 1024}")
        if self.network != "any":
            limits.append(f"net={self.network}")
        argv = [sys.executable, "-I", "-S", WATCHDOG, str(os.getpid()), f"{self.grace:g}",
                *limits, "--", self.command, *self.args]
        proto = _ChildProtocol(self)
        if not (IReactorProcess.providedBy(self.reactor)
                and IReactorFDSet.providedBy(self.reactor)):
            raise RuntimeError("this reactor cannot start processes")
        # stdin is a pipe of our own (see _Stdin); both ends are close-on-exec, the child gets
        # the read end as its fd 0.
        read_end, write_end = os.pipe()
        try:
            transport = self.reactor.spawnProcess(
                proto, sys.executable, argv, env=self.env, path=self.cwd,
                childFDs={0: read_end, 1: "r", 2: "r"})
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        os.set_blocking(write_end, False)
        self._stdin = _Stdin(self.reactor, write_end)
        self._proto = proto
        self.pid = transport.pid

    def _abort(self) -> None:
        self._kill_all(self.pid)

    def _kill_all(self, pid: int | None) -> None:
        """SIGKILL the server and every descendant now: the watchdog does it on SIGUSR1 (one by
        one, detached descendants included, before it exits: a SIGKILL to the group would end
        the watchdog first and leave those to init). The group's SIGKILL follows after C{grace}
        for a watchdog that could not (cancelled once the process ended)."""
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            return
        self._kill_calls.append(
            self.reactor.callLater(self.grace, self._killpg, pid, signal.SIGKILL))

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
        self._kill_all(self.pid)

    def _send(self, message: dict[str, Any]) -> None:
        stdin = self._stdin
        if stdin is None or self._proto is None:
            return
        stdin.write(orjson.dumps(message) + b"\n")  # one message, one write (see _Stdin)

    def _process_ended(self, proto: _ChildProtocol, reason: Failure) -> None:
        if proto is not self._proto:
            return
        pid = self.pid
        self._proto = None
        stdin, self._stdin = self._stdin, None
        if stdin is not None:
            stdin.abort()
        for call in self._kill_calls:
            if call.active():
                call.cancel()
        self._kill_calls = []
        # Anything the server left in its group goes too.
        self._killpg(pid, signal.SIGKILL)
        error = None
        if self.state != "closed":
            ended = reason.value if isinstance(reason.value, (ProcessDone, ProcessTerminated)) \
                else None
            code = ended.exitCode if ended is not None else None
            sig = ended.signal if ended is not None else None
            error = self._run_error or self._exit_reason(code, sig)
            if not reason.check(ProcessDone) or self.state == "ready":
                log.warn("proxy server {name} (pid {pid}) ended: {err}", name=self.name, pid=pid,
                         err=error)
        self._ended(error)
        if self.state == "closed":
            # Stopped for good: answer once nothing of the group is left (the SIGKILL above
            # takes a moment to reach what the server left behind).
            self._after_group_gone(pid, self._stopped, GROUP_WAIT_TRIES)

    def _exit_reason(self, code: Any, sig: Any) -> str:
        """Why the server ended, from the watchdog's status (C{128 + n}: the server was killed
        by signal C{n}), naming the server's own limit where it is the likely cause."""
        if sig is None and isinstance(code, int) and 128 < code < 128 + 65:
            sig = code - 128
        if sig is None:
            why = f"exited with status {code}"
        else:
            try:
                why = f"killed by signal {sig} ({signal.Signals(sig).name})"
            except ValueError:
                why = f"killed by signal {sig}"
        if self.cpu_seconds and sig in (signal.SIGXCPU, signal.SIGKILL):
            why += (f": over its CPU time limit? (cpuSeconds {self.cpu_seconds} in the servers "
                    "file)")
        elif self.memory_mb and (sig is not None or code not in (0, None)):
            why += (f" (its memory limit is memoryMB {self.memory_mb} in the servers file: an "
                    "allocation over it fails)")
        return why

    def _stopped(self) -> None:
        waiters, self._ended_waiters = self._ended_waiters, []
        if self.on_state is not None:
            self.on_state(self)
        for d in waiters:
            d.callback(None)

    def _after_group_gone(self, pgid: int | None, then: Callable[[], None], tries: int) -> None:
        alive = pgid is not None
        if pgid is not None:
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

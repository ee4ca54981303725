"""
One child MCP server over stdio: its process, its JSON-RPC client side, its restarts.

The process runs under L{gasoline.proxy._watchdog} (own process group, dies with the daemon) with
C{cwd} set to the session's directory and a minimal environment (L{ENV_ALLOWLIST} plus the server's
own C{env}). Its stderr goes to a bounded buffer that error messages quote.

Requests the daemon sends get the child's own integer ids (never the agent's), so several agents'
calls on one child cannot collide; a cancelled request sends ``notifications/cancelled`` with the
child's id. Requests from the child (``roots/list``, ``sampling/createMessage``,
``elicitation/create``, ``ping``) and notifications (progress, ``tools/list_changed``, ...) go to
the owner's hooks (L{IChildOwner}-shaped: the proxy session).

Shutdown (L{ChildServer.stop}): close stdin, SIGTERM to the group after C{grace}, SIGKILL to the
group after another C{grace}; the Deferred fires once the process is reaped.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import deque
from typing import Any, Callable

import orjson
from twisted.internet.defer import CancelledError, Deferred, TimeoutError, fail, maybeDeferred, succeed
from twisted.internet.error import ProcessDone
from twisted.internet.interfaces import IReactorProcess
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline.core.errors import GasolineError
from gasoline.mcp.jsonrpc import JsonRpcError

log = Logger()

#: What a child inherits from the daemon's environment (the official SDKs' list).
ENV_ALLOWLIST = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
#: Protocol version the daemon speaks to its children.
CHILD_PROTOCOL = "2025-06-18"
#: Bytes of a child's stderr kept for error messages.
STDERR_KEEP = 16 * 1024
#: Longest line accepted from a child's stdout (a larger one kills the child).
MAX_LINE = 16 * 1024 * 1024
#: Seconds between closing stdin and SIGTERM, and between SIGTERM and SIGKILL.
GRACE = 2.0
#: Restart back-off: first delay, cap, and the uptime after which it starts over.
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
BACKOFF_RESET_AFTER = 60.0
#: Restarts in a row (each up for less than BACKOFF_RESET_AFTER) before waiting for a call.
MAX_FAILED_STARTS = 5

WATCHDOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_watchdog.py")


class ChildDown(GasolineError):
    code = "server_unavailable"
    retry = "The server is restarting; retry in a few seconds. Its stderr is quoted in details."


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
        self.child._ended(self, reason)


class ChildServer:
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
        self.reactor = reactor
        self.name = name
        self.command = command
        self.args = args
        self.env = env
        self.cwd = cwd
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.capabilities = capabilities
        self.on_request = on_request
        self.on_notification = on_notification
        self.on_state = on_state
        self.restart_enabled = restart
        self.grace = grace
        #: ``stopped`` (never started), ``starting``, ``ready``, ``down`` (crashed, restart
        #: pending), ``closed`` (stopped for good).
        self.state = "stopped"
        self.tools: list[dict[str, Any]] = []
        self.server_info: dict[str, Any] = {}
        self.server_capabilities: dict[str, Any] = {}
        self.pid: int | None = None
        self.restarts = 0
        #: Why the child last went down (kept while it restarts; cleared once it is ready).
        self.last_error: str | None = None
        #: Why the daemon ended the current run itself (a bad line, a failed initialize).
        self._run_error: str | None = None
        self._stderr_buf: deque[bytes] = deque()
        self._stderr_len = 0
        self._proto: _ChildProtocol | None = None
        self._next_id = 0
        self._pending: dict[int, Deferred] = {}
        #: Requests the child sent us, still being answered: child id -> Deferred.
        self._incoming: dict[Any, Deferred] = {}
        #: Callers waiting for the start in progress.
        self._waiters: list[Deferred] = []
        self._ended_waiters: list[Deferred] = []
        self._restart_call: Any = None
        self._kill_calls: list[Any] = []
        self._failures = 0
        self._started_at = 0.0

    # -- public --------------------------------------------------------------------------------

    def stderr_tail(self, limit: int = 2000) -> str:
        text = b"".join(self._stderr_buf).decode("utf-8", "replace")
        return text[-limit:]

    def ensure_started(self) -> Deferred:
        """Fire when the child is ready (start it if it is not running)."""
        if self.state == "ready":
            return succeed(self)
        if self.state == "closed":
            return fail(ChildDown(f"server {self.name} is stopped", server=self.name))
        if self.state == "down":
            if self._restart_call is not None:
                return fail(self._down_error())  # a restart is pending: fail fast
            # Restarts gave up (too many failed starts in a row): this call tries again.
            self.restarts += 1
            self._spawn()
        elif self.state == "stopped":
            self._spawn()
        if self.state != "starting":  # the spawn itself failed
            return fail(self._down_error())
        d: Deferred = Deferred()
        self._waiters.append(d)
        return d

    def _start_done(self, error: Exception | None) -> None:
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            if d.called:
                continue
            if error is None:
                d.callback(self)
            else:
                d.errback(error)

    def request(self, method: str, params: dict[str, Any] | None = None,
                timeout: float | None = None,
                on_cancel: Callable[[], None] | None = None) -> Deferred:
        """Send C{method}; fire with its result, fail with L{JsonRpcError} or L{ChildDown}.

        Cancelling the Deferred sends the child ``notifications/cancelled``.
        """
        if self._proto is None or self.state not in ("ready", "starting"):
            return fail(self._down_error())
        self._next_id += 1
        rid = self._next_id

        def cancel(_: Deferred) -> None:
            if self._pending.pop(rid, None) is not None and self._proto is not None:
                self._send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": rid, "reason": "cancelled by the caller"}})
            if on_cancel is not None:
                on_cancel()

        d: Deferred = Deferred(cancel)
        self._pending[rid] = d
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)
        t = self.timeout if timeout is None else timeout

        def timed_out(f: Failure) -> Failure:
            if f.check(TimeoutError):
                raise ChildDown(f"server {self.name} did not answer {method} within {t:g} s",
                                code="server_timeout", retry="", server=self.name)
            return f

        return d.addTimeout(t, self.reactor).addErrback(timed_out)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        if self._proto is not None:
            message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
            if params is not None:
                message["params"] = params
            self._send(message)

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

    def _spawn(self) -> None:
        self.state = "starting"
        self._run_error = None
        self._started_at = self.reactor.seconds()
        argv = [sys.executable, "-I", "-S", WATCHDOG, str(os.getpid()), f"{self.grace:g}", "--",
                self.command, *self.args]
        proto = _ChildProtocol(self)
        self._proto = proto
        try:
            if not IReactorProcess.providedBy(self.reactor):
                raise RuntimeError("this reactor cannot start processes")
            transport = self.reactor.spawnProcess(
                proto, sys.executable, argv, env=self.env, path=self.cwd)
        except Exception as e:  # e.g. the cwd does not exist
            self._proto = None
            self.last_error = f"cannot start: {e}"
            self._crashed()
            self._start_done(self._down_error())
            return
        self.pid = transport.pid
        d = self.request("initialize", {
            "protocolVersion": CHILD_PROTOCOL,
            "capabilities": self.capabilities,
            "clientInfo": {"name": "gasoline-proxy", "version": "1"},
        }, timeout=self.start_timeout)

        def initialized(result: Any) -> Deferred:
            if not isinstance(result, dict):
                raise ChildDown(f"server {self.name} answered initialize with {result!r}")
            self.server_info = result.get("serverInfo") or {}
            self.server_capabilities = result.get("capabilities") or {}
            self.notify("notifications/initialized")
            if "tools" not in self.server_capabilities:
                return succeed([])
            return self.list_tools(timeout=self.start_timeout)

        def listed(tools: list[dict[str, Any]]) -> None:
            if self.state != "starting":  # ended meanwhile (_ended reported it)
                return
            self.tools = tools
            self.state = "ready"
            self.last_error = None
            if self.on_state is not None:
                self.on_state(self)
            self._start_done(None)

        def failed(f: Failure) -> None:
            if self.state != "starting":  # the process ended: _ended reported it
                return
            self._run_error = self.last_error = f"failed to start: {f.getErrorMessage()}"
            log.warn("proxy server {name} failed to start: {err}", name=self.name,
                     err=f.getErrorMessage())
            self._start_done(self._down_error())
            if self._proto is not None:
                self._killpg(self.pid, signal.SIGKILL)

        d.addCallback(initialized).addCallbacks(listed, failed)

    def list_tools(self, timeout: float | None = None) -> Deferred:
        """Every tool of the child (following ``nextCursor``)."""
        tools: list[dict[str, Any]] = []

        def page(cursor: Any) -> Deferred:
            return self.request("tools/list", {"cursor": cursor} if cursor else {},
                                timeout=timeout).addCallback(got)

        def got(result: Any) -> Any:
            if isinstance(result, dict) and isinstance(result.get("tools"), list):
                tools.extend(t for t in result["tools"]
                             if isinstance(t, dict) and isinstance(t.get("name"), str))
                cursor = result.get("nextCursor")
                if cursor and len(tools) < 10_000:
                    return page(cursor)
            return tools

        return page(None)

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

    def _stderr(self, data: bytes) -> None:
        self._stderr_buf.append(data)
        self._stderr_len += len(data)
        while self._stderr_len > STDERR_KEEP and len(self._stderr_buf) > 1:
            self._stderr_len -= len(self._stderr_buf.popleft())

    def _send(self, message: dict[str, Any]) -> None:
        proto = self._proto
        if proto is None or proto.transport is None:
            return
        proto.transport.write(orjson.dumps(message) + b"\n")

    def _ended(self, proto: _ChildProtocol, reason: Failure) -> None:
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
        if self.state != "closed":
            code = getattr(reason.value, "exitCode", None)
            sig = getattr(reason.value, "signal", None)
            self.last_error = self._run_error or (
                f"exited with status {code}" if sig is None else f"killed by signal {sig}")
            if not reason.check(ProcessDone) or self.state == "ready":
                log.warn("proxy server {name} (pid {pid}) ended: {err}", name=self.name, pid=pid,
                         err=self.last_error)
        pending, self._pending = self._pending, {}
        incoming, self._incoming = self._incoming, {}
        for d in incoming.values():
            d.cancel()
        err = self._down_error()
        for d in pending.values():
            if not d.called:
                d.errback(err)
        self._start_done(err)
        if self.state == "closed":
            waiters, self._ended_waiters = self._ended_waiters, []
            if self.on_state is not None:
                self.on_state(self)
            for d in waiters:
                d.callback(None)
            return
        self._crashed()

    def _crashed(self) -> None:
        self.state = "down"
        self.tools_before_crash = self.tools
        if self.reactor.seconds() - self._started_at > BACKOFF_RESET_AFTER:
            self._failures = 0
        self._failures += 1
        if self.on_state is not None:
            self.on_state(self)
        if not self.restart_enabled:
            return
        if self._failures > MAX_FAILED_STARTS:
            self.last_error = (f"{self.last_error}; gave up after {MAX_FAILED_STARTS} restarts in "
                               "a row, the next call tries again")
            return
        delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (self._failures - 1))
        self._cancel_restart()
        self._restart_call = self.reactor.callLater(delay, self._restart)

    def _restart(self) -> None:
        self._restart_call = None
        if self.state != "down":
            return
        self.restarts += 1
        self._spawn()

    def _cancel_restart(self) -> None:
        call, self._restart_call = self._restart_call, None
        if call is not None and call.active():
            call.cancel()

    def _down_error(self) -> ChildDown:
        why = self.last_error or "not running"
        tail = self.stderr_tail(800).strip()
        return ChildDown(f"server {self.name} is unavailable ({why})", server=self.name,
                         state=self.state, stderr=tail)

    # -- messages from the child ---------------------------------------------------------------

    def _line(self, line: bytes) -> None:
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            self._stderr(b"[stdout, not JSON] " + line[:500] + b"\n")
            return
        if not isinstance(msg, dict):
            return
        if "method" in msg:
            method = msg.get("method")
            params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
            if not isinstance(method, str):
                return
            if "id" in msg:
                self._child_request(msg["id"], method, params)
            elif method == "notifications/cancelled":
                rid = params.get("requestId")
                d = self._incoming.pop(rid, None) if isinstance(rid, (int, str)) else None
                if d is not None:
                    d.cancel()
            else:
                try:
                    self.on_notification(self, method, params)
                except Exception:
                    log.failure("proxy notification hook failed")
            return
        rid = msg.get("id")
        d = self._pending.pop(rid, None) if isinstance(rid, int) else None
        if d is None or d.called:
            return
        if "error" in msg:
            err = msg["error"] if isinstance(msg["error"], dict) else {}
            code = err.get("code") if isinstance(err.get("code"), int) else -32603
            d.errback(JsonRpcError(code, str(err.get("message", "error")), err.get("data")))
        else:
            d.callback(msg.get("result"))

    def _child_request(self, rid: Any, method: str, params: dict[str, Any]) -> None:
        d = maybeDeferred(self.on_request, self, method, params)
        if not d.called and isinstance(rid, (int, str)):
            self._incoming[rid] = d

            def forget(value: Any) -> Any:
                if self._incoming.get(rid) is d:
                    del self._incoming[rid]
                return value

            d.addBoth(forget)

        def answer(result: Any) -> None:
            self._send({"jsonrpc": "2.0", "id": rid, "result": result})

        def refused(f: Failure) -> None:
            if f.check(JsonRpcError):
                e = f.value
                error: dict[str, Any] = {"code": e.code, "message": e.message}
                if getattr(e, "data", None) is not None:
                    error["data"] = e.data
            elif f.check(CancelledError):
                return
            else:
                log.failure("proxy: answering {method} for {name} failed", f, method=method,
                            name=self.name)
                error = {"code": -32603, "message": f.getErrorMessage()}
            self._send({"jsonrpc": "2.0", "id": rid, "error": error})

        d.addCallbacks(answer, refused)

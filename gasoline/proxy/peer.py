"""
The daemon's client side of one MCP server, whatever carries its messages.

L{ServerPeer} holds what a stdio child (L{gasoline.proxy.child.ChildServer}) and a remote server
reached by URL (L{gasoline.proxy.remote.RemoteServer}) have in common: the C{initialize} /
C{tools/list} handshake, the daemon's own request ids, pending requests and their timeouts,
cancellation, requests and notifications from the server, restarts with back-off, and the state
the session and C{GET /session/<id>} read. A subclass says how to open, write to and close the
connection (L{ServerPeer._open}, L{ServerPeer._send}, L{ServerPeer._abort}) and calls
L{ServerPeer._message} for each decoded message and L{ServerPeer._ended} when the connection is
gone.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from twisted.internet.defer import (
    CancelledError,
    Deferred,
    TimeoutError,
    fail,
    maybeDeferred,
    succeed,
)
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline.core.errors import GasolineError
from gasoline.mcp.jsonrpc import JsonRpcError, track_pending

log = Logger()

#: Protocol version the daemon asks its servers for.
CHILD_PROTOCOL = "2025-06-18"
#: Bytes of a server's diagnostics (a child's stderr, a remote server's error bodies) kept.
STDERR_KEEP = 16 * 1024
#: Restart back-off: first delay, cap, and the uptime after which it starts over.
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
BACKOFF_RESET_AFTER = 60.0
#: Restarts in a row (each up for less than BACKOFF_RESET_AFTER) before waiting for a call.
MAX_FAILED_STARTS = 5


class ChildDown(GasolineError):
    code = "server_unavailable"
    retry = "The server is restarting; retry in a few seconds. Its stderr is quoted in details."


class ServerPeer:
    """One MCP server as the daemon's client sees it (see the module docstring).

    @param reactor: provides C{IReactorTime} (and what the subclass needs).
    @param on_request: C{(peer, method, params) -> Deferred | value} for requests the server
        sends (the value is the result; raise L{JsonRpcError} to answer an error).
    @param on_notification: C{(peer, method, params) -> None}.
    @param on_state: C{(peer) -> None} after a start, a crash or a stop.
    """

    #: What L{_down_error} calls the diagnostics it quotes.
    diagnostics = "stderr"

    def __init__(self, reactor: Any, name: str, *, timeout: float, start_timeout: float,
                 capabilities: dict[str, Any],
                 on_request: Callable[..., Any], on_notification: Callable[..., None],
                 on_state: Callable[[Any], None] | None = None,
                 restart: bool = True,
                 on_restart: Callable[[Any], None] | None = None) -> None:
        self.reactor = reactor
        self.name = name
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.capabilities = capabilities
        self.on_request = on_request
        self.on_notification = on_notification
        self.on_state = on_state
        self.restart_enabled = restart
        #: C{(peer) -> None} each time a new run starts after the first (for C{/metrics}).
        self.on_restart = on_restart
        #: C{stopped} (never started), C{starting}, C{ready}, C{down} (crashed, restart
        #: pending), C{closed} (stopped for good).
        self.state = "stopped"
        self.tools: list[dict[str, Any]] = []
        self.server_info: dict[str, Any] = {}
        self.server_capabilities: dict[str, Any] = {}
        #: The protocol version the server answered C{initialize} with.
        self.protocol_version: str | None = None
        self.pid: int | None = None
        self.restarts = 0
        #: Why the server last went down (kept while it restarts; cleared once it is ready).
        self.last_error: str | None = None
        #: Why the daemon ended the current run itself (a bad line, a failed initialize).
        self._run_error: str | None = None
        self._stderr_buf: deque[bytes] = deque()
        self._stderr_len = 0
        self._next_id = 0
        self._pending: dict[int, Deferred] = {}
        #: Requests the server sent us, still being answered: their id -> Deferred.
        self._incoming: dict[Any, Deferred] = {}
        #: Our requests in flight that said whom they serve (L{request}'s C{origin}).
        self._origins: dict[int, Any] = {}
        #: Callers waiting for the start in progress.
        self._waiters: list[Deferred] = []
        self._restart_call: Any = None
        self._failures = 0
        self._started_at = 0.0
        #: A token per start, so late events of an earlier run are ignored.
        self._run: object | None = None

    def show_tools(self, tools: list[dict[str, Any]]) -> None:
        """The server's tools, as its latest C{tools/list} answered (or, for a restored peer
        not started yet, as they were saved)."""
        self.tools = tools

    # -- to implement ----------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """A connection to the server is open (messages can be sent)."""
        raise NotImplementedError

    def _open(self) -> None:
        """Open the connection; L{_spawn} then sends C{initialize}. May return a Deferred
        (the handshake waits for it); raising or failing marks the start failed."""
        raise NotImplementedError

    def _send(self, message: dict[str, Any]) -> None:
        """Write one JSON-RPC message to the server."""
        raise NotImplementedError

    def _abort(self) -> None:
        """The run failed (a failed initialize, a broken stream): drop the connection at once;
        L{_ended} follows."""
        raise NotImplementedError

    def stop(self) -> Deferred:
        """Stop for good; fire once the connection (or process) is gone."""
        raise NotImplementedError

    # -- public ----------------------------------------------------------------------------------

    def stderr_tail(self, limit: int = 2000) -> str:
        text = b"".join(self._stderr_buf).decode("utf-8", "replace")
        return text[-limit:]

    def ensure_started(self) -> Deferred:
        """Fire when the server is ready (start it if it is not running)."""
        if self.state == "ready":
            return succeed(self)
        if self.state == "closed":
            return fail(ChildDown(f"server {self.name} is stopped", server=self.name))
        if self.state == "down":
            if self._restart_call is not None:
                return fail(self._down_error())  # a restart is pending: fail fast
            # Restarts gave up (too many failed starts in a row): this call tries again.
            self._count_restart()
            self._spawn()
        elif self.state == "stopped":
            self._spawn()
        if self.state != "starting":  # the start itself failed
            return fail(self._down_error())
        d: Deferred = Deferred()
        self._waiters.append(d)
        return d

    def request(self, method: str, params: dict[str, Any] | None = None,
                timeout: float | None = None,
                on_cancel: Callable[[], None] | None = None, origin: Any = None) -> Deferred:
        """Send C{method}; fire with its result, fail with L{JsonRpcError} or L{ChildDown}.

        Cancelling the Deferred sends the server C{notifications/cancelled}.

        @param origin: whom the request serves, for a transport that ties the server's own
            requests to one of ours (L{_message}'s C{related}): C{on_request} is then given
            C{origin=} for them. Kept while the request is in flight.
        """
        if not self.connected or self.state not in ("ready", "starting"):
            return fail(self._down_error())
        self._next_id += 1
        rid = self._next_id

        def cancel(_: Deferred) -> None:
            if self._pending.pop(rid, None) is not None and self.connected:
                self._send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": rid, "reason": "cancelled by the caller"}})
            self._cancelled(rid)
            if on_cancel is not None:
                on_cancel()

        d: Deferred = Deferred(cancel)
        self._pending[rid] = d
        if origin is not None:
            self._origins[rid] = origin
            d.addBoth(self._forget_origin, rid)
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

    def _forget_origin(self, result: Any, rid: int) -> Any:
        self._origins.pop(rid, None)
        return result

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        if self.connected:
            message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
            if params is not None:
                message["params"] = params
            self._send(message)

    def list_tools(self, timeout: float | None = None) -> Deferred:
        """Every tool of the server (following C{nextCursor})."""
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

    # -- start, crash, restart -------------------------------------------------------------------

    def _cancelled(self, rid: int) -> None:
        """Request C{rid} was cancelled by the caller (a subclass may drop its response)."""

    def _spawn(self) -> None:
        self.state = "starting"
        self._run_error = None
        self._started_at = self.reactor.seconds()
        run = self._run = object()

        def opened(_: Any) -> None:
            if self._run is run and self.state == "starting":
                self._handshake()

        def failed(f: Failure) -> None:
            if self._run is not run or self.state != "starting":
                return
            self._opening_failed(f"cannot start: {f.getErrorMessage()}")

        # Synchronous for a child process; a remote legacy-SSE server first sends its endpoint.
        maybeDeferred(self._open).addCallbacks(opened, failed)

    def _opening_failed(self, why: str) -> None:
        self.last_error = why
        self._crashed()
        self._start_done(self._down_error())

    def _handshake(self) -> None:
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
            version = result.get("protocolVersion")
            self.protocol_version = version if isinstance(version, str) else CHILD_PROTOCOL
            self._initialized()
            self.notify("notifications/initialized")
            if "tools" not in self.server_capabilities:
                return succeed([])
            return self.list_tools(timeout=self.start_timeout)

        def listed(tools: list[dict[str, Any]]) -> None:
            if self.state != "starting":  # ended meanwhile (_ended reported it)
                return
            self.show_tools(tools)
            self.state = "ready"
            self.last_error = None
            self._ready()
            if self.on_state is not None:
                self.on_state(self)
            self._start_done(None)

        def failed(f: Failure) -> None:
            if self.state != "starting":  # the connection ended: _ended reported it
                return
            self._run_error = self.last_error = f"failed to start: {f.getErrorMessage()}"
            log.warn("proxy server {name} failed to start: {err}", name=self.name,
                     err=f.getErrorMessage())
            error = self._down_error()
            if self.connected:
                self._abort()
            self._start_done(error)

        d.addCallback(initialized).addCallbacks(listed, failed)

    def _initialized(self) -> None:
        """C{initialize} was answered (before C{notifications/initialized} goes out)."""

    def _ready(self) -> None:
        """The handshake is done and the tools are listed."""

    def _start_done(self, error: Exception | None) -> None:
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            if d.called:
                continue
            if error is None:
                d.callback(self)
            else:
                d.errback(error)

    def _ended(self, error: str | None) -> None:
        """The connection (or process) is gone; C{error} says why (None: an orderly end).

        Fails every pending request, then restarts with back-off unless stopped for good.
        """
        if self.state != "closed":
            self.last_error = self._run_error or error or "the connection ended"
        pending, self._pending = self._pending, {}
        incoming, self._incoming = self._incoming, {}
        for d in incoming.values():
            d.cancel()
        err = self._down_error()
        for d in pending.values():
            if not d.called:
                d.errback(err)
        if self.state != "closed":
            self._crashed()  # before the waiters hear of it: they see the state "down"
        self._start_done(err)

    def _crashed(self) -> None:
        self.state = "down"
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
        self._count_restart()
        self._spawn()

    def _count_restart(self) -> None:
        self.restarts += 1
        if self.on_restart is not None:
            self.on_restart(self)

    def _cancel_restart(self) -> None:
        call, self._restart_call = self._restart_call, None
        if call is not None and call.active():
            call.cancel()

    def _down_error(self) -> ChildDown:
        why = self.last_error or "not running"
        tail = self.stderr_tail(800).strip()
        details: dict[str, Any] = {self.diagnostics: tail}
        return ChildDown(f"server {self.name} is unavailable ({why})", server=self.name,
                         state=self.state, **details)

    def _stderr(self, data: bytes) -> None:
        self._stderr_buf.append(data)
        self._stderr_len += len(data)
        while self._stderr_len > STDERR_KEEP and len(self._stderr_buf) > 1:
            self._stderr_len -= len(self._stderr_buf.popleft())

    # -- messages from the server ----------------------------------------------------------------

    def _message(self, msg: Any, related: int | None = None) -> None:
        """Dispatch one decoded JSON-RPC message from the server.

        @param related: the id of our request this message came with, when the transport says
            (a streamable HTTP server sends its requests about a call on that call's answer
            stream); C{None} when it cannot (stdio, a stream not tied to a request).
        """
        if not isinstance(msg, dict):
            return
        if "method" in msg:
            method = msg.get("method")
            params = raw_params if isinstance(raw_params := msg.get("params"), dict) else {}
            if not isinstance(method, str):
                return
            if "id" in msg:
                origin = self._origins.get(related) if related is not None else None
                self._server_request(msg["id"], method, params, origin)
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
            code = raw_code if isinstance(raw_code := err.get("code"), int) else -32603
            d.errback(JsonRpcError(code, str(err.get("message", "error")), err.get("data")))
        else:
            d.callback(msg.get("result"))

    def _server_request(self, rid: Any, method: str, params: dict[str, Any],
                        origin: Any = None) -> None:
        if origin is None:
            d = maybeDeferred(self.on_request, self, method, params)
        else:
            d = maybeDeferred(self.on_request, self, method, params, origin=origin)
        if not d.called and isinstance(rid, (int, str)):
            track_pending(self._incoming, rid, d)

        def answer(result: Any) -> None:
            self._send({"jsonrpc": "2.0", "id": rid, "result": result})

        def refused(f: Failure) -> None:
            e = f.value
            if isinstance(e, JsonRpcError):
                error: dict[str, Any] = {"code": e.code, "message": e.message}
                if e.data is not None:
                    error["data"] = e.data
            elif f.check(CancelledError):
                return
            else:
                log.failure("proxy: answering {method} for {name} failed", f, method=method,
                            name=self.name)
                error = {"code": -32603, "message": f.getErrorMessage()}
            self._send({"jsonrpc": "2.0", "id": rid, "error": error})

        d.addCallbacks(answer, refused)

"""
Proxy sessions: one agent's working directory, allowed directories and child MCP servers.

L{ProxyManager} owns every session, the shared (C{remote}) children and the limits. A session is
created by C{POST /session/init} (L{ProxyManager.create}); its id is also an MCP session id
(C{Mcp-Session-Id}), and every MCP session bound to it (that one, or a C{gasoline connect}
connection naming it) lists Gasoline's own tools plus the session's aggregated tools
(L{SessionTools}, the generic C{extra_tools} hook of L{gasoline.mcp.session.McpSession}).

A session ends on C{DELETE /session/{id}}, when its MCP session ends (C{DELETE /mcp} or the MCP
idle timeout), after C{sessionIdleTimeout} seconds without a request on any bound MCP session (the
main cleanup path: agents rarely send DELETE), or when the daemon stops. Ending it stops its local
children (stdin closed, SIGTERM, SIGKILL, reaped).
"""

from __future__ import annotations

import math
import os
import secrets
from pathlib import Path
from typing import Any

import attrs
import orjson
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.interfaces import IReactorProcess
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gasoline.common import client_id_for_cwd
from gasoline.core.documents import JsonDocument
from gasoline.core.errors import GasolineError
from gasoline.core.ratelimit import SlidingWindowLimiter
from gasoline.interfaces import ISessionTools
from gasoline.mcp import jsonrpc
from gasoline.mcp.jsonrpc import INVALID_REQUEST, JsonRpcError
from gasoline.mcp.tools import Tool, error_result
from gasoline.proxy.child import ChildServer, child_env
from gasoline.proxy.remote import RemoteServer
from gasoline.proxy.config import (
    LOCAL,
    REMOTE,
    ProxyConfig,
    ProxyConfigError,
    ServerConfig,
    project_servers,
)
from gasoline.proxy.naming import build_table
from gasoline.proxy.peer import ServerPeer
from gasoline.proxy.paths import PathRefused, check_arguments

log = Logger()

#: C{protocolVersion} in the C{/session/init} answer (the newest the daemon speaks).
PROTOCOL_VERSION = "2025-11-25"
#: Debounce for a child's C{notifications/tools/list_changed}.
LIST_CHANGED_DELAY = 0.5
#: Largest number of bound MCP sessions (connector connections) per proxy session.
MAX_BINDINGS = 8


class ProxyError(GasolineError):
    code = "proxy_error"


class SessionLimit(ProxyError):
    code = "too_many_sessions"
    retry = "End an idle session (DELETE /session/<id>) or raise proxy.maxSessions."


class ChildLimit(ProxyError):
    code = "too_many_children"
    retry = "End an idle session or raise proxy.maxChildrenPerServer."


class ServerLimit(ProxyError):
    """A proxied server's own limit (C{callsPerMinute}, C{maxResultBytes}) was hit: the error
    names the server and the field of the servers file."""

    code = "server_limit"


class UnknownSession(ProxyError):
    code = "unknown_session"
    retry = "Open a new session with POST /session/init."


@attrs.define(eq=False)
class SessionServer:
    """One configured server as one session sees it."""

    config: ServerConfig
    context: str
    enabled: bool
    reason: str | None = None
    working_directory: str | None = None
    allowed_directories: tuple[str, ...] = ()
    child: ServerPeer | None = None

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"executionContext": self.context, "enabled": self.enabled}
        if self.context == LOCAL and self.working_directory is not None:
            d["workingDirectory"] = self.working_directory
            d["allowedDirectories"] = list(self.allowed_directories)
        elif self.context == REMOTE:
            if self.config.command is not None:  # what this session's calls are checked against
                d["allowedDirectories"] = list(self.allowed_directories)
            child = self.child
            d["endpoint"] = child.endpoint if isinstance(child, RemoteServer) else "internal"
            if isinstance(child, RemoteServer):
                d["transport"] = child.transport
        child = self.child
        if child is not None:
            d["status"] = child.state
            if child.restarts:
                d["restarts"] = child.restarts
            if child.state != "ready" and child.last_error:
                d["error"] = child.last_error
        if self.reason:
            d["reason"] = self.reason
        return d


@implementer(ISessionTools)
class SessionTools:
    """The session's aggregated tools, as the MCP server asks for them (C{extra_tools})."""

    def __init__(self, session: "ProxySession") -> None:
        self._session = session

    def definitions(self) -> list[dict[str, Any]]:
        return self._session.tool_definitions()

    def get(self, name: str) -> Tool | None:
        return self._session.tools.get(name)

    def progress(self, params: dict[str, Any]) -> None:
        self._session.agent_progress(params)


@attrs.define(eq=False)
class ProxySession:
    manager: "ProxyManager"
    session_id: str
    client_id: str
    working_directory: str
    client_info: dict[str, Any]
    capabilities: dict[str, Any]
    preferences: dict[str, Any]
    created_at: float
    servers: dict[str, SessionServer] = attrs.field(factory=dict)
    #: Aggregated name -> Tool (handler routes to the child).
    tools: dict[str, Tool] = attrs.field(factory=dict)
    #: MCP sessions bound to this one (the primary first).
    bound: list[Any] = attrs.field(factory=list)
    last_used: float = 0.0
    closed: bool = False
    idle_call: Any = None
    _definitions: list[dict[str, Any]] | None = None
    #: Child progress token -> the agent's request context.
    _progress: dict[str, Any] = attrs.field(factory=dict)
    #: Calls in flight per server (their contexts; the newest last) for server->agent requests.
    _active: dict[str, list[Any]] = attrs.field(factory=dict)
    _list_changed_call: Any = None
    _next_token: int = 0
    #: Progress token given to the agent on a relayed request -> (the child, its own token).
    _relay_progress: dict[str, tuple[Any, Any]] = attrs.field(factory=dict)

    # -- tools ---------------------------------------------------------------------------------

    def rebuild_tools(self) -> None:
        listing: dict[str, list[str]] = {}
        defs: dict[tuple[str, str], dict[str, Any]] = {}
        for name, entry in self.servers.items():
            child = entry.child
            if not entry.enabled or child is None:
                continue
            tools = child.tools
            listing[name] = [t["name"] for t in tools]
            for t in tools:
                defs[(name, t["name"])] = t
        table = build_table(listing)
        new: dict[str, Tool] = {}
        for agg, (server, tool) in table.items():
            d = defs[(server, tool)]
            schema = raw_schema if isinstance(raw_schema := d.get("inputSchema"), dict) else \
                {"type": "object"}
            desc = d.get("description") if isinstance(d.get("description"), str) else ""
            new[agg] = Tool(
                name=agg, description=f"[{server}] {desc}".strip(), input_schema=schema,
                handler=self._handler(server, tool), title=d.get("title") if isinstance(
                    d.get("title"), str) else None,
                annotations=d.get("annotations") if isinstance(d.get("annotations"), dict)
                else None,
                proxied=True,
            )
        self.tools = new
        self._definitions = None

    def tool_definitions(self) -> list[dict[str, Any]]:
        self.touch()
        if self._definitions is None:
            out = []
            for tool in self.tools.values():
                d = tool.definition()
                child_def = None
                # outputSchema and _meta are forwarded unchanged.
                server, original = self.route(tool.name)
                entry = self.servers.get(server)
                if entry is not None and entry.child is not None:
                    child_def = next((t for t in entry.child.tools if t.get("name") == original),
                                     None)
                if child_def is not None and isinstance(child_def.get("outputSchema"), dict):
                    d["outputSchema"] = child_def["outputSchema"]
                out.append(d)
            self._definitions = out
        return self._definitions

    def route(self, aggregated: str) -> tuple[str, str]:
        handler = self.tools[aggregated].handler
        return handler.server, handler.tool  # type: ignore[attr-defined]

    def describe_tools(self) -> list[dict[str, Any]]:
        out = []
        for name in self.tools:
            server, original = self.route(name)
            out.append({"name": name, "executionContext": self.servers[server].context,
                        "server": server, "tool": original})
        return out

    def _handler(self, server: str, tool: str):
        def handler(ctx: Any, arguments: dict[str, Any]) -> Any:
            return self.call(ctx, server, tool, arguments)

        handler.server = server  # type: ignore[attr-defined]
        handler.tool = tool  # type: ignore[attr-defined]
        return handler

    # -- calls ---------------------------------------------------------------------------------

    def touch(self) -> None:
        self.last_used = self.manager.clock.seconds()

    def call(self, ctx: Any, server: str, tool: str, arguments: dict[str, Any]) -> Any:
        self.touch()
        manager = self.manager
        started = self.last_used
        entry = self.servers.get(server)
        if entry is None or not entry.enabled or entry.child is None:
            reason = entry.reason if entry is not None else "unknown server"
            manager.call_done(server, started, False)
            return error_result(ProxyError(f"server {server} is disabled: {reason}",
                                           code="server_disabled"))
        config = entry.config
        if config.calls_per_minute is not None:
            wait = manager.limiter_for(server, config.calls_per_minute).check(self.session_id)
            if wait:
                manager.call_done(server, started, False)
                seconds = round(wait + 0.0005, 3)
                return error_result(ServerLimit(
                    f"server {server}: at most {config.calls_per_minute} calls per minute per "
                    "session (callsPerMinute in the servers file)", code="server_rate_limited",
                    retry=f"Wait {seconds:g} s before calling this server again.",
                    retry_after_ms=math.ceil(wait * 1000), retry_after_seconds=seconds,
                    server=server,
                    limit=config.calls_per_minute))
        # Every server run by command is checked, local or shared: its process reads this
        # machine's files either way (an override to remote never turns the check off).
        if entry.config.command is not None and entry.allowed_directories:
            try:
                check_arguments(arguments, entry.working_directory or self.working_directory,
                                entry.allowed_directories)
            except PathRefused as e:  # code path_not_allowed, with allowedDirectories
                manager.call_done(server, started, False)
                return error_result(e)
        child = entry.child
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        token = None
        if ctx.progress_token is not None:
            self._next_token += 1
            token = f"{self.session_id[:8]}-{self._next_token}"
            self._progress[token] = ctx
            self.manager.progress_routes[token] = self
            params["_meta"] = {"progressToken": token}
        active = self._active.setdefault(server, [])
        active.append(ctx)
        # A shared server's requests about this call (sampling, elicitation) can then be told
        # apart from another session's, where its transport says which call they are about.
        origin = (self, ctx) if entry.context == REMOTE else None

        def send(_: Any) -> Deferred:
            return child.request("tools/call", params, origin=origin)

        def done(result: Any) -> Any:
            if token is not None:
                self._progress.pop(token, None)
                self.manager.progress_routes.pop(token, None)
            if ctx in active:
                active.remove(ctx)
            self.touch()
            cap = config.max_result_bytes
            if cap is not None and isinstance(result, dict):
                size = _size(result)
                if size > cap:
                    result = error_result(ServerLimit(
                        f"server {server}: the result of {tool} is {size} bytes, over this "
                        f"server's limit of {cap} (maxResultBytes in the servers file)",
                        code="server_result_too_large",
                        retry="Ask for less (a range, a page), or raise maxResultBytes.",
                        server=server, limit=cap, size=size))
            manager.call_done(server, started, not isinstance(result, Failure) and not (
                isinstance(result, dict) and result.get("isError") is True))
            return result

        # A ready child gets the request at once: the Deferred returned is then the request's
        # own, still waiting, so the MCP server tracks it as in flight and can cancel it.
        if child.state == "ready":
            d = child.request("tools/call", params, origin=origin)
        else:
            d = child.ensure_started().addCallback(send)
        d.addBoth(done)
        return d

    # -- from the children ---------------------------------------------------------------------

    def child_request(self, child: ServerPeer, server: str, method: str,
                      params: dict[str, Any], ctx: Any = None) -> Any:
        """Answer a request from one of the session's servers (C{ctx}: the call it is about,
        when known)."""
        entry = self.servers.get(server)
        if method == "ping":
            return {}
        if method == "roots/list":
            dirs = entry.allowed_directories if entry is not None else ()
            return {"roots": [{"uri": Path(d).as_uri(), "name": os.path.basename(d) or d}
                              for d in dirs]}
        if method in ("sampling/createMessage", "elicitation/create"):
            capability = method.split("/")[0]
            return self.relay(server, capability, method, params, child, ctx)
        raise JsonRpcError(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {method}")

    def relay(self, server: str, capability: str, method: str, params: dict[str, Any],
              child: Any = None, ctx: Any = None) -> Any:
        """Send a child's sampling/elicitation request to the agent, if it declared it.

        A progress token in the request is replaced by one of the proxy's (unique across the
        daemon's sessions and children); the agent's progress for it goes back to C{child} with
        the child's own token (L{agent_progress})."""
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        mine = None
        if child is not None and isinstance(token, (str, int)) and not isinstance(token, bool):
            self._next_token += 1
            mine = f"{self.session_id[:8]}-r{self._next_token}"
            self._relay_progress[mine] = (child, token)
            params = {**params, "_meta": {**(meta or {}), "progressToken": mine}}
        try:
            d = self._relay(server, capability, method, params, ctx)
        except Exception:
            self._relay_progress.pop(mine, None)  # type: ignore[arg-type]
            raise
        if mine is not None:
            def forget(value: Any) -> Any:
                self._relay_progress.pop(mine, None)
                return value

            d.addBoth(forget)
        return d

    def agent_progress(self, params: dict[str, Any]) -> None:
        """The agent's C{notifications/progress}: to the child whose relayed request it is
        about, with the child's own token; anything else is dropped."""
        token = params.get("progressToken")
        route = self._relay_progress.get(token) if isinstance(token, str) else None
        if route is None:
            return
        child, original = route
        child.notify("notifications/progress", {**params, "progressToken": original})

    def _relay(self, server: str, capability: str, method: str, params: dict[str, Any],
               about: Any = None) -> Any:
        active = self._active.get(server) or []
        if about is not None and about in active and \
                capability in (about.session.client_capabilities or {}):
            ctx = about  # the call the request is about: on that call's stream
        else:
            ctx = next((c for c in reversed(active)
                        if capability in (c.session.client_capabilities or {})), None)
        if ctx is not None:
            return self._ask_agent(ctx.session, ctx.emit, method, params)
        session = next((s for s in self.bound
                        if not s.closed and capability in (s.client_capabilities or {})), None)
        if session is None:
            raise JsonRpcError(INVALID_REQUEST, f"the agent did not declare the {capability} "
                               "capability; Gasoline refuses this request on its behalf")
        return self._ask_agent(session, session.send, method, params)

    def _ask_agent(self, mcp_session: Any, emit: Any, method: str,
                   params: dict[str, Any]) -> Deferred:
        """Send the agent a request with its own id (the MCP server routes the answer through
        C{mcp_session.outgoing}); cancelling it (the child cancelled, or the timeout) tells the
        agent with C{notifications/cancelled}."""
        rid = mcp_session.next_request_id()

        def cancel(_: Deferred) -> None:
            if mcp_session.outgoing.pop(rid, None) is not None and not mcp_session.closed:
                emit(jsonrpc.notification("notifications/cancelled", {
                    "requestId": rid, "reason": "the MCP server that asked cancelled it"}))

        d: Deferred = Deferred(cancel)
        mcp_session.outgoing[rid] = d
        emit(jsonrpc.request(rid, method, params))
        return d.addTimeout(self.manager.config_client_timeout, self.manager.clock)

    def child_notification(self, child: ServerPeer, server: str, method: str,
                           params: dict[str, Any]) -> None:
        if method == "notifications/progress":
            ctx = self._progress.get(params.get("progressToken"))  # type: ignore[arg-type]
            if ctx is not None:
                forwarded = dict(params)
                forwarded["progressToken"] = ctx.progress_token
                ctx.emit(jsonrpc.notification("notifications/progress", forwarded))
        elif method == "notifications/tools/list_changed":
            self.list_changed(child)
        elif method == "notifications/message":
            level = params.get("level")
            for s in self.bound:
                if not s.closed and isinstance(level, str) and s.wants_log(level):
                    forwarded = dict(params)
                    forwarded["logger"] = f"{server}" + (f".{params['logger']}" if isinstance(
                        params.get("logger"), str) else "")
                    s.send(jsonrpc.notification("notifications/message", forwarded))

    def list_changed(self, child: ServerPeer) -> None:
        """A child's tool list changed: refresh it, then tell the agent once (debounced)."""
        if self._list_changed_call is not None and self._list_changed_call.active():
            self._list_changed_call.reset(LIST_CHANGED_DELAY)
            return
        self._list_changed_call = self.manager.clock.callLater(
            LIST_CHANGED_DELAY, self._refresh_tools)

    def _refresh_tools(self) -> None:
        self._list_changed_call = None
        ds = [entry.child.list_tools().addCallback(_set_tools, entry.child)
              for entry in self.servers.values()
              if entry.child is not None and entry.child.state == "ready"]

        def announce(_: Any) -> None:
            if self.closed:
                return
            self.rebuild_tools()
            for s in self.bound:
                if not s.closed:
                    s.send(jsonrpc.notification("notifications/tools/list_changed"))

        DeferredList(ds, consumeErrors=True).addCallback(announce)

    def child_state(self, child: ServerPeer) -> None:
        if not self.closed:
            self.rebuild_tools()

    # -- description ---------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id,
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {
                "tools": {"listChanged": True},
                "session": {"local_execution": True, "remote_execution": True},
            },
            "clientId": self.client_id,
            "workingDirectory": self.working_directory,
            "createdAt": self.created_at,
            "lastUsed": self.last_used,
            "idleTimeout": self.manager.config.session_idle_timeout,
            "servers": {name: entry.describe() for name, entry in self.servers.items()},
            "tools": self.describe_tools(),
        }

    def to_json(self) -> dict[str, Any]:
        """What is persisted (enough to re-create the session after a daemon restart)."""
        primary = self.bound[0] if self.bound else None
        return {
            "sessionId": self.session_id, "clientId": self.client_id,
            "workingDirectory": self.working_directory, "clientInfo": self.client_info,
            "capabilities": self.capabilities, "preferences": self.preferences,
            "createdAt": self.created_at, "lastUsed": self.last_used,
            # The tool lists, so a restored session lists and routes them before its children
            # are started again (lazily, by the first call).
            "tools": {name: e.child.tools for name, e in self.servers.items()
                      if e.child is not None and e.child.tools},
            "mcp": None if primary is None or not primary.initialized else {
                "protocolVersion": primary.protocol_version,
                "capabilities": primary.client_capabilities,
                "clientInfo": primary.client_info,
            },
        }


def _set_tools(tools: list[dict[str, Any]], child: ServerPeer) -> None:
    child.tools = tools


@attrs.define(eq=False)
class _Shared:
    """One shared (C{remote}) child and the sessions using it."""

    child: ServerPeer
    users: set[str] = attrs.field(factory=set)


class ProxyManager:
    """Every proxy session, the shared children, the limits.

    @param reactor: C{IReactorTime}; children are spawned only if it also provides
        C{IReactorProcess} (a C{task.Clock} cannot start processes: local servers then fail with a
        clear reason).
    @param mcp: the L{gasoline.mcp.server.McpServer} whose sessions carry the aggregated tools.
    """

    def __init__(self, reactor: Any, config: ProxyConfig, mcp: Any,
                 state_dir: Path | None = None, environ: dict[str, str] | None = None,
                 client_timeout: float = 60.0, http: Any = None) -> None:
        self.reactor = reactor
        #: The HTTP client of remote servers by C{url} (None: each has its own treq client).
        self.http = http
        self.clock = reactor
        self.config = config
        self.mcp = mcp
        self.environ = dict(os.environ if environ is None else environ)
        self.config_client_timeout = client_timeout
        self.sessions: dict[str, ProxySession] = {}
        self.shared: dict[str, _Shared] = {}
        #: Child progress token -> session (tokens are unique across sessions).
        self.progress_routes: dict[str, ProxySession] = {}
        #: Proxied calls by (server, C{ok} | C{error}), and restarts by server (for
        #: C{/metrics}: gasoline.proxy.metrics).
        self.call_counts: dict[tuple[str, str], int] = {}
        self.restart_counts: dict[str, int] = {}
        #: Server name -> its own C{callsPerMinute} limiter (per session).
        self._limiters: dict[str, SlidingWindowLimiter] = {}
        #: C{(server, seconds, ok)} after every proxied call (the latency histogram), if set.
        self.on_call: Any = None
        #: False on a C{task.Clock}: every child then fails to start, with that reason.
        self.can_spawn = IReactorProcess.providedBy(reactor)
        self.document: JsonDocument | None = None
        #: What is saved once the daemon began stopping (ending sessions must not erase them).
        self._snapshot: dict[str, Any] | None = None
        self.service = _ProxyService(self)
        if state_dir is not None:
            self.document = JsonDocument(Path(state_dir) / "proxy-sessions.json",
                                         self._persisted, poll=True)
            self.document.service(reactor).setServiceParent(self.service)

    # -- counting ------------------------------------------------------------------------------

    def children_of(self, server: str) -> int:
        return sum(1 for s in self.sessions.values()
                   for name, e in s.servers.items()
                   if name == server and e.child is not None and e.context == LOCAL
                   and e.child.state != "closed")

    def instances(self) -> list[tuple[str, str, ServerPeer]]:
        """Every server instance: C{(server, context, peer)}, shared ones once."""
        out: list[tuple[str, str, ServerPeer]] = [
            (name, LOCAL, e.child) for s in self.sessions.values()
            for name, e in s.servers.items() if e.child is not None and e.context == LOCAL]
        out.extend((name, REMOTE, shared.child) for name, shared in self.shared.items())
        return out

    def limiter_for(self, server: str, per_minute: int) -> SlidingWindowLimiter:
        """The C{callsPerMinute} limiter of C{server} (keyed by session)."""
        limiter = self._limiters.get(server)
        if limiter is None or limiter.limit != per_minute:
            limiter = self._limiters[server] = SlidingWindowLimiter(self.clock, per_minute, 60.0)
        return limiter

    def call_done(self, server: str, started: float, ok: bool) -> None:
        key = (server, "ok" if ok else "error")
        self.call_counts[key] = self.call_counts.get(key, 0) + 1
        if self.on_call is not None:
            self.on_call(server, self.clock.seconds() - started, ok)

    def stats(self) -> dict[str, Any]:
        return {
            "sessions": len(self.sessions),
            "servers": [s.name for s in self.config.servers],
            "children": sum(1 for s in self.sessions.values() for e in s.servers.values()
                            if e.child is not None and e.child.state in ("starting", "ready")),
            "shared": len(self.shared),
        }

    # -- lifecycle -----------------------------------------------------------------------------

    def create(self, body: dict[str, Any], *, session_id: str | None = None,
               restored: dict[str, Any] | None = None) -> Deferred:
        """Validate a C{/session/init} body, open the session, start its children; fire with
        the session once every enabled child answered C{initialize} and C{tools/list} (or
        failed: a failed server is listed with its error). Raise L{ProxyError} on bad input."""
        wd = body.get("workingDirectory")
        if not isinstance(wd, str) or not wd or not os.path.isabs(wd) or "\0" in wd:
            raise ProxyError('"workingDirectory" must be an absolute path', code="invalid_param")
        wd = os.path.normpath(wd)
        if not os.path.isdir(wd):
            raise ProxyError(f'"workingDirectory" {wd!r} is not a directory',
                             code="invalid_param")
        info = body.get("clientInfo", {})
        caps = body.get("capabilities", {})
        prefs = body.get("preferences", {})
        for key, value in (("clientInfo", info), ("capabilities", caps), ("preferences", prefs)):
            if not isinstance(value, dict):
                raise ProxyError(f'"{key}" must be an object', code="invalid_param")
        overrides = prefs.get("executionContext", {})
        if not isinstance(overrides, dict) or not all(
                isinstance(v, str) and v in (LOCAL, REMOTE) for v in overrides.values()):
            raise ProxyError('"preferences.executionContext" maps server names to "local" or '
                             '"remote"', code="invalid_param")
        if len(self.sessions) >= self.config.max_sessions:
            raise SessionLimit(f"the daemon already has {len(self.sessions)} proxy sessions "
                               f"(proxy.maxSessions = {self.config.max_sessions})")
        try:
            extra = project_servers(self.config, wd, self.environ)
        except ProxyConfigError as e:
            raise ProxyError(str(e), code="invalid_project_config") from None
        now = self.clock.seconds()
        sid = session_id or secrets.token_hex(16)
        session = ProxySession(
            manager=self, session_id=sid, client_id=client_id_for_cwd(wd), working_directory=wd,
            client_info=info, capabilities=caps, preferences=prefs, created_at=now,
            last_used=now)
        wanted: dict[str, int] = {}
        for server in (*self.config.servers, *extra):
            context = server.execution_context
            reason = server.reason
            asked = overrides.get(server.name)
            if asked is not None and asked != context and server.allow_override \
                    and server.command is not None:
                context = asked
            entry = SessionServer(config=server, context=context, enabled=server.enabled,
                                  reason=reason)
            if asked is not None and asked != context:
                entry.reason = (entry.reason + "; " if entry.reason else "") + \
                    f"executionContext stays {context}: this server does not allow overrides"
            if entry.enabled and context == LOCAL:
                resolved = server.resolve(wd)
                entry.working_directory = resolved.cwd
                entry.allowed_directories = resolved.allowed_directories
                wanted[server.name] = wanted.get(server.name, 0) + 1
            elif entry.enabled and server.command is not None:
                # A shared process, one for every session: this session's calls are checked
                # against this session's directories, relative paths taken from the process's
                # own directory (L{_child_for}).
                entry.working_directory = self._shared_cwd(server)
                entry.allowed_directories = server.resolve(wd).allowed_directories
            elif entry.enabled:
                entry.allowed_directories = tuple(
                    d for d in server.allowed_directories if os.path.isabs(d))
            session.servers[server.name] = entry
        for name, n in wanted.items():
            if self.children_of(name) + n > self.config.max_children_per_server:
                raise ChildLimit(
                    f"server {name} already runs {self.children_of(name)} instances "
                    f"(proxy.maxChildrenPerServer = {self.config.max_children_per_server})")
        # The MCP session with the same id: POST /mcp with Mcp-Session-Id: <sessionId>.
        mcp_session = self.mcp.open_session(session.client_id, "streamable", session_id=sid)
        if restored is not None and restored.get("protocolVersion"):
            mcp_session.initialized = True
            mcp_session.ready = True
            mcp_session.protocol_version = restored.get("protocolVersion")
            mcp_session.client_capabilities = restored.get("capabilities") or {}
            mcp_session.client_info = restored.get("clientInfo") or {}
        self.sessions[sid] = session
        self._bind(session, mcp_session, primary=True)
        saved_tools = (restored or {}).get("tools") or {}
        for name, entry in session.servers.items():
            if entry.enabled:
                entry.child = self._child_for(session, name, entry)
                tools = saved_tools.get(name)
                if entry.child.state == "stopped" and isinstance(tools, list):
                    entry.child.tools = [t for t in tools
                                         if isinstance(t, dict) and isinstance(t.get("name"), str)]
        session.rebuild_tools()
        self._arm_idle(session)
        if self.document is not None:
            self.document.mark_dirty()
        if restored is not None:
            return succeed(session)
        starts = [entry.child.ensure_started() for entry in session.servers.values()
                  if entry.child is not None and entry.child.state != "ready"]

        def started(_: Any) -> ProxySession:
            session.rebuild_tools()
            session.touch()  # the idle time counts from the answer, not from the request
            return session

        return DeferredList(starts, consumeErrors=True).addCallback(started)

    def _child_for(self, session: ProxySession, name: str, entry: SessionServer) -> ServerPeer:
        server = entry.config
        if entry.context == REMOTE:
            shared = self.shared.get(name)
            if shared is None or shared.child.state == "closed":
                cwd = self._shared_cwd(server)
                child = self._make_child(name, server, server.command or "", server.args,
                                         dict(server.env), cwd, None)
                shared = self.shared[name] = _Shared(child)
            shared.users.add(session.session_id)
            return shared.child
        resolved = server.resolve(session.working_directory)
        return self._make_child(name, server, resolved.command, resolved.args, resolved.env,
                                resolved.cwd, session)

    def _shared_cwd(self, server: ServerConfig) -> str:
        """The working directory of a shared (C{remote}) C{command} server's process."""
        return os.path.expanduser(server.cwd) if server.cwd else self.environ.get("HOME", "/")

    def _make_child(self, name: str, server: ServerConfig, command: str, args: tuple[str, ...],
                    env: dict[str, str], cwd: str, session: ProxySession | None) -> ServerPeer:
        caps: dict[str, Any] = {"roots": {"listChanged": False}}
        declared = session.capabilities if session is not None else {}
        for capability in ("sampling", "elicitation"):
            # Declared is declared, {} included (the usual form of "sampling": {}).
            if session is not None and isinstance(declared.get(capability), dict):
                caps[capability] = {}

        def owner_for(params: dict[str, Any]) -> ProxySession | None:
            if session is not None:
                return session
            token = params.get("progressToken")
            if isinstance(token, str):
                return self.progress_routes.get(token)
            return None

        def on_request(child: ServerPeer, method: str, params: dict[str, Any],
                       origin: Any = None) -> Any:
            if session is not None:
                return session.child_request(child, name, method, params)
            if method == "roots/list":
                return {"roots": [{"uri": Path(d).as_uri(), "name": os.path.basename(d)}
                                  for d in server.allowed_directories if os.path.isabs(d)]}
            if method == "ping":
                return {}
            return self._shared_request(name, child, method, params, origin)

        def on_notification(child: ServerPeer, method: str, params: dict[str, Any]) -> None:
            if method == "notifications/tools/list_changed" and session is None:
                for s in self.sessions.values():
                    if name in s.servers:
                        s.list_changed(child)
                return
            owner = owner_for(params)
            if owner is not None:
                owner.child_notification(child, name, method, params)

        def on_state(child: ServerPeer) -> None:
            if session is not None:
                session.child_state(child)
            else:
                for s in self.sessions.values():
                    if name in s.servers:
                        s.child_state(child)

        peer = self._new_peer(name, server, command, args, env, cwd, caps, on_request,
                              on_notification, on_state)

        def restarted(_: ServerPeer) -> None:
            self.restart_counts[name] = self.restart_counts.get(name, 0) + 1

        peer.on_restart = restarted
        return peer

    def _shared_request(self, name: str, child: ServerPeer, method: str, params: dict[str, Any],
                        origin: tuple[ProxySession, Any] | None) -> Any:
        """A request (sampling, elicitation) from a shared server: to the session it is about.

        A streamable HTTP server sends its requests about a call on that call's answer stream,
        so they come with the call (C{origin}: its session and request). Anything else (a
        shared stdio child, a legacy SSE server, a server's GET stream) says nothing of whom it
        serves: it goes to the session only when exactly one session uses the server, and is
        refused otherwise, rather than guessed (the session with a call in flight is not
        necessarily the one whose work asks: a guess could hand one agent another's data).
        """
        if origin is not None:
            owner, ctx = origin
            if not owner.closed and self.sessions.get(owner.session_id) is owner:
                return owner.child_request(child, name, method, params, ctx)
        shared = self.shared.get(name)
        users = [self.sessions[sid] for sid in (shared.users if shared is not None else ())
                 if sid in self.sessions]
        if len(users) == 1:
            return users[0].child_request(child, name, method, params)
        raise JsonRpcError(
            INVALID_REQUEST,
            f"{method} from the shared server {name} cannot be attributed to one session "
            f"({len(users)} sessions use it, and the request did not come with one of their "
            "calls: only a streamable HTTP server says which call its requests are about). "
            "Make the server executionContext local to give each session its own instance.")

    def _new_peer(self, name: str, server: ServerConfig, command: str, args: tuple[str, ...],
                  env: dict[str, str], cwd: str, caps: dict[str, Any], on_request: Any,
                  on_notification: Any, on_state: Any) -> ServerPeer:
        if server.url is not None:
            return RemoteServer(
                self.reactor, name, server.url, dict(server.headers),
                transport=server.transport or "auto", timeout=server.timeout,
                start_timeout=self.config.start_timeout, capabilities=caps,
                on_request=on_request, on_notification=on_notification, on_state=on_state,
                http=self.http)
        return ChildServer(
            self.reactor, name, command, args, child_env(env, self.environ), cwd,
            timeout=server.timeout, start_timeout=self.config.start_timeout, capabilities=caps,
            on_request=on_request, on_notification=on_notification, on_state=on_state,
            cpu_seconds=server.cpu_seconds, memory_mb=server.memory_mb)


    def get(self, session_id: str) -> ProxySession:
        session = self.sessions.get(session_id)
        if session is None:
            raise UnknownSession(f"no proxy session {session_id!r} (ended, expired or never "
                                 "opened)")
        return session

    def _bind(self, session: ProxySession, mcp_session: Any, primary: bool = False) -> None:
        mcp_session.extra_tools = SessionTools(session)
        session.bound.append(mcp_session)

        def closed(s: Any) -> None:
            if s in session.bound:
                session.bound.remove(s)
            # The session's own MCP session ended (DELETE /mcp, MCP idle timeout): the proxy
            # session ends with it, unless connector connections still use it.
            if primary and not any(not b.closed for b in session.bound):
                self.destroy(session.session_id, why="its MCP session ended")

        mcp_session.on_close.append(closed)

    def bind(self, session_id: str, mcp_session: Any) -> None:
        """Make C{mcp_session} (a connector connection) see C{session_id}'s tools.

        @raise UnknownSession: no such proxy session.
        """
        session = self.get(session_id)
        live = [s for s in session.bound if not s.closed]
        if len(live) > MAX_BINDINGS:
            raise ProxyError(f"proxy session {session_id} already has {MAX_BINDINGS} "
                             "connections", code="too_many_connections")
        session.touch()
        self._bind(session, mcp_session)

    def destroy(self, session_id: str, why: str = "ended") -> Deferred:
        """End a session: unbind its MCP sessions, stop its local children; fire once reaped."""
        session = self.sessions.pop(session_id, None)
        if session is None or session.closed:
            return succeed(None)
        session.closed = True
        log.info("proxy session {sid} ({wd}) {why}", sid=session_id,
                 wd=session.working_directory, why=why)
        call, session.idle_call = session.idle_call, None
        if call is not None and call.active():
            call.cancel()
        lc, session._list_changed_call = session._list_changed_call, None
        if lc is not None and lc.active():
            lc.cancel()
        for token in list(session._progress):
            self.progress_routes.pop(token, None)
        bound, session.bound = session.bound, []
        for s in bound:
            if getattr(s, "extra_tools", None) is not None and s.extra_tools._session is session:
                s.extra_tools = None
            if not s.closed and s.session_id == session_id:
                self.mcp.close_session(s)
        stops = []
        for name, entry in session.servers.items():
            if entry.child is None:
                continue
            if entry.context == LOCAL:
                stops.append(entry.child.stop())
            else:
                shared = self.shared.get(name)
                if shared is not None:
                    shared.users.discard(session_id)
        if self.document is not None:
            self.document.mark_dirty()
        return DeferredList(stops, consumeErrors=True).addCallback(lambda _: None)

    def stop_all(self) -> Deferred:
        ds = [self.destroy(sid, why="ended: the daemon is stopping") for sid in list(self.sessions)]
        for shared in self.shared.values():
            ds.append(shared.child.stop())
        self.shared.clear()
        return DeferredList(ds, consumeErrors=True)

    # -- idle ----------------------------------------------------------------------------------

    def _arm_idle(self, session: ProxySession) -> None:
        session.idle_call = self.clock.callLater(self.config.session_idle_timeout,
                                                 self._idle_check, session)

    def last_activity(self, session: ProxySession) -> float:
        seen = [s.last_seen for s in session.bound if not s.closed]
        return max([session.last_used, *seen])

    def _idle_check(self, session: ProxySession) -> None:
        session.idle_call = None
        if session.closed:
            return
        idle = self.clock.seconds() - self.last_activity(session)
        timeout = self.config.session_idle_timeout
        if idle >= timeout:
            self.destroy(session.session_id, why=f"idle for {idle:.0f} s: ended").addErrback(
                lambda f: log.failure("ending idle proxy session failed", f))
            return
        session.idle_call = self.clock.callLater(timeout - idle, self._idle_check, session)

    # -- persistence ---------------------------------------------------------------------------

    def _persisted(self) -> dict[str, Any]:
        if self._snapshot is not None:
            return self._snapshot
        return {"version": 1, "sessions": [s.to_json() for s in self.sessions.values()]}

    def restore(self) -> int:
        """Re-open the sessions a previous daemon saved (children start lazily on the next
        call). Start-up only (reads the state file). Return how many were restored."""
        if self.document is None:
            return 0
        saved = self.document.load()
        if not isinstance(saved, dict) or not isinstance(saved.get("sessions"), list):
            return 0
        n = 0
        for item in saved["sessions"]:
            if not isinstance(item, dict) or not isinstance(item.get("sessionId"), str):
                continue
            if item["sessionId"] in self.mcp.sessions:
                continue
            body = {k: item.get(k) for k in ("workingDirectory", "clientInfo", "capabilities",
                                              "preferences") if item.get(k) is not None}
            mcp_state = dict(raw_mcp) if isinstance(raw_mcp := item.get("mcp"), dict) else {}
            mcp_state["tools"] = item.get("tools") if isinstance(item.get("tools"), dict) else {}
            try:
                self.create(body, session_id=item["sessionId"], restored=mcp_state)
            except GasolineError as e:
                log.warn("proxy session {sid} not restored: {err}", sid=item["sessionId"],
                         err=e.message)
                continue
            n += 1
        if n:
            log.info("restored {n} proxy session(s); their servers start on the next call", n=n)
        return n


class _ProxyService(MultiService):
    """Saves the sessions (for a restart), then ends them all (stopping every child) when the
    daemon stops; its child service writes C{proxy-sessions.json} on a timer."""

    name = "proxy-sessions"  # type: ignore[assignment]  # Twisted types Service.name as None

    def __init__(self, manager: ProxyManager) -> None:
        super().__init__()
        self._manager = manager

    def stopService(self):
        manager = self._manager
        manager._snapshot = manager._persisted()
        d = super().stopService()  # the flush service writes the snapshot once more

        def stop_children(_: Any) -> Deferred:
            return manager.stop_all()

        return (d if d is not None else succeed(None)).addCallback(stop_children)


def _size(result: dict[str, Any]) -> int:
    """Bytes of C{result} as JSON (what C{maxResultBytes} bounds)."""
    try:
        return len(orjson.dumps(result, default=str, option=orjson.OPT_NON_STR_KEYS))
    except (TypeError, orjson.JSONEncodeError):
        return 0

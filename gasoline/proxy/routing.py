"""
One proxy session at work: its aggregated tools, the calls it routes to its servers, and what its
servers send back (progress, log messages, C{tools/list_changed}, sampling and elicitation
requests relayed to the agent).

L{ProxySession} is built whole by L{gasoline.proxy.session.ProxyManager.create} from a
L{gasoline.proxy.plan.SessionPlan}; L{SessionTools} is how the MCP server sees its tools
(the C{extra_tools} hook of L{gasoline.mcp.session.McpSession}).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import attrs
import orjson
from twisted.internet.defer import Deferred, DeferredList
from twisted.python.failure import Failure
from zope.interface import implementer

from gasoline.interfaces import ISessionTools
from gasoline.mcp import jsonrpc
from gasoline.mcp.jsonrpc import INVALID_REQUEST, JsonRpcError
from gasoline.mcp.tools import Tool, error_result
from gasoline.proxy.config import REMOTE
from gasoline.proxy.errors import ProxyError, ServerLimit
from gasoline.proxy.naming import build_table
from gasoline.proxy.paths import PathRefused, check_arguments
from gasoline.proxy.peer import ServerPeer
from gasoline.proxy.plan import SessionServer

if TYPE_CHECKING:
    from twisted.internet.interfaces import IDelayedCall

    from gasoline.proxy.session import ProxyManager

#: C{protocolVersion} in the C{/session/init} answer (the newest the daemon speaks).
PROTOCOL_VERSION = "2025-11-25"
#: Debounce for a child's C{notifications/tools/list_changed}.
LIST_CHANGED_DELAY = 0.5


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


@attrs.frozen
class _Routed:
    """An aggregated tool's handler: calls C{tool} of the session's C{server}."""

    session: ProxySession
    server: str
    tool: str

    def __call__(self, ctx: Any, arguments: dict[str, Any]) -> Any:
        return self.session.call(ctx, self.server, self.tool, arguments)


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
    idle_call: IDelayedCall | None = None
    _definitions: list[dict[str, Any]] | None = None
    #: Child progress token -> the agent's request context.
    _progress: dict[str, Any] = attrs.field(factory=dict)
    #: Calls in flight per server (their contexts; the newest last) for server->agent requests.
    _active: dict[str, list[Any]] = attrs.field(factory=dict)
    _list_changed_call: IDelayedCall | None = None
    #: This session's tools as the MCP sessions bound to it see them (C{McpSession.show_tools}).
    view: SessionTools = attrs.field(init=False)
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
        assert isinstance(handler, _Routed)
        return handler.server, handler.tool

    def describe_tools(self) -> list[dict[str, Any]]:
        out = []
        for name in self.tools:
            server, original = self.route(name)
            out.append({"name": name, "executionContext": self.servers[server].context,
                        "server": server, "tool": original})
        return out

    def _handler(self, server: str, tool: str) -> Callable[[Any, dict[str, Any]], Any]:
        return _Routed(self, server, tool)

    # -- calls ---------------------------------------------------------------------------------

    def __attrs_post_init__(self) -> None:
        self.view = SessionTools(self)

    def close(self) -> tuple[list[Any], list[str]]:
        """Mark the session closed and cancel its timers; hand back the MCP sessions that were
        bound to it and the child progress tokens it routed (both forgotten here)."""
        self.closed = True
        call, self.idle_call = self.idle_call, None
        if call is not None and call.active():
            call.cancel()
        lc, self._list_changed_call = self._list_changed_call, None
        if lc is not None and lc.active():
            lc.cancel()
        bound, self.bound = self.bound, []
        return bound, list(self._progress)

    def touch(self) -> None:
        self.last_used = self.manager.clock.seconds()

    def bind(self, mcp_session: Any) -> None:
        """C{mcp_session} sees this session's tools (the primary first)."""
        self.bound.append(mcp_session)

    def unbind(self, mcp_session: Any) -> None:
        """C{mcp_session} ended: it no longer sees this session's tools."""
        if mcp_session in self.bound:
            self.bound.remove(mcp_session)

    def arm_idle(self, call: IDelayedCall | None) -> None:
        """C{call} checks whether the session is idle (C{None}: that check ran)."""
        self.idle_call = call

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
            self.manager.route_progress(token, self)
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
                self.manager.drop_progress_route(token)
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
            if mcp_session.take_answer(rid) is not None and not mcp_session.closed:
                emit(jsonrpc.notification("notifications/cancelled", {
                    "requestId": rid, "reason": "the MCP server that asked cancelled it"}))

        d: Deferred = Deferred(cancel)
        mcp_session.expect_answer(rid, d)
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
    child.show_tools(tools)



def _size(result: dict[str, Any]) -> int:
    """Bytes of C{result} as JSON (what C{maxResultBytes} bounds)."""
    try:
        return len(orjson.dumps(result, default=str, option=orjson.OPT_NON_STR_KEYS))
    except (TypeError, orjson.JSONEncodeError):
        return 0

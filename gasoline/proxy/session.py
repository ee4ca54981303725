"""
Proxy sessions: one agent's working directory, allowed directories and child MCP servers.

L{ProxyManager} owns every session, the shared (C{remote}) children and the limits. A session is
created by C{POST /session/init} (L{ProxyManager.create}): the body is checked and each server
planned by L{gasoline.proxy.plan}, the limits are checked against the plan (L{ProxyManager.plan}),
and the session (a L{gasoline.proxy.routing.ProxySession}, which routes its calls) is built from
the plan whole. Its id is also an MCP session id (C{Mcp-Session-Id}), and every MCP session bound
to it (that one, or a C{gasoline connect} connection naming it) lists Gasoline's own tools plus
the session's aggregated tools (L{gasoline.proxy.routing.SessionTools}, the generic
C{extra_tools} hook of L{gasoline.mcp.session.McpSession}).

A session ends on C{DELETE /session/{id}}, when its MCP session ends (C{DELETE /mcp} or the MCP
idle timeout), after C{sessionIdleTimeout} seconds without a request on any bound MCP session (the
main cleanup path: agents rarely send DELETE), or when the daemon stops. Ending it stops its local
children (stdin closed, SIGTERM, SIGKILL, reaped).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import attrs
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.interfaces import IReactorProcess
from twisted.logger import Logger

from gasoline.core.clients.registry import CLIENT_ID_RE
from gasoline.core.storage.documents import JsonDocument
from gasoline.core.errors import GasolineError, SessionOwnerRefused
from gasoline.core.clients.session_ids import session_label
from gasoline.core.clients.ratelimit import SlidingWindowLimiter
from gasoline.mcp.jsonrpc import INVALID_REQUEST, JsonRpcError
from gasoline.proxy.child import ChildServer, child_env
from gasoline.proxy.config import (
    LOCAL,
    REMOTE,
    ProxyConfig,
    ProxyConfigError,
    ServerConfig,
    project_servers,
)
from gasoline.proxy.errors import ChildLimit, ProxyError, SessionLimit, UnknownSession
from gasoline.proxy.peer import ServerPeer
from gasoline.proxy.plan import SessionPlan, SessionRequest, SessionServer, plan_session, shared_cwd
from gasoline.proxy.remote import RemoteServer
from gasoline.proxy.routing import ProxySession

if TYPE_CHECKING:
    from gasoline.mcp.server import McpServer
    from gasoline.mcp.session import McpSession

log = Logger()

#: Largest number of bound MCP sessions (connector connections) per proxy session.
MAX_BINDINGS = 8


@attrs.define(eq=False)
class _Shared:
    """One shared (C{remote}) child and the sessions using it."""

    child: ServerPeer
    users: set[str] = attrs.field(factory=set)

    def use(self, session_id: str) -> None:
        """The proxy session C{session_id} uses the child."""
        self.users.add(session_id)

    def release(self, session_id: str) -> None:
        """It no longer does."""
        self.users.discard(session_id)


class ProxyManager:
    """Every proxy session, the shared children, the limits.

    @param reactor: C{IReactorTime}; children are spawned only if it also provides
        C{IReactorProcess} (a C{task.Clock} cannot start processes: local servers then fail with a
        clear reason).
    @param mcp: the L{gasoline.mcp.server.McpServer} whose sessions carry the aggregated tools.
    """

    def __init__(self, reactor: Any, config: ProxyConfig, mcp: McpServer,
                 state_dir: Path | None = None, environ: dict[str, str] | None = None,
                 client_timeout: float = 60.0, http: Any = None, at_rest: Any = None,
                 on_call: Callable[[str, float, bool], None] | None = None) -> None:
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
        #: C{(server, seconds, ok)} after every proxied call (the latency histogram), if given.
        self.on_call = on_call
        #: False on a C{task.Clock}: every child then fails to start, with that reason.
        self.can_spawn = IReactorProcess.providedBy(reactor)
        self.document: JsonDocument | None = None
        #: What is saved once the daemon began stopping (ending sessions must not erase them).
        self._snapshot: dict[str, Any] | None = None
        self.service = _ProxyService(self)
        if state_dir is not None:
            self.document = JsonDocument(Path(state_dir) / "proxy-sessions.json",
                                         self._persisted, poll=True, at_rest=at_rest,
                                         what="the proxy sessions it listed (agents open new ones)")
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

    # -- audit ---------------------------------------------------------------------------------

    def audit(self, session: ProxySession, mode: str, details: dict[str, Any],
              outcome: str = "ok", error: str | None = None) -> None:
        """Record a session event in its agent's tool audit (C{configure audit_log}, the log
        dir's C{clients/<id>.log}) as tool C{proxy}; proxied calls are recorded there by the
        tool registry itself, as C{<server>__<tool>}."""
        # The session id is a bearer credential (it opens the session's routes): the audit
        # keeps a reference that tells sessions apart without granting anything.
        ref = hashlib.sha256(session.session_id.encode()).hexdigest()[:12]
        self.mcp.tools.audit_event(session.client_id, "proxy", mode,
             {"ref": ref, "working_directory": session.working_directory, **details},
             outcome, error)

    # -- lifecycle -----------------------------------------------------------------------------

    def create(self, body: dict[str, Any], *, session_id: str | None = None,
               restored: dict[str, Any] | None = None,
               client_id: str | None = None) -> Deferred:
        """Validate a C{/session/init} body, open the session, start its children; fire with
        the session once every enabled child answered C{initialize} and C{tools/list} (or
        failed: a failed server is listed with its error). Raise L{ProxyError} on bad input
        and L{SessionLimit} or L{ChildLimit} when a limit would be passed.

        C{restored} (L{restore}): the saved MCP state and tool lists of a session a previous
        daemon had; its children then start on the first call, not now.

        C{client_id}: the agent's client id, one the caller proved (C{X-Gasoline-Client}, see
        L{gasoline.http.client_proof}); C{None} gives the session a fresh id of its own (the
        working directory's hash, the connector's id there, is never given to a caller that
        did not prove it)."""
        plan = self.plan(SessionRequest.from_body(body))
        request = plan.request
        now = self.clock.seconds()
        session = ProxySession(
            manager=self, session_id=session_id or secrets.token_hex(16),
            client_id=client_id or self.mcp.registry.anonymous_client_id(),
            working_directory=request.working_directory, client_info=request.client_info,
            capabilities=request.capabilities, preferences=request.preferences,
            created_at=now, last_used=now, servers=plan.servers)
        mcp_session = self._open_mcp_session(session, restored)  # may refuse: nothing kept then
        self.sessions[session.session_id] = session
        self._bind(session, mcp_session, primary=True)
        self._attach_children(session, (restored or {}).get("tools") or {})
        session.rebuild_tools()
        self._arm_idle(session)
        if self.document is not None:
            self.document.mark_dirty()
        self.audit(session, "session_restored" if restored is not None else "session_start",
                   {"servers": sorted(n for n, e in session.servers.items() if e.enabled)})
        if restored is not None:
            return succeed(session)
        return self._start_children(session)

    def plan(self, request: SessionRequest) -> SessionPlan:
        """The session C{request} asks for, within the limits; nothing is started.

        @raise SessionLimit: C{proxy.maxSessions} sessions are open already.
        @raise ChildLimit: a server would pass C{proxy.maxChildrenPerServer} local instances.
        @raise ProxyError: code C{invalid_project_config}, the project's servers file is bad.
        """
        if len(self.sessions) >= self.config.max_sessions:
            raise SessionLimit(f"the daemon already has {len(self.sessions)} proxy sessions "
                               f"(proxy.maxSessions = {self.config.max_sessions})")
        try:
            extra = project_servers(self.config, request.working_directory, self.environ)
        except ProxyConfigError as e:
            raise ProxyError(str(e), code="invalid_project_config") from None
        plan = plan_session(self.config, extra, request, self.environ)
        for name, n in plan.local_instances.items():
            if self.children_of(name) + n > self.config.max_children_per_server:
                raise ChildLimit(
                    f"server {name} already runs {self.children_of(name)} instances "
                    f"(proxy.maxChildrenPerServer = {self.config.max_children_per_server})")
        return plan

    def _open_mcp_session(self, session: ProxySession, restored: dict[str, Any] | None) -> Any:
        """The MCP session with the same id (C{POST /mcp} with C{Mcp-Session-Id: <sessionId>}),
        initialized as it was when C{restored} says so."""
        mcp_session = self.mcp.open_session(session.client_id, "streamable",
                                            session_id=session.session_id)
        if restored is not None and restored.get("protocolVersion"):
            mcp_session.initialize(restored["protocolVersion"], restored.get("capabilities") or {},
                                   restored.get("clientInfo") or {}, ready=True)
        return mcp_session

    def _attach_children(self, session: ProxySession, saved_tools: dict[str, Any]) -> None:
        """Give each enabled server of C{session} its peer (its callbacks route to the session,
        so it is made once the session exists); a restored, stopped peer lists its saved tools
        until it starts again."""
        for name, entry in session.servers.items():
            if entry.enabled:
                child = self._child_for(session, name, entry)
                entry.attach(child)
                tools = saved_tools.get(name)
                if child.state == "stopped" and isinstance(tools, list):
                    child.show_tools([t for t in tools
                                      if isinstance(t, dict) and isinstance(t.get("name"), str)])

    def _start_children(self, session: ProxySession) -> Deferred:
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
            shared.use(session.session_id)
            return shared.child
        resolved = server.resolve(session.working_directory)
        return self._make_child(name, server, resolved.command, resolved.args, resolved.env,
                                resolved.cwd, session)

    def _shared_cwd(self, server: ServerConfig) -> str:
        """The working directory of a shared (C{remote}) C{command} server's process."""
        return shared_cwd(server, self.environ)

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

        def restarted(child: ServerPeer) -> None:
            self.restart_counts[name] = self.restart_counts.get(name, 0) + 1
            users = [session] if session is not None else [
                s for s in self.sessions.values() if name in s.servers]
            for user in users:
                self.audit(user, "server_restart", {
                    "server": name, "shared": session is None,
                    "restarts": child.restarts, "after": child.last_error})

        return self._new_peer(name, server, command, args, env, cwd, caps, on_request,
                              on_notification, on_state, restarted)

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
                  on_notification: Any, on_state: Any, on_restart: Any) -> ServerPeer:
        if server.url is not None:
            return RemoteServer(
                self.reactor, name, server.url, dict(server.headers),
                transport=server.transport or "auto", timeout=server.timeout,
                start_timeout=self.config.start_timeout, capabilities=caps,
                on_request=on_request, on_notification=on_notification, on_state=on_state,
                http=self.http, on_restart=on_restart)
        return ChildServer(
            self.reactor, name, command, args, child_env(env, self.environ), cwd,
            timeout=server.timeout, start_timeout=self.config.start_timeout, capabilities=caps,
            on_request=on_request, on_notification=on_notification, on_state=on_state,
            cpu_seconds=server.cpu_seconds, memory_mb=server.memory_mb, network=server.network,
            on_restart=on_restart)


    def get(self, session_id: str) -> ProxySession:
        session = self.sessions.get(session_id)
        if session is None:
            raise UnknownSession(f"no proxy session {session_id!r} (ended, expired or never "
                                 "opened)")
        return session

    def _bind(self, session: ProxySession, mcp_session: McpSession, primary: bool = False) -> None:
        session.bind(mcp_session)

        def closed(s: Any) -> None:
            session.unbind(s)
            # The session's own MCP session ended (DELETE /mcp, MCP idle timeout): the proxy
            # session ends with it, unless connector connections still use it.
            if primary and not any(not b.closed for b in session.bound):
                self.destroy(session.session_id, why="its MCP session ended")

        mcp_session.show_tools(session.view, on_close=closed)

    def bind(self, session_id: str, mcp_session: McpSession) -> None:
        """Make C{mcp_session} (a connector connection) see C{session_id}'s tools.

        @raise UnknownSession: no such proxy session.
        """
        session = self.get(session_id)
        if mcp_session.client_id != session.client_id:
            # A proxy session's tools act as its client id: only a connection of that (proven)
            # client may see them (gasoline.core.clients.session_ids).
            raise SessionOwnerRefused(
                f"forbidden: proxy session {session_label(session_id)} belongs to another client "
                "id than this connection's")
        live = [s for s in session.bound if not s.closed]
        if len(live) > MAX_BINDINGS:
            raise ProxyError(f"proxy session {session_label(session_id)} already has {MAX_BINDINGS} "
                             "connections", code="too_many_connections")
        session.touch()
        self._bind(session, mcp_session)

    def destroy(self, session_id: str, why: str = "ended") -> Deferred:
        """End a session: unbind its MCP sessions, stop its local children; fire once reaped."""
        session = self.sessions.pop(session_id, None)
        if session is None or session.closed:
            return succeed(None)
        bound, tokens = session.close()
        log.info("proxy session {sid} ({wd}) {why}", sid=session_label(session_id),
                 wd=session.working_directory, why=why)
        self.audit(session, "session_end", {"why": why})
        for token in tokens:
            self.progress_routes.pop(token, None)
        for s in bound:
            s.hide_tools(session.view)
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
                    shared.release(session_id)
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
        session.arm_idle(self.clock.callLater(self.config.session_idle_timeout,
                                              self._idle_check, session))

    def last_activity(self, session: ProxySession) -> float:
        seen = [s.last_seen for s in session.bound if not s.closed]
        return max([session.last_used, *seen])

    def _idle_check(self, session: ProxySession) -> None:
        session.arm_idle(None)
        if session.closed:
            return
        idle = self.clock.seconds() - self.last_activity(session)
        timeout = self.config.session_idle_timeout
        if idle >= timeout:
            self.destroy(session.session_id, why=f"idle for {idle:.0f} s: ended").addErrback(
                lambda f: log.failure("ending idle proxy session failed", f))
            return
        session.arm_idle(self.clock.callLater(timeout - idle, self._idle_check, session))

    # -- persistence ---------------------------------------------------------------------------

    def route_progress(self, token: str, session: ProxySession) -> None:
        """A shared server's progress with C{token} is about a call of C{session}."""
        self.progress_routes[token] = session

    def drop_progress_route(self, token: str) -> None:
        """The call of progress C{token} is answered."""
        self.progress_routes.pop(token, None)

    def freeze_snapshot(self) -> None:
        """What is saved from now on is the sessions as they are now (the daemon is stopping:
        ending them must not empty the file a restart restores)."""
        self._snapshot = self._persisted()

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
        if saved is None:
            return 0
        if not isinstance(saved, dict) or not isinstance(saved.get("sessions"), list):
            self.document.unusable("not a list of proxy sessions")
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
                saved_id = item.get("clientId")
                self.create(body, session_id=item["sessionId"], restored=mcp_state,
                            client_id=saved_id if isinstance(saved_id, str)
                            and CLIENT_ID_RE.match(saved_id) else None)
            except GasolineError as e:
                log.warn("proxy session {sid} not restored: {err}", sid=session_label(item["sessionId"]),
                         err=e.message)
                continue
            n += 1
        if n:
            log.info("restored {n} proxy session(s); their servers start on the next call", n=n)
        return n


class _ProxyService(MultiService):
    """Saves the sessions (for a restart), then ends them all (stopping every child) when the
    daemon stops; its child service writes C{proxy-sessions.json} on a timer."""

    def __init__(self, manager: ProxyManager) -> None:
        super().__init__()
        self.setName("proxy-sessions")
        self._manager = manager

    def stopService(self) -> Deferred[None] | None:
        manager = self._manager
        manager.freeze_snapshot()
        d = super().stopService()  # the flush service writes the snapshot once more

        def stop_children(_: Any) -> Deferred:
            return manager.stop_all()

        return (d if d is not None else succeed(None)).addCallback(stop_children)

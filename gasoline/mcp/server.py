"""
The MCP server every transport shares: lifecycle, version negotiation, sessions and dispatch.

Transports (C{gasoline.http.mcp_http}) decode bytes and call L{McpServer.handle} (one message) or
L{McpServer.handle_batch} with the session and an C{emit} callable that carries messages tied to
this request (progress, log messages, server→client requests) to wherever the transport sends them;
both return a Deferred that fires with the response dict, a list of them, or C{None} when nothing is
to be answered (notifications, client responses, cancelled requests).

Three error tiers: the transport answers HTTP statuses for transport faults; this module answers
JSON-RPC errors for protocol faults (malformed messages, unknown methods, bad params, requests before
C{initialize}); tool failures are C{isError: true} results (see L{gasoline.mcp.tools}).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import Any, Callable, Iterable, Literal, Protocol

from twisted.internet.defer import CancelledError, Deferred, gatherResults, maybeDeferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline import __version__
from gasoline.core.errors import TooManyClients
from gasoline.core.interfaces import IClientRegistry
from gasoline.core.lifecycle import StopHook
from gasoline.core.turns import DaemonBusy, TurnBudget
from gasoline.core.clients.session_ids import session_label
from gasoline.mcp import jsonrpc
from gasoline.mcp.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    JsonRpcError,
    Notification,
    Request,
    Response,
)
from gasoline.mcp.context import Emit, RequestContext
from gasoline.mcp.outgoing import redact_outgoing, redacting
from gasoline.mcp.resources import PromptRegistry, ResourceRegistry
from gasoline.mcp.session import LOG_LEVELS, McpSession
from gasoline.mcp.tools import ToolRegistry, error_result

log = Logger()

#: Newest first. The answer to C{initialize} is the requested version if listed, else the first.
SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_VERSION = SUPPORTED_VERSIONS[0]
#: The revision without a handshake or sessions: a request that arrives with no session is
#: answered on its own, the caller's identity taken from the transport (docs/mcp.md, "Revisions").
STATELESS_VERSION = "2026-07-28"
#: Every revision a request may name (C{MCP-Protocol-Version}).
KNOWN_VERSIONS = (STATELESS_VERSION, *SUPPORTED_VERSIONS)
#: The client id of stateless requests that name no client.
STATELESS_CLIENT = "stateless"
#: Only this revision allows JSON-RPC batches (added in 2025-03-26, removed in 2025-06-18).
BATCH_VERSIONS = frozenset({"2025-03-26"})
#: Sessions with no request for this long are closed (legacy SSE: 1 h).
DEFAULT_IDLE_TIMEOUT = 3600.0
#: At the client limit, a quiet session (no open stream, no request in flight) is closed to make
#: room, least recently used first (clients such as the TypeScript SDK never send DELETE /mcp);
#: its client's state stays inheritable for the client TTL. This long a quiet spell is preferred.
RECLAIM_AFTER = 300.0
#: ... and a named client's session (C{X-Gasoline-Client}: an agent's connector, which ends its
#: sessions itself) quieter than this is never closed for another client: agents that are working
#: (a call every few seconds, or minutes of thinking) keep their sessions, and a newcomer past
#: C{--max-clients} is refused instead (429 C{too_many_clients}), so live sessions never push
#: each other out. An anonymous session (an SDK client that never sends C{DELETE /mcp} leaves
#: them behind) goes at once while no reclaimed session has come back; once one does (a request
#: on it, or its client initializing again), the same floor holds for every session for
#: L{PRESSURE_WINDOW}, extended by every refusal. A reclaimed session's next request is told why
#: (L{McpServer.reclaim_notice}).
RECLAIM_MIN_QUIET = 120.0
PRESSURE_WINDOW = 300.0
#: Reclaimed sessions remembered for that notice.
RECLAIMED_KEPT = 1000

INSTRUCTIONS = (
    "Gasoline gives you read access to a real browser (console logs, errors, network, WebSocket "
    "traffic, user actions, performance) and lets you drive it, through five tools: observe (read "
    "what the browser did), analyze (compute answers: DOM, accessibility, performance, security), "
    "generate (artifacts: reproduction scripts, tests, HAR, CSP), configure (your own settings and "
    "state: noise rules, checkpoints, key-value store, health) and interact (navigate, click, type, "
    "screenshots). Every tool takes a required `what` naming the mode. Reads go through your own "
    "cursor: `observe {what:\"errors\"}` returns what is new since your last call, and other agents "
    "sharing this daemon never move it. Read the gasoline://guide resource for details."
)

class SessionObserver(Protocol):
    """Told when an MCP session opens and when it ends (C{McpServer.session_observers}; the
    C{--log-dir} client logs are one)."""

    def session_opened(self, session: McpSession) -> None: ...

    def session_closed(self, session: McpSession) -> None: ...


class McpServer:
    """Dispatches MCP messages for every session; owns the session table."""

    def __init__(
        self,
        clock: IReactorTime,
        registry: IClientRegistry,
        tools: ToolRegistry,
        resources: ResourceRegistry,
        prompts: PromptRegistry | None = None,
        *,
        instructions: str = INSTRUCTIONS,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        server_name: str = "gasoline",
        sessions: dict[str, McpSession] | None = None,
        turns: TurnBudget | None = None,
        session_observers: Iterable[SessionObserver] = (),
    ) -> None:
        self.clock = clock
        #: Agents' tool calls run within the reactor turn's budget (capture first).
        self.turns = turns if turns is not None else TurnBudget(clock)
        self.registry = registry
        self.tools = tools
        self.resources = resources
        self.prompts = prompts if prompts is not None else PromptRegistry()
        self.instructions = instructions
        self.idle_timeout = idle_timeout
        self.server_info = {"name": server_name, "title": "Gasoline", "version": __version__}
        #: Session id -> session. May be given: a component that pushes to sessions (context
        #: streaming) shares the table without holding the server.
        self.sessions: dict[str, McpSession] = sessions if sessions is not None else {}
        self._methods: dict[str, Callable[[RequestContext, dict[str, Any]], Any]] = {
            "ping": self._ping,
            "logging/setLevel": self._set_level,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
            "resources/list": self._resources_list,
            "resources/templates/list": self._resources_templates,
            "resources/read": self._resources_read,
            "resources/subscribe": self._resources_subscribe,
            "resources/unsubscribe": self._resources_unsubscribe,
            "prompts/list": self._prompts_list,
            "prompts/get": self._prompts_get,
            "completion/complete": self._complete,
        }
        #: Closes every MCP session (and its idle timer) when the daemon stops.
        self.service = StopHook(self.close_all, name="mcp-sessions")
        #: Told C{session_opened(session)} / C{session_closed(session)} (per-client logs).
        self.session_observers: list[SessionObserver] = list(session_observers)
        #: A session is closed for another client only after this long without a request.
        self.reclaim_min_quiet = RECLAIM_MIN_QUIET
        #: Session ids and client ids of sessions closed for another client -> why (bounded).
        self._reclaimed: OrderedDict[str, str] = OrderedDict()
        #: Until when every session keeps the quiet floor (a reclaimed client came back).
        self._pressure_until = float("-inf")
        # At the client limit the registry asks us for a quiet session to close.
        registry.add_reclaimer(self.reclaim_idle)

    # -- sessions ------------------------------------------------------------------------------

    def open_session(self, client_id: str | None, transport: str,
                     session_id: str | None = None) -> McpSession:
        """A new session for C{client_id} (a fresh anonymous id from the registry when None, one
        no caller can name), with a fresh
        random session id unless C{session_id} names one (a session opened on the client's
        behalf before it connects, e.g. by C{POST /session/init}).

        @raise gasoline.core.errors.GasolineError: the registry refused (too many clients, bad id).
        """
        anonymous = client_id is None
        if client_id is None:
            client_id = self.registry.anonymous_client_id()
        if "client:" + client_id in self._reclaimed:
            self._under_pressure()  # a reclaimed client initializing again
        try:
            # At the limit the registry has asked its reclaimers (ours: reclaim_idle) already.
            state = self.registry.connect(client_id)
        except TooManyClients:
            if self.clock.seconds() < self._pressure_until:
                self._under_pressure()
            raise
        now = self.clock.seconds()
        if session_id is not None and session_id in self.sessions:
            raise ValueError(f"MCP session {session_id} already exists")
        session = McpSession(
            session_id=session_id or secrets.token_hex(16),
            client_id=client_id,
            state=state,
            transport=transport,
            created_at=now,
            last_seen=now,
            anonymous=anonymous,
        )
        self.sessions[session.session_id] = session
        session.arm_idle(self.clock.callLater(self.idle_timeout, self._idle, session))
        log.info("MCP session {sid} opened for client {cid} ({transport})",
                 sid=session_label(session.session_id), cid=client_id, transport=transport)
        self._tell_observers("session_opened", session)
        return session

    def open_stateless(self, client_id: str | None) -> McpSession:
        """A session for one request that came without one (MCP 2026-07-28): no handshake, the
        client's identity (its cursors, settings, state) from the transport, closed again once
        the request is answered (L{close_session}). C{None}: the shared L{STATELESS_CLIENT}.

        @raise gasoline.core.errors.GasolineError: the registry refused (too many clients).
        """
        session = self.open_session(client_id or STATELESS_CLIENT, "stateless")
        session.initialize(STATELESS_VERSION, {}, {})
        return session

    def _tell_observers(self, what: Literal["session_opened", "session_closed"],
                        session: McpSession) -> None:
        for observer in list(self.session_observers):
            try:
                if what == "session_opened":
                    observer.session_opened(session)
                else:
                    observer.session_closed(session)
            except Exception:
                log.failure("session observer {o!r} failed", o=observer)

    def reclaim_idle(self) -> bool:
        """At the client limit: close the least recently used I{quiet} session (no open
        server->client stream, no request in flight), so only live clients hold slots. Its
        client's state stays in the registry for the TTL (the same client id inherits it). A
        client with another live session keeps its slot, so closing such a session frees nothing
        and it is tried last. True if a session was closed."""
        now = self.clock.seconds()
        floor = self.reclaim_min_quiet
        pressed = now < self._pressure_until
        candidates = [
            s for s in self.sessions.values()
            if not s.closed and not s.in_flight and not s.outgoing and s.transport != "sse"
            and s.standalone.writer is None
            and all(stream.writer is None for stream in s.streams.values())
            and (now - s.last_seen >= floor or (s.anonymous and not pressed))
        ]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.state.connections > 1,
                                                s.last_seen))
        quiet = now - victim.last_seen
        log.info("client limit reached: closing MCP session {sid} ({cid}), idle for {t:.0f} s",
                 sid=session_label(victim.session_id), cid=victim.client_id, t=quiet)
        notice = (f"this session was closed after {quiet:.0f} s without a request to make room "
                  f"for another client (--max-clients reached); send initialize to start a new "
                  f"one (your client state is kept)")
        for key in (victim.session_id, "client:" + victim.client_id):
            self._reclaimed.pop(key, None)
            self._reclaimed[key] = notice
        while len(self._reclaimed) > RECLAIMED_KEPT:
            self._reclaimed.popitem(last=False)
        self.close_session(victim)
        return True

    def reclaim_notice(self, session_id: str | None = None,
                       client_id: str | None = None) -> str | None:
        """Why the session C{session_id} (or the latest session of C{client_id}) is gone, when it
        was closed to make room for another client (L{reclaim_idle}); said once."""
        for key in (session_id, None if client_id is None else "client:" + client_id):
            if key is not None and key in self._reclaimed:
                self._under_pressure()
                return self._reclaimed.pop(key)
        return None

    def _under_pressure(self) -> None:
        """A reclaimed client came back, or a newcomer was refused while one had: live clients
        outnumber the slots, so no session is closed for another before the quiet floor."""
        until = self.clock.seconds() + PRESSURE_WINDOW
        if until > self._pressure_until:
            if self._pressure_until < self.clock.seconds():
                log.info("client limit: a client whose session was reclaimed came back; for "
                         "{w:.0f} s no session is closed for another before {q:.0f} s quiet",
                         w=PRESSURE_WINDOW, q=self.reclaim_min_quiet)
            self._pressure_until = until

    def touch(self, session: McpSession) -> None:
        """Activity on C{session}: push its idle deadline back and touch the agent's state."""
        session.seen(self.clock.seconds(), self.idle_timeout)

    def _idle(self, session: McpSession) -> None:
        session.arm_idle(None)
        log.info("MCP session {sid} idle for {t}s: closed", sid=session_label(session.session_id),
                 t=self.idle_timeout)
        self.close_session(session)

    def close_session(self, session: McpSession) -> None:
        """End C{session}: cancel its work, release its client connection, run transport hooks."""
        if session.closed:
            return
        self.sessions.pop(session.session_id, None)
        hooks = session.close()
        try:
            self.registry.disconnect(session.client_id)
        except Exception:
            log.failure("registry.disconnect failed for {cid}", cid=session.client_id)
        for hook in hooks:
            try:
                hook(session)
            except Exception:
                log.failure("session close hook failed")
        log.info("MCP session {sid} of client {cid} closed after {t:.0f} s",
                 sid=session_label(session.session_id), cid=session.client_id,
                 t=self.clock.seconds() - session.created_at)
        self._tell_observers("session_closed", session)

    def close_all(self) -> None:
        for session in list(self.sessions.values()):
            self.close_session(session)
        self.turns.stop()

    def resource_updated(self, uri: str) -> int:
        """Tell every session subscribed to C{uri}; return how many were told."""
        message = jsonrpc.encode(
            jsonrpc.notification("notifications/resources/updated", {"uri": uri})
        )
        told = 0
        for session in list(self.sessions.values()):
            if uri in session.subscriptions:
                session.send(message)
                told += 1
        return told

    # -- dispatch ------------------------------------------------------------------------------

    def handle(
        self,
        session: McpSession,
        obj: Any,
        emit: Emit | None = None,
        close_stream: Callable[[], None] | None = None,
    ) -> Deferred:
        """Handle one decoded message; fire with the response dict or None."""
        try:
            message = jsonrpc.classify(obj)
        except JsonRpcError as e:
            return succeed(e.response())
        return self.dispatch(session, message, emit, close_stream)

    def handle_batch(
        self, session: McpSession, items: list[Any], emit: Emit | None = None
    ) -> Deferred:
        """Handle a JSON-RPC batch; fire with the list of responses (None when there are none)."""
        if session.protocol_version not in BATCH_VERSIONS:
            version = session.protocol_version or "none negotiated yet"
            return succeed(
                jsonrpc.error(
                    None,
                    INVALID_REQUEST,
                    f"Invalid Request: batches are not supported in protocol version {version} "
                    "(only 2025-03-26 allows them)",
                )
            )
        if not items:
            return succeed(jsonrpc.error(None, INVALID_REQUEST, "Invalid Request: empty batch"))
        ds = []
        for obj in items:
            if isinstance(obj, dict) and obj.get("method") == "initialize":
                ds.append(
                    succeed(
                        jsonrpc.error(
                            obj.get("id") if jsonrpc._valid_id(obj.get("id")) else None,
                            INVALID_REQUEST,
                            "Invalid Request: initialize must not be part of a batch",
                        )
                    )
                )
            else:
                ds.append(self.handle(session, obj, emit))
        d = gatherResults(ds, consumeErrors=True)
        d.addCallback(lambda rs: [r for r in rs if r is not None] or None)
        return d

    def dispatch(
        self,
        session: McpSession,
        message: Any,
        emit: Emit | None = None,
        close_stream: Callable[[], None] | None = None,
    ) -> Deferred:
        if isinstance(message, Request):
            return self._request(session, message, emit or session.send, close_stream)
        if isinstance(message, Notification):
            self._notification(session, message)
        elif isinstance(message, Response):
            self._response(session, message)
        return succeed(None)

    def _request(
        self, session: McpSession, req: Request, emit: Emit, close_stream: Callable[[], None] | None
    ) -> Deferred:
        rid = req.id
        method = req.method
        if method == "initialize":
            try:
                return succeed(jsonrpc.result(rid, self._initialize(session, req.params)))
            except JsonRpcError as e:
                return succeed(e.response(rid))
        if not session.initialized and method != "ping":
            return succeed(
                jsonrpc.error(
                    rid, INVALID_REQUEST, f"Invalid Request: {method} before initialize"
                )
            )
        handler = self._methods.get(method)
        if handler is None:
            return succeed(jsonrpc.error(rid, METHOD_NOT_FOUND, f"Method not found: {method}"))
        # Notifications and requests tied to this request pass the outgoing redaction
        # (gasoline.mcp.outgoing); tool results are redacted by the registry, errors in _failed.
        ctx = RequestContext(self, session, rid, method, req.params, redacting(emit), close_stream)
        d = maybeDeferred(handler, ctx, req.params)
        if not d.called:
            jsonrpc.track_pending(session.in_flight, rid, d)
        d.addCallbacks(lambda value: jsonrpc.result(rid, value), self._failed, errbackArgs=(rid,))
        return d

    def _failed(self, failure: Failure, rid: Any) -> dict[str, Any] | None:
        if isinstance(failure.value, JsonRpcError):
            # Gasoline's own faults and a proxied server's error.message / error.data alike.
            return redact_outgoing(failure.value.response(rid))
        if failure.check(CancelledError):
            # The client cancelled (or went away): the spec says not to answer.
            return None
        log.failure("MCP request {rid} failed", failure, rid=rid)
        return redact_outgoing(jsonrpc.error(rid, INTERNAL_ERROR,
                                             f"Internal error: {failure.getErrorMessage()}"))

    def _notification(self, session: McpSession, note: Notification) -> None:
        method = note.method
        if method == "notifications/initialized":
            session.mark_ready()
        elif method == "notifications/cancelled":
            d = session.take_in_flight(note.params.get("requestId"))
            if d is not None:
                d.cancel()
        elif method == "notifications/progress" and session.extra_tools is not None:
            # Progress on a request the session's extra tools sent the agent (a proxied server's
            # sampling request, say): theirs to route.
            session.extra_tools.progress(note.params)
        # Anything else (roots/list_changed, unknown) needs no action and no answer.

    def _response(self, session: McpSession, response: Response) -> None:
        d = session.take_answer(response.id)
        if d is None:
            return
        if response.error is not None:
            err = response.error if isinstance(response.error, dict) else {}
            d.errback(
                JsonRpcError(
                    int(err.get("code", INTERNAL_ERROR)) if isinstance(err.get("code"), int) else INTERNAL_ERROR,
                    str(err.get("message", "client error")),
                    err.get("data"),
                )
            )
        else:
            d.callback(response.result)

    def request_client(
        self, session: McpSession, method: str, params: dict[str, Any], emit: Emit, timeout: float
    ) -> Deferred:
        rid = session.next_request_id()
        d: Deferred = Deferred(lambda _: session.take_answer(rid))
        session.expect_answer(rid, d)
        emit(jsonrpc.request(rid, method, params))
        return d.addTimeout(timeout, self.clock)

    # -- methods -------------------------------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        caps: dict[str, Any] = {
            "logging": {},
            "tools": {"listChanged": False},
            "resources": {"subscribe": True, "listChanged": False},
        }
        if self.prompts.prompts:
            caps["prompts"] = {"listChanged": False}
            caps["completions"] = {}
        return caps

    def _initialize(self, session: McpSession, params: dict[str, Any]) -> dict[str, Any]:
        if session.initialized:
            raise JsonRpcError(INVALID_REQUEST, "Invalid Request: this session is already initialized")
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise JsonRpcError(INVALID_PARAMS, 'Invalid params: "protocolVersion" must be a string')
        caps = params.get("capabilities", {})
        info = params.get("clientInfo", {})
        if not isinstance(caps, dict) or not isinstance(info, dict):
            raise JsonRpcError(
                INVALID_PARAMS, 'Invalid params: "capabilities" and "clientInfo" must be objects'
            )
        version = requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION
        session.initialize(version, caps, info)
        capabilities = self.capabilities()
        if session.extra_tools is not None:
            # The session's extra tools change when its servers do (tools/list_changed).
            capabilities["tools"] = {"listChanged": True}
        return {
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": self.server_info,
            "instructions": self.instructions,
        }

    def _ping(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _set_level(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        level = params.get("level")
        if level not in LOG_LEVELS:
            raise JsonRpcError(
                INVALID_PARAMS, f"Invalid params: level must be one of {', '.join(LOG_LEVELS)}"
            )
        ctx.session.set_log_level(level)
        ctx.log("info", {"message": f"log level set to {level}", "session": session_label(ctx.session.session_id)})
        return {}

    def _tools_list(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        extra = ctx.session.extra_tools
        if extra is not None:
            return {"tools": self.tools.definitions() + extra.definitions()}
        return {"tools": self.tools.definitions()}

    def _tools_call(self, ctx: RequestContext, params: dict[str, Any]) -> Any:
        name = params.get("name")
        if not isinstance(name, str):
            raise JsonRpcError(INVALID_PARAMS, 'Invalid params: "name" must be a string')
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise JsonRpcError(INVALID_PARAMS, 'Invalid params: "arguments" must be an object')
        tool = self.tools.get(name)
        if tool is None and ctx.session.extra_tools is not None:
            tool = ctx.session.extra_tools.get(name)
        if tool is None:
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        try:
            # Capture first: within the reactor turn's budget, or in a later turn, or refused
            # busy (gasoline.core.turns).
            return self.turns.submit(lambda: self.tools.call(ctx, tool, arguments))
        except DaemonBusy as e:
            self.tools.count_error(e.code)
            return error_result(e)

    def _resources_list(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"resources": self.resources.definitions()}

    def _resources_templates(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"resourceTemplates": self.resources.template_definitions()}

    def _uri(self, params: dict[str, Any]) -> str:
        uri = params.get("uri")
        if not isinstance(uri, str) or not uri:
            raise JsonRpcError(INVALID_PARAMS, 'Invalid params: "uri" must be a non-empty string')
        return uri

    def _resources_read(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        return self.resources.read(ctx, self._uri(params))

    def _resources_subscribe(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        uri = self._uri(params)
        self.resources.require(uri)
        ctx.session.subscribe(uri)
        return {}

    def _resources_unsubscribe(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        ctx.session.unsubscribe(self._uri(params))
        return {}

    def _prompts_list(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"prompts": self.prompts.definitions()}

    def _prompts_get(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise JsonRpcError(INVALID_PARAMS, 'Invalid params: "name" must be a string')
        args = params.get("arguments") or {}
        if not isinstance(args, dict):
            raise JsonRpcError(INVALID_PARAMS, 'Invalid params: "arguments" must be an object')
        return self.prompts.get(name, args)

    def _complete(self, ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
        ref = params.get("ref")
        argument = params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise JsonRpcError(INVALID_PARAMS, 'Invalid params: "ref" and "argument" must be objects')
        return {"completion": self.prompts.complete(ref, argument)}



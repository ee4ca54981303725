"""
MCP over HTTP: streamable HTTP (2025-11-25) at C{/mcp}, the connector's form of it, and the legacy
HTTP+SSE transport (2024-11-05) at C{/mcp/sse} + C{/mcp/messages/<session-id>}.

B{Streamable HTTP}: C{POST /mcp} carries one JSON-RPC message (or a batch where the negotiated revision allows it).
Notifications and responses get 202 with no body. Requests are answered with
C{application/json}, or with an SSE stream when the client accepts C{text/event-stream} and the
answer is not ready at once or the handler sends something first (progress, log messages,
sampling/elicitation requests): the JSON fast path costs nothing for the common case. An SSE
answer starts with a priming event (an id, empty data, a C{retry} hint); every event has an id,
and C{GET /mcp} with C{Last-Event-ID} resumes that stream. C{initialize} without a session id
creates a session and returns its cryptographically random C{Mcp-Session-Id}; any other request
without one is stateless (MCP 2026-07-28: answered on its own, as plain JSON, for the client
C{stateless}) unless its C{MCP-Protocol-Version} names a session revision (then 400); an
unknown or ended session is a 404. C{GET /mcp} (C{Accept:
text/event-stream}) opens the server→client stream; C{DELETE /mcp} ends the session. An
C{MCP-Protocol-Version} header naming a revision we do not speak is a 400.

B{Connector form (the C{gasoline connect} bridge, contract in docs/mcp.md)}: C{X-Gasoline-Client: <client id>} with its
C{X-Gasoline-Client-Proof} (L{gasoline.http.client_proof}: without a valid proof the request is a
403, never served as another id) and C{X-Gasoline-Connection: <per-process id>}, no
C{Mcp-Session-Id}: the session is keyed by (client id, connection id) and (re)created by
C{initialize} (a request on a connection without one is a 404, or, with
C{MCP-Protocol-Version: 2026-07-28}, answered statelessly for that client id); answers are always plain JSON (200, or 202 without a body); C{GET /mcp} with the
same headers streams that connection's notifications as SSE with ids and C{Last-Event-ID} replay.

B{A plain client with a fixed id} (C{X-Gasoline-Client} and its proof, no
C{X-Gasoline-Connection}) speaks streamable HTTP as any client does: each C{initialize} opens a
session of that client id with its own C{Mcp-Session-Id} (several coexist, sharing the client's
state), C{DELETE} ends one; a session id of another client is a 404.

B{Legacy HTTP+SSE}: C{GET /mcp/sse} opens a session and sends C{event: endpoint} whose data is
C{/mcp/messages/<session-id>}; POSTs there get 202 and their answers arrive on the stream as
C{event: message}. Closing the stream ends the session (C{notifyFinish}); a session with no
request for an hour is dropped (a clock timer, see L{gasoline.mcp.server}).

Host and Origin are checked for every path by the root resource's guard before this code runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Literal

from klein import Klein
from twisted.logger import Logger
from twisted.web.server import NOT_DONE_YET

from gasoline.core.errors import ClientProofRefused, GasolineError, TooManyClients
from gasoline.http.client_proof import claimed_client, require_owner
from gasoline.http.keepalive import keepalive_service
from gasoline.http.mcp_sse import _JSON, _Finisher, _PostExchange, _sse_event, _start_sse
from gasoline.mcp import jsonrpc
from gasoline.mcp.jsonrpc import INVALID_REQUEST, PARSE_ERROR, SESSION_NOT_FOUND
from gasoline.mcp.server import KNOWN_VERSIONS, STATELESS_VERSION, McpServer
from gasoline.mcp.session import McpSession

if TYPE_CHECKING:
    from twisted.web.server import Request

log = Logger()

#: Largest JSON-RPC body accepted (a 413 beyond it).
MAX_BODY = 4 * 1024 * 1024
_VERSIONS = frozenset(v.encode() for v in KNOWN_VERSIONS)
_STATELESS = STATELESS_VERSION.encode()


def _error_body(request: Request, status: int, code: int, message: str, id: Any = None) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", _JSON)
    return jsonrpc.encode(jsonrpc.error(id, code, message))


def _gasoline_error(request: Request, error: GasolineError) -> bytes:
    status = 429 if isinstance(error, TooManyClients) else \
        403 if isinstance(error, ClientProofRefused) else 400
    request.setResponseCode(status)
    request.setHeader(b"content-type", _JSON)
    return jsonrpc.encode(jsonrpc.error(None, INVALID_REQUEST, error.message, error.to_json()))


class McpHTTP:
    """The routes of C{/mcp}, C{/mcp/sse} and C{/mcp/messages/<session-id>}."""

    app = Klein()

    def __init__(self, server: McpServer, max_body: int = MAX_BODY, *,
                 session_binder: Callable[[str, McpSession], Any] | None = None) -> None:
        self.server = server
        self.max_body = max_body
        #: (client id, connection id) -> the connector connection's session.
        self.connections: dict[tuple[str, str], McpSession] = {}
        #: Open SSE responses (they get keep-alive comments).
        self.open_streams: set[_Finisher] = set()
        self.keepalive_service = keepalive_service(server.clock, self.open_streams,
                                                   "mcp-sse-keepalive", "SSE")
        #: C{bind(proxy_session_id, mcp_session)}: a connector connection that sends
        #: C{X-Gasoline-Proxy-Session} sees that proxy session's tools (passed by the app when the
        #: daemon has proxy servers; raises a GasolineError for an unknown id).
        self.session_binder = session_binder

    def track(self, finisher: "_Finisher") -> None:
        """Count C{finisher}'s response as an open SSE stream until it ends."""
        if finisher not in self.open_streams and not finisher.done:
            self.open_streams.add(finisher)
            finisher.request.notifyFinish().addBoth(lambda _: self.open_streams.discard(finisher))

    # -- shared helpers ------------------------------------------------------------------------

    def _body(self, request: Request) -> bytes | None:
        length = request.getHeader(b"content-length")
        if length is not None:
            try:
                if int(length) > self.max_body:
                    return None
            except ValueError:
                pass
        content = request.content
        if content is None:
            return b""
        content.seek(0)
        body = content.read(self.max_body + 1)
        return None if len(body) > self.max_body else body

    def _too_large(self, request: Request) -> bytes:
        """The 413 answer to a body over L{max_body}."""
        return _error_body(request, 413, INVALID_REQUEST,
                           f"Payload Too Large: the limit is {self.max_body} bytes")

    def _version_error(self, request: Request) -> bytes | None:
        version = request.getHeader(b"mcp-protocol-version")
        if version is not None and version not in _VERSIONS:
            return _error_body(
                request, 400, INVALID_REQUEST,
                f"Bad Request: unsupported MCP-Protocol-Version {version.decode('latin-1')!r} "
                f"(supported: {', '.join(KNOWN_VERSIONS)})",
            )
        return None

    def _connector_key(self, request: Request) -> tuple[str, str] | None:
        """C{(client id, connection id)} of a connector-form request (its client id proven:
        L{claimed_client}, and an C{X-Gasoline-Connection}), or C{None} for the plain form (with
        or without a named client: L{_named_client}).

        @raise GasolineError: a client id named without its proof (403), or malformed (400)."""
        client = claimed_client(request, self.server.registry.client_key)
        conn = request.getHeader(b"x-gasoline-connection")
        if client is None or conn is None:
            return None
        return client, conn.decode("utf-8", "replace")

    def _named_client(self, request: Request) -> str | None:
        """The proven client id of a plain-form request (C{X-Gasoline-Client} and its proof,
        no C{X-Gasoline-Connection}): a hand-wired HTTP client with a fixed id. It gets
        C{Mcp-Session-Id} sessions like any streamable client, each a session of that id.

        @raise GasolineError: a client id named without its proof (403), or malformed (400)."""
        if request.getHeader(b"x-gasoline-connection") is not None:
            return None
        return claimed_client(request, self.server.registry.client_key)

    def _stateless_client(self, request: Request,
                         key: tuple[str, str] | None) -> str | None | Literal[False]:
        """For a non-initialize request: the client a stateless (2026-07-28) answer is for
        (C{None}: no identity given), or C{False} when the request is for a session (2025-11-25:
        it is found, or refused by L{_find}).

        Connector form: stateless only when it says C{MCP-Protocol-Version: 2026-07-28} and the
        connection has no session (the connector says so while its agent has not initialized; an
        initialized connector gets a 404 after a daemon restart and re-creates its session).
        Plain form: no C{Mcp-Session-Id} and no C{MCP-Protocol-Version} other than 2026-07-28."""
        version = request.getHeader(b"mcp-protocol-version")
        if key is not None:
            if version != _STATELESS:
                return False
            session = self.connections.get(key)
            return key[0] if session is None or session.closed else False
        if request.getHeader(b"mcp-session-id") is not None:
            return False
        if version is not None and version != _STATELESS:
            return False
        return self._named_client(request)

    def _find(self, request: Request) -> tuple[McpSession | None, bytes | None]:
        """The session a request names, or the error body to answer: by C{Mcp-Session-Id} when
        it sends one (whose owner it must prove, L{require_owner}), else the connector form's
        connection."""
        sid = request.getHeader(b"mcp-session-id")
        if sid is not None:
            session = self.server.sessions.get(sid.decode("latin-1"))
            if session is None or session.transport != "streamable":
                notice = (self.server.reclaim_notice(session_id=sid.decode("latin-1"))
                          if session is None else None)
                return None, _error_body(request, 404, SESSION_NOT_FOUND,
                                         f"Session not found: {notice}" if notice else
                                         "Session not found: unknown or ended Mcp-Session-Id")
            try:
                require_owner(request, self.server.registry.client_key, session.client_id,
                              session.session_id)
            except GasolineError as e:
                return None, _gasoline_error(request, e)
            return session, None
        try:
            key = self._connector_key(request)
        except GasolineError as e:
            return None, _gasoline_error(request, e)
        if key is not None:
            session = self.connections.get(key)
            if session is None or session.closed:
                notice = self.server.reclaim_notice(client_id=key[0])
                return None, _error_body(
                    request, 404, SESSION_NOT_FOUND,
                    f"Session not found: {notice}" if notice else
                    "Session not found: this connection has no MCP session; send initialize",
                )
            return session, None
        return None, _error_body(request, 400, INVALID_REQUEST,
                                 "Bad Request: Mcp-Session-Id header is required")

    def _open_connector(self, key: tuple[str, str]) -> McpSession:
        old = self.connections.pop(key, None)
        if old is not None:
            self.server.close_session(old)
        session = self.server.open_session(key[0], "connector")
        self.connections[key] = session

        def forget(s: McpSession) -> None:
            if self.connections.get(key) is s:
                del self.connections[key]

        session.when_closed(forget)
        session.when_closed(_finish_streams)
        return session

    def _bind_proxy(self, request: Request, session: McpSession) -> bytes | None:
        """C{X-Gasoline-Proxy-Session: <id>} on a connector's initialize: bind that session."""
        proxy_id = request.getHeader(b"x-gasoline-proxy-session")
        if proxy_id is None:
            return None
        try:
            if self.session_binder is None:
                raise GasolineError("this daemon has no proxy sessions", code="unknown_session")
            self.session_binder(proxy_id.decode("latin-1"), session)
        except GasolineError as e:
            self.server.close_session(session)
            request.setResponseCode(404)
            request.setHeader(b"content-type", _JSON)
            return jsonrpc.encode(jsonrpc.error(None, SESSION_NOT_FOUND, e.message, e.to_json()))
        return None

    def _bind_late(self, request: Request, session: McpSession) -> None:
        """A connection opened before its proxy session (the connector's fast initialize)
        names it on a later request: bind it then; an unknown id leaves Gasoline's own tools."""
        proxy_id = request.getHeader(b"x-gasoline-proxy-session")
        if proxy_id is None or self.session_binder is None:
            return
        try:
            self.session_binder(proxy_id.decode("latin-1"), session)
        except GasolineError as e:
            log.info("connector session not bound to proxy session: {e}", e=e.message)

    # -- streamable HTTP -----------------------------------------------------------------------

    @app.route("/mcp", methods=["POST"])
    def _post(self, request: Request) -> Any:  # bytes, or NOT_DONE_YET
        ctype = request.getHeader(b"content-type")
        if ctype is not None and b"json" not in ctype.lower():
            return _error_body(request, 415, INVALID_REQUEST,
                               "Unsupported Media Type: send application/json")
        body = self._body(request)
        if body is None:
            return self._too_large(request)
        refused = self._version_error(request)
        if refused is not None:
            return refused
        try:
            obj = jsonrpc.decode(body)
        except jsonrpc.JsonRpcError as e:
            return _error_body(request, 400, PARSE_ERROR, e.message)
        is_init = isinstance(obj, dict) and obj.get("method") == "initialize"
        new_session = False
        session: McpSession | None
        # A request naming a session is for that session (its owner checked by _find), whatever
        # else it sends; the connector form is the one without Mcp-Session-Id.
        named = request.getHeader(b"mcp-session-id") is not None
        try:
            key = None if named else self._connector_key(request)
            stateless = False if is_init else self._stateless_client(request, key)
            if stateless is not False:
                if isinstance(obj, list):
                    return _error_body(request, 400, INVALID_REQUEST,
                                       "Invalid Request: batches need a session (protocol "
                                       "2025-03-26); a request without one stands alone")
                session = self.server.open_stateless(stateless)
            elif key is not None:
                if is_init:
                    session = self._open_connector(key)
                    new_session = True
                    refused = self._bind_proxy(request, session)
                    if refused is not None:
                        return refused
                else:
                    session, refused = self._find(request)
                    if refused is not None:
                        return refused
                    if session is not None and session.extra_tools is None:
                        self._bind_late(request, session)
            elif is_init and not named:
                # Each initialize is a session of its own, for the named client (its state
                # shared by its sessions) or for a fresh anonymous id.
                session = self.server.open_session(self._named_client(request), "streamable")
                session.when_closed(_finish_streams)
                new_session = True
            else:
                session, refused = self._find(request)
                if refused is not None:
                    return refused
        except GasolineError as e:
            return _gasoline_error(request, e)
        assert session is not None
        if session.transport == "streamable":
            request.setHeader(b"mcp-session-id", session.session_id.encode())
            # Browser-based MCP clients can only read the id if it is exposed (CORS).
            request.setHeader(b"access-control-expose-headers", b"Mcp-Session-Id")
        self.server.touch(session)
        session.arrived_on(_connection_key(request))

        if isinstance(obj, list):
            has_requests = any(jsonrpc.is_request_obj(m) for m in obj)
        else:
            has_requests = jsonrpc.is_request_obj(obj)
        if stateless is not False:
            return self._stateless(request, session, obj, has_requests)
        if not has_requests:
            return self._accept(request, session, obj)

        sse_ok = False
        if key is None:
            accept = (request.getHeader(b"accept") or b"").lower()
            sse_ok = b"text/event-stream" in accept
            if accept and not sse_ok and _JSON not in accept and b"*/*" not in accept:
                return _error_body(request, 406, INVALID_REQUEST,
                                   "Not Acceptable: accept application/json or text/event-stream")
            sse_only = sse_ok and _JSON not in accept and b"*/*" not in accept
        else:
            sse_only = False
        exchange = _PostExchange(self, request, session, sse_ok, sse_only)
        if isinstance(obj, list):
            d = self.server.handle_batch(session, obj, exchange.emit)
        else:
            d = self.server.handle(session, obj, exchange.emit, exchange.close_stream)
        exchange.follow(d)
        exchange.end_render()
        if new_session and isinstance(exchange.response, dict) and "error" in exchange.response:
            # A refused initialize leaves no session behind.
            self.server.close_session(session)
            request.responseHeaders.removeHeader(b"mcp-session-id")
        # Still working: answer on an SSE stream when the client takes one, else JSON later.
        return exchange.render_result(upgrade=sse_ok)

    def _stateless(self, request: Request, session: McpSession, obj: Any,
                   has_requests: bool) -> bytes | int:
        """Answer one message of a request-scoped session (L{McpServer.open_stateless}) as plain
        JSON, then close the session (work still running when the client goes is cancelled)."""
        if not has_requests:
            try:
                return self._accept(request, session, obj)
            finally:
                self.server.close_session(session)
        exchange = _PostExchange(self, request, session, False, False)
        d = self.server.handle(session, obj, exchange.emit, exchange.close_stream)
        exchange.follow(d)
        d.addBoth(lambda _: self.server.close_session(session))
        exchange.end_render()
        return exchange.render_result(upgrade=False)

    def _accept(self, request: Request, session: McpSession, obj: Any) -> bytes:
        """Notifications and responses only: process them; 202 without a body."""
        answers: list[Any] = []
        if isinstance(obj, list):
            d = self.server.handle_batch(session, obj)
        else:
            d = self.server.handle(session, obj)
        d.addCallback(answers.append)
        d.addErrback(lambda f: log.failure("MCP notification handling failed", f))
        errors = answers[0] if answers else None
        if errors:
            first = errors[0] if isinstance(errors, list) else errors
            request.setResponseCode(400)
            request.setHeader(b"content-type", _JSON)
            return jsonrpc.encode(first)
        request.setResponseCode(202)
        return b""

    @app.route("/mcp", methods=["GET"])
    def _get(self, request: Request) -> Any:  # bytes, or NOT_DONE_YET
        accept = (request.getHeader(b"accept") or b"").lower()
        if b"text/event-stream" not in accept:
            return _error_body(request, 406, INVALID_REQUEST,
                               "Not Acceptable: GET /mcp needs Accept: text/event-stream")
        refused = self._version_error(request)
        if refused is not None:
            return refused
        session, refused = self._find(request)
        if refused is not None:
            return refused
        assert session is not None
        self.server.touch(session)
        session.arrived_on(_connection_key(request))
        last = request.getHeader(b"last-event-id")
        last_id = last.decode("latin-1") if last else None
        stream = session.standalone
        if last_id is not None:
            found = session.stream_for_event(last_id)
            if found is not None:
                stream = found
            else:
                last_id = None
        old_closer = stream.closer
        if old_closer is not None and stream.writer is not None:
            old_closer()  # one GET per stream: the newest replaces the previous one
        _start_sse(request)
        if session.transport == "streamable":
            request.setHeader(b"mcp-session-id", session.session_id.encode())
        finisher = _Finisher(request, self.server.clock)
        self.track(finisher)
        finisher.write(b": gasoline stream\n\n")

        def writer(event_id: str, payload: bytes) -> None:
            finisher.write(_sse_event(event_id, payload))

        stream.attach(writer, last_id, closer=finisher.finish)

        def gone(_: Any) -> None:
            stream.detach(writer)
            stream.forget_closer(finisher.finish)

        request.notifyFinish().addBoth(gone)
        if stream.done:
            stream.detach(writer)
            finisher.finish()
        return NOT_DONE_YET

    @app.route("/mcp", methods=["DELETE"])
    def _delete(self, request: Request) -> Any:  # bytes, or NOT_DONE_YET
        session, refused = self._find(request)
        if refused is not None:
            return refused
        assert session is not None
        self.server.close_session(session)
        request.setResponseCode(204)
        return b""

    # -- legacy HTTP+SSE -----------------------------------------------------------------------

    @app.route("/mcp/sse", methods=["GET"])
    def _legacy_sse(self, request: Request) -> Any:  # bytes, or NOT_DONE_YET
        accept = (request.getHeader(b"accept") or b"").lower()
        if accept and b"text/event-stream" not in accept and b"*/*" not in accept:
            return _error_body(request, 406, INVALID_REQUEST,
                               "Not Acceptable: GET /mcp/sse needs Accept: text/event-stream")
        try:
            session = self.server.open_session(
                claimed_client(request, self.server.registry.client_key), "sse")
        except GasolineError as e:
            return _gasoline_error(request, e)
        _start_sse(request)
        finisher = _Finisher(request, self.server.clock)
        self.track(finisher)
        finisher.write(b"event: endpoint\ndata: /mcp/messages/" + session.session_id.encode()
                       + b"\n\n")

        def writer(event_id: str, payload: bytes) -> None:
            finisher.write(_sse_event(event_id, payload, b"message"))

        session.standalone.attach(writer, closer=finisher.finish)
        session.when_closed(lambda s: finisher.finish())
        # Disconnect detection: the stream is the session.
        request.notifyFinish().addBoth(lambda _: self.server.close_session(session))
        return NOT_DONE_YET

    @app.route("/mcp/messages/<sid>", methods=["POST"])
    def _legacy_post(self, request: Request, sid: str) -> bytes:
        session = self.server.sessions.get(sid)
        if session is None or session.transport != "sse":
            return _error_body(request, 404, SESSION_NOT_FOUND,
                               "Session not found: unknown or ended session id")
        try:
            require_owner(request, self.server.registry.client_key, session.client_id,
                          session.session_id)
        except GasolineError as e:
            return _gasoline_error(request, e)
        body = self._body(request)
        if body is None:
            return self._too_large(request)
        try:
            obj = jsonrpc.decode(body)
        except jsonrpc.JsonRpcError as e:
            return _error_body(request, 400, PARSE_ERROR, e.message)
        self.server.touch(session)
        session.arrived_on(_connection_key(request))
        if isinstance(obj, list):
            d = self.server.handle_batch(session, obj)
        else:
            d = self.server.handle(session, obj)

        def answer(response: Any) -> None:
            if response is not None and not session.closed:
                session.send(response)

        d.addCallback(answer)
        d.addErrback(lambda f: log.failure("legacy MCP message failed", f))
        request.setResponseCode(202)
        request.setHeader(b"content-type", b"text/plain")
        return b"Accepted"


def _finish_streams(session: McpSession) -> None:
    """A session ended: end every HTTP stream still attached to it."""
    for stream in list(session.streams.values()):
        closer = stream.end()
        if closer is not None:
            closer()


def _connection_key(request: Request) -> str | None:
    """A rate-limit key for the TCP connection C{request} came on: switching client
    ids within one connection must not buy more tool calls."""
    channel = request.channel
    return None if channel is None else f"connection:{id(channel):x}"

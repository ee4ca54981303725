"""
C{/session}: the session-based MCP proxy's routes (C{docs/proxy.md})::

  POST   /session/init          body C{{workingDirectory, clientInfo?, capabilities?, preferences?}};
                                the agent's client id is the one C{X-Gasoline-Client} names with
                                its proof (L{gasoline.http.client_proof}; else 403), or a fresh one
                                -> 200 C{{sessionId, protocolVersion, capabilities, servers, tools}}
                                   once every enabled server started (or failed, with its reason)
                                -> 400 C{invalid_param} / C{bad_json} / C{invalid_project_config}
                                -> 429 C{too_many_sessions} / C{too_many_children}
                                -> 404 C{proxy_disabled} when the daemon has no servers file
  GET    /session/{id}          -> 200 the same description (servers' live status), 404
  DELETE /session/{id}          -> 200 C{{sessionId, ended: true}} once its children are reaped;
  POST   /session/{id}/destroy     404 C{unknown_session}

The session id is also the MCP session: C{POST /mcp} with C{Mcp-Session-Id: <sessionId>}. Every
route that takes the id needs the identity that opened the session (the same proven client id, or
none when it was opened without one; else 403 C{session_owner}, see L{gasoline.core.clients.session_ids}).
Host, Origin and the optional API key are checked by the root's guard before this code runs; on top
of that, these routes start processes, so a request carrying any C{Origin} (a browser: a page, or
an extension the guard lets through for the ingest routes) gets 403 C{forbidden_origin}.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from klein import Klein
from twisted.logger import Logger

from gasoline.core.errors import GasolineError
from gasoline.core.clients.session_ids import session_label
from gasoline.http.client_proof import claimed_client, require_owner
from gasoline.http.json import json_body, read_json_object

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure
    from twisted.web.server import Request

    from gasoline.proxy.routing import ProxySession
    from gasoline.proxy.session import ProxyManager

log = Logger()

#: An init body is small; anything larger is refused without parsing.
MAX_BODY = 64 * 1024

_STATUS = {"forbidden_origin": 403, "client_proof": 403, "session_owner": 403, "too_many_sessions": 429, "too_many_children": 429, "unknown_session": 404,
           "proxy_disabled": 404, "too_many_clients": 429}


def _error(request: Request, err: GasolineError) -> bytes:
    return json_body(request, err.to_json(), _STATUS.get(err.code, 400))


class ProxyAPI:
    """The C{/session} routes over a L{gasoline.proxy.session.ProxyManager} (or None: the
    daemon runs without a servers file, and every route says so)."""

    app = Klein()

    def __init__(self, manager: ProxyManager | None) -> None:
        self.manager = manager

    def _manager(self, request: Request) -> ProxyManager:
        if request.getHeader(b"origin") is not None:
            raise GasolineError("proxy sessions cannot be opened or read from a browser",
                                code="forbidden_origin")
        if self.manager is None:
            raise GasolineError(
                "this daemon has no proxy servers configured (start it with --proxy-config "
                "FILE; see docs/proxy.md)", code="proxy_disabled")
        return self.manager

    @app.route("/session/init", methods=["POST"])
    def init(self, request: Request) -> bytes | Deferred[bytes]:
        try:
            manager = self._manager(request)
            client_id = claimed_client(request, manager.mcp.registry.client_key)
            body = read_json_object(request, MAX_BODY)
            d = manager.create(body, client_id=client_id)
        except GasolineError as e:
            return _error(request, e)

        def created(session: ProxySession) -> bytes:
            log.info("proxy session {sid} opened for {wd}", sid=session_label(session.session_id),
                     wd=session.working_directory)
            request.setHeader(b"mcp-session-id", session.session_id.encode())
            return json_body(request, session.describe())

        def failed(f: Failure) -> bytes:
            if isinstance(f.value, GasolineError):
                return _error(request, f.value)
            log.failure("proxy session init failed", f)
            return json_body(request, {"error": "internal_error",
                                       "message": f.getErrorMessage()}, 500)

        return d.addCallbacks(created, failed)

    def _owned(self, request: Request, sid: str) -> tuple[ProxyManager, ProxySession]:
        """The proxy session C{sid}, if C{request} is its owner (L{require_owner}: it proves the
        client id that opened it, or names none when it was opened without one)."""
        manager = self._manager(request)
        session = manager.get(sid)
        require_owner(request, manager.mcp.registry.client_key, session.client_id, sid)
        return manager, session

    @app.route("/session/<sid>", methods=["GET"])
    def describe(self, request: Request, sid: str) -> bytes:
        try:
            _, session = self._owned(request, sid)
        except GasolineError as e:
            return _error(request, e)
        return json_body(request, session.describe())

    @app.route("/session/<sid>", methods=["DELETE"])
    def delete(self, request: Request, sid: str) -> bytes | Deferred[bytes]:
        return self._end(request, sid)

    @app.route("/session/<sid>/destroy", methods=["POST", "DELETE"])
    def destroy(self, request: Request, sid: str) -> bytes | Deferred[bytes]:
        return self._end(request, sid)

    def _end(self, request: Request, sid: str) -> bytes | Deferred[bytes]:
        try:
            manager, _ = self._owned(request, sid)
        except GasolineError as e:
            return _error(request, e)
        d = manager.destroy(sid, why="ended by DELETE /session")
        return d.addCallback(lambda _: json_body(request, {"sessionId": sid, "ended": True}))

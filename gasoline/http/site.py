"""
The root of the HTTP surface: the route policy, the guards, then the route's handler.

Each API is its own object whose class declares its routes with Klein (ingest, MCP, admin, ...);
the root is built with all of them (C{app.build_http}) and reads their declarations once into one
table (L{gasoline.http.dispatch.Handlers}): every route served has an entry of the route policy
(L{gasoline.http.routes}), else the root cannot be built. It is a leaf resource that, for every
request, resolves the raw path and method once: the path must be canonical (else 400) and name a
route of the table (else 404, after the guards so that the extension still gets its CORS
headers); the guards of extension-protocol.md §1 run with that route's policy; a method the
route does not have is 405, and a route no API of this daemon serves (the relay's without a
relay) is 404. Only then is the route's handler called, through the one code path that takes every kind
of answer (L{gasoline.http.dispatch.Handlers.render}). Nothing is set on the root after it is
built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from gasoline.core.inflight import InFlight
from gasoline.http.dispatch import Handlers, HasRoutes, Target
from gasoline.http.json import json_error, method_not_allowed, not_found
from gasoline.http.routes import TABLE, UNKNOWN, NotCanonical, RouteTable

if TYPE_CHECKING:
    from gasoline.http.guards import Guard


class GasolineRoot(Resource):
    isLeaf = True

    def __init__(self, guard: Guard, apis: Iterable[HasRoutes] = (), routes: RouteTable = TABLE,
                 *, on_response: Callable[[bytes, int], None] | None = None,
                 inflight: InFlight | None = None) -> None:
        super().__init__()
        #: The daemon-wide in-flight budget (request bodies, unfinished WebSocket messages):
        #: the site serving this root and the WebSocket routes it serves share it.
        self.inflight = inflight or InFlight()
        #: The route policy (gasoline.http.routes.ROUTES).
        self.routes = routes
        #: The policy's routes with their handlers, read from C{apis}' Klein declarations.
        self.handlers = Handlers.of(apis, routes)
        self.guard = guard
        #: Called as C{on_response(path, code)} once each request is answered (C{/metrics}).
        self.on_response = on_response

    def render(self, request: Request) -> bytes | int:
        body = self._render(request)
        hook = self.on_response
        if hook is not None:
            if request.finished or body is not NOT_DONE_YET:
                hook(request.path, request.code)
            else:
                request.notifyFinish().addBoth(lambda _: hook(request.path, request.code))
        return body

    def policy(self, request: Request) -> bytes | None:
        """The route policy and the guards: C{None} to go on, else the body of the refusal
        (status and headers already set on C{request}). The channel runs it on the headers of a
        request that has a body, before any of the body is read (L{gasoline.http.request}), and
        L{render} runs it again on the whole request."""
        refused = self._policy(request)
        return refused if isinstance(refused, bytes) else None

    def _policy(self, request: Request) -> bytes | Target:
        method = request.method
        if method == b"OPTIONS":
            # A preflight is judged by the policy of the route it asks for (one path can have
            # routes for several callers: GET /logs is an agent's, POST /logs the extension's).
            asked = request.getHeader(b"access-control-request-method")
            method = asked.encode("ascii", "replace") if isinstance(asked, str) else \
                asked or method
        target = self.handlers.resolve(request.path, method)
        if isinstance(target, NotCanonical):
            return json_error(request, 400, f"bad request: {target} (spell the route exactly)")
        refused = self.guard.check(request, target.route if target is not None else UNKNOWN)
        if refused is not None:
            return refused
        if target is None:
            return not_found(request)
        route = target.route
        if not route.allows_method(request.method):
            return method_not_allowed(request, route.methods)
        return target

    def _render(self, request: Request) -> bytes | int:
        target = self._policy(request)
        if isinstance(target, bytes):
            return target
        if target.handler is None:
            return not_found(request)  # a route of the policy this daemon does not serve
        return self.handlers.render(request, target)

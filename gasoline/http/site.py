"""
The root of the HTTP surface: the route policy, the guards, then dispatch by the first segment.

Each API is its own object with its own Klein app (ingest, MCP, admin, ...). The root is a leaf
resource that, for every request, decides once on the path that is dispatched
(L{gasoline.http.routes}): the raw path must be canonical (else 400) and name a route of the table
(else 404, after the guards so that the extension still gets its CORS headers); the guards of
extension-protocol.md §1 run with that route's policy; a method the route does not have is 405.
Only then is the request handed, with its full path intact, to the resource mounted for the path's
first segment (or to the fallback, the extension ingest API). Because the raw path has no
percent-encoding, no empty and no dot segment, Twisted's decoded C{postpath} (what Klein and the
resources route on) is exactly the raw path the table matched. Mounting is explicit: C{app.build_http}
passes every mount (and the C{on_response} hook) at construction; nothing is set on the root
afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from gasoline.core.inflight import InFlight
from gasoline.http.json import json_error
from gasoline.http.routes import TABLE, UNKNOWN, NotCanonical, RouteTable

if TYPE_CHECKING:
    from gasoline.http.guards import Guard


class GasolineRoot(Resource):
    isLeaf = True

    def __init__(self, guard: Guard, fallback: Resource | None = None, routes: RouteTable = TABLE, *,
                 mounts: Mapping[bytes, Resource] | None = None,
                 on_response: Callable[[bytes, int], None] | None = None,
                 inflight: InFlight | None = None) -> None:
        super().__init__()
        #: The daemon-wide in-flight budget (request bodies, unfinished WebSocket messages):
        #: the site serving this root and the WebSocket routes mounted on it share it.
        self.inflight = inflight or InFlight()
        #: The route policy (gasoline.http.routes.ROUTES).
        self.routes = routes
        #: first path segment (bytes) -> resource that renders every path under it
        self.mounts: dict[bytes, Resource] = dict(mounts or {})
        self.fallback = fallback
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
        method = request.method
        if method == b"OPTIONS":
            # A preflight is judged by the policy of the route it asks for (one path can have
            # routes for several callers: GET /logs is an agent's, POST /logs the extension's).
            asked = request.getHeader(b"access-control-request-method")
            method = asked.encode("ascii", "replace") if isinstance(asked, str) else \
                asked or method
        route = self.routes.resolve(request.path, method)
        if isinstance(route, NotCanonical):
            return json_error(request, 400, f"bad request: {route} (spell the route exactly)")
        refused = self.guard.check(request, route or UNKNOWN)
        if refused is not None:
            return refused
        if route is None:
            return json_error(request, 404, "not found",
                              path=request.path.decode("ascii", "replace"))
        if not route.allows_method(request.method):
            request.setHeader(b"allow", ", ".join(route.methods).encode())
            return json_error(request, 405, f"method {request.method.decode('ascii', 'replace')}"
                              " not allowed here", allowed=list(route.methods))
        return None

    def _render(self, request: Request) -> bytes | int:
        refused = self.policy(request)
        if refused is not None:
            return refused
        segment = request.postpath[0] if request.postpath else b""
        target = self.mounts.get(segment, self.fallback)
        if target is None:
            return json_error(request, 404, "not found")
        return target.render(request)

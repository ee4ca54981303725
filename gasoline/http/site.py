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

from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from gasoline.http.json import json_error
from gasoline.http.routes import TABLE, UNKNOWN, NotCanonical, RouteTable


class GasolineRoot(Resource):
    isLeaf = True

    def __init__(self, guard, fallback: Resource | None = None, routes: RouteTable = TABLE, *,
                 mounts: Mapping[bytes, Resource] | None = None,
                 on_response: Callable[[bytes, int], None] | None = None) -> None:
        super().__init__()
        #: The route policy (gasoline.http.routes.ROUTES).
        self.routes = routes
        #: first path segment (bytes) -> resource that renders every path under it
        self.mounts: dict[bytes, Resource] = dict(mounts or {})
        self.fallback = fallback
        self.guard = guard
        #: Called as C{on_response(path, code)} once each request is answered (C{/metrics}).
        self.on_response = on_response

    def render(self, request):
        body = self._render(request)
        hook = self.on_response
        if hook is not None:
            if request.finished or body is not NOT_DONE_YET:
                hook(request.path, request.code)
            else:
                request.notifyFinish().addBoth(lambda _: hook(request.path, request.code))
        return body

    def _render(self, request):
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
        segment = request.postpath[0] if request.postpath else b""
        target = self.mounts.get(segment, self.fallback)
        if target is None:
            return json_error(request, 404, "not found")
        return target.render(request)

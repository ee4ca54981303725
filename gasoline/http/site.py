"""
The root of the HTTP surface: request guards, then dispatch by the first path segment.

Each API is its own object with its own Klein app (ingest, MCP, admin, ...). The root is a leaf
resource that runs the guards of extension-protocol.md §1 for every request, then hands the request,
with its full path intact, to the resource mounted for the path's first segment (or to the fallback,
the extension ingest API). Mounting is explicit: C{app.build_http} passes every mount (and the
C{on_response} hook) at construction; nothing is set on the root afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from gasoline.http.json import json_error


class GasolineRoot(Resource):
    isLeaf = True

    def __init__(self, guard, fallback: Resource | None = None, *,
                 mounts: Mapping[bytes, Resource] | None = None,
                 on_response: Callable[[bytes, int], None] | None = None) -> None:
        super().__init__()
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
        refused = self.guard.check(request)
        if refused is not None:
            return refused
        segment = request.postpath[0] if request.postpath else b""
        target = self.mounts.get(segment, self.fallback)
        if target is None:
            return json_error(request, 404, "not found")
        return target.render(request)

"""
A Klein app's fixed routes, answered without Klein's per-request machinery.

For every request, C{KleinResource.render} binds a werkzeug C{MapAdapter}, adapts the request to
C{IKleinRequest}, registers two C{notifyFinish} callbacks and runs the handler through a chain of
four Deferreds. On C{POST /logs} (50 console entries) that is about 245,000 instructions, 15 % of
the request (C{bench/ingest_path.py} under callgrind). For a route whose path has no variable
part none of it is needed: the root (L{gasoline.http.site.GasolineRoot}) has already matched the
exact path and method against the route table. L{DirectRoutes} looks the request's method and
path up in a dict built once from the app's C{url_map} and calls the endpoint itself; every
other request (a route with a variable part or without a list of methods, a path the app does
not have) goes to the app's Klein resource, unchanged. A direct answer is returned whole, so
twisted.web sends it with a C{Content-Length} rather than chunked.

The routes stay declared once, with C{@app.route}. What Klein would do with an answer is done
here for the two kinds of answer these handlers give: C{bytes}, returned at once, or a
C{Deferred} of them, written when it fires and cancelled if the connection goes away first (as
Klein cancels it). A handler's exception, raised or in its Deferred, goes to C{on_error}, the
one place the API turns failures into answers (its Klein error handler calls the same function).
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from klein import Klein

log = Logger()

#: What an API makes of a failed handler: the answer's body, or C{None} when there is no one
#: left to answer (the handler was cancelled because its connection went away).
ErrorAnswer = Callable[[object, Failure], bytes | None]


class DirectRoutes(Resource):
    """Serves the fixed routes of a bound Klein C{app} directly; every other path through the
    app's own resource."""

    isLeaf = True

    def __init__(self, app: Klein, on_error: ErrorAnswer) -> None:
        super().__init__()
        #: The Klein app (bound to its API object): its resource serves what is not direct.
        self.app = app
        self.klein = app.resource()
        self.on_error = on_error
        #: C{(method, path)} -> endpoint name, for every rule without a variable part.
        self.endpoints: dict[tuple[bytes, bytes], str] = {
            (method.encode("ascii"), rule.rule.encode("ascii")): rule.endpoint
            for rule in app.url_map.iter_rules()
            if not rule.arguments
            for method in rule.methods or ()
        }

    def render(self, request: Request) -> object:
        endpoint = self.endpoints.get((request.method, request.path))
        if endpoint is None:
            return self.klein.render(request)
        try:
            answer = self.app.execute_endpoint(endpoint, request)
            if isinstance(answer, Deferred):
                return self._later(answer, request)
            if not isinstance(answer, bytes):
                raise TypeError(f"{endpoint} answered {type(answer).__name__}, not bytes or a "
                                "Deferred of bytes: serve it through Klein")
        except Exception:
            return self.on_error(request, Failure()) or b""
        return answer

    def _later(self, answer: Deferred, request: Request) -> object:
        """Write C{answer}'s bytes when it fires; cancel it if the connection goes away first."""
        gone = request.notifyFinish()
        gone.addErrback(lambda _: answer.cancel())

        def write(body: bytes | None) -> None:
            if body is None or gone.called or request.finished:
                return  # cancelled, or nobody is left to answer
            request.write(body)
            request.finish()

        answer.addErrback(lambda failure: self.on_error(request, failure))
        answer.addCallback(write)
        answer.addErrback(lambda failure: log.failure("answering {path} failed", failure,
                                                      path=request.path))
        return NOT_DONE_YET


__all__ = ["DirectRoutes", "ErrorAnswer"]

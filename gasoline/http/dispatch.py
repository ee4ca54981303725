"""
The route table with its handlers: which handler answers a (method, path), decided in one place.

Each API of the HTTP surface is an object whose class declares its routes with Klein
(C{app = Klein()}, C{@app.route("/clients/<client_id>", methods=["GET"])}). Klein's declarations
are read once, when the root is built (L{Handlers.of}): every declared route is bound to the
entry of the route policy (L{gasoline.http.routes.ROUTES}) with the same path shape that takes its
method, and a declaration without one is a L{RouteNotDeclared} error at build, so no route can
be served that the policy does not cover. Two handlers for one (method, route) are an error too.

Per request, the root (L{gasoline.http.site.GasolineRoot}) resolves the raw path and method once
to a L{Target} (the policy's route, its handler, the handler's path arguments; remembered for the
last 1,024 pairs), runs the policy's guards, and calls the handler through L{Handlers.render}, the
one code path for every answer a handler may give:

 - C{bytes} (or C{str}, encoded as UTF-8): the whole answer, sent with a C{Content-Length};
 - a C{Deferred} or a coroutine (an C{async def} handler): written when it fires, cancelled if
   the connection goes away first;
 - an C{IResource}: rendered for the request (a WebSocket endpoint, C{/metrics}), its answer
   treated the same way;
 - C{NOT_DONE_YET}: the handler has taken the request and finishes it itself (an SSE stream);
 - C{None}: an empty body.

The request is the one twisted.web made (the root is a leaf: C{postpath} is the whole path); path
arguments come as keyword arguments, as Klein passes them. A handler's exception, raised or in
its Deferred, and an answer of another type go to
L{answer_failure}, the one error handler of the surface. Klein's own resource, its werkzeug
matching and its per-app error handlers are not used: the root's 404 and 405
(L{gasoline.http.json.not_found}, L{gasoline.http.json.method_not_allowed}) are the only ones.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from inspect import iscoroutine
from typing import Any, Protocol, TypeVar

import attrs
from klein import Klein
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET, Request

from gasoline.core import validate
from gasoline.core.errors import GasolineError
from gasoline.core.validate import PayloadError
from gasoline.http.json import json_body, json_error
from gasoline.http.routes import NotCanonical, Route, RouteTable

log = Logger()
_T = TypeVar("_T")

#: A werkzeug parameter: C{<name>} or C{<converter:name>}.
_RULE_PARAM = re.compile(r"<(?:([a-z]+):)?([a-z_]+)>")


class HasRoutes(Protocol):
    """An API: an object whose class declares its routes with a Klein app named C{app}."""

    app: Klein


class RouteNotDeclared(ValueError):
    """A handler is declared for a (method, path) that the route policy has no entry for, or two
    handlers for one."""


@attrs.frozen
class Handler:
    """One route's handler: C{call(request, **arguments)}."""

    call: Callable[..., object]
    #: The path arguments, as C{(segment index, name, rest)}: C{rest} takes every segment from
    #: the index on (werkzeug's C{<path:name>}, the table's C{{*}}).
    params: tuple[tuple[int, str, bool], ...]
    #: The API object and the endpoint's name (for tests and error messages).
    api: object
    endpoint: str

    def arguments(self, segments: tuple[bytes, ...]) -> dict[str, str]:
        out = {}
        for index, name, rest in self.params:
            raw = b"/".join(segments[index:]) if rest else segments[index]
            out[name] = raw.decode("ascii")  # canonical: unreserved ASCII only
        return out


@attrs.frozen
class Target:
    """What a (path, method) resolves to: the policy's route and, when an API serves that
    method there, its handler and arguments."""

    route: Route
    handler: Handler | None = None
    arguments: dict[str, str] = attrs.field(factory=dict)


def declared(api: HasRoutes) -> list[tuple[str, str, Handler]]:
    """C{(pattern, method, handler)} for every route C{api}'s Klein app declares: the pattern in
    the table's spelling (C{{name}}, C{{*}}), C{HEAD} only where a rule lists it alone (werkzeug
    adds it to every C{GET} rule; the root serves C{HEAD} with the C{GET} handler otherwise)."""
    app = api.app  # bound to api (Klein's descriptor)
    out = []
    for rule in app.url_map.iter_rules():
        parts = rule.rule.split("/")[1:] if rule.rule != "/" else []
        params, pattern = [], []
        for index, part in enumerate(parts):
            m = _RULE_PARAM.fullmatch(part)
            if m is None:
                if "<" in part:
                    raise RouteNotDeclared(f"{rule.rule}: a parameter must be a whole segment")
                pattern.append(part)
                continue
            converter, name = m.groups()
            if converter not in (None, "string", "path"):
                raise RouteNotDeclared(f"{rule.rule}: converter {converter} is not supported")
            rest = converter == "path"
            if rest and index != len(parts) - 1:
                raise RouteNotDeclared(f"{rule.rule}: <path:...> must be the last segment")
            params.append((index, name, rest))
            pattern.append("{*}" if rest else "{" + name + "}")
        methods = set(rule.methods or ())
        if methods != {"HEAD"}:
            methods.discard("HEAD")
        if not methods:
            raise RouteNotDeclared(f"{rule.rule}: list the methods of the route")
        # What Klein's execute_endpoint calls (its route wrapper, which passes the instance and
        # turns a coroutine into a Deferred), bound once.
        call = functools.partial(app.endpoints[rule.endpoint], api)
        handler = Handler(call, tuple(params), api, rule.endpoint)
        for method in sorted(methods):
            out.append(("/" + "/".join(pattern), method, handler))
    return out


def _same_shape(pattern: str, other: str) -> bool:
    a, b = pattern.split("/"), other.split("/")
    return len(a) == len(b) and all(
        x == y or (x.startswith("{") and y.startswith("{") and (x == "{*}") == (y == "{*}"))
        for x, y in zip(a, b))


class Handlers:
    """The route table with its handlers (see the module docstring); build it with L{of}."""

    def __init__(self, routes: RouteTable, handlers: dict[tuple[Route, bytes], Handler],
                 apis: tuple[object, ...] = ()) -> None:
        self.routes = routes
        #: (policy route, method) -> handler. Keyed by the route object itself (the table's).
        self._handlers = {(id(route), method): h for (route, method), h in handlers.items()}
        self.handlers = handlers
        #: The API objects served, in the order given.
        self.apis = apis
        #: L{_resolve}, remembered for the last 1,024 (path, method) pairs: the extension sends
        #: the same few paths hundreds of times a second.
        self.resolve = functools.lru_cache(maxsize=1024)(self._resolve)

    @classmethod
    def of(cls, apis: Iterable[HasRoutes], routes: RouteTable) -> Handlers:
        """Read the routes every API declares, once, and bind each to its policy entry.

        @raise RouteNotDeclared: a declared route that no policy entry covers (same path shape,
            the method among the entry's), or a second handler for one (method, route)."""
        apis = tuple(apis)
        handlers: dict[tuple[Route, bytes], Handler] = {}
        for api in apis:
            for pattern, method, handler in declared(api):
                entry = next((r for r in routes.routes if _same_shape(r.pattern, pattern)
                              and r.allows_method(method.encode())), None)
                if entry is None:
                    raise RouteNotDeclared(
                        f"{type(api).__name__} serves {method} {pattern}, which the route "
                        "policy (gasoline.http.routes.ROUTES) does not declare")
                key = (entry, method.encode())
                if key in handlers:
                    raise RouteNotDeclared(f"{method} {pattern} has two handlers: "
                                           f"{handlers[key].endpoint} and {handler.endpoint}")
                handlers[key] = handler
        return cls(routes, handlers, apis)

    def api(self, kind: type[_T]) -> _T:
        """The one served API of class C{kind} (tests, the app's collaborators)."""
        found = [a for a in self.apis if isinstance(a, kind)]
        if len(found) != 1:
            raise LookupError(f"{len(found)} APIs of class {kind.__name__} are served")
        return found[0]

    def _resolve(self, path: bytes, method: bytes) -> Target | NotCanonical | None:
        """The target of the raw path C{path} for C{method}: a L{NotCanonical} (returned, not
        raised) when the path is not canonical; C{None} when it names no route of the policy."""
        route = self.routes.resolve(path, method)
        if route is None or isinstance(route, NotCanonical):
            return route
        handler = self._handlers.get((id(route), method))
        if handler is None and method == b"HEAD":
            handler = self._handlers.get((id(route), b"GET"))
        if handler is None:
            return Target(route)
        segments = tuple(path[1:].split(b"/")) if path != b"/" else ()
        return Target(route, handler, handler.arguments(segments))

    # -- answering -------------------------------------------------------------------------------

    def render(self, request: Request, target: Target) -> bytes | int:
        """Call C{target}'s handler for C{request} and return what C{render} returns."""
        handler = target.handler
        assert handler is not None
        try:
            arguments = target.arguments
            answer = handler.call(request, **arguments) if arguments else handler.call(request)
            if type(answer) is bytes:
                return answer
            return self._settle(request, answer)
        except Exception:
            return answer_failure(request, Failure()) or b""

    def _settle(self, request: Request, answer: object) -> bytes | int:
        """An answer of any kind as C{render}'s result (bytes, or C{NOT_DONE_YET})."""
        if isinstance(answer, bytes):
            return answer
        if isinstance(answer, str):
            return answer.encode("utf-8")
        if isinstance(answer, Deferred):
            return self._later(request, answer)
        if iscoroutine(answer):
            return self._later(request, ensureDeferred(answer))
        if answer is None:
            return b""
        if type(answer) is int and answer == NOT_DONE_YET:
            return NOT_DONE_YET
        if IResource.providedBy(answer):
            return self._settle(request, answer.render(request))
        raise TypeError(f"a handler answered {type(answer).__name__}: answer bytes, str, a "
                        "Deferred, a coroutine, an IResource or NOT_DONE_YET")

    def _later(self, request: Request, answer: Deferred[Any]) -> int:
        """Write C{answer}'s result when it fires; cancel it if the connection goes away first."""
        gone = request.notifyFinish()
        gone.addErrback(lambda _: answer.cancel())

        def done(result: object) -> None:
            if gone.called or request.finished:
                return  # nobody is left to answer
            _write_whole(request, self._settle(request, result))

        def failed(failure: Failure) -> None:
            if gone.called or request.finished:
                if not failure.check(CancelledError):
                    log.failure("answering {path} failed after its request ended", failure,
                                path=request.path)
                return
            _write_whole(request, answer_failure(request, failure))

        answer.addCallback(done)
        answer.addErrback(failed)
        answer.addErrback(lambda failure: log.failure("answering {path} failed", failure,
                                                      path=request.path))
        return NOT_DONE_YET


def _write_whole(request: Request, body: bytes | int | None) -> None:
    """Write a late answer whole and finish: not a stream (C{None}: nobody to answer;
    C{NOT_DONE_YET}: the resource answered owns the request)."""
    if isinstance(body, bytes):
        request.write(body)
        request.finish()


def answer_failure(request: Request, failure: Failure) -> bytes | None:
    """The one error handler of the HTTP surface: the answer to a handler that failed. 413 or
    400 for a bad payload (L{PayloadError}), a domain error's own JSON and status
    (L{GasolineError}, C{http_status} or 400), else 500 (logged); C{None} for a handler
    cancelled because its connection went away."""
    error = failure.value
    if isinstance(error, validate.PayloadTooLarge):
        return json_error(request, 413, str(error), limit=error.limit)
    if isinstance(error, PayloadError):
        return json_error(request, 400, str(error))
    if isinstance(error, GasolineError):
        return json_body(request, error.to_json(), error.http_status)
    if isinstance(error, CancelledError):
        return None
    log.failure("route {path} failed", failure, path=request.path)
    return json_error(request, 500, "internal error")


__all__ = ["Handler", "Handlers", "HasRoutes", "RouteNotDeclared", "Target", "answer_failure",
           "declared"]

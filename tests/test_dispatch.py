"""
The one dispatcher (L{gasoline.http.dispatch}): the root resolves a (method, path) once, runs the
policy, and calls the route's handler through one code path for every kind of answer.

Two things are checked. The mechanism itself, on a small API whose routes answer every way a
handler can (bytes, str, a Deferred fired later or failed, a coroutine of an C{async def}, an
C{IResource}, C{NOT_DONE_YET}, an exception, a wrong type), on fixed routes and on routes with a
variable part; an unknown path and a wrong method get the root's one 404 and 405; a declaration
the policy lacks cannot be served. And the ingest API: every one of its fixed routes, asked a
corpus of requests (valid, empty, malformed, wrong types, without the extension's header),
answers exactly as it does through Klein's own resource (status, headers, body).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from _stub_daemon import StubDaemon
from klein import Klein
from treq.testing import StubTreq
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from gasoline.core.validate import PayloadError
from gasoline.http.dispatch import RouteNotDeclared, answer_failure
from gasoline.http.guards import Guard
from gasoline.http.ingest import IngestAPI
from gasoline.http.request import GasolineSite
from gasoline.http.routes import Caller, Route, RouteTable
from gasoline.http.site import GasolineRoot
from gasoline.testing import EXTENSION_HEADERS, response_body, stub_request
from support import connect

URL = "http://127.0.0.1:7890"

_ANY = ("GET", "POST")
TOY_ROUTES = RouteTable(tuple(
    Route(pattern, _ANY, Caller.ADMIN) for pattern in (
        "/bytes", "/str", "/later", "/raises", "/fails-later", "/wrong-type", "/async",
        "/async/{name}", "/deferred", "/deferred/{name}", "/resource", "/resource/{name}",
        "/deferred-resource", "/owned", "/none", "/item/{name}", "/rest/{name}/{*}",
        "/undeclared-here")))


class Leaf(Resource):
    isLeaf = True

    def __init__(self, body: bytes) -> None:
        super().__init__()
        self.body = body

    def render(self, request):
        request.setHeader(b"x-route", b"resource")
        return self.body + b" " + request.path


class Toy:
    """Routes answering every way a handler can."""

    app = Klein()

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.later: list[Deferred] = []

    @app.route("/bytes", methods=["GET", "POST"])
    def answer_bytes(self, request):
        request.setHeader(b"x-route", b"bytes")
        return b"now " + request.method

    @app.route("/str", methods=["GET"])
    def answer_str(self, request):
        return "caf\u00e9"

    @app.route("/later", methods=["GET"])
    def answer_later(self, request):
        d: Deferred = Deferred()
        self.later.append(d)
        return d

    @app.route("/fails-later", methods=["GET"])
    def fails_later(self, request):
        d: Deferred = Deferred()
        self.clock.callLater(1, d.errback, PayloadError("failed later"))
        return d

    @app.route("/raises", methods=["GET"])
    def raises(self, request):
        raise ValueError("broken handler")

    @app.route("/wrong-type", methods=["GET"])
    def wrong_type(self, request):
        return 42.0

    @app.route("/async", methods=["GET"])
    @app.route("/async/<name>", methods=["GET"])
    async def answer_async(self, request, name: str = "fixed"):
        d: Deferred = Deferred()
        self.clock.callLater(1, d.callback, name.encode())
        got = await d
        request.setHeader(b"x-route", b"async")
        return b"async " + got

    @app.route("/deferred", methods=["GET"])
    @app.route("/deferred/<name>", methods=["GET"])
    def answer_deferred(self, request, name: str = "fixed"):
        d: Deferred = Deferred()
        self.clock.callLater(1, d.callback, b"deferred " + name.encode())
        return d

    @app.route("/resource", methods=["GET"])
    @app.route("/resource/<name>", methods=["GET"])
    def answer_resource(self, request, name: str = "fixed"):
        return Leaf(b"resource " + name.encode())

    @app.route("/deferred-resource", methods=["GET"])
    def answer_deferred_resource(self, request):
        d: Deferred = Deferred()
        self.clock.callLater(1, d.callback, Leaf(b"later resource"))
        return d

    @app.route("/owned", methods=["GET"])
    def owned(self, request):
        request.write(b"written by the handler")
        self.clock.callLater(1, request.finish)
        return NOT_DONE_YET

    @app.route("/none", methods=["POST"])
    def answer_none(self, request):
        request.setResponseCode(204)

    @app.route("/item/<name>", methods=["GET"])
    def item(self, request, name):
        return b"item " + name.encode()

    @app.route("/rest/<name>/<path:rest>", methods=["GET"])
    def rest(self, request, name, rest):
        return f"{name}: {rest}".encode()


@pytest.fixture
def toy():
    clock = Clock()
    toy = Toy(clock)
    return toy, GasolineSite(GasolineRoot(Guard(), [toy], TOY_ROUTES), reactor=clock), clock


def _send(site, path: bytes, method: bytes = b"GET"):
    channel, transport = connect(site)
    channel.dataReceived(method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Length: 0\r\n\r\n")
    return channel, transport


def _status(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


def _json(raw: bytes) -> Any:
    return json.loads(response_body(raw))


@pytest.mark.parametrize("path,body", [
    (b"/bytes", b"now GET"), (b"/str", "caf\u00e9".encode()),
    (b"/async", b"async fixed"), (b"/async/abc", b"async abc"),
    (b"/deferred", b"deferred fixed"), (b"/deferred/abc", b"deferred abc"),
    (b"/resource", b"resource fixed /resource"), (b"/resource/abc", b"resource abc /resource/abc"),
    (b"/deferred-resource", b"later resource /deferred-resource"),
    (b"/owned", b"written by the handler"),
    (b"/item/abc", b"item abc"), (b"/rest/a/b/c", b"a: b/c")])
def test_every_kind_of_answer_on_fixed_and_variable_routes(toy, path, body):
    app, site, clock = toy
    _, transport = _send(site, path)
    clock.advance(1)
    raw = transport.value()
    assert _status(raw) == 200, raw
    assert response_body(raw) == body


def test_the_answer_kinds_keep_their_headers_and_a_whole_answer_has_a_length(toy):
    app, site, clock = toy
    _, transport = _send(site, b"/bytes", b"POST")
    raw = transport.value()
    assert b"X-Route: bytes" in raw and b"Content-Length: 8" in raw and raw.endswith(b"now POST")
    _, transport = _send(site, b"/async/x")
    clock.advance(1)
    assert b"X-Route: async" in transport.value()
    _, transport = _send(site, b"/resource/x")
    assert b"X-Route: resource" in transport.value()
    _, transport = _send(site, b"/none", b"POST")
    assert _status(transport.value()) == 204


def test_head_is_answered_by_the_get_handler_without_a_body(toy):
    app, site, clock = toy
    _, transport = _send(site, b"/bytes", b"HEAD")
    raw = transport.value()
    assert _status(raw) == 200 and b"X-Route: bytes" in raw and raw.endswith(b"\r\n\r\n")


def test_an_unknown_path_and_a_wrong_method_are_the_roots_404_and_405(toy):
    app, site, clock = toy
    for path in (b"/nowhere", b"/item", b"/item/a/b", b"/bytes/x"):
        _, transport = _send(site, path)
        raw = transport.value()
        assert _status(raw) == 404 and _json(raw) == {"error": "not found",
                                                      "path": path.decode()}, raw
    _, transport = _send(site, b"/bytes", b"DELETE")
    raw = transport.value()
    assert _status(raw) == 405 and b"Allow: GET, POST" in raw
    assert _json(raw) == {"error": "method DELETE not allowed here", "allowed": ["GET", "POST"]}
    # a route of the policy that no API serves here: the same 404
    _, transport = _send(site, b"/undeclared-here")
    assert _status(transport.value()) == 404
    # a method the policy takes but the API does not serve there (POST /item/x): the same 404
    _, transport = _send(site, b"/item/x", b"POST")
    assert _status(transport.value()) == 404


def test_a_raised_exception_a_failed_deferred_and_a_wrong_type_get_the_one_error_answer(toy):
    app, site, clock = toy
    _, transport = _send(site, b"/raises")
    raw = transport.value()
    assert _status(raw) == 500 and _json(raw) == {"error": "internal error"}
    _, transport = _send(site, b"/fails-later")
    clock.advance(1)
    raw = transport.value()
    assert _status(raw) == 400 and _json(raw) == {"error": "failed later"}
    _, transport = _send(site, b"/wrong-type")
    raw = transport.value()
    assert _status(raw) == 500 and _json(raw) == {"error": "internal error"}


def test_a_deferred_answer_is_written_when_it_fires_and_the_connection_goes_on(toy):
    app, site, clock = toy
    channel, transport = _send(site, b"/later")
    assert transport.value() == b"" and len(app.later) == 1
    app.later[0].callback(b"done later")
    raw = transport.value()
    assert _status(raw) == 200 and response_body(raw) == b"done later"
    transport.clear()
    channel.dataReceived(b"GET /bytes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
    assert transport.value().endswith(b"now GET")


def test_a_deferred_answer_is_cancelled_when_its_connection_goes_away(toy):
    app, site, clock = toy
    channel, transport = _send(site, b"/later")
    channel.connectionLost(Failure(ConnectionDone()))
    pending = app.later[0]
    assert pending.called  # cancelled: the handler's wait is released
    failures: list[Failure] = []
    pending.addErrback(failures.append)
    assert failures == [] and transport.value() == b""  # answered (nothing), nothing left over


def test_a_route_the_policy_does_not_declare_cannot_be_served():
    class Stray:
        app = Klein()

        @app.route("/bytes", methods=["DELETE"])
        def stray(self, request):
            return b""

    with pytest.raises(RouteNotDeclared, match="DELETE /bytes"):
        GasolineRoot(Guard(), [Stray()], TOY_ROUTES)

    class Twice:
        app = Klein()

        @app.route("/str", methods=["GET"])
        def again(self, request):
            return b""

    with pytest.raises(RouteNotDeclared, match="two handlers"):
        GasolineRoot(Guard(), [Toy(Clock()), Twice()], TOY_ROUTES)


def test_the_one_error_answer_says_nothing_for_a_cancelled_handler():
    class Req:
        path = b"/x"

    assert answer_failure(Req(), Failure(CancelledError())) is None  # type: ignore[arg-type]


# -- the ingest API: the same answers as through Klein's resource ---------------------------------------------

CONSOLE_ENTRY = {"ts": "2026-11-26T01:00:00.000Z", "url": "http://localhost:3000/",
                 "message": "hello token=abcdef0123456789", "level": "error", "type": "console",
                 "args": ["hello"], "tabId": 12}
PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhf"
       "DwAChwGA60e6kgAAAABJRU5ErkJggg==")

#: A request each route accepts, besides the corpus every route gets.
VALID = {
    "/logs": {"entries": [CONSOLE_ENTRY, 5]},
    "/network-bodies": {"bodies": [{"url": "http://a/", "status": 500, "response_body": "x"}]},
    "/enhanced-actions": {"actions": [{"type": "click", "timestamp": 1767225600000}]},
    "/network-waterfall": {"entries": [{"name": "a.js", "duration": 3}], "page_url": "http://p/"},
    "/websocket-events": {"events": [{"event": "open", "id": "c1", "url": "ws://x/"}]},
    "/performance-snapshots": {"snapshots": [{"url": "http://a/", "timing": {"load": 1}}]},
    "/extension-logs": {"logs": [{"level": "info", "message": "hi"}]},
    "/api/extension-status": {"type": "status", "tracking_enabled": True},
    "/sync": {"ext_session_id": "s1", "extension_version": "0.7.9"},
    "/query-result": {"id": "q-unknown", "status": "complete", "result": {}},
    "/dom-result": {"id": "q-unknown", "result": {}},
    "/screenshots": {"data_url": PNG, "url": "http://a/"},
    "/test-boundary": {"test_id": "t-1", "action": "start"},
}
CORPUS: list[bytes | None] = [
    None, b"", b"{}", b"[]", b"null", b"not json", b'{"entries": 5, "bodies": "x", "events": {}}',
    b'{"entries": [1, "x", null, {"level": 7}], "logs": [[]], "actions": [{}]}',
    b'{"id": 5, "test_id": "", "action": "sideways", "data_url": "data:image/gif;base64,AA"}',
    b"[" * 5000 + b"]" * 5000, "{\"message\": \"\udcff\"}".encode("utf-8", "surrogatepass"),
]



UNSTABLE = {b"date", b"content-length", b"transfer-encoding"}


def _answer(daemon: StubDaemon, treq, method: str, path: str, body, headers) -> tuple:
    r, raw = stub_request(treq, method, URL + path, data=body, headers=headers,
                          clock=daemon.clock, wait=60)
    text = (raw.decode("utf-8", "replace").replace(str(daemon.state_dir), "<state>")
            .replace(daemon.app.extension.instance, "<instance>"))
    seen = sorted((k, tuple(v)) for k, v in r.headers.getAllRawHeaders() if k.lower() not in UNSTABLE)
    return r.code, seen, text


def _through_klein(*apis: Any) -> Resource:
    """The routes of C{apis} served by Klein's own resource (werkzeug matching, C{IKleinRequest},
    its Deferred chain), every failure answered by the one error handler: the reference."""
    reference = Klein()
    n = 0
    for api in apis:
        bound = api.app
        for rule in bound.url_map.iter_rules():
            def view(request, _bound=bound, _endpoint=rule.endpoint, **kwargs):
                return _bound.execute_endpoint(_endpoint, request, **kwargs)

            reference.route(rule.rule, methods=sorted(rule.methods or ()),
                            endpoint=f"{rule.endpoint}-{n}")(view)
            n += 1
    reference.handle_errors(Exception)(lambda request, failure: answer_failure(request, failure))
    return reference.resource()


class PolicyThenKlein(Resource):
    """The root's policy and guards, then Klein."""

    isLeaf = True

    def __init__(self, root: GasolineRoot, klein: Resource) -> None:
        super().__init__()
        self.root, self.klein = root, klein

    def render(self, request):
        refused = self.root.policy(request)
        return refused if refused is not None else self.klein.render(request)


class Pair:
    """Two daemons in step: one served by the root, the other with the ingest routes through
    Klein's resource."""

    def __init__(self, tmp_path) -> None:
        self.ours = StubDaemon(tmp_path / "ours")
        self.via_klein = StubDaemon(tmp_path / "klein")
        root = self.via_klein.app.resource
        self.klein_treq = StubTreq(PolicyThenKlein(
            root, _through_klein(root.handlers.api(IngestAPI))))

    def both(self, method: str, path: str, body, headers) -> tuple:
        return (_answer(self.ours, self.ours.treq, method, path, body, headers),
                _answer(self.via_klein, self.klein_treq, method, path, body, headers))


def _fixed_ingest_routes(tmp_path) -> list[tuple[str, str]]:
    handlers = StubDaemon(tmp_path / "list").app.resource.handlers
    return sorted({(method.decode(), route.pattern) for (route, method), h in
                   handlers.handlers.items() if isinstance(h.api, IngestAPI) and not h.params})


def test_every_fixed_ingest_route_is_served(tmp_path):
    routes = _fixed_ingest_routes(tmp_path)
    assert ("POST", "/logs") in routes and ("POST", "/sync") in routes
    assert {p for _, p in routes} >= set(VALID)


def test_every_fixed_ingest_route_answers_as_klein_does(tmp_path):
    pair = Pair(tmp_path)
    headers = dict(EXTENSION_HEADERS)
    no_client = {k: v for k, v in headers.items() if k.lower() != "x-gasoline-client"}
    compared = 0
    for method, path in _fixed_ingest_routes(tmp_path):
        bodies = [json.dumps(VALID[path]).encode()] if path in VALID else []
        for body in [*bodies, *CORPUS]:
            for h in (headers, no_client):
                ours, klein = pair.both(method, path, body, h)
                assert ours == klein, (method, path, body and body[:60], h is headers)
                compared += 1
    assert compared >= 19 * len(CORPUS) * 2
    # the corpus reached the handlers' own answers, not only the header gate
    codes = {c for c in (pair.both("POST", "/logs", b, headers)[0][0] for b in CORPUS)}
    assert {200, 400} <= codes


#: Fixed GET routes whose answer is a stream that stays open (compared elsewhere: test_mcp_http,
#: test_mcp_sse_legacy, test_status_page).
_STREAMS = {"/mcp/sse", "/ui/stream"}
#: Values that change with each request: a fresh relay client id in each discovery answer, and
#: /metrics' series of the requests answered (this test's own).
_RANDOM = re.compile(r"/cdp/[A-Za-z0-9_-]+|^gasoline_http_.*\n", re.M)


def _steady(text: str) -> str:
    return _RANDOM.sub(lambda m: "/cdp/<id>" if m.group().startswith("/") else "", text)


def test_every_fixed_read_route_of_every_api_answers_as_klein_does(tmp_path):
    """The same daemon served twice, by the root and by Klein's resource over every API: each
    fixed GET and HEAD route, asked as a local process, as the extension (with its header and
    origin) and as the daemon's own page, answers the same (status, headers, body)."""
    d = StubDaemon(tmp_path)
    root = d.app.resource
    klein_treq = StubTreq(PolicyThenKlein(root, _through_klein(*root.handlers.apis)))
    routes = sorted({(method.decode(), route.pattern)
                     for (route, method), h in root.handlers.handlers.items()
                     if not h.params and method in (b"GET", b"HEAD")
                     and route.pattern not in _STREAMS})
    callers = [{}, dict(EXTENSION_HEADERS, Origin="chrome-extension://abcdefghijklmnop"),
               {"Origin": "http://127.0.0.1:7890", "Sec-Fetch-Site": "same-origin"}]
    compared, codes = 0, set()
    for method, path in routes:
        for headers in callers:
            ours = _answer(d, d.treq, method, path, None, headers)
            klein = _answer(d, klein_treq, method, path, None, headers)
            assert (ours[0], ours[1], _steady(ours[2])) == \
                (klein[0], klein[1], _steady(klein[2])), (method, path, headers)
            compared += 1
            codes.add(ours[0])
    assert len(routes) >= 20 and compared == 3 * len(routes)
    assert {200, 400, 403} <= codes  # answers of the handlers and of the policy alike


def test_a_long_poll_answer_is_written_when_it_comes(tmp_path):
    d = StubDaemon(tmp_path)
    pending = d.treq.request("POST", URL + "/sync", data=b"{}", headers=EXTENSION_HEADERS)
    answered: list = []
    pending.addCallback(lambda r: d.treq.content(r).addCallback(answered.append))
    d.treq.flush()
    assert answered == []  # held: no command yet
    d.app.extension.commands.enqueue("dom", {"selector": "h1"}, "agent-a")
    d.treq.flush()
    assert [c["type"] for c in json.loads(answered[0])["commands"]] == ["dom"]

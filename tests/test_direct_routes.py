"""
L{DirectRoutes}: a Klein app's fixed routes answered without Klein's per-request machinery.

Two things are checked. The mechanism itself, on a small app whose routes answer every way a
handler can (bytes, a Deferred fired later or failed, an exception, a wrong type, a variable
path served by Klein). And the ingest API, the one API served this way: every one of its fixed
routes, asked the same corpus of requests (valid, empty, malformed, wrong types, without the
extension's header), answers exactly as it does through Klein (status, headers, body).
"""

from __future__ import annotations

import json

import pytest
from treq.testing import StubTreq
from _stub_daemon import StubDaemon
from klein import Klein
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure

from gasoline.http.direct import DirectRoutes
from gasoline.http.json import json_error
from gasoline.http.request import GasolineSite
from gasoline.http.site import GasolineRoot
from gasoline.testing import EXTENSION_HEADERS, response_body, stub_request
from support import connect

URL = "http://127.0.0.1:7890"


class Toy:
    """Routes answering every way a handler can (and one without listed methods, which
    Klein serves: DirectRoutes takes only what it can look up exactly)."""

    app = Klein()

    def __init__(self) -> None:
        self.later: list[Deferred] = []
        self.errors: list[Failure] = []
        self.klein_calls = 0

    @app.route("/bytes", methods=["GET", "POST"])
    def answer_bytes(self, request):
        request.setHeader(b"x-route", b"bytes")
        return b"now " + request.method

    @app.route("/later", methods=["GET"])
    def answer_later(self, request):
        d: Deferred = Deferred()
        self.later.append(d)
        return d

    @app.route("/raises", methods=["GET"])
    def raises(self, request):
        raise ValueError("broken handler")

    @app.route("/wrong-type", methods=["GET"])
    def wrong_type(self, request):
        return "a str, not bytes"

    @app.route("/any-method")
    def any_method(self, request):
        self.klein_calls += 1
        return b"any"

    @app.route("/item/<name>", methods=["GET"])
    def item(self, request, name):
        self.klein_calls += 1
        return b"item " + name.encode()

    def on_error(self, request, failure: Failure) -> bytes | None:
        self.errors.append(failure)
        if failure.check(CancelledError):
            return None
        return json_error(request, 599, f"failed: {failure.getErrorMessage()}")


@pytest.fixture
def toy():
    toy = Toy()
    return toy, GasolineSite(DirectRoutes(toy.app, toy.on_error), reactor=Clock())


def _get(site, path: bytes, method: bytes = b"GET"):
    channel, transport = connect(site)
    channel.dataReceived(method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Length: 0\r\n\r\n")
    return channel, transport


def _status(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


def test_only_the_fixed_routes_are_direct(toy):
    app, site = toy
    resource = site.resource
    assert set(resource.endpoints) == {
        (m, p) for p in (b"/bytes", b"/later", b"/raises", b"/wrong-type")
        for m in (b"GET", b"HEAD")} | {(b"POST", b"/bytes")}


def test_bytes_are_the_answer_as_returned(toy):
    app, site = toy
    for method in (b"GET", b"POST"):
        _, transport = _get(site, b"/bytes", method)
        raw = transport.value()
        assert _status(raw) == 200
        assert b"X-Route: bytes" in raw
        assert raw.endswith(b"\r\n\r\nnow " + method)


def test_a_variable_path_and_an_unknown_one_go_through_klein(toy):
    app, site = toy
    _, transport = _get(site, b"/item/abc")
    assert response_body(transport.value()) == b"item abc" and app.klein_calls == 1
    _, transport = _get(site, b"/any-method", b"PUT")
    assert response_body(transport.value()) == b"any" and app.klein_calls == 2
    _, transport = _get(site, b"/nowhere")
    assert _status(transport.value()) == 404  # Klein's own answer (this app maps no errors)
    _, transport = _get(site, b"/bytes", b"DELETE")  # a method the route does not have
    assert _status(transport.value()) == 405


def test_a_raised_exception_and_a_wrong_type_are_answered_by_on_error(toy):
    app, site = toy
    _, transport = _get(site, b"/raises")
    raw = transport.value()
    assert _status(raw) == 599 and b"broken handler" in raw
    _, transport = _get(site, b"/wrong-type")
    raw = transport.value()
    assert _status(raw) == 599 and b"wrong_type answered str" in raw
    assert [f.type for f in app.errors] == [ValueError, TypeError]


def test_a_deferred_answer_is_written_when_it_fires(toy):
    app, site = toy
    channel, transport = _get(site, b"/later")
    assert transport.value() == b"" and len(app.later) == 1
    app.later[0].callback(b"done later")
    raw = transport.value()
    assert _status(raw) == 200 and response_body(raw) == b"done later"
    # the connection serves the next request (the first one finished)
    transport.clear()
    channel.dataReceived(b"GET /bytes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
    assert transport.value().endswith(b"now GET")


def test_a_failed_deferred_is_answered_by_on_error(toy):
    app, site = toy
    _, transport = _get(site, b"/later")
    app.later[0].errback(ValueError("failed later"))
    raw = transport.value()
    assert _status(raw) == 599 and b"failed later" in raw


def test_a_deferred_answer_is_cancelled_when_its_connection_goes_away(toy):
    app, site = toy
    channel, transport = _get(site, b"/later")
    channel.connectionLost(Failure(ConnectionDone()))
    pending = app.later[0]
    assert pending.called  # cancelled: the handler's wait is released
    assert [f.type.__name__ for f in app.errors] == ["CancelledError"]
    assert transport.value() == b""


# -- the ingest API: the same answers as through Klein ---------------------------------------------

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


class Pair:
    """Two daemons in step: one served as the daemon is (fixed ingest routes direct), the other
    with the same routes through Klein."""

    def __init__(self, tmp_path) -> None:
        self.direct = StubDaemon(tmp_path / "direct")
        self.via_klein = StubDaemon(tmp_path / "klein")
        root = self.via_klein.app.resource
        assert isinstance(root.fallback, DirectRoutes)
        self.klein_treq = StubTreq(GasolineRoot(root.guard, root.fallback.klein, root.routes,
                                                 mounts=root.mounts))

    def both(self, method: str, path: str, body, headers) -> tuple:
        return (_answer(self.direct, self.direct.treq, method, path, body, headers),
                _answer(self.via_klein, self.klein_treq, method, path, body, headers))


def _direct_routes(tmp_path) -> list[tuple[str, str]]:
    fallback = StubDaemon(tmp_path / "list").app.resource.fallback
    assert isinstance(fallback, DirectRoutes)
    return sorted({(m.decode(), p.decode()) for m, p in fallback.endpoints if m != b"HEAD"})


def test_every_fixed_ingest_route_is_direct(tmp_path):
    routes = _direct_routes(tmp_path)
    assert ("POST", "/logs") in routes and ("POST", "/sync") in routes
    assert {p for _, p in routes} >= set(VALID)


def test_every_direct_ingest_route_answers_as_klein_does(tmp_path):
    pair = Pair(tmp_path)
    headers = dict(EXTENSION_HEADERS)
    no_client = {k: v for k, v in headers.items() if k.lower() != "x-gasoline-client"}
    compared = 0
    for method, path in _direct_routes(tmp_path):
        bodies = [json.dumps(VALID[path]).encode()] if path in VALID else []
        for body in [*bodies, *CORPUS]:
            for h in (headers, no_client):
                direct, klein = pair.both(method, path, body, h)
                assert direct == klein, (method, path, body and body[:60], h is headers)
                compared += 1
    assert compared >= 19 * len(CORPUS) * 2
    # the corpus reached the handlers' own answers, not only the header gate
    codes = {c for c in (pair.both("POST", "/logs", b, headers)[0][0] for b in CORPUS)}
    assert {200, 400} <= codes


def test_a_long_poll_answer_is_written_through_the_direct_route(tmp_path):
    d = StubDaemon(tmp_path)
    pending = d.treq.request("POST", URL + "/sync", data=b"{}", headers=EXTENSION_HEADERS)
    answered: list = []
    pending.addCallback(lambda r: d.treq.content(r).addCallback(answered.append))
    d.treq.flush()
    assert answered == []  # held: no command yet
    d.app.extension.commands.enqueue("dom", {"selector": "h1"}, "agent-a")
    d.treq.flush()
    assert [c["type"] for c in json.loads(answered[0])["commands"]] == ["dom"]

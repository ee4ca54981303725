"""
The route policy, by enumeration: every route of a built daemon (its root serves exactly the
table's routes, each bound to its entry when it is built), x spellings of its path x caller classes x with and without the API
key, sent through Twisted's real HTTP parser (no sockets). Any 2xx (or WebSocket 101) that the
table of L{gasoline.http.routes} does not allow fails, and so does a handler whose own gate
disagrees with its entry (the extension header on a route that is not the extension's).

The expected answer is computed from the table's fields (the spec) here, independently of
L{gasoline.http.guards}: a spelling other than the canonical one never succeeds; a canonical one
succeeds only for a method of the route, an Origin class the route accepts, a browser request
only on a route marked for browsers, and the key when the route needs it.
"""

from __future__ import annotations

import re
from collections import Counter

import attrs
import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from gasoline.app import Config, build
from gasoline.http.ingest import EXTENSION_GATED
from gasoline.http.request import GasolineSite
from gasoline.http.routes import ROUTES, Caller as CallerClass, Key, Origins, Route, find_route

KEY = "sekrit"
PINNED = "pinnedextensionid"
OTHER = "otherextensionid"
HOST = b"127.0.0.1:7890"


@attrs.frozen
class Caller:
    name: str
    headers: tuple[tuple[bytes, bytes], ...]
    #: "extension", "other-extension", "opted-in", "web", or None (no Origin)
    origin: str | None = None
    sec_fetch: bool = False


_EXT = ((b"X-Gasoline-Client", b"gasoline-extension/0.7.9"),)
CALLERS = [
    # A local process (an agent, a CDP client, CI, curl, or an attacker on this machine): it can
    # send any header, the extension's X-Gasoline-Client included.
    Caller("local process", _EXT),
    Caller("the pinned extension", _EXT + ((b"Origin", b"chrome-extension://" + PINNED.encode()),
                                          (b"Sec-Fetch-Site", b"none"),
                                          (b"Sec-Fetch-Mode", b"cors")), origin="extension"),
    # Chromium sends no Origin on an extension's GET (seen in tests/e2e), only Sec-Fetch-*.
    Caller("the extension's GET without Origin", _EXT + ((b"Sec-Fetch-Site", b"none"),
                                                        (b"Sec-Fetch-Mode", b"cors"),
                                                        (b"Sec-Fetch-Dest", b"empty")),
           sec_fetch=True, origin="extension fetch"),
    Caller("another extension", _EXT + ((b"Origin", b"chrome-extension://" + OTHER.encode()),),
           origin="other-extension"),
    Caller("web page fetch", _EXT + ((b"Origin", b"http://localhost:3000"),
                                     (b"Sec-Fetch-Site", b"same-site"),
                                     (b"Sec-Fetch-Mode", b"cors")), origin="web"),
    Caller("web page form POST", ((b"Origin", b"null"), (b"Sec-Fetch-Mode", b"navigate"),
                                  (b"Sec-Fetch-Dest", b"iframe")), origin="web"),
    Caller("iframe navigation", ((b"Sec-Fetch-Site", b"cross-site"),
                                 (b"Sec-Fetch-Mode", b"navigate"),
                                 (b"Sec-Fetch-Dest", b"iframe")), sec_fetch=True),
    Caller("<img> / no-cors fetch", ((b"Sec-Fetch-Site", b"same-site"),
                                     (b"Sec-Fetch-Mode", b"no-cors"),
                                     (b"Sec-Fetch-Dest", b"image")), sec_fetch=True),
    Caller("typed into the address bar", ((b"Sec-Fetch-Site", b"none"),
                                          (b"Sec-Fetch-Mode", b"navigate"),
                                          (b"Sec-Fetch-User", b"?1")), sec_fetch=True),
    # Node's fetch (undici: the MCP SDK, Puppeteer, Playwright) sends Sec-Fetch-Mode alone.
    Caller("Node fetch", _EXT + ((b"Sec-Fetch-Mode", b"cors"),)),
    Caller("the daemon's own origin", _EXT + ((b"Origin", b"http://" + HOST),),
           origin="opted-in"),
]

#: (api key, pinned extension ids) of the daemons under test.
CONFIGS = [(None, (PINNED,)), (KEY, (PINNED,)), (None, ())]


def concrete(pattern: str) -> str:
    """A path the pattern matches: parameters become ids of the right shape."""
    path = pattern.replace("{*}", "devtools/browser/abc")
    return re.sub(r"\{[a-z_]+\}", "abc123", path)


def spellings(path: str) -> list[str]:
    """Other spellings of C{path}: each must be refused (400/404), never dispatched."""
    if path == "/":
        return ["//", "/.", "/%2e", "/./", "/%2F"]
    segments = path[1:].split("/")
    first = segments[0]
    rest = "/".join(segments[1:])
    tail = ("/" + rest) if len(segments) > 1 else ""
    out = [
        "/%" + format(ord(first[0]), "02x") + first[1:] + tail,       # /%6dcp
        "/%" + format(ord(first[0]), "02X") + first[1:] + tail,       # /%6Dcp
        "/" + "".join("%" + format(ord(c), "02x") for c in first) + tail,
        "/" + first.upper() + tail,
        "/" + first[:1].upper() + first[1:] + tail,
        "//" + path[1:],
        "/./" + path[1:],
        "/x/../" + path[1:],
        "/%2e/" + path[1:],
        path + "/.",
        path + "/..",
        "/" + path[1:] + "%00",
        "/" + path[1:] + ";x",
        "http://127.0.0.1:7890" + path,                             # absolute-form target
    ]
    if len(segments) > 1:
        out.append("/" + path[1:].replace("/", "%2F"))
        out.append("/" + first + "//" + rest)
        if rest:
            out.append("/" + first + "/%" + format(ord(rest[0]), "02x") + rest[1:])
    if not path.endswith("/") and find_route(tuple(s.encode() for s in (path + "/")[1:].split("/"))) is None:
        out.append(path + "/")
    return out


def parse_status(raw: bytes) -> int | None:
    if not raw.startswith(b"HTTP/1.1 "):
        return None
    return int(raw.split(b" ", 2)[1])


class Daemon:
    def __init__(self, tmp_path, api_key, ids) -> None:
        self.clock = Clock()
        self.stops = 0
        self.app = build(Config(state_dir=tmp_path, persist=False, api_key=api_key,
                                extension_ids=ids), self.clock, stop=self._stop)
        self.site = GasolineSite(self.app.resource, reactor=self.clock)

    def _stop(self) -> None:
        self.stops += 1

    def send(self, method: str, target: str, headers) -> int | None:
        proto = self.site.buildProtocol(None)
        transport = StringTransport()
        transport.protocol = proto  # autobahn's WebSocketResource looks for it
        proto.makeConnection(transport)
        body = b"{}" if method in ("POST", "DELETE", "PUT") else b""
        lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: " + HOST,
                 b"Accept: application/json, text/event-stream",
                 b"Content-Type: application/json", b"Content-Length: %d" % len(body)]
        if method == "GET" and (target.endswith("cdp") or "/cdp/" in target):
            lines += [b"Upgrade: websocket", b"Connection: Upgrade", b"Sec-WebSocket-Version: 13",
                      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
        lines += [name + b": " + value for name, value in headers]
        proto.dataReceived(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        self.clock.advance(0.2)  # the shutdown's short delay, deferred answers
        status = parse_status(transport.value())
        proto.connectionLost(Failure(ConnectionDone()))
        return status


def origin_class(caller: Caller, ids: tuple[str, ...]) -> str | None:
    if caller.origin == "other-extension":
        return "extension" if not ids else "other"
    if caller.origin == "web":
        return "other"
    return caller.origin


ACCEPTS = {
    Origins.NONE: set(),
    Origins.EXTENSION: {"extension"},
    Origins.OPTED_IN: {"opted-in"},
    Origins.EXTENSION_OR_OPTED_IN: {"extension", "opted-in"},
}


def table_allows(route: Route, method: str, caller: Caller, with_key: bool, api_key, ids) -> bool:
    """What the table says about a canonical request."""
    if not route.allows_method(method.encode()):
        return False
    kind = origin_class(caller, ids)
    if kind == "extension fetch":
        # no Origin: which extension sent it cannot be told, pinned ids or not
        kind = None if route.browser else "extension"
        if kind is not None and kind not in ACCEPTS[route.origins]:
            return False
    elif kind is None:
        if caller.sec_fetch and not route.browser:
            return False
    elif kind not in ACCEPTS[route.origins]:
        return False
    key_ok = api_key is None or with_key
    if not key_ok and (route.key is Key.ALWAYS
                       or (route.key is Key.UNLESS_EXTENSION and kind != "extension")):
        return False
    return True


def _methods(route: Route) -> list[str]:
    return list(route.methods) + (["HEAD"] if "GET" in route.methods else []) + ["PUT"]


@pytest.mark.parametrize("api_key,ids", CONFIGS, ids=["no key", "key", "unpinned"])
@pytest.mark.parametrize("route", ROUTES, ids=[r.pattern for r in ROUTES])
def test_no_request_succeeds_that_the_table_does_not_allow(tmp_path, route, api_key, ids):
    daemon = Daemon(tmp_path, api_key, ids)
    path = concrete(route.pattern)
    unexpected, seen = [], Counter()
    for method in _methods(route):
        for caller in CALLERS:
            for with_key in (False, True):
                headers = caller.headers + (((b"X-Gasoline-Key", KEY.encode()),)
                                            if with_key else ())
                allowed = table_allows(route, method, caller, with_key, api_key, ids)
                status = daemon.send(method, path, headers)
                seen[status] += 1
                if status is not None and (200 <= status < 300 or status == 101) and not allowed:
                    unexpected.append((method, path, caller.name, with_key, status))
                for other in spellings(path):
                    status = daemon.send(method, other, headers)
                    seen[status] += 1
                    if status not in (400, 403, 404):
                        unexpected.append((method, other, caller.name, with_key, status))
    assert unexpected == [], f"answers the table does not allow: {unexpected[:20]}"
    # Not vacuous: the canonical spelling got through the guards for someone.
    assert sum(n for code, n in seen.items() if code not in (400, 401, 403, 404)) > 0, seen


def test_the_shutdown_route_is_only_reached_canonically(tmp_path):
    """The issue's probe, end to end: POST /%73hutdown with a web page's Origin stopped the daemon."""
    daemon = Daemon(tmp_path, None, ())
    for target in ["/%73hutdown", "//shutdown", "/./shutdown", "/x/../shutdown", "/SHUTDOWN",
                   "/%2fshutdown", "/shutdown/", "/shutdown%00"]:
        for headers in (_EXT + ((b"Origin", b"http://localhost:3000"),),
                        _EXT + ((b"Origin", b"chrome-extension://abc"),), _EXT):
            assert daemon.send("POST", target, headers) in (400, 403, 404), target
    assert daemon.stops == 0
    assert daemon.send("POST", "/shutdown", _EXT) == 200
    assert daemon.stops == 1


# -- every route the daemon serves has a table entry, and the handlers' gates agree with it ------


def test_every_route_the_daemon_serves_is_bound_to_its_table_entry(tmp_path):
    """Structural: the root reads every API's Klein declarations at build and refuses one without
    an entry (tests/test_dispatch.py shows the refusal). Here: the built daemon serves every
    route of the table, each through exactly the entry that declares its method."""
    daemon = Daemon(tmp_path, None, ())
    handlers = daemon.app.resource.handlers
    # HEAD goes with GET (an explicit HEAD handler, as HEAD /logs has, answers it instead)
    served = {(route.pattern, method.decode()) for route, method in handlers.handlers
              if method != b"HEAD"}
    declared = {(route.pattern, method) for route in ROUTES for method in route.methods
                if method != "HEAD"}
    assert served == declared
    for (route, method), handler in handlers.handlers.items():
        assert route in ROUTES and route.allows_method(method), (route, method)
    assert len({type(h.api) for h in handlers.handlers.values()}) >= 10


def test_the_extension_header_gate_is_on_the_extension_routes_only(tmp_path):
    """The policy and the handlers' own gates agree: a handler that asks for the extension's
    X-Gasoline-Client serves an EXTENSION route, and no admin route asks for it (the operator and
    CI call those as themselves)."""
    handlers = Daemon(tmp_path, None, ()).app.resource.handlers
    gated = set()
    for (route, method), handler in handlers.handlers.items():
        bound = handler.api.app  # type: ignore[attr-defined]
        if bound.endpoints[handler.endpoint].__wrapped__ in EXTENSION_GATED:  # (Klein's wrapper)
            gated.add((route.pattern, method.decode()))
            assert route.caller is CallerClass.EXTENSION, (route.pattern, method)
    assert ("POST", "/logs") in {(m, p) for p, m in gated}
    assert {p for p, _ in gated}.isdisjoint({"/snapshot", "/clear", "/shutdown",
                                              "/test-boundary", "/metrics"})
    assert ("/logs", "DELETE") not in gated


@pytest.mark.parametrize("path", ["/mcp/other", "/mcp/sse/x", "/mcp/messages", "/events/x",
                                  "/extension", "/extension/other", "/mcp/messages/a/b",
                                  "/json/other", "/health/x", "/clients/a/b", "/pairing/x",
                                  "/logs/x"])
def test_a_path_without_a_table_entry_never_reaches_a_handler(tmp_path, path):
    daemon = Daemon(tmp_path, None, ())
    reached = []
    handlers = daemon.app.resource.handlers
    original = handlers.render

    def spy(request, target):
        reached.append(request.path)
        return original(request, target)

    handlers.render = spy  # type: ignore[method-assign]
    assert daemon.send("GET", path, ()) == 404
    assert daemon.send("POST", path, ()) == 404
    assert reached == []
    assert daemon.send("GET", "/health", ()) == 200 and reached == [b"/health"]  # the spy works

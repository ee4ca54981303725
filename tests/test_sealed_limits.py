"""
The structural JSON limits of a sealed route are counted on what is parsed: the plaintext of a
sealed body, once it is opened; the ciphertext is capped by bytes only.

Every sealed route is enumerated twice, and the two must agree: the handlers that open sealed
bodies (L{gasoline.http.ingest.extension_session} marks them), found in the Klein apps of a built
daemon, and the methods the route table declares C{sealed} (the guard leaves the count to those
handlers). Then each (route, method) gets, through Twisted's real HTTP parser (GasolineSite, one
connection per request, no sockets), as a paired extension:

 - a sealed body whose plaintext holds more JSON values than the limit: 413 naming the limit,
   and the route never runs (its ciphertext, random bytes, holds few separators: counted there,
   it passed and was parsed);
 - the same unsealed: 413 too (the handler counts what it parses either way, before a pin);
 - a sealed body nested deeper than the parser takes: a clear 400, the daemon goes on;
 - a legitimate sealed body as large as the route takes: not refused as "too many JSON values"
   (on C{/logs}, whose limit is 10 MB, random ciphertext over about 8.5 MB holds more than
   100,000 separator bytes: counted there, it was refused).
"""

from __future__ import annotations

import json

import orjson
import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from gasoline.app import Config, build
from gasoline.core.trust.identity import unb64u
from gasoline.core.validate import MAX_JSON_TOKENS
from gasoline.http.ingest import OPENS_SEALED
from gasoline.http.request import GasolineSite, body_limit_for
from gasoline.http.routes import ROUTES
from gasoline.testing import PairedExtensionKeys, response_body

HOST = b"127.0.0.1:7890"
EXT = {"X-Gasoline-Client": "gasoline-extension/0.7.9"}


class Daemon:
    def __init__(self, tmp_path) -> None:
        self.clock = Clock()
        self.app = build(Config(state_dir=tmp_path, persist=False), self.clock, stop=lambda: None)
        self.site = GasolineSite(self.app.resource, reactor=self.clock)

    def send(self, method: str, path: str, body: bytes, headers: dict[str, str]
             ) -> tuple[int, bytes]:
        proto = self.site.buildProtocol(None)
        transport = StringTransport()
        proto.makeConnection(transport)
        lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: " + HOST,
                 b"Content-Length: %d" % len(body)]
        lines += [f"{k}: {v}".encode() for k, v in headers.items()]
        proto.dataReceived(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        for _ in range(30):  # /sync holds its answer up to its long-poll time
            if transport.value():
                break
            self.clock.advance(1)
        raw = transport.value()
        proto.connectionLost(Failure(ConnectionDone()))
        assert raw.startswith(b"HTTP/1.1 "), raw[:200]
        return int(raw.split(b" ", 2)[1]), response_body(raw)

    def pair(self) -> PairedExtensionKeys:
        code, body = self.send("GET", "/pairing", b"", EXT)
        assert code == 200, body
        ext = PairedExtensionKeys(unb64u(json.loads(body)["key"], "key"))
        code, body = self.send("POST", "/pairing/challenge",
                               json.dumps(ext.challenge()).encode(),
                               {**EXT, "Content-Type": "application/json"})
        assert code == 200 and ext.finish(json.loads(body)), body
        return ext

    def sealed(self, ext: PairedExtensionKeys, method: str, path: str, plain: bytes
               ) -> tuple[int, bytes]:
        headers, data, iv = ext.seal(method, path, plain)
        code, body = self.send(method, path, data, headers)
        if code == 200:
            body = ext.open_answer(iv, body) if path == "/sync" else body
        return code, body

    def console(self) -> int:
        return len(self.app.daemon.store.buffers["console"])


def handlers_that_open_sealed_bodies(daemon: Daemon) -> set[tuple[str, str]]:
    found = set()
    for (route, method), handler in daemon.app.resource.handlers.handlers.items():
        view = handler.api.app.endpoints[handler.endpoint]  # type: ignore[attr-defined]
        if view.__wrapped__ in OPENS_SEALED and method != b"HEAD":  # (Klein's wrapper of it)
            found.add((route.pattern, method.decode()))
    return found


SEALED = sorted((route.pattern, method) for route in ROUTES for method in route.sealed)


def test_the_table_declares_exactly_the_routes_whose_handlers_open_sealed_bodies(tmp_path):
    daemon = Daemon(tmp_path)
    assert len(SEALED) >= 13
    assert handlers_that_open_sealed_bodies(daemon) == set(SEALED)


def _many_values(n: int) -> bytes:
    # valid JSON, an object as every sealed route takes: n + 1 separators
    return b'{"entries":[' + b"0," * n + b'0],"bodies":[],"actions":[]}'


def _nested(depth: int) -> bytes:
    return b'{"entries":' + b"[" * depth + b"]" * depth + b"}"


def _large_legitimate(path: str) -> bytes:
    """A body of few JSON values, as large as the route takes once sealed (28 bytes of IV and
    tag) and JSON-encoded: ten console entries on /logs, one long string elsewhere."""
    room = body_limit_for(path.encode()) - 28 - 4096
    if path == "/logs":
        chunk = room // 10
        entries = [{"level": "info", "message": "x" * (chunk - 200), "ts": "2026-01-01T00:00:00Z"}
                   for _ in range(10)]
        return orjson.dumps({"entries": entries})
    return orjson.dumps({"pad": "x" * room, "entries": [], "bodies": [], "actions": [],
                         "snapshots": [], "events": [], "logs": [], "id": "q-1",
                         "ext_session_id": "ext_1", "settings": {}})


@pytest.mark.parametrize("pattern,method", SEALED)
def test_a_sealed_body_is_counted_on_its_plaintext(tmp_path, pattern, method):
    daemon = Daemon(tmp_path)
    ext = daemon.pair()
    before = daemon.console()
    too_many = _many_values(MAX_JSON_TOKENS + 5_000)
    code, body = daemon.sealed(ext, method, pattern, too_many)
    assert code == 413, (code, body[:300])
    answer = json.loads(body)
    assert answer["limit"] == MAX_JSON_TOKENS and "too many JSON values" in answer["error"]
    assert daemon.console() == before

    # nested deeper than the parser takes: a clear 400 (or the route ignores its body), never a
    # crash; the session goes on
    code, body = daemon.sealed(ext, method, pattern, _nested(2_000))
    assert code in (200, 400), (code, body[:300])
    if code == 400:
        assert "JSON" in json.loads(body)["error"]

    # a legitimate body as large as the route takes is not refused for its ciphertext
    code, body = daemon.sealed(ext, method, pattern, _large_legitimate(pattern))
    assert code != 413, body[:300]
    assert b"too many JSON values" not in body
    if pattern == "/logs":
        assert code == 200 and daemon.console() == before + 10


@pytest.mark.parametrize("pattern,method", SEALED)
def test_an_unsealed_body_on_a_sealed_route_is_still_counted(tmp_path, pattern, method):
    """Before an extension is pinned the published extension's plain bodies pass: the handler
    counts them too (the guard leaves these routes to it)."""
    daemon = Daemon(tmp_path)
    code, body = daemon.send(method, pattern, _many_values(MAX_JSON_TOKENS + 5_000),
                             {**EXT, "Content-Type": "application/json"})
    assert code == 413, (code, body[:300])
    assert json.loads(body)["limit"] == MAX_JSON_TOKENS


def test_routes_that_are_not_sealed_are_still_counted_by_the_guard(tmp_path):
    daemon = Daemon(tmp_path)
    for path in ("/mcp", "/pairing/challenge", "/clients"):
        code, body = daemon.send("POST", path, _many_values(MAX_JSON_TOKENS + 5_000),
                                 {**EXT, "Content-Type": "application/json",
                                  "Accept": "application/json, text/event-stream"})
        assert code == 413, (path, code, body[:300])
        assert json.loads(body)["limit"] == MAX_JSON_TOKENS

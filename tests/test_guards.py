"""Request guards (extension-protocol.md §1) and the capped request body, without sockets."""

from __future__ import annotations

import json

import pytest
from gasoline.testing import stub_request
from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from gasoline.app import Config, build
from gasoline.http.guards import ALLOW_HEADERS, ALLOW_METHODS, Guard, host_allowed
from gasoline.http.request import DEFAULT_LIMIT, LOGS_LIMIT, MAX_BODY, GasolineSite
from gasoline.testing import EXTENSION_HEADERS

URL = "http://127.0.0.1:7890"


def make(tmp_path, **config):
    clock = Clock()
    app = build(Config(state_dir=tmp_path, persist=False, **config), clock)
    return app, StubTreq(app.resource)


def call(treq, method, url, **kwargs):
    return stub_request(treq, method, url, **kwargs)


def header(response, name: str):
    values = response.headers.getRawHeaders(name.encode())
    return values[0] if values else None


@pytest.mark.parametrize(
    "host",
    [None, b"localhost", b"LOCALHOST:7890", b"127.0.0.1", b"127.0.0.1:1", b"[::1]", b"[::1]:7890"],
)
def test_loopback_hosts_are_allowed(host):
    assert host_allowed(host)


@pytest.mark.parametrize(
    "host",
    [b"evil.com", b"evil.com:7890", b"127.0.0.1.nip.io", b"localhost.evil.com", b"[::1",
     b"[::2]:80", b"127.0.0.1:abc", b"localhost:", b"0.0.0.0", b"", b"127.0.0.1:7890:1"],
)
def test_other_hosts_are_refused(host):
    assert not host_allowed(host)


def test_dns_rebinding_host_gets_403_json(tmp_path):
    app, treq = make(tmp_path)
    r, body = call(treq, "GET", "http://rebind.example:7890/health")
    assert r.code == 403
    assert json.loads(body) == {"error": "forbidden: invalid host"}


@pytest.mark.parametrize(
    "origin",
    ["http://evil.com", "https://localhost:3000", "null", "chrome-extension://ABC",
     "chrome-extension://abc/x", "file://", "http://localhost.evil.com", "http://127.0.0.1:99999"],
)
def test_foreign_origin_gets_403_invalid_origin(tmp_path, origin):
    app, treq = make(tmp_path)
    r, body = call(treq, "POST", f"{URL}/logs", data=b'{"entries":[]}',
                   headers={**EXTENSION_HEADERS, "Origin": origin})
    assert r.code == 403
    assert json.loads(body) == {"error": "forbidden: invalid origin"}
    assert header(r, "Access-Control-Allow-Origin") is None
    assert len(app.store.buffers["console"]) == 0


@pytest.mark.parametrize(
    "origin",
    ["chrome-extension://abcdefghijklmnop", "moz-extension://0b1c-22_ab"],
)
def test_allowed_origin_is_echoed_never_star(tmp_path, origin):
    app, treq = make(tmp_path)
    r, body = call(treq, "GET", f"{URL}/health", headers={"Origin": origin})
    assert r.code == 200
    assert header(r, "Access-Control-Allow-Origin") == origin.encode()
    assert header(r, "Access-Control-Allow-Methods") == ALLOW_METHODS
    assert header(r, "Access-Control-Allow-Headers") == ALLOW_HEADERS
    assert b"X-Gasoline-Key" in ALLOW_HEADERS and b"DELETE" in ALLOW_METHODS
    assert b"Mcp-Session-Id" in ALLOW_HEADERS and b"MCP-Protocol-Version" in ALLOW_HEADERS
    assert b"X-Gasoline-Client-Proof" in ALLOW_HEADERS


def test_cors_headers_are_on_error_responses_too(tmp_path):
    app, treq = make(tmp_path)
    origin = "chrome-extension://abc"
    r, body = call(treq, "GET", f"{URL}/no-such-route",
                   headers={**EXTENSION_HEADERS, "Origin": origin})
    assert r.code == 404 and json.loads(body)["error"] == "not found"
    assert header(r, "Access-Control-Allow-Origin") == origin.encode()
    r, body = call(treq, "POST", f"{URL}/logs", data=b"{", headers={**EXTENSION_HEADERS, "Origin": origin})
    assert r.code == 400 and header(r, "Access-Control-Allow-Origin") == origin.encode()


def test_pinned_extension_ids_refuse_other_extensions(tmp_path):
    app, treq = make(tmp_path, extension_ids=("goodid",))
    r, _ = call(treq, "GET", f"{URL}/health", headers={"Origin": "chrome-extension://goodid"})
    assert r.code == 200
    r, body = call(treq, "GET", f"{URL}/health", headers={"Origin": "chrome-extension://otherid"})
    assert r.code == 403 and json.loads(body)["error"] == "forbidden: invalid origin"
    r, _ = call(treq, "GET", f"{URL}/health", headers={"Origin": "http://localhost:5173"})
    assert r.code == 403  # a loopback page is a web page


def test_preflight_is_204_without_extension_header_or_key(tmp_path):
    app, treq = make(tmp_path, api_key="sekrit")
    for path in ("/logs", "/sync", "/health"):
        r, body = call(treq, "OPTIONS", f"{URL}{path}", headers={
            "Origin": "chrome-extension://abc",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Private-Network": "true",
        })
        assert r.code == 204, path
        assert body == b""
        assert header(r, "Access-Control-Allow-Origin") == b"chrome-extension://abc"
        assert header(r, "Access-Control-Allow-Private-Network") == b"true"


def test_logs_body_over_10_mb_is_413(tmp_path):
    app, treq = make(tmp_path)
    body = b'{"entries":[{"level":"log","message":"' + b"x" * LOGS_LIMIT + b'"}]}'
    r, out = call(treq, "POST", f"{URL}/logs", data=body, headers=EXTENSION_HEADERS)
    assert r.code == 413
    assert json.loads(out)["error"].startswith("request body too large")
    assert len(app.store.buffers["console"]) == 0


def test_other_ingest_body_over_5_mb_is_413_but_logs_accepts_it(tmp_path):
    app, treq = make(tmp_path)
    big = b'{"bodies":[{"url":"u","response_body":"' + b"y" * DEFAULT_LIMIT + b'"}]}'
    r, out = call(treq, "POST", f"{URL}/network-bodies", data=big, headers=EXTENSION_HEADERS)
    assert r.code == 413 and json.loads(out)["limit"] == DEFAULT_LIMIT
    # /logs takes up to 10 MB; a 5.5 MB batch of 1,000 entries (the per-request limit) is fine
    entries = [{"level": "log", "message": "z" * 5500}] * 1000
    r, out = call(treq, "POST", f"{URL}/logs", data=json.dumps({"entries": entries}),
                  headers=EXTENSION_HEADERS)
    assert r.code == 200 and json.loads(out)["received"] == 1000


def test_api_key_guards_mcp_and_admin_routes_only(tmp_path):
    app, treq = make(tmp_path, api_key="sekrit")
    r, body = call(treq, "POST", f"{URL}/mcp", data=b"{}")
    assert r.code == 401 and "X-Gasoline-Key" in json.loads(body)["error"]
    r, _ = call(treq, "GET", f"{URL}/clients", headers={"X-Gasoline-Key": "wrong"})
    assert r.code == 401
    r, _ = call(treq, "GET", f"{URL}/metrics")
    assert r.code == 401
    r, _ = call(treq, "GET", f"{URL}/clients", headers={"X-Gasoline-Key": "sekrit"})
    assert r.code != 401
    r, _ = call(treq, "GET", f"{URL}/clients", headers={"Authorization": "Bearer sekrit"})
    assert r.code != 401
    # never the extension routes or /health
    r, _ = call(treq, "GET", f"{URL}/health")
    assert r.code == 200
    r, body = call(treq, "POST", f"{URL}/logs", data=b'{"entries":[{"level":"log"}]}',
                   headers=EXTENSION_HEADERS)
    assert r.code == 200 and json.loads(body)["received"] == 1


def test_without_api_key_mcp_and_admin_routes_are_not_locked(tmp_path):
    app, treq = make(tmp_path)
    r, _ = call(treq, "GET", f"{URL}/clients")
    assert r.code != 401


def test_guard_from_config_reads_ids_and_key():
    guard = Guard.from_config(Config(extension_ids=("a", "b"), api_key="k"))
    assert guard.extension_ids == frozenset({"a", "b"}) and guard.api_key == "k"
    assert Guard.from_config(Config(api_key="")).api_key is None


# -- the capped request body (real HTTP parsing, no socket) --------------------------------------


def _post_raw(tmp_path, path: bytes, chunks, headers: bytes):
    clock = Clock()
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    site = GasolineSite(app.resource, reactor=clock)
    requests = []

    class Spy(site.requestFactory):
        buffered = 0

        def handleContentChunk(self, data):
            super().handleContentChunk(data)
            self.buffered = self.content.tell()  # finish() closes request.content later

    def spy(*a, **kw):
        requests.append(Spy(*a, **kw))
        return requests[-1]

    site.requestFactory = spy
    proto = site.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.dataReceived(
        b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"X-Gasoline-Client: gasoline-extension/0.7.9\r\n" + headers + b"\r\n"
    )
    for chunk in chunks:
        proto.dataReceived(chunk)
    return app, requests[0], transport.value()


def test_a_declared_body_beyond_the_limit_is_refused_on_its_headers_never_read(tmp_path):
    total = 12 * 1024 * 1024
    chunk = b"a" * (1024 * 1024)
    app, request, raw = _post_raw(
        tmp_path, b"/logs", [chunk] * 12, b"Content-Length: %d\r\n" % total
    )
    assert request.body_length == 0 and request.buffered == 0  # not a byte of it kept
    assert raw.startswith(b"HTTP/1.1 413 ")
    assert b'"error":"request body too large' in raw and b"Connection: close" in raw


def test_a_chunked_body_beyond_the_largest_limit_is_discarded_not_buffered(tmp_path):
    piece = b"a" * (1024 * 1024)
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * 12 + [b"0\r\n\r\n"]
    app, request, raw = _post_raw(
        tmp_path, b"/logs", chunks, b"Transfer-Encoding: chunked\r\n"
    )
    assert request.body_length == 12 * len(piece)
    assert request.oversize
    assert request.buffered == MAX_BODY
    assert raw.startswith(b"HTTP/1.1 413 ")
    assert b'"error":"request body too large' in raw


def test_chunked_body_over_limit_is_413_json(tmp_path):
    piece = b"b" * (1024 * 1024)
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * 6 + [b"0\r\n\r\n"]
    app, request, raw = _post_raw(
        tmp_path, b"/network-bodies", chunks, b"Transfer-Encoding: chunked\r\n"
    )
    assert request.body_length == 6 * len(piece)
    assert raw.startswith(b"HTTP/1.1 413 ")


def test_small_body_passes_through_the_capped_request(tmp_path):
    body = b'{"entries":[{"level":"error","message":"boom"}]}'
    app, request, raw = _post_raw(
        tmp_path, b"/logs", [body],
        b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body),
    )
    assert raw.startswith(b"HTTP/1.1 200 ")
    assert raw.endswith(b'\r\n\r\n{"received":1,"rejected":0,"entries":1}')
    assert not request.oversize


def test_access_log_records_server_errors_only(tmp_path):
    clock = Clock()
    app = build(Config(state_dir=tmp_path / "state", persist=False), clock)
    access_log = tmp_path / "access.log"
    site = GasolineSite(app.resource, logPath=str(access_log), reactor=clock)
    site.startFactory()

    def post(body: bytes) -> bytes:
        proto = site.buildProtocol(None)
        transport = StringTransport()
        proto.makeConnection(transport)
        proto.dataReceived(
            b"POST /logs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Gasoline-Client: gasoline-extension\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        return transport.value()

    assert post(b'{"entries":[{"level":"log"}]}').startswith(b"HTTP/1.1 200 ")

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    app.store.add = broken
    raw = post(b'{"entries":[{"level":"log"}]}')
    assert raw.startswith(b"HTTP/1.1 500 ")
    assert b'{"error":"internal error"}' in raw and b"disk on fire" not in raw
    site.stopFactory()
    lines = access_log.read_text().splitlines()
    assert len(lines) == 1 and '" 500 ' in lines[0]

"""
Web pages must not drive the daemon: the origin policy of L{gasoline.http.guards},
C{--allow-origin}, and C{POST /clients}' working-directory check.
"""

from __future__ import annotations

import json

import pytest

from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.http.guards import normalize_origin
from treq.testing import StubTreq
from gasoline.tap import OptionError, Options
from gasoline.testing import EXTENSION_HEADERS, client_headers
from gasoline.common import client_id_for_cwd
from test_guards import URL, call, header, make

INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "page", "version": "1"}}}).encode()
MCP_HEADERS = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}

WEB_PAGES = ["http://localhost:3000", "http://127.0.0.1", "http://[::1]:8080",
             "https://evil.example", "null"]
AGENT_ROUTES = [("POST", "/mcp", INIT, MCP_HEADERS),
                ("POST", "/clients", b'{"cwd":"/tmp"}', {"Content-Type": "application/json"}),
                ("GET", "/clients", None, {}),
                ("POST", "/shutdown", b"{}", EXTENSION_HEADERS)]


@pytest.mark.parametrize("origin", WEB_PAGES + ["chrome-extension://abcdef"])
@pytest.mark.parametrize("method,path,body,headers", AGENT_ROUTES)
def test_agent_and_shutdown_routes_refuse_every_browser_origin(tmp_path, origin, method, path,
                                                               body, headers):
    stopped = []
    clock = Clock()
    app = build(Config(state_dir=tmp_path, persist=False), clock,
                stop=lambda: stopped.append(True))
    treq = StubTreq(app.resource)
    r, out = call(treq, method, f"{URL}{path}", data=body, headers={**headers, "Origin": origin})
    assert r.code == 403 and json.loads(out) == {"error": "forbidden: invalid origin"}
    assert header(r, "Access-Control-Allow-Origin") is None
    clock.advance(10)
    assert stopped == [] and app.registry.summary()["total"] == 0


@pytest.mark.parametrize("origin", WEB_PAGES)
@pytest.mark.parametrize("path", ["/logs", "/sync", "/mcp", "/clients", "/health", "/shutdown"])
def test_preflight_never_echoes_a_web_origin(tmp_path, origin, path):
    app, treq = make(tmp_path)
    r, body = call(treq, "OPTIONS", f"{URL}{path}", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST"})
    assert r.code == 403
    assert header(r, "Access-Control-Allow-Origin") is None


@pytest.mark.parametrize("origin", WEB_PAGES[:3])
def test_a_loopback_page_cannot_post_telemetry_either(tmp_path, origin):
    app, treq = make(tmp_path)
    r, _ = call(treq, "POST", f"{URL}/logs", data=b'{"entries":[{"message":"x","level":"log"}]}',
                headers={**EXTENSION_HEADERS, "Origin": origin})
    assert r.code == 403 and len(app.store.buffers["console"]) == 0


def test_the_published_extension_keeps_working_with_defaults(tmp_path):
    app, treq = make(tmp_path)
    origin = "chrome-extension://kbhjlbocpkmafmcgfmcpknhkmdgenfhg"
    r, _ = call(treq, "OPTIONS", f"{URL}/logs", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST"})
    assert r.code == 204 and header(r, "Access-Control-Allow-Origin") == origin.encode()
    r, body = call(treq, "POST", f"{URL}/logs", data=b'{"entries":[{"message":"x","level":"log"}]}',
                   headers={**EXTENSION_HEADERS, "Origin": origin})
    assert r.code == 200 and json.loads(body)["received"] == 1
    r, _ = call(treq, "GET", f"{URL}/health", headers={"Origin": origin})
    assert r.code == 200


def test_requests_without_origin_work_as_before(tmp_path):
    app, treq = make(tmp_path)
    r, body = call(treq, "POST", f"{URL}/mcp", data=INIT, headers=MCP_HEADERS)
    assert r.code == 200 and json.loads(body)["result"]["serverInfo"]
    r, _ = call(treq, "POST", f"{URL}/clients", data=json.dumps({"cwd": str(tmp_path)}).encode(),
                headers=client_headers(app, client_id_for_cwd(str(tmp_path))))
    assert r.code == 200


def test_allow_origin_opts_a_web_origin_in_but_never_for_shutdown(tmp_path):
    app, treq = make(tmp_path, allowed_origins=(normalize_origin("http://localhost:6274/"),))
    origin = "http://localhost:6274"
    r, _ = call(treq, "OPTIONS", f"{URL}/mcp", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST"})
    assert r.code == 204 and header(r, "Access-Control-Allow-Origin") == origin.encode()
    r, body = call(treq, "POST", f"{URL}/mcp", data=INIT, headers={**MCP_HEADERS, "Origin": origin})
    assert r.code == 200
    r, _ = call(treq, "POST", f"{URL}/mcp", data=INIT,
                headers={**MCP_HEADERS, "Origin": "http://localhost:6275"})
    assert r.code == 403
    r, _ = call(treq, "POST", f"{URL}/shutdown", data=b"{}",
                headers={**EXTENSION_HEADERS, "Origin": origin})
    assert r.code == 403


def test_allow_origin_option_is_repeatable_and_validated():
    opts = Options()
    opts.parseOptions(["--allow-origin", "http://LOCALHOST:6274/", "--allow-origin",
                       "https://app.example:443"])
    assert opts.config().allowed_origins == ("http://localhost:6274", "https://app.example")
    with pytest.raises(OptionError, match="--allow-origin"):  # one line, not twistd's help
        Options().parseOptions(["--allow-origin", "chrome-extension://abc"])
    with pytest.raises(OptionError, match="--allow-origin"):
        Options().parseOptions(["--allow-origin", "http://x:99999"])
    plain = Options()
    plain.parseOptions([])
    assert plain.config().allowed_origins == ()


@pytest.mark.parametrize("cwd", ["relative/dir", "/no/such/dir/anywhere", "", 7])
def test_clients_cwd_must_be_an_existing_absolute_directory(tmp_path, cwd):
    app, treq = make(tmp_path)
    r, body = call(treq, "POST", f"{URL}/clients", data=json.dumps({"cwd": cwd}).encode())
    assert r.code == 400, body
    assert json.loads(body)["error"] == "invalid_param"
    assert app.registry.summary()["total"] == 0


def test_clients_cwd_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    app, treq = make(tmp_path)
    r, body = call(treq, "POST", f"{URL}/clients", data=json.dumps({"cwd": str(f)}).encode())
    assert r.code == 400 and "directory" in json.loads(body)["message"]


def test_the_daemons_own_origin_is_same_origin_and_accepted(tmp_path):
    app, treq = make(tmp_path)
    r, _ = call(treq, "POST", "http://127.0.0.1:7890/mcp", data=INIT,
                headers={**MCP_HEADERS, "Origin": "http://127.0.0.1:7890"})
    assert r.code == 200
    # Another port on the same host is another origin: a web page.
    r, _ = call(treq, "POST", "http://127.0.0.1:7890/mcp", data=INIT,
                headers={**MCP_HEADERS, "Origin": "http://127.0.0.1:7891"})
    assert r.code == 403
    r, _ = call(treq, "POST", "http://127.0.0.1:7890/shutdown", data=b"{}",
                headers={**EXTENSION_HEADERS, "Origin": "http://127.0.0.1:7890"})
    assert r.code == 403

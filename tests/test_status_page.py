"""The status page (gasoline.http.status_page): what it serves, whom it refuses, what it shows.

The daemon is built on a C{task.Clock} and driven through C{StubTreq}; the stream is driven through
the page object's own timer function on the same clock.
"""

from __future__ import annotations

import json

import pytest
from twisted.internet.task import Clock
from twisted.web.test.requesthelper import DummyRequest

from _mcp_calls import call, session_for

from gasoline.app import Config, build
from gasoline.http.status_page import KEEPALIVE, MAX_STREAMS, TICK, StatusPage
from gasoline.testing import EXTENSION_HEADERS, stub_request
from treq.testing import StubTreq

URL = "http://127.0.0.1:7890"
SECRET = "captured-page-text-marker-7731"


def make(tmp_path, **config):
    clock = Clock()
    clock.advance(1_700_000_000)
    app = build(Config(state_dir=tmp_path, persist=False, **config), clock)
    return app, clock, StubTreq(app.resource)


def get(treq, path, headers=None):
    response, body = stub_request(treq, "GET", URL + path, headers=headers or {})
    return response, body


def page_of(app) -> StatusPage:
    return StatusPage(app.daemon, tools=app.mcp.tools, streaming=app.streaming, relay=app.relay,
                      proxy=app.proxy, api_key=app.config.api_key)


@pytest.mark.parametrize("path,kind", [("/", b"text/html"), ("/ui/status.js", b"text/javascript"),
                                       ("/ui/status.css", b"text/css"),
                                       ("/ui/state", b"application/json")])
def test_every_status_route_refuses_framing_and_carries_a_strict_csp(tmp_path, path, kind):
    app, clock, treq = make(tmp_path)
    response, body = get(treq, path)
    assert response.code == 200 and body
    headers = response.headers
    assert headers.getRawHeaders(b"content-type")[0].startswith(kind)
    assert headers.getRawHeaders(b"x-frame-options") == [b"DENY"]
    csp = headers.getRawHeaders(b"content-security-policy")[0]
    for part in (b"default-src 'none'", b"script-src 'self'", b"frame-ancestors 'none'",
                 b"connect-src 'self'"):
        assert part in csp
    assert b"unsafe-inline" not in csp and b"unsafe-eval" not in csp
    assert headers.getRawHeaders(b"x-content-type-options") == [b"nosniff"]


def test_the_page_loads_nothing_from_elsewhere(tmp_path):
    """No CDN, no inline script or style: every script and stylesheet is the daemon's own."""
    app, clock, treq = make(tmp_path)
    html = get(treq, "/")[1].decode()
    assert "http://" not in html.replace('href="/', "") and "https://" not in html
    assert "<script>" not in html and "<style" not in html and " style=" not in html
    assert '<script src="/ui/status.js"' in html and 'href="/ui/status.css"' in html


@pytest.mark.parametrize("path", ["/", "/ui/state", "/ui/stream", "/ui/status.js"])
@pytest.mark.parametrize("origin", [b"http://evil.example", b"http://localhost:7890",
                                    b"chrome-extension://abcdefghijklmnop", b"null"])
def test_a_foreign_origin_is_refused(tmp_path, path, origin):
    app, clock, treq = make(tmp_path)
    response, body = get(treq, path, headers={b"Origin": [origin]})
    assert response.code == 403, body


def test_the_daemons_own_origin_is_served(tmp_path):
    app, clock, treq = make(tmp_path)
    response, body = get(treq, "/ui/state", headers={b"Origin": [URL.encode()],
                                                     b"Sec-Fetch-Site": [b"same-origin"]})
    assert response.code == 200 and json.loads(body)["version"]


@pytest.mark.parametrize("site", [b"cross-site", b"same-site"])
def test_state_requests_from_another_site_are_refused(tmp_path, site):
    app, clock, treq = make(tmp_path)
    assert get(treq, "/ui/state", headers={b"Sec-Fetch-Site": [site]})[0].code == 403


def test_the_page_is_refused_inside_a_frame(tmp_path):
    app, clock, treq = make(tmp_path)
    assert get(treq, "/", headers={b"Sec-Fetch-Dest": [b"iframe"]})[0].code == 403
    assert get(treq, "/", headers={b"Sec-Fetch-Dest": [b"document"],
                                   b"Sec-Fetch-Site": [b"none"]})[0].code == 200


def test_with_an_api_key_the_state_needs_it_and_the_page_asks_for_it(tmp_path):
    app, clock, treq = make(tmp_path, api_key="s3cret")
    assert get(treq, "/")[0].code == 200  # the page holds no state: it asks for the key
    response, body = get(treq, "/ui/state")
    # The route policy's guard answers first (the page's script asks for the key on any 401).
    assert response.code == 401 and b"X-Gasoline-Key" in body
    assert get(treq, "/ui/stream")[0].code == 401
    assert get(treq, "/ui/state", headers={b"X-Gasoline-Key": [b"wrong"]})[0].code == 401
    assert get(treq, "/ui/state", headers={b"X-Gasoline-Key": [b"s3cret"]})[0].code == 200
    assert get(treq, "/ui/state", headers={b"Authorization": [b"Bearer s3cret"]})[0].code == 200


def test_unknown_status_paths_are_404(tmp_path):
    app, clock, treq = make(tmp_path)
    assert get(treq, "/ui/nothing")[0].code == 404
    assert get(treq, "/ui/../setup.py")[0].code == 400  # not canonical: refused before routing


def test_state_shows_agents_calls_and_extension_but_no_captured_content(tmp_path):
    app, clock, treq = make(tmp_path, tool_rate_limit=100)
    app.registry.register("agent-a", cwd=str(tmp_path))
    body = json.dumps({"entries": [{"level": "error", "message": SECRET,
                                    "url": f"https://shop.example/checkout?token={SECRET}"}]})
    response, _ = stub_request(treq, "POST", URL + "/logs", data=body, headers=EXTENSION_HEADERS)
    assert response.code == 200
    sync = json.dumps({"session_id": "ext-1", "settings": {
        "tracking_enabled": True, "tracked_tab_id": 7, "pilot_enabled": True,
        "tracked_tab_url": f"https://shop.example/checkout?token={SECRET}"}})
    stub_request(treq, "POST", URL + "/sync", data=sync, headers=EXTENSION_HEADERS, clock=clock,
                 wait=6)
    failed, summary, payload = call(app, session_for(app, "agent-a"), "observe", {"what": "errors"})
    assert not failed and SECRET in json.dumps(payload)  # the agent does get the text

    raw = get(treq, "/ui/state")[1]
    assert SECRET not in raw.decode() and "checkout" not in raw.decode()
    state = json.loads(raw)
    [agent] = state["agents"]
    assert agent["id"] == "agent-a" and agent["project"] == str(tmp_path)
    assert agent["connected"] is True
    assert [(c["tool"], c["what"], c["outcome"]) for c in agent["last_calls"]] == [
        ("observe", "errors", "ok")]
    assert agent["rate_limit"]["used"] == 1 and agent["rate_limit"]["limit"] == 100
    ext = state["extension"]
    assert ext["tracked_tab"] == 7 and ext["pilot"] is True
    assert ext["tracked_origin"] == "https://shop.example"
    assert ext["daemon_fingerprint"]
    assert state["buffers"]["console"]["used"] == 1
    assert ext["gone"] is False
    # The browser goes away (no sync within the link's disconnect delay): its tab and pilot are
    # shown gone, not as it last said.
    clock.advance(app.extension.disconnect_after + 1)
    ext = json.loads(get(treq, "/ui/state")[1])["extension"]
    assert ext["connected"] is False and ext["gone"] is True
    assert ext["pilot"] is None and ext["tracked_tab"] is None and ext["tracking"] is None
    assert ext["tracked_origin"] is None


def test_errors_are_counted_by_kind(tmp_path):
    app, clock, treq = make(tmp_path)
    failed, _, _ = call(app, session_for(app, "agent-b"), "analyze", {"what": "no_such_mode"})
    assert failed
    state = json.loads(get(treq, "/ui/state")[1])
    assert state["errors"] == {"unknown_mode": 1}
    assert state["agents"][0]["last_calls"][0]["outcome"] == "error"


class StreamRequest(DummyRequest):
    """A DummyRequest that takes the stream's push producer (DummyRequest's own
    C{registerProducer} keeps resuming a push producer forever)."""

    producer = None

    def registerProducer(self, producer, streaming):
        self.producer = producer

    def unregisterProducer(self):
        self.producer = None


def _events(request: DummyRequest) -> list[dict]:
    text = b"".join(request.written).decode()
    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]


def test_the_stream_sends_the_state_then_each_change_and_keepalives_when_idle(tmp_path):
    app, clock, treq = make(tmp_path)
    page = page_of(app)
    request = StreamRequest([b"ui", b"stream"])
    page._stream(request)
    assert [e["agents"] for e in _events(request)] == [[]]
    page._tick()
    clock.advance(TICK)
    page._tick()  # nothing but the clock moved: nothing sent
    assert len(_events(request)) == 1 and b": keep-alive" not in b"".join(request.written)
    app.registry.register("agent-new")
    clock.advance(TICK)
    page._tick()
    events = _events(request)
    assert len(events) == 2 and [a["id"] for a in events[1]["agents"]] == ["agent-new"]
    for _ in range(int(KEEPALIVE / TICK) + 1):
        clock.advance(TICK)
        page._tick()
    assert b": keep-alive" in b"".join(request.written)
    assert len(_events(request)) == 2
    request.processingFailed(Exception("client went away"))  # notifyFinish fires
    assert page.streams == {}


def test_open_streams_are_bounded(tmp_path):
    app, clock, treq = make(tmp_path)
    page = page_of(app)
    requests = [StreamRequest([b"ui", b"stream"]) for _ in range(MAX_STREAMS)]
    for r in requests:
        page._stream(r)
    extra = StreamRequest([b"ui", b"stream"])
    page._stream(extra)
    assert extra.responseCode == 503
    assert len(page.streams) == MAX_STREAMS


def test_buffer_rates_come_from_successive_samples(tmp_path):
    app, clock, treq = make(tmp_path)
    page = page_of(app)
    page._tick()
    body = json.dumps({"entries": [{"level": "info", "message": str(i)} for i in range(10)]})
    stub_request(treq, "POST", URL + "/logs", data=body, headers=EXTENSION_HEADERS)
    clock.advance(2.0)
    page._tick()
    assert page.state()["buffers"]["console"]["rate_per_s"] == 5.0


def test_paired_state_and_the_pinned_fingerprint_come_from_the_identity_s_public_summary(tmp_path):
    """Before any pairing: not paired, nothing pinned. Once an extension paired (it is then the
    pinned one, its session in the pinned table): paired, its fingerprint shown. The page reads
    DaemonIdentity.summary(), no private attribute."""
    from gasoline.core.trust.identity import unb64u
    from gasoline.testing import PairedExtensionKeys

    app, clock, treq = make(tmp_path)
    ext = json.loads(get(treq, "/ui/state")[1])["extension"]
    assert ext["paired"] is False and ext["extension_fingerprint"] is None
    daemon_key = unb64u(json.loads(stub_request(treq, "GET", URL + "/pairing",
                                                headers=EXTENSION_HEADERS)[1])["key"], "key")
    keys = PairedExtensionKeys(daemon_key)
    response, body = stub_request(treq, "POST", URL + "/pairing/challenge",
                                  data=json.dumps(keys.challenge()), headers=EXTENSION_HEADERS)
    assert response.code == 200 and keys.finish(json.loads(body))
    ext = json.loads(get(treq, "/ui/state")[1])["extension"]
    assert ext["paired"] is True and ext["paired_sessions"] == 1
    assert ext["extension_fingerprint"] == keys.fingerprint
    assert ext["launched_extensions"] == [] and ext["refused_extensions"] == []
    source = open(__import__("gasoline.http.status_page").http.status_page.__file__).read()
    assert '"_sessions"' not in source and "identity._" not in source

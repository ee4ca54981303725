"""C{GET /metrics}: the Prometheus text format, parsed by prometheus_client's own parser, with
counters that move with real traffic through the HTTP surface (ingest, MCP tool calls, guard
refusals, an extension round trip); its own registry per daemon; the API key guards it."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.task import Clock
from treq.testing import StubTreq

from gasoline.app import Config, build
from gasoline.metrics import Metrics, route_label
from gasoline.testing import EXTENSION_HEADERS, client_headers

MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


class Http:
    def __init__(self, app) -> None:
        self.stub = StubTreq(app.resource)
        self.app = app

    def request(self, method: str, path: str, body=None, headers=None):
        out: list = []
        data = json.dumps(body).encode() if body is not None else None
        self.stub.request(method, "http://127.0.0.1" + path, data=data,
                          headers=headers or {}).addCallback(out.append)
        self.stub.flush()
        content: list = []
        out[0].content().addCallback(content.append)
        self.stub.flush()
        return out[0].code, content[0], out[0].headers

    def samples(self, headers=None) -> dict[tuple[str, tuple], float]:
        code, body, response_headers = self.request("GET", "/metrics", headers=headers)
        assert code == 200, body
        assert response_headers.getRawHeaders("content-type")[0].startswith("text/plain")
        out = {}
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out


@pytest.fixture
def app(tmp_path):
    clock = Clock()
    clock.advance(1_700_000_000)
    return build(Config(state_dir=tmp_path, persist=False, tool_rate_limit=2), clock)


def _mcp(http: Http, rid: int, method: str, params: dict, sid: str | None = None):
    headers = {**MCP_HEADERS, **client_headers(http.app, "metrics-agent")}
    if sid:
        headers["mcp-session-id"] = sid
    return http.request("POST", "/mcp", {"jsonrpc": "2.0", "id": rid, "method": method,
                                         "params": params}, headers)


def test_metrics_parse_and_seed_series_are_present(app):
    samples = Http(app).samples()
    names = {name for name, _ in samples}
    for name in ("gasoline_clients_active", "gasoline_buffer_entries",
                 "gasoline_buffer_writes_total", "gasoline_client_reads_total",
                 "gasoline_sse_connections", "gasoline_extension_connected",
                 "gasoline_rate_limited_calls_total"):
        assert name in names, name
    assert samples[("gasoline_buffer_entries", (("type", "console"),))] == 0


def test_counters_move_with_real_traffic(app):
    http = Http(app)
    before = http.samples()
    # Ingest: one accepted batch with one invalid entry, one refused origin.
    code, body, _ = http.request("POST", "/logs", {"entries": [
        {"level": "error", "message": "boom", "ts": "2026-01-01T00:00:00Z"},
        {"level": "error", "message": "two", "ts": "2026-01-01T00:00:00Z"}, 42]},
        EXTENSION_HEADERS)
    assert code == 200, body
    assert http.request("POST", "/logs", {"entries": []},
                        dict(EXTENSION_HEADERS, Origin="http://evil.example"))[0] == 403
    # MCP: a session, two tool calls (one fails), then one refused by the rate limit (2/min).
    code, _, headers = _mcp(http, 0, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "m", "version": "1"}})
    assert code == 200
    sid = (headers.getRawHeaders("mcp-session-id") or [None])[0]
    _mcp(http, 1, "tools/call", {"name": "observe", "arguments": {"what": "errors"}}, sid)
    _mcp(http, 2, "tools/call", {"name": "observe", "arguments": {"what": "no-such-mode"}}, sid)
    _mcp(http, 3, "tools/call", {"name": "observe", "arguments": {"what": "errors"}}, sid)

    after = http.samples()

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert delta("gasoline_buffer_writes_total", type="console") == 2
    assert after[("gasoline_buffer_entries", (("type", "console"),))] == 2
    assert delta("gasoline_ingest_rejected_entries_total", type="console") == 1
    assert delta("gasoline_http_requests_total", route="logs", code="200") == 1
    assert delta("gasoline_http_rejects_total", route="logs", reason="forbidden") == 1
    assert delta("gasoline_http_requests_total", route="metrics", code="200") == 1
    assert delta("gasoline_tool_calls_total", tool="observe") == 3
    assert delta("gasoline_tool_errors_total", tool="observe", code="unknown_mode") == 1
    assert delta("gasoline_rate_limited_calls_total") == 1
    assert delta("gasoline_client_reads_total", type="console") >= 1
    assert after[("gasoline_clients_active", ())] == 1


def test_query_latency_histogram_counts_extension_round_trips(app):
    http = Http(app)
    app.extension.touch()
    d = app.router.call("agent", "dom", {"selector": "h1"})
    results: list = []
    d.addCallback(results.append)
    (cmd_id,) = app.router.pending_commands("agent")[0]["command_id"],
    app.clock.advance(0.2)
    app.extension.commands.resolve({"id": cmd_id, "status": "complete", "result": {"ok": 1}})
    assert results == [{"ok": 1}]
    samples = http.samples()
    assert samples[("gasoline_query_latency_seconds_count", (("type", "dom"),))] == 1
    assert samples[("gasoline_query_latency_seconds_bucket", (("le", "0.1"), ("type", "dom")))] == 0
    assert samples[("gasoline_query_latency_seconds_bucket", (("le", "0.25"), ("type", "dom")))] == 1
    assert samples[("gasoline_extension_connected", ())] == 1
    app.extension.stop()


def test_metrics_require_the_api_key_when_set(tmp_path):
    app = build(Config(state_dir=tmp_path, persist=False, api_key="s3cret"), Clock())
    http = Http(app)
    assert http.request("GET", "/metrics")[0] == 401
    assert http.samples(headers={"X-Gasoline-Key": "s3cret"})


def test_each_daemon_has_its_own_registry(tmp_path):
    a = build(Config(state_dir=tmp_path / "a", persist=False), Clock())
    b = build(Config(state_dir=tmp_path / "b", persist=False), Clock())
    a.metrics.request_done(b"/logs", 200)
    assert a.metrics.requests == {("logs", 200): 1}
    assert b.metrics.requests == {}


def test_features_can_add_their_own_series():
    metrics = Metrics()
    relayed = metrics.counter("relay_messages_total", "CDP messages relayed.", ["direction"])
    relayed.labels("to_browser").inc(3)
    from prometheus_client.core import GaugeMetricFamily

    def collect():
        g = GaugeMetricFamily("gasoline_proxy_upstreams", "Upstream MCP servers.")
        g.add_metric([], 2)
        yield g

    metrics.add_collector(collect)
    text = metrics.render().decode()
    assert 'gasoline_relay_messages_total{direction="to_browser"} 3.0' in text
    assert "gasoline_proxy_upstreams 2.0" in text


def test_route_label_keeps_the_label_set_bounded():
    assert route_label(b"/logs") == "logs"
    assert route_label(b"/mcp/x?y") == "mcp"
    assert route_label(b"/") == "root"
    assert route_label(b"/wp-admin/setup.php") == "other"
    assert route_label(b"/\xff") == "other"


def test_every_route_of_the_table_has_its_own_label():
    """The labels come from the route table: a route added there is labelled, never C{other}."""
    from gasoline.http.routes import ROUTES

    for route in ROUTES:
        path = "/" + "/".join("a/b" if s == "{*}" else "x" if s.startswith("{") else s
                              for s in route.segments)
        want = route.segments[0] if route.segments else "root"
        assert route_label(path.encode()) == want, route.pattern
    labels = {route_label(("/" + "/".join(r.segments)).encode()) for r in ROUTES}
    assert {"pairing", "json", "status", "cdp", "ui", "extension", "root"} <= labels


def test_relay_series_move_with_cdp_traffic(app):
    """The CDP relay's series (gasoline.relay.metrics): clients, the extension link, commands
    and their errors, events fanned out, requests to the extension and those pending."""
    from gasoline.relay.testing import FakeExtensionLink, RecordingPeer

    http = Http(app)
    before = http.samples()
    assert before[("gasoline_relay_extension_connected", ())] == 0
    assert before[("gasoline_relay_clients", ())] == 0
    relay = app.relay
    ext = FakeExtensionLink(relay).connect()
    tab = ext.add_tab()
    peer_a, peer_b = RecordingPeer(), RecordingPeer()
    a = relay.client_connected("a", peer_a)
    b = relay.client_connected("b", peer_b)
    relay.client_message(a, {"id": 1, "method": "Target.attachToTarget",
                             "params": {"targetId": tab.target_id, "flatten": True}})
    relay.client_message(b, {"id": 1, "method": "Target.attachToTarget",
                             "params": {"targetId": tab.target_id, "flatten": True}})
    session_a = peer_a.responses()[1]["result"]["sessionId"]
    relay.client_message(a, {"id": 2, "method": "Runtime.evaluate", "sessionId": session_a,
                             "params": {"expression": "1+1"}})
    relay.client_message(a, {"id": 3, "method": "No.suchMethod"})  # error: not found
    relay.client_text(b, "{not json")  # error: parse
    ext.event(tab, "Inspector.targetCrashed")  # an ungated event: to both sessions
    ext.auto = False
    relay.client_message(a, {"id": 4, "method": "Runtime.evaluate", "sessionId": session_a,
                             "params": {"expression": "2"}})
    during = http.samples()
    assert during[("gasoline_relay_pending_requests", ())] == 1
    app.clock.advance(relay.request_timeout + 1)  # the extension never answers: an error

    after = http.samples()

    def delta(name):
        return after[(name, ())] - before.get((name, ()), 0)

    assert after[("gasoline_relay_clients", ())] == 2
    assert after[("gasoline_relay_extension_connected", ())] == 1
    assert after[("gasoline_relay_targets", ())] == 1
    assert after[("gasoline_relay_pending_requests", ())] == 0
    assert delta("gasoline_relay_extension_links_total") == 1
    assert delta("gasoline_relay_commands_total") == 6
    assert delta("gasoline_relay_command_errors_total") == 3
    assert delta("gasoline_relay_events_total") == 2
    # attach (once: the tab is shared), two evaluates forwarded with "send".
    assert delta("gasoline_relay_extension_requests_total") == len(ext.requests) >= 3

    relay.client_lost(b)
    relay.extension_lost(ext)
    final = http.samples()
    assert final[("gasoline_relay_clients", ())] == 1
    assert final[("gasoline_relay_extension_connected", ())] == 0


def test_streaming_series_move_with_subscribed_agents(tmp_path):
    clock = Clock()
    clock.advance(1_700_000_000)
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    http = Http(app)
    before = http.samples()
    assert before[("gasoline_streaming_agents", ())] == 0
    assert before[("gasoline_streaming_inbox_items", ())] == 0
    # One agent with an open stream, subscribed to errors at one event per second.
    server = app.mcp
    session = server.open_session("streamer", "connector")
    server.handle(session, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "m", "version": "1"}}})
    server.handle(session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    written: list = []
    session.standalone.attach(lambda event_id, payload: written.append(payload))
    d = server.handle(session, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "configure", "arguments": {"what": "streaming", "subscribe": ["error"],
                                           "filters": {"rate_limit": 1}}}})
    assert d.result["result"]["isError"] is False, d.result

    def errors(n: int, tag: str):
        code, body, _ = http.request("POST", "/logs", {"entries": [
            {"level": "error", "message": f"{tag} {i}", "url": "http://localhost:3000/",
             "ts": "2026-01-01T00:00:00Z"} for i in range(n)]}, EXTENSION_HEADERS)
        assert code == 200, body
        clock.advance(0)

    errors(3, "first")  # one matched and pushed, two over the rate limit
    after = http.samples()

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert after[("gasoline_streaming_agents", ())] == 1
    assert delta("gasoline_streaming_events_classified_total") == 3
    assert delta("gasoline_streaming_events_matched_total") == 1
    assert delta("gasoline_streaming_notifications_total") == 1 == len(written)
    assert delta("gasoline_streaming_events_dropped_total", reason="rate_limit") == 2
    assert delta("gasoline_streaming_events_dropped_total", reason="inbox_full") == 0
    assert after[("gasoline_streaming_inbox_items", ())] == 1
    assert after[("gasoline_streaming_inbox_max_items", ())] == 1
    assert delta("gasoline_streaming_notification_latency_seconds_count") == 1
    assert delta("gasoline_streaming_notification_latency_seconds_bucket", le="0.0005") == 1

    # Past the window the rate_limit_exceeded notice enters the inbox; then fill the inbox
    # (100 items) one event per second until the oldest are pushed out.
    clock.advance(1.0)
    for second in range(105):
        errors(1, f"s{second}")
        clock.advance(1.0)
    full = http.samples()
    assert full[("gasoline_streaming_inbox_max_items", ())] == 100
    assert full[("gasoline_streaming_events_dropped_total", (("reason", "inbox_full"),))] > 0
    assert full[("gasoline_streaming_events_matched_total", ())] \
        - before[("gasoline_streaming_events_matched_total", ())] == 106

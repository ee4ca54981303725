"""Hostile input: random bodies and headers on every ingest route never crash or wedge the daemon."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import site_answer
from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.http.request import GasolineSite


ROUTES = [
    ("POST", "/sync"), ("POST", "/logs"), ("DELETE", "/logs"), ("POST", "/network-bodies"),
    ("POST", "/websocket-events"), ("POST", "/enhanced-actions"), ("POST", "/performance-snapshots"),
    ("POST", "/network-waterfall"), ("POST", "/query-result"), ("POST", "/screenshots"),
    ("POST", "/api/extension-status"), ("POST", "/extension-logs"), ("GET", "/pending-queries"),
    ("POST", "/dom-result"), ("POST", "/test-boundary"), ("GET", "/snapshot"), ("POST", "/clear"),
    ("DELETE", "/clear"), ("POST", "/shutdown"), ("GET", "/health"), ("POST", "/nowhere"),
]
FIELDS = ["entries", "bodies", "events", "actions", "snapshots", "logs", "settings", "id",
          "command_results", "last_command_ack", "extension_logs", "data_url", "dataUrl",
          "query_id", "test_id", "action", "level", "result", "page_url", "in_progress"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30)
    | st.sampled_from(["log", "error", "warn", "q-1", "q-2", "start", "end",
                       "data:image/png;base64,iVBORw0KGgo=", "data:image/png;base64,@@"]),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), children, max_size=5),
    max_leaves=25,
)
objects = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
bodies = (
    objects.map(lambda v: json.dumps(v).encode())
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=200)
    | st.just(b"[" * 2000 + b"]" * 2000)
    | st.just(b'{"entries":[{"level":"log","a":' + b"[" * 300 + b"]" * 300 + b"}]}")
)
header_values = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40
)
headers = st.fixed_dictionaries(
    {"X-Gasoline-Client": st.sampled_from(
        ["gasoline-extension/0.7.9", "gasoline-extension", "gasoline-extension-offscreen", "agent"])},
    optional={
        "Content-Type": st.sampled_from(
            ["application/json", "text/plain", "application/x-www-form-urlencoded",
             "multipart/form-data; boundary=x", "application/json; charset=latin-1"]),
        "Origin": st.sampled_from(
            ["chrome-extension://abc", "http://evil.com", "null", "http://localhost:3000"])
        | header_values,
        "X-Gasoline-Extension-Version": header_values,
        "X-Gasoline-Key": header_values,
    },
)


def _fetch(site, clock, method, path, data=None, headers=None):
    answer = site_answer(site, clock, method, path, data or b"", headers, wait=5)
    return [answer] if answer is not None else []


def test_random_input_always_gets_json_2xx_or_4xx_and_daemon_stays_healthy(tmp_path):
    clock = Clock()
    clock.advance(1_700_000_000)
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    stops = []
    app.shutdown.stop = lambda: stops.append(1)
    # The daemon's own site (its body limits, no form parsing), as a user's request meets it.
    site = GasolineSite(app.resource, reactor=clock)
    seen = set()
    runs = []

    @settings(max_examples=400, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(route=st.sampled_from(ROUTES), body=bodies, hdrs=headers)
    def hostile(route, body, hdrs):
        method, path = route
        out = _fetch(site, clock, method, path, data=body if method != "GET" else None, headers=hdrs)
        assert out, f"no answer to {method} {path}"
        code, raw = out[0]
        assert 200 <= code < 500, (method, path, code, raw)
        parsed = json.loads(raw)
        assert isinstance(parsed, dict)
        if code >= 400:
            assert isinstance(parsed.get("error"), str), parsed
        seen.add((path, code // 100))
        runs.append(code)
        clock.advance(1.1)  # past the per-second rate limits and the shutdown delay

    hostile()
    assert len(runs) >= 200, len(runs)
    # the property run reached both outcomes on the main routes
    assert ("/logs", 2) in seen and ("/logs", 4) in seen
    # ...and the daemon is still healthy and still ingests
    out = _fetch(site, clock, "GET", "/health")
    code, raw = out[0]
    health = json.loads(raw)
    assert code == 200 and health["status"] == "ok" and health["service-name"] == "gasoline"
    good = _fetch(site, clock, "POST", "/logs", data=b'{"entries":[{"level":"log","message":"still ok"}]}',
                  headers={"X-Gasoline-Client": "gasoline-extension/0.7.9"})
    assert good[0][0] == 200 and json.loads(good[0][1])["received"] == 1
    assert app.extension.commands.waiting == 0

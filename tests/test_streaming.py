"""Context streaming on a Clock: subscriptions, matching, the inbox and its ways out."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from twisted.internet.defer import CancelledError

from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE, WATERFALL, WEBSOCKET_EVENTS
from gasoline.streaming.events import classify
from gasoline.streaming.inbox import Inbox
from gasoline.streaming.subscription import Matcher, Subscription, parse
from gasoline.core.errors import InvalidParam


class Agent:
    """One MCP session of client C{client_id} on the app's server, its stream captured."""

    def __init__(self, app: Any, client_id: str, transport: str = "connector",
                 attach: bool = True) -> None:
        self.app = app
        self.session = app.mcp.open_session(client_id, transport)
        self.pushed: list[dict[str, Any]] = []
        self._n = 0
        self.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "t", "version": "0"}})
        app.mcp.handle(self.session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        if attach:
            self.attach()

    def attach(self) -> None:
        self.session.standalone.attach(lambda eid, payload: self.pushed.append(orjson.loads(payload)))

    def detach(self) -> None:
        self.session.standalone.detach()

    def call(self, method: str, params: dict[str, Any] | None = None, emit=None) -> Any:
        self._n += 1
        out: list[Any] = []
        d = self.app.mcp.handle(self.session, {"jsonrpc": "2.0", "id": self._n, "method": method,
                                               "params": params or {}}, emit)
        d.addCallback(lambda r: (out.append(r), r)[1])
        self.last = d
        return out[0] if out else d

    def tool(self, name: str, args: dict[str, Any], emit=None) -> Any:
        return self.call("tools/call", {"name": name, "arguments": args}, emit)

    def subscribe(self, types: list[str], **filters: Any) -> dict[str, Any]:
        r = self.tool("configure", {"what": "streaming", "enabled": True, "subscribe": types,
                                    "filters": filters})
        return r

    def messages(self, method: str = "notifications/message") -> list[dict[str, Any]]:
        return [m for m in self.pushed if m.get("method") == method]

    def events(self) -> list[dict[str, Any]]:
        return [m["params"]["data"] for m in self.messages()]


def payload(response: dict[str, Any]) -> dict[str, Any]:
    result = response["result"]
    assert result["isError"] is False, result
    return json.loads(result["content"][0]["text"].partition("\n")[2])


def error_text(response: dict[str, Any]) -> str:
    result = response["result"]
    assert result["isError"] is True, result
    return result["content"][0]["text"]


@pytest.fixture(autouse=True)
def _no_timer_left(clock):
    """Every test here leaves no timer behind once the app is stopped (conftest's C{app})."""
    yield
    assert clock.getDelayedCalls() == []


def timers(clock: Any) -> list[Any]:
    """Pending calls other than the MCP sessions' idle deadlines."""
    return [c for c in clock.getDelayedCalls() if getattr(c.func, "__name__", "") != "_idle"]


def err(msg: str, url: str = "https://app.example.com/page", **kw: Any) -> dict[str, Any]:
    return {"level": "error", "type": "console", "message": msg, "url": url, "tabId": 7, **kw}


def ingest(app: Any, clock: Any, buffer: str, entries: list[dict[str, Any]]) -> None:
    app.store.add(buffer, entries)
    clock.advance(0)


# -- subscription validation ---------------------------------------------------------------------


@pytest.mark.parametrize("args, words", [
    ({"subscribe": ["error", "bogus"]}, "unknown event type 'bogus'"),
    ({"subscribe": ["error"] * 11}, "at most 10"),
    ({"subscribe": ["error"], "filters": {"url_pattern": "a" * 101}}, "longer than 100"),
    ({"subscribe": ["error"], "filters": {"url_pattern": "(?=x)"}}, "not a valid RE2"),
    ({"subscribe": ["error"], "filters": {"exclude_pattern": r"(a)\1"}}, "not a valid RE2"),
    ({"subscribe": ["error"], "filters": {"url_pattern": r"\p{L}{50}x{50}"}}, "too complex"),
    ({"subscribe": ["error"], "filters": {"url_pattern": "((a{100}){100}){100}"}}, "not a valid RE2"),
    ({"subscribe": ["error"], "filters": {"url_pattern": ""}}, "non-empty string"),
    ({"subscribe": ["error"], "filters": {"url_pattern": 5}}, "non-empty string"),
    ({"subscribe": "error", "filters": []}, "filters must be an object"),
    ({"subscribe": [{"x": 1}]}, "unknown event type"),
    ({"subscribe": ["error"], "filters": {"rate_limit": 0}}, "between 1 and 100"),
    ({"subscribe": ["error"], "filters": {"rate_limit": 101}}, "between 1 and 100"),
    ({"subscribe": ["error"], "filters": {"rate_limit": "5"}}, "must be an integer"),
    ({"subscribe": ["error"], "filters": {"severity": "urgent"}}, "filters.severity"),
    ({"subscribe": ["error"], "filters": {"colour": 1}}, "unknown filter"),
    ({"subscribe": []}, "non-empty list"),
    ({}, "subscribe is required"),
    ({"enabled": "yes", "subscribe": ["error"]}, "enabled must be a boolean"),
])
def test_invalid_subscriptions_are_refused_with_a_clear_error(args, words):
    with pytest.raises(InvalidParam) as e:
        parse(args)
    assert words in e.value.message


def test_configure_answers_the_issue_shape_and_warns_for_all(app, clock):
    a = Agent(app, "A")
    body = payload(a.subscribe(["error", "network_failure"], severity="high", rate_limit=7,
                               url_pattern="^https://api"))
    assert body["configured"] is True and body["streaming_enabled"] is True
    assert body["subscribe"] == ["error", "network_failure"]
    assert body["filters"]["severity"] == "high" and body["filters"]["rate_limit"] == 7
    assert body["filters"]["url_pattern"] == "^https://api"
    assert "warning" not in body
    every = payload(a.subscribe(["all"]))
    assert "warning" in every and every["filters"]["rate_limit"] == 10
    off = payload(a.tool("configure", {"what": "streaming", "enabled": False}))
    assert off["streaming_enabled"] is False and off["configured"] is True
    bad = error_text(a.tool("configure", {"what": "streaming", "subscribe": ["nope"]}))
    assert "invalid_param" in bad and "nope" in bad


@pytest.mark.parametrize("action", ["enable", "disable", "status"])
def test_every_streaming_answer_has_the_published_enabled_key(app, clock, action):
    """The published Gasoline's scripts read `enabled`; `streaming_enabled` stays too."""
    a = Agent(app, "pub")
    if action != "enable":
        a.subscribe(["error"])
    body = payload(a.tool("configure", {"what": "streaming", "streaming_action": action,
                                        "events": ["error"]}))
    assert body["enabled"] is body["streaming_enabled"] is (action != "disable")
    if action == "status":
        a.tool("configure", {"what": "streaming", "streaming_action": "disable"})
        off = payload(a.tool("configure", {"what": "streaming", "streaming_action": "status"}))
        assert off["enabled"] is off["streaming_enabled"] is False


# -- matching and delivery ------------------------------------------------------------------------


def test_subscribed_agent_is_pushed_others_are_not(app, clock):
    a, b, c = Agent(app, "A"), Agent(app, "B"), Agent(app, "C")
    a.subscribe(["error"])
    b.subscribe(["websocket_close"])
    ingest(app, clock, CONSOLE, [err("TypeError: x is null", type="exception", stack="at f")])
    [event] = a.events()
    assert event["event_type"] == "error" and event["message"] == "TypeError: x is null"
    assert event["severity"] == "high" and event["stack_trace"] == "at f"
    assert event["tabId"] == 7 and event["url"] == "https://app.example.com/page"
    assert event["seq"] == 1 and event["untrusted"] is True and event["timestamp"]
    [note] = a.messages()
    assert note["params"]["logger"] == "gasoline" and note["params"]["level"] == "error"
    assert b.events() == [] and c.events() == []


def test_matching_runs_after_the_ingest_call_returns(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"])
    app.store.add(CONSOLE, [err("boom")])
    assert a.events() == []  # nothing happened inside the write
    clock.advance(0)
    assert [e["message"] for e in a.events()] == ["boom"]


def test_url_and_exclude_patterns_and_severity(app, clock):
    api = Agent(app, "api")
    api.subscribe(["error", "network_failure"], url_pattern=r"^https://api\.example\.com",
                  exclude_pattern="healthz|ResizeObserver")
    high = Agent(app, "high")
    high.subscribe(["error", "network_failure"], severity="high")
    ingest(app, clock, CONSOLE, [
        err("a", url="https://api.example.com/v1/users"),
        err("b", url="https://www.example.com/"),
        err("c", url="https://api.example.com/healthz"),
        err("ResizeObserver loop limit exceeded", url="https://api.example.com/x"),
        {"level": "error", "type": "network", "status": 404, "method": "GET",
         "url": "https://api.example.com/missing", "message": "GET /missing → 404"},
        {"level": "error", "type": "network", "status": 503, "method": "GET",
         "url": "https://www.example.com/down", "message": "GET /down → 503"},
        err("TypeError", url="https://www.example.com/", type="exception"),
        {"level": "warn", "type": "console", "message": "just a warning", "url": "https://api.example.com/"},
    ])
    assert [(e["event_type"], e["message"]) for e in api.events()] == [
        ("error", "a"), ("network_failure", "GET /missing → 404")]
    assert [(e["event_type"], e["severity"]) for e in high.events()] == [
        ("network_failure", "high"), ("error", "high")]


def test_other_event_types_are_recognised(app, clock):
    a = Agent(app, "A")
    a.subscribe(["all"], rate_limit=100, slow_ms=500)
    ingest(app, clock, WATERFALL, [{"url": "https://x/slow", "duration": 900, "method": "GET"},
                                   {"url": "https://x/fast", "duration": 20}])
    ingest(app, clock, WEBSOCKET_EVENTS, [{"id": "w1", "event": "open", "url": "wss://x"},
                                          {"id": "w1", "event": "close", "code": 1006, "url": "wss://x"}])
    app.store.add_performance([{"url": "https://x/", "timing": {"largest_contentful_paint": 5000}}])
    clock.advance(0)
    ingest(app, clock, CONSOLE, [{"level": "error", "type": "console", "url": "https://x/",
                                  "message": "Refused to load the script because it violates the "
                                             "following Content Security Policy directive"}])
    kinds = [(e["event_type"], e["severity"]) for e in a.events()]
    assert kinds == [("network_slow", "low"), ("websocket_close", "medium"),
                     ("performance_degradation", "high"), ("security_violation", "high")]


def test_accessibility_audit_publishes_violations(app, clock):
    a = Agent(app, "A")
    a.subscribe(["accessibility_violation"], severity="high")
    n = app.streaming.publish_audit(
        [{"id": "color-contrast", "impact": "serious", "help": "contrast", "nodes": [{}, {}]},
         {"id": "region", "impact": "minor", "help": "landmarks"}], "https://x/", 3)
    assert n == 2
    [event] = a.events()
    assert event["message"].startswith("color-contrast: contrast (2 elements)")
    assert event["severity"] == "high"


def test_rate_limit_throttles_and_sends_one_notice(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"], rate_limit=3)
    ingest(app, clock, CONSOLE, [err(f"e{i}") for i in range(10)])
    assert [e["message"] for e in a.events()] == ["e0", "e1", "e2"]
    clock.advance(1.0)
    notices = [e for e in a.events() if e["event_type"] == "rate_limit_exceeded"]
    assert len(notices) == 1 and notices[0]["throttled"] == 7
    ingest(app, clock, CONSOLE, [err("later")])  # a new window
    assert a.events()[-1]["message"] == "later"
    assert timers(clock) == []


def test_inbox_overflow_drops_oldest_with_one_growing_notice(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"], rate_limit=100)
    for burst in range(3):
        ingest(app, clock, CONSOLE, [err(f"b{burst}-{i}") for i in range(60)])
        clock.advance(1.0)
    out = payload(a.tool("observe", {"what": "events", "limit": 1000}))
    items = out["events"]
    assert len(items) == 100
    seqs = [e["seq"] for e in items]
    assert seqs == sorted(seqs) and len(set(seqs)) == 100
    full = [e for e in items if e["event_type"] == "buffer_full"]
    assert len(full) == 1 and full[0]["throttled"] >= 80
    assert len([e for e in a.events() if e["event_type"] == "buffer_full"]) == 1
    assert out["dropped"] >= 80


def test_observe_events_returns_what_was_pushed_in_order_then_nothing(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"], rate_limit=100)
    ingest(app, clock, CONSOLE, [err(f"m{i}") for i in range(5)])
    first = payload(a.tool("observe", {"what": "events"}))
    assert first["events"] == a.events()
    assert [e["seq"] for e in first["events"]] == [1, 2, 3, 4, 5]
    again = payload(a.tool("observe", {"what": "events"}))
    assert again["count"] == 0 and again["acknowledged"] == 5
    ingest(app, clock, CONSOLE, [err("m5")])
    third = payload(a.tool("observe", {"what": "events"}))
    assert [e["seq"] for e in third["events"]] == [6]
    # since re-reads what is still held: nothing before the acknowledgement
    assert payload(a.tool("observe", {"what": "events", "since": 0}))["count"] == 0


def test_push_does_not_acknowledge_and_other_results_carry_a_note(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error", "network_failure"], rate_limit=100)
    ingest(app, clock, CONSOLE, [err("x"), err("y"), {"level": "error", "type": "network",
                                                       "status": 500, "url": "https://x/",
                                                       "message": "GET / → 500"}])
    result = a.tool("observe", {"what": "logs"})["result"]
    assert len(result["content"]) == 2
    note = result["content"][1]["text"]
    assert note == '3 new browser events: 2 error, 1 network_failure — observe {what:"events"}'
    json.loads(result["content"][0]["text"].partition("\n")[2])  # the first block is intact
    payload(a.tool("observe", {"what": "events"}))
    assert len(a.tool("observe", {"what": "logs"})["result"]["content"]) == 1


def test_long_poll_waits_for_an_event_with_progress(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"])
    emitted: list = []
    d = a.tool("observe", {"what": "events", "wait_ms": 30_000}, emit=emitted.append)
    assert not d.called
    clock.advance(12)
    assert emitted == []  # no progress token, no progress
    ingest(app, clock, CONSOLE, [err("late")])
    response = d.result
    body = payload(response)
    assert [e["message"] for e in body["events"]] == ["late"] and body["waited_ms"] == 12000
    assert timers(clock) == []

    progress: list = []
    a._n += 1
    d2 = app.mcp.handle(a.session, {"jsonrpc": "2.0", "id": "p", "method": "tools/call", "params": {
        "name": "observe", "arguments": {"what": "events", "wait_ms": 12_000},
        "_meta": {"progressToken": "tok"}}}, progress.append)
    clock.pump([1] * 12)
    body = payload(d2.result)
    assert body["count"] == 0 and body["waited_ms"] == 12000
    notes = [p["params"] for p in progress if p["method"] == "notifications/progress"]
    assert len(notes) >= 2 and {n["progressToken"] for n in notes} == {"tok"}
    values = [n["progress"] for n in notes]
    assert values == sorted(values) and len(set(values)) == len(values)  # always increasing
    assert any(n.get("message") == "waiting for browser events" for n in notes)
    assert timers(clock) == []


def test_long_poll_is_cancellable_and_bounded(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"])
    assert "wait_ms" in error_text(a.tool("observe", {"what": "events", "wait_ms": 50_001}))
    d = a.tool("observe", {"what": "events", "wait_ms": 20_000})
    a.call("notifications/cancelled")  # no-op id: unknown
    app.mcp.handle(a.session, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": a._n - 1}})
    assert d.called
    assert timers(clock) == []
    assert app.streaming.agents["A"].waiters == []


def test_unsubscribed_agent_reading_events_is_told_how_to_subscribe(app, clock):
    a = Agent(app, "A")
    body = payload(a.tool("observe", {"what": "events", "wait_ms": 5000}))
    assert body["count"] == 0 and body["streaming_enabled"] is False
    assert timers(clock) == []


def test_one_stream_per_agent_newest_session_and_none_to_dead_streams(app, clock):
    old = Agent(app, "A")
    new = Agent(app, "A", transport="streamable")
    old.subscribe(["error"])
    clock.advance(1)
    app.mcp.touch(new.session)
    ingest(app, clock, CONSOLE, [err("one")])
    assert [e["message"] for e in new.events()] == ["one"] and old.events() == []
    new.detach()
    ingest(app, clock, CONSOLE, [err("two")])
    assert [e["message"] for e in old.events()] == ["two"]
    old.detach()
    ingest(app, clock, CONSOLE, [err("three")])
    assert len(old.session.standalone) == 1 and len(new.session.standalone) == 1  # nothing queued
    body = payload(new.tool("observe", {"what": "events"}))
    assert [e["message"] for e in body["events"]] == ["one", "two", "three"]


def test_session_log_level_still_filters_pushes(app, clock):
    a = Agent(app, "A")
    a.call("logging/setLevel", {"level": "error"})
    a.subscribe(["error", "websocket_close"], rate_limit=100)
    ingest(app, clock, WEBSOCKET_EVENTS, [{"id": "w", "event": "close", "code": 1000, "url": "wss://x"}])
    ingest(app, clock, CONSOLE, [err("e", type="exception")])
    assert [e["event_type"] for e in a.events()] == ["error"]
    assert payload(a.tool("observe", {"what": "events"}))["count"] == 2


def test_event_payloads_are_redacted(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"])
    ingest(app, clock, CONSOLE, [err("auth failed Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789")])
    [event] = a.events()
    assert "abcdefghijklmnopqrstuvwxyz0123456789" not in event["message"]


def test_subscription_persists_with_client_state_and_is_restored(tmp_path, clock):
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    a = Agent(app, "persisted")
    a.subscribe(["network_failure"], url_pattern="api")
    app.registry.flush(force=True)
    app.mcp.close_all()
    app.streaming.stop()
    app.store.notifier.stop()
    clock.advance(60)
    again = build(Config(state_dir=tmp_path, persist=False), clock)
    b = Agent(again, "persisted")
    ingest(again, clock, CONSOLE, [{"level": "error", "type": "network", "status": 500,
                                    "url": "https://api/x", "message": "boom"}])
    assert [e["message"] for e in b.events()] == ["boom"]
    status = payload(b.tool("configure", {"what": "streaming", "streaming_action": "status"}))
    assert status["subscribe"] == ["network_failure"] and status["filters"]["url_pattern"] == "api"
    again.mcp.close_all()
    again.streaming.stop()
    again.store.notifier.stop()


def test_resource_subscription_is_told_once_until_read(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"], rate_limit=100)
    a.call("resources/subscribe", {"uri": "gasoline://events"})
    ingest(app, clock, CONSOLE, [err("1"), err("2")])
    assert len(a.messages("notifications/resources/updated")) == 1
    read = a.call("resources/read", {"uri": "gasoline://events"})
    body = json.loads(read["result"]["contents"][0]["text"])
    assert [e["message"] for e in body["events"]] == ["1", "2"]
    ingest(app, clock, CONSOLE, [err("3")])
    assert len(a.messages("notifications/resources/updated")) == 2


def test_disabling_stops_pushes(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"])
    a.tool("configure", {"what": "streaming", "enabled": False})
    ingest(app, clock, CONSOLE, [err("x")])
    assert a.events() == []


# -- pieces -----------------------------------------------------------------------------------------


def test_inbox_sequence_numbers_and_ack():
    box = Inbox(3)
    for i in range(5):
        box.append({"i": i})
    assert [item["seq"] for item in box.unread()] == [3, 4, 5] and box.dropped == 2
    items, more = box.after(0, 2)
    assert [i["seq"] for i in items] == [3, 4] and more
    box.ack(4)
    assert [item["seq"] for item in box.unread()] == [5] and box.acked == 4


def test_matcher_compiles_patterns_once():
    sub = parse({"subscribe": ["error"], "filters": {"url_pattern": "x"}})
    m = Matcher(sub)
    assert m.include is not None
    [event] = classify(CONSOLE, [err("e", url="https://x")], 0.0)
    assert m.matches(event)
    assert Subscription.from_json(sub.to_json()) == sub
    assert Subscription.from_json({"enabled": True, "subscribe": ["bogus"]}) is None


def test_hostile_entries_do_not_break_classification():
    events = classify(CONSOLE, [{"level": "error", "message": 5}, "junk", None,
                                {"level": "error", "type": "network", "status": "x"}], 0.0)
    assert [e.event_type for e in events] == ["error", "network_failure"]


def test_long_poll_cancel_raises_cancelled(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"])
    d = app.streaming.wait(app.registry.get("A"), 10)
    d.cancel()
    assert isinstance(d.result.value, CancelledError) if hasattr(d.result, "value") else True
    d.addErrback(lambda f: None)
    assert timers(clock) == []


# -- GET /events -------------------------------------------------------------------------------------


def _events_request(app: Any, query: dict[bytes, list[bytes]], headers: dict[bytes, bytes] | None = None,
                    token: bool = True):
    """C{GET /events} with C{query}; with C{token}, the client's token is added (what the
    subscribing agent got in its C{events_url})."""
    from twisted.web.server import NOT_DONE_YET

    if token and query.get(b"client") and b"proof" not in query:
        client = query[b"client"][0].decode()
        query = {**query, b"proof": [app.streaming.events_token(client).encode()]}
    from twisted.python.components import Componentized
    from twisted.web.test.requesthelper import DummyRequest

    class Request(DummyRequest, Componentized):
        """As twisted.web's Request: C{Componentized} (the guards note the request's facts on
        it, gasoline.core.trust.request_facts)."""

        producer = None
        content = None  # a GET without a body (twisted.web's Request sets it; DummyRequest not)

        def __init__(self, postpath: list[bytes]) -> None:
            DummyRequest.__init__(self, postpath)
            Componentized.__init__(self)

        @property
        def code(self) -> int:  # what twisted.web's Request calls it (the root reports it)
            return self.responseCode or 200

        def registerProducer(self, producer, streaming):  # the stream's push producer
            self.producer = producer

        def unregisterProducer(self):
            self.producer = None

    request = Request([b"events"])
    request.path = b"/events"
    request.args = query
    for k, v in (headers or {}).items():
        request.requestHeaders.setRawHeaders(k, [v])
    body = app.resource.render(request)
    if body is NOT_DONE_YET:
        return request, None
    return request, body


def _sse(request: Any) -> list[dict[str, Any]]:
    out = []
    for chunk in b"".join(request.written).split(b"\n\n"):
        lines = dict(line.split(b": ", 1) for line in chunk.split(b"\n") if b": " in line
                     and not line.startswith(b":"))
        if b"data" in lines:
            out.append({"id": int(lines[b"id"]), "event": lines[b"event"].decode(),
                        "data": json.loads(lines[b"data"])})
    return out


def test_events_route_streams_the_inbox_without_acknowledging(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"], rate_limit=100)
    ingest(app, clock, CONSOLE, [err("before")])
    request, body = _events_request(app, {b"client": [b"A"]})
    assert body is None
    assert request.responseHeaders.getRawHeaders(b"content-type") == [b"text/event-stream"]
    ingest(app, clock, CONSOLE, [err("after")])
    got = _sse(request)
    assert [(g["id"], g["event"], g["data"]["message"]) for g in got] == [
        (1, "error", "before"), (2, "error", "after")]
    assert payload(a.tool("observe", {"what": "events"}))["count"] == 2  # not acknowledged
    resumed, _ = _events_request(app, {b"client": [b"A"]}, {b"last-event-id": b"1"})
    ingest(app, clock, CONSOLE, [err("third")])
    assert [g["data"]["message"] for g in _sse(resumed)] == ["third"]
    request.finish()
    assert len(app.streaming.agents["A"].listeners) == 1
    a.tool("configure", {"what": "streaming", "enabled": False})
    assert resumed.finished  # unsubscribing ends the stream
    assert app.streaming.agents == {}


@pytest.mark.parametrize("query, headers, status", [
    ({}, {}, 400),
    ({b"client": [b"../etc"]}, {}, 400),
    ({b"client": [b"nobody"]}, {}, 404),
    ({b"client": [b"B"]}, {}, 409),
    ({b"client": [b"A"], b"since": [b"x"]}, {}, 400),
    ({b"client": [b"A"]}, {b"origin": b"https://evil.example"}, 403),
    ({b"client": [b"A"]}, {b"accept": b"application/json"}, 406),
])
def test_events_route_refusals(app, clock, query, headers, status):
    Agent(app, "A").subscribe(["error"])
    Agent(app, "B")
    request, body = _events_request(app, query, headers)
    assert request.responseCode == status and body is not None


def test_events_route_opens_only_with_the_token_the_subscribing_agent_got(app, clock):
    """Knowing a client id (GET /health listed them) used to be enough to read that agent's
    events; the stream now needs the token of the agent's own events_url."""
    a = Agent(app, "A")
    url = payload(a.tool("configure", {"what": "streaming", "subscribe": ["error"]}))["events_url"]
    assert url.startswith("/events?client=A&proof=")
    status = payload(a.tool("configure", {"what": "streaming", "streaming_action": "status"}))
    assert status["events_url"] == url
    token = url.split("proof=", 1)[1].encode()
    assert token == app.streaming.events_token("A").encode()  # not redacted on its way
    Agent(app, "B").subscribe(["error"])
    for query in ({b"client": [b"A"]}, {b"client": [b"A"], b"proof": [b"x" * len(token)]},
                  {b"client": [b"A"], b"proof": [app.streaming.events_token("B").encode()]},
                  {b"client": [b"nobody"]}):
        request, body = _events_request(app, query, token=False)
        assert request.responseCode == 403 and body is not None, query
        assert b"nobody" not in body  # no oracle for which ids exist
    request, body = _events_request(app, {b"client": [b"A"], b"proof": [token]}, token=False)
    assert body is None and request.responseCode == 200
    request.finish()
    request, body = _events_request(app, {b"client": [b"A"]},
                                    {b"x-gasoline-events-proof": token}, token=False)
    assert body is None and request.responseCode == 200
    request.finish()


def test_events_route_needs_the_api_key_when_one_is_set(tmp_path, clock):
    keyed = build(Config(state_dir=tmp_path, persist=False, api_key="sekrit"), clock)
    Agent(keyed, "A").subscribe(["error"])
    request, body = _events_request(keyed, {b"client": [b"A"]})
    assert request.responseCode == 401
    request, body = _events_request(keyed, {b"client": [b"A"]}, {b"x-gasoline-key": b"sekrit"})
    assert body is None and request.responseCode == 200
    request.finish()
    keyed.mcp.close_all()
    keyed.streaming.stop()
    keyed.store.notifier.stop()


def test_the_unread_note_also_follows_async_mode_results(app, clock):
    a = Agent(app, "A")
    a.subscribe(["error"])
    ingest(app, clock, CONSOLE, [err("x")])

    async def slow_mode(ctx, args):
        return ctx.ok("async answer", {"n": 1})

    app.tools.tables["observe"]["logs"] = slow_mode
    result = a.tool("observe", {"what": "logs"})["result"]
    assert result["content"][0]["text"].startswith("async answer")
    assert result["content"][1]["text"].startswith("1 new browser event: 1 error")


# -- the ingest path pays nothing for types nobody subscribed to ---------------------------------


def test_writes_no_agent_subscribed_to_queue_and_schedule_nothing(app, clock):
    notifier = app.store.notifier
    ingest(app, clock, CONSOLE, [err("first")])  # the hub's first look at the (empty) agent table
    before = notifier.unwanted
    for i in range(5):
        app.store.add(CONSOLE, [err(f"nobody listens {i}")])
        assert notifier.pending == 0 and timers(clock) == []
    assert notifier.unwanted == before + 5
    # An agent subscribed to network_slow only: console writes still cost nothing...
    a = Agent(app, "slow-only")
    a.subscribe(["network_slow"], slow_ms=100)
    ingest(app, clock, WATERFALL, [{"url": "https://x/a", "duration": 50}])  # refresh after configure
    unwanted = notifier.unwanted
    app.store.add(CONSOLE, [err("not for slow-only")])
    assert notifier.pending == 0 and notifier.unwanted == unwanted + 1
    # ...and the waterfall writes reach it.
    ingest(app, clock, WATERFALL, [{"url": "https://x/b", "duration": 250, "method": "GET"}])
    assert [e["event_type"] for e in a.events()] == ["network_slow"]


def test_a_subscription_restored_with_client_state_is_found_within_a_second(app, clock):
    ingest(app, clock, CONSOLE, [err("before anyone")])
    # A client whose saved state carries a subscription comes back (as after a restart) without
    # calling configure: the hub re-reads the registry at most once per second of writes.
    a = Agent(app, "restored")
    state = app.registry.get("restored")
    state.subscriptions["streaming"] = parse({"subscribe": ["error"]}).to_json()
    clock.advance(1.0)
    ingest(app, clock, CONSOLE, [err("after the refresh")])
    assert [e["message"] for e in a.events()] == ["after the refresh"]


def test_throttled_events_are_counted_exactly_with_and_without_patterns(app, clock):
    plain = Agent(app, "plain")
    plain.subscribe(["error"], rate_limit=1)
    picky = Agent(app, "picky")
    picky.subscribe(["error"], rate_limit=1, severity="high", exclude_pattern="skip")
    entries = [err("a1"), err("a2", type="exception"), err("a3"),
               err("a4 skip", type="exception"), err("a5", type="exception")]
    ingest(app, clock, CONSOLE, entries)
    # plain: 1 pushed, 4 throttled; picky: a2 pushed, a5 throttled (a1/a3 medium, a4 excluded).
    assert app.streaming.agents["plain"].throttled_total == 4
    assert app.streaming.agents["picky"].throttled_total == 1
    assert [e["message"] for e in plain.events()] == ["a1"]
    assert [e["message"] for e in picky.events()] == ["a2"]
    # The window stays full: a second write is only counted.
    ingest(app, clock, CONSOLE, entries)
    assert app.streaming.agents["plain"].throttled_total == 9
    assert app.streaming.agents["picky"].throttled_total == 3
    assert app.streaming.throttled == 12
    clock.advance(1.0)
    notices = [e for e in plain.events() if e["event_type"] == "rate_limit_exceeded"]
    assert [n["throttled"] for n in notices] == [9]


def test_shared_notification_bytes_equal_a_full_encoding(app, clock):
    a = Agent(app, "A")
    b = Agent(app, "B")
    a.subscribe(["error"], rate_limit=100)
    b.subscribe(["error"], rate_limit=100)
    ingest(app, clock, CONSOLE, [err("one \"quoted\" \u2603"), err("two")])
    for agent in (a, b):
        for m in agent.messages():
            data = m["params"]["data"]
            assert list(data)[-1] == "seq" and data["untrusted"] is True
            assert m["params"]["level"] == "warning" and m["params"]["logger"] == "gasoline"
    assert [e["seq"] for e in a.events()] == [1, 2] == [e["seq"] for e in b.events()]
    assert a.events()[0]["message"] == "one \"quoted\" \u2603"

"""C{dom_change} and C{websocket_message} streaming events, on a Clock (the real-browser tests are
in tests/e2e/test_streaming_browser.py)."""

from __future__ import annotations

import json

import pytest

from test_streaming import Agent, error_text, ingest, payload

from gasoline.core.errors import InvalidParam
from gasoline.core.storage.store import WEBSOCKET_EVENTS
from gasoline.streaming.subscription import parse
from gasoline.testing import EXTENSION_HEADERS
from treq.testing import StubTreq

SECRET = "AKIAIOSFODNN7EXAMPLE"


@pytest.fixture(autouse=True)
def _no_timer_left(clock):
    yield
    assert clock.getDelayedCalls() == []


def ws(direction, data, url="wss://app.example.test/feed", **kw):
    return {"type": "websocket", "event": "message", "id": "c1", "url": url,
            "direction": direction, "data": data, "size": len(data), "tabId": 7, **kw}


def test_websocket_message_is_off_unless_named_and_carries_a_redacted_preview(app, clock):
    named, every, closes = Agent(app, "N"), Agent(app, "E"), Agent(app, "C")
    named.subscribe(["websocket_message"], url_pattern="feed")
    every.subscribe(["all"])
    closes.subscribe(["websocket_close"])
    big = '{"price": 3, "token": "' + SECRET + '"}' + "x" * 500
    ingest(app, clock, WEBSOCKET_EVENTS, [
        ws("incoming", big),
        ws("outgoing", "hello"),
        ws("incoming", "elsewhere", url="wss://other.test/x")])
    got = named.events()
    assert [(e["direction"], e["size"]) for e in got] == [("incoming", len(big)), ("outgoing", 5)]
    assert len(got[0]["preview"]) <= 201 and got[0]["preview"].endswith("…")
    assert SECRET not in json.dumps(got) and "price" in got[0]["preview"]
    assert got[0]["event_type"] == "websocket_message" and got[0]["url"].startswith("wss://app")
    # "all" does not include it; nor does websocket_close.
    assert every.events() == [] and closes.events() == []
    app.streaming.stop()


def test_dom_change_subscription_is_validated():
    ok = parse({"subscribe": ["dom_change"], "watch": [
        {"selector": "#checkout-error", "condition": "appears"},
        {"selector": "text=Saved", "condition": "disappears"},
        {"selector": ".status", "condition": "text_matches", "text": "done"}]})
    assert len(ok.watches) == 3
    for args, words in [
        ({"subscribe": ["dom_change"]}, "needs watch"),
        ({"subscribe": ["error"], "watch": [{"selector": "#x"}]}, "add it to subscribe"),
        ({"subscribe": ["dom_change"], "watch": [{"selector": ""}]}, "selector"),
        ({"subscribe": ["dom_change"], "watch": [{"selector": "#x", "condition": "hovers"}]},
         "condition must be one of"),
        ({"subscribe": ["dom_change"], "watch": [{"selector": "#x", "condition": "text_matches"}]},
         "text"),
        ({"subscribe": ["dom_change"], "watch": [{"selector": "#x", "colour": 1}]}, "unknown"),
        ({"subscribe": ["dom_change"], "watch": [{"selector": f"#x{i}"} for i in range(11)]},
         "at most 10"),
    ]:
        with pytest.raises(InvalidParam) as e:
            parse(args)
        assert words in e.value.message, (args, e.value.message)


def post(app, clock, body):
    stub = StubTreq(app.resource)
    d = stub.request("POST", "http://127.0.0.1:7890/dom-changes", headers=EXTENSION_HEADERS,
                     data=json.dumps(body).encode())
    stub.flush()
    response = d.result
    content = stub.content(response)
    stub.flush()
    return response.code, json.loads(content.result)


def test_dom_change_reaches_only_the_agent_whose_watch_it_is(app, clock):
    a, b, c = Agent(app, "A"), Agent(app, "B"), Agent(app, "C")
    body = payload(a.tool("configure", {"what": "streaming", "subscribe": ["dom_change"],
                                        "watch": [{"selector": "#checkout-error"}]}))
    assert body["streaming_enabled"] is True
    b.tool("configure", {"what": "streaming", "subscribe": ["dom_change"],
                         "watch": [{"selector": "#checkout-error"}]})
    c.subscribe(["all"])
    watches = app.extension.dom_watches
    # One entry per agent's watch, opaque ids: the extension does not learn whose watch it is.
    assert len(watches) == 2 and {w["selector"] for w in watches} == {"#checkout-error"}
    assert not any(cid in json.dumps(watches) for cid in ("A", "B"))
    answer = app.extension._response([])
    assert answer["dom_watches"]["watches"] == watches
    a_watch = next(w["id"] for w in watches if app.streaming.watches.owners[w["id"]][0] == "A")
    code, out = post(app, clock, {"tab_id": 7, "url": "http://localhost:3000/checkout",
                                  "changes": [{"watch": a_watch, "condition": "appears",
                                               "text": "Card declined", "count": 1}]})
    assert code == 200 and out["events"] == 1
    [event] = a.events()
    assert event["event_type"] == "dom_change" and event["selector"] == "#checkout-error"
    assert event["condition"] == "appears" and event["element_text"] == "Card declined"
    assert event["tabId"] == 7 and event["untrusted"] is True
    assert b.events() == [] and c.events() == []
    # A report for a watch nobody owns (or malformed) makes no event and no error.
    code, out = post(app, clock, {"changes": [{"watch": "wnope", "condition": "appears"}, 5]})
    assert code == 200 and out["events"] == 0
    code, out = post(app, clock, {"changes": "x"})
    assert code == 400
    # Unsubscribing removes the watch from what the extension gets.
    a.tool("configure", {"what": "streaming", "enabled": False})
    assert [w["id"] for w in app.extension.dom_watches] != [] and \
        a_watch not in {w["id"] for w in app.extension.dom_watches}
    b.tool("configure", {"what": "streaming", "enabled": False})
    assert app.extension.dom_watches == []
    err = error_text(a.tool("configure", {"what": "streaming", "subscribe": ["dom_change"]}))
    assert "needs watch" in err
    app.streaming.stop()


def test_dom_changes_share_the_rate_limit_and_its_notice(app, clock):
    a = Agent(app, "A")
    a.tool("configure", {"what": "streaming", "subscribe": ["dom_change"],
                         "watch": [{"selector": ".toast"}], "filters": {"rate_limit": 2}})
    wid = app.extension.dom_watches[0]["id"]
    post(app, clock, {"changes": [{"watch": wid, "condition": "appears"}] * 5})
    assert len(a.events()) == 2
    clock.advance(1.0)
    notices = [e for e in a.events() if e["event_type"] == "rate_limit_exceeded"]
    assert len(notices) == 1 and notices[0]["throttled"] == 3
    app.streaming.stop()

"""
Streaming events from a real page, in Debian's Chromium with the extension and a real daemon:

- C{dom_change}: two agents watch the tracked tab; an element appears; only the agent whose
  watch it is hears of it (the other agent's own watch, on another selector, stays quiet); it
  then disappears and the agent watching for that is told;
- C{websocket_message}: the page's WebSocket sends and receives a frame; the subscribed agent
  gets both directions with their size and a preview, an agent subscribed to C{all} none.

Latency (target 200 ms p99) is measured by bench/dom_change.py, not here. Fails (not skips)
under CI=true without Chromium (the C{browser} fixture).
"""

from __future__ import annotations

import uuid

import pytest
from _agents import HttpAgent
from harness import daemon_get, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def tracked(browser, site, daemon, path="/blank.html"):
    url = site.url + path
    sw, page, tab = browser.track_new_tab(url, daemon.url, trackedTabUrl=url)
    wait_until(lambda: daemon_get(daemon.url, "/health")["capture"]["tracked_tab_id"] == tab, 25,
               interval=0.2, what="a /sync with the tracked tab")
    return sw, page, tab


def test_dom_change_reaches_only_the_subscribed_agent(browser, site, ext_daemon):
    _, page, tab = tracked(browser, site, ext_daemon)
    a, b = HttpAgent(ext_daemon, "dom-agent-a"), HttpAgent(ext_daemon, "dom-agent-b")
    a.tool("configure", {"what": "streaming", "subscribe": ["dom_change"], "watch": [
        {"selector": "#checkout-error", "condition": "appears"},
        {"selector": "#checkout-error", "condition": "disappears"}]})
    b.tool("configure", {"what": "streaming", "subscribe": ["dom_change"],
                         "watch": [{"selector": "#other-widget", "condition": "appears"}]})
    # The watches reach the tab (the next /sync answer carries them).
    wait_until(lambda: _watching(browser, tab), 20, interval=0.2,
               what="the DOM watches installed in the tab")
    marker = uuid.uuid4().hex[:8]
    browser.cdp.evaluate(page, f"""(() => {{ const d = document.createElement('div');
        d.id = 'checkout-error'; d.textContent = 'Card declined {marker}';
        document.body.appendChild(d); return true; }})()""")
    got = wait_until(lambda: a.events(wait_ms=2000), 20, what="agent A's dom_change event")
    [event] = [e for e in got if e["event_type"] == "dom_change"]
    assert event["selector"] == "#checkout-error" and event["condition"] == "appears"
    assert marker in event["element_text"] and event["tabId"] == tab
    assert event["url"].startswith(site.url) and event["untrusted"] is True
    browser.cdp.evaluate(page, "document.getElementById('checkout-error').remove(), true")
    gone = wait_until(lambda: a.events(wait_ms=2000), 20, what="the disappears event")
    assert [e["condition"] for e in gone if e["event_type"] == "dom_change"] == ["disappears"]
    # B watched another selector: nothing; nor did the element reach anyone else.
    assert [e for e in b.events(wait_ms=500) if e["event_type"] == "dom_change"] == []


def _watching(browser, tab) -> bool:
    """Whether the tab's isolated world has the watcher (asked through the worker)."""
    sw = browser.service_worker()
    return bool(browser.cdp.evaluate(sw, f"""chrome.scripting.executeScript({{target: {{tabId: {tab}}},
        func: () => !!globalThis.__gasolineDomWatch}}).then(r => r[0].result)"""))


def test_websocket_messages_stream_to_the_agent_that_named_them(browser, site, ext_daemon):
    _, page, _ = tracked(browser, site, ext_daemon)
    ws_agent, all_agent = HttpAgent(ext_daemon, "ws-agent"), HttpAgent(ext_daemon, "all-agent")
    ws_agent.tool("configure", {"what": "streaming", "subscribe": ["websocket_message"],
                                "filters": {"url_pattern": "/ws$"}})
    all_agent.tool("configure", {"what": "streaming", "subscribe": ["all"]})
    marker = uuid.uuid4().hex[:8]
    browser.navigate(page, f"{site.url}/capture.html?m={marker}")
    wait_until(lambda: browser.cdp.evaluate(page, "window.__done && window.__done.ws"), 15,
               what="the page's WebSocket echo")
    seen: list = []

    def both():
        seen.extend(e for e in ws_agent.events(wait_ms=2000)
                    if e["event_type"] == "websocket_message")
        return {e["direction"] for e in seen} >= {"incoming", "outgoing"}

    wait_until(both, 25, what="both directions of the page's WebSocket frame")
    out = next(e for e in seen if e["direction"] == "outgoing")
    assert out["preview"] == f"ping-{marker}" and out["size"] == len(f"ping-{marker}")
    assert out["url"].endswith("/ws")
    assert [e for e in all_agent.events() if e["event_type"] == "websocket_message"] == []

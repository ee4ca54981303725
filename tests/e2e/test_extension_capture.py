"""
End to end, in Debian's Chromium: a page's activity is captured by the extension and arrives in a
real daemon; only tracked tabs are captured; capture resumes after the daemon restarts and after
the service worker is stopped. Fails (not skips) under CI=true without Chromium.
"""

from __future__ import annotations

import json
import uuid

import pytest

from support import DaemonProcess
from harness import daemon_get, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def track_new_tab(browser, site, daemon_url, path="/blank.html", reload=True):
    """Open a tab, make it the tracked tab and point the extension at the daemon (via chrome.storage).

    With ``reload`` the page is loaded again once tracked, so everything it does is captured
    (without it, tracking reaches an open page within a few milliseconds; see the second test).
    """
    url = site.url + path
    sw, page, tab = browser.track_new_tab(url, daemon_url, trackedTabUrl=url)
    if reload:
        browser.navigate(page, url + ("&" if "?" in url else "?") + "tracked")
    return sw, page, tab


def snapshot_until(daemon_url, predicate, what, timeout=25.0, status=None):
    """Poll the daemon's /snapshot until C{predicate} holds. C{status} (a callable: the extension's
    status snapshot) goes into the timeout's message with the buffers' sizes at that moment."""
    def check():
        snap = daemon_get(daemon_url, "/snapshot")
        return snap if predicate(snap) else None

    def describe():
        snap = daemon_get(daemon_url, "/snapshot")
        sizes = {k: len(v) for k, v in snap.items() if isinstance(v, list)}
        return {"daemon buffers": sizes, "extension": status() if status else None}

    return wait_until(check, timeout, interval=0.25, what=what, describe=describe)


def logs_with(snap, text):
    return [e for e in snap["logs"] if text in json.dumps(e)]


def _capture_page_clicked(browser, site, ext_daemon, marker):
    """A tracked tab on the capture page (its fetch, XHR and WebSocket done), its button clicked."""
    sw, page, tab = track_new_tab(browser, site, ext_daemon.url)
    browser.navigate(page, f"{site.url}/capture.html?m={marker}")
    wait_until(lambda: browser.cdp.evaluate(page, "window.__done.ws && window.__done.fetch && window.__done.xhr"), 10,
               what="the page's fetch, XHR and WebSocket")
    browser.click(page, "#go")
    return sw, page, tab


def test_page_console_errors_network_websocket_and_clicks_reach_the_daemon(browser, site, ext_daemon):
    marker = uuid.uuid4().hex[:10]
    sw, page, tab = _capture_page_clicked(browser, site, ext_daemon, marker)
    assert browser.cdp.evaluate(page, "document.getElementById('status').textContent") == "clicked"
    browser.cdp.evaluate(page, "document.getElementById('secret').focus()")
    browser.cdp.call("Input.insertText", {"text": "pa55word-" + marker}, session=page)

    def complete(s):
        kinds = {(e.get("type"), e.get("level")) for e in logs_with(s, marker)}
        actions = [a for a in s["enhanced_actions"] if a.get("type") in ("click", "input")]
        return (
            {("console", "error"), ("console", "log"), ("exception", "error"), ("network", "error")} <= kinds
            and any(marker in json.dumps(b) and "/api/fail" in b["url"] for b in s["network_bodies"])
            and any(b["url"].endswith("/api/login") for b in s["network_bodies"])
            and any("/api/ok?req=" in b["url"] for b in s["network_bodies"])
            and any("/api/ok?xhr=" in b["url"] for b in s["network_bodies"])
            and sum(1 for e in s["websocket_events"] if e.get("event") in ("open", "message", "close")) >= 4
            and {"click", "input"} <= {a["type"] for a in actions}
        )

    snap = snapshot_until(ext_daemon.url, complete, "every kind of capture to reach the daemon",
                          status=lambda: browser.status(sw))
    mine = logs_with(snap, marker)

    console_error = next(e for e in mine if e["type"] == "console" and e["level"] == "error")
    assert console_error["tabId"] == tab
    assert "e2e console error" in console_error["message"]
    assert "[Circular]" in json.dumps(console_error["args"])  # cycles serialized safely
    assert "<body>" in console_error["args"]  # DOM nodes described, not dumped

    thrown = next(e for e in mine if e["type"] == "exception" and "e2e thrown" in e["message"])
    assert "e2e thrown " + marker in thrown["stack"] and thrown["lineno"] > 0
    rejected = next(e for e in mine if e["type"] == "exception" and "rejected" in e["message"])
    assert rejected["message"].startswith("Unhandled promise rejection")

    failed = next(e for e in mine if e["type"] == "network")
    assert failed["status"] == 500 and failed["method"] == "POST" and failed["tabId"] == tab

    body = next(b for b in snap["network_bodies"] if "/api/fail" in b["url"])
    assert json.loads(body["request_body"]) == {"hello": "body-" + marker}
    assert "body-" + marker in body["response_body"] and body["status"] == 500
    assert body["tab_id"] == tab
    assert body["request_headers"]["authorization"] == "[REDACTED:header]"  # not on the header allow-list
    assert "e2e-secret-token" not in json.dumps(snap)

    from_request = next(b for b in snap["network_bodies"] if "/api/ok?req=" in b["url"])
    assert from_request["method"] == "PUT" and from_request["request_body"] == "request-object-body-" + marker
    assert from_request["status"] == 200 and "request-object-body-" + marker in from_request["response_body"]

    from_xhr = next(b for b in snap["network_bodies"] if "/api/ok?xhr=" in b["url"])
    assert from_xhr["method"] == "POST" and from_xhr["request_body"] == "xhr-body-" + marker
    assert from_xhr["status"] == 200 and "xhr-body-" + marker in from_xhr["response_body"]
    assert from_xhr["url"].startswith(site.url) and from_xhr["tab_id"] == tab
    assert from_xhr.get("request_headers", {}).get("x-api-key") in (None, "[REDACTED:header]")
    assert "e2e-xhr-key" not in json.dumps(snap)

    login = next(b for b in snap["network_bodies"] if b["url"].endswith("/api/login"))
    assert "hunter2" not in json.dumps(login)
    assert json.loads(login["request_body"])["password"] == "[REDACTED:password]"

    ws = [e for e in snap["websocket_events"] if e.get("tab_id") == tab]
    assert [e["event"] for e in ws if e["event"] != "message"] == ["open", "close"]
    frames = {(e["direction"], e["data"]) for e in ws if e["event"] == "message"}
    assert frames == {("outgoing", "ping-" + marker), ("incoming", "ping-" + marker)}

    click = next(a for a in snap["enhanced_actions"] if a["type"] == "click")
    assert click["selectors"]["testId"] == "go-button"
    assert click["selectors"]["ariaLabel"] == "Go button"
    assert click["selectors"]["role"] == {"role": "button", "name": "Go button"}
    assert click["selectors"]["css"] == "#go"
    assert click["tab_id"] == tab
    typed = next(a for a in snap["enhanced_actions"] if a["type"] == "input")
    assert typed["value"] == "[REDACTED:input]"
    assert ("pa55word-" + marker) not in json.dumps(snap)
    assert any(a["type"] == "navigate" and marker in a.get("to_url", "") for a in snap["enhanced_actions"])

    health = daemon_get(ext_daemon.url, "/health")
    assert health["capture"]["extension_connected"] is True
    assert health["capture"]["tracked_tab_id"] == tab


def test_untracked_tabs_are_not_captured_and_tracking_applies_without_reload(browser, site, ext_daemon):
    sw, tracked_page, tracked_tab = track_new_tab(browser, site, ext_daemon.url)
    _, other_page, _ = browser.new_page(site.url + "/blank.html?other")
    browser.cdp.evaluate(other_page, "console.error('untracked-secret'); fetch('/api/fail', {method: 'POST', body: 'untracked-body'}); 1")
    browser.cdp.evaluate(tracked_page, "console.error('tracked-one'); 1")
    snapshot_until(ext_daemon.url, lambda s: logs_with(s, "tracked-one"), "the tracked tab's error")

    # Track the second tab (as the popup does) and log again without reloading it.
    other_tab = browser.tab_id_for(sw, site.url + "/blank.html?other")
    browser.storage_set(sw, {"gasolineTrackedTabs": [other_tab]})
    wait_until(
        lambda: browser.cdp.evaluate(other_page, "console.error('now-tracked'); new Promise(r => setTimeout(() => r(true), 300))")
        and logs_with(daemon_get(ext_daemon.url, "/snapshot"), "now-tracked"),
        15, interval=0.5, what="the newly tracked tab's error",
    )
    snap = daemon_get(ext_daemon.url, "/snapshot")
    assert not logs_with(snap, "untracked-secret")
    assert not any("untracked-body" in json.dumps(b) for b in snap["network_bodies"])
    assert {e["tabId"] for e in logs_with(snap, "now-tracked")} == {other_tab}
    assert {e["tabId"] for e in logs_with(snap, "tracked-one")} == {tracked_tab}


def test_capture_resumes_after_the_daemon_is_killed_and_restarted(browser, site, ext_daemon, tmp_path):
    sw, page, tab = track_new_tab(browser, site, ext_daemon.url)
    browser.cdp.evaluate(page, "console.error('before-restart'); 1")
    snapshot_until(ext_daemon.url, lambda s: logs_with(s, "before-restart"), "the first error")
    port = ext_daemon.port
    ext_daemon.kill()

    # While the daemon is down the extension buffers, and shows itself disconnected.
    browser.cdp.evaluate(page, "console.error('while-down'); 1")
    wait_until(
        lambda: browser.cdp.evaluate(sw, "chrome.storage.session.get('gasolineStatus').then(r => r.gasolineStatus && r.gasolineStatus.connected === false)"),
        20, interval=0.5, what="the extension to notice the daemon is gone",
    )

    # The same daemon (its state dir, so its identity) on the same port.
    restarted = DaemonProcess(state_dir=ext_daemon.state_dir, args=["--listen", f"tcp:{port}:interface=127.0.0.1"])
    restarted.start()
    try:
        assert restarted.port == port
        browser.cdp.evaluate(page, "console.error('after-restart'); 1")
        snap = snapshot_until(
            restarted.url,
            lambda s: logs_with(s, "while-down") and logs_with(s, "after-restart"),
            "the buffered and the new error after the restart",
            timeout=40,
        )
        assert {e["tabId"] for e in logs_with(snap, "while-down")} == {tab}
        wait_until(lambda: daemon_get(restarted.url, "/health")["capture"]["extension_connected"], 15, what="/sync to resume")
    finally:
        restarted.stop()


def test_sync_resumes_after_the_service_worker_is_stopped(browser, site, ext_daemon):
    sw, page, tab = track_new_tab(browser, site, ext_daemon.url)
    first = wait_until(lambda: daemon_get(ext_daemon.url, "/health")["capture"].get("extension_session_id"), 15, what="a first sync")
    browser.cdp.evaluate(sw, "self.__oldWorker = true")
    targets = [t for t in browser.cdp.targets() if t["type"] == "service_worker" and t["url"].endswith("/background.js")]
    assert browser.cdp.call("Target.closeTarget", {"targetId": targets[0]["targetId"]})["success"] is True
    # Any extension event (here: the tracked page loading) restarts the worker, which restarts the loop.
    browser.navigate(page, site.url + "/blank.html?again")
    browser.cdp.evaluate(page, "console.error('after-worker-restart'); 1")
    snapshot_until(ext_daemon.url, lambda s: logs_with(s, "after-worker-restart"), "capture after the worker restarted")
    second = wait_until(
        lambda: (sid := daemon_get(ext_daemon.url, "/health")["capture"].get("extension_session_id")) != first and sid,
        15, what="a sync from the new worker",
    )
    assert second.startswith("ext_")
    assert browser.cdp.evaluate(browser.service_worker(), "self.__oldWorker === undefined") is True


def _observe_all(mcp_url: str, modes: list[str]) -> dict[str, str]:
    """MCP agents (the official SDK over streamable HTTP) read observe modes; returns the texts."""
    import asyncio

    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> dict[str, str]:
        out = {}
        for what in modes:  # one agent per mode: each read advances that agent's own cursor
            async with streamable_http_client(mcp_url) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result = await session.call_tool("observe", {"what": what, "limit": 1000})
                    assert result.is_error is False, (what, result.content[0].text)
                    out[what] = result.content[0].text
        return out

    return asyncio.run(asyncio.wait_for(main(), 30))


def test_an_mcp_agent_observes_what_the_page_did(browser, site, ext_daemon):
    marker = uuid.uuid4().hex[:10]
    sw, page, tab = _capture_page_clicked(browser, site, ext_daemon, marker)
    snapshot_until(
        ext_daemon.url,
        lambda s: any(a["type"] == "click" for a in s["enhanced_actions"]) and logs_with(s, "e2e thrown"),
        "the click and the exception",
        status=lambda: browser.status(sw),
    )
    # Only observe errors / logs exist in the daemon so far; the other buffers are checked through
    # /snapshot above and the performance snapshot in test_extension_commands.py.
    wanted = {
        "errors": ["e2e console error " + marker, "e2e thrown " + marker, "e2e rejected " + marker],
        "logs": ["e2e log line " + marker],
    }
    seen: dict[str, str] = {}

    def observed():
        seen.update(_observe_all(ext_daemon.url + "/mcp", list(wanted)))
        return all(text in seen[mode] for mode, texts in wanted.items() for text in texts)

    try:
        wait_until(observed, 15, interval=0.5, what="observe errors/logs to show the page's entries")
    except AssertionError as e:
        raise AssertionError(f"{e}; last observe texts: {seen!r}"[:4000]) from None

"""
The CDP hub relay end to end: Debian's Chromium with the extension loaded, the real daemon, and real
CDP clients pointed at the daemon (Playwright for Python ``connect_over_cdp``; puppeteer-core
``connect({browserURL})`` in tests/e2e/test_relay_puppeteer.py).

Each test tracks a page with the AI Web Pilot on (the tabs a CDP client may see), waits until the
extension's CDP link announced it to the relay, and drives it through the relay only.
"""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest

from harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.browser]

playwright_sync = pytest.importorskip("playwright.sync_api", reason="playwright (test extra) is not installed")


def relay_targets(daemon) -> list[dict]:
    with urllib.request.urlopen(daemon.url + "/json/list", timeout=5) as r:
        return json.loads(r.read())


def relay_status(daemon) -> dict:
    with urllib.request.urlopen(daemon.url + "/status", timeout=5) as r:
        return json.loads(r.read())


def exposed_tab(browser, daemon, site, path="/blank.html"):
    """Open a page, track it with the pilot on, wait until the relay lists it; return its URL."""
    url = site.url + path
    browser.track_new_tab(url, daemon.url, aiWebPilotEnabled=True)
    wait_until(lambda: any(t["url"] == url for t in relay_targets(daemon)), 20,
               what="the relay to list the tracked tab")
    return url


@pytest.fixture
def pw():
    with playwright_sync.sync_playwright() as p:
        yield p


def page_at(cdp_browser, url):
    return wait_until(lambda: next((pg for ctx in cdp_browser.contexts for pg in ctx.pages
                                    if pg.url == url), None), 10, what=f"Playwright to see {url}")


def test_playwright_alone_navigates_evaluates_clicks_screenshots_and_hears_console(browser, daemon, site, pw):
    url = exposed_tab(browser, daemon, site)
    cdp_browser = pw.chromium.connect_over_cdp(daemon.url)
    try:
        page = page_at(cdp_browser, url)
        assert page.evaluate("1 + 1") == 2
        page.goto(site.url + "/commands.html")
        assert page.title() == "Gasoline commands page"
        messages = []
        page.on("console", lambda m: messages.append(m.text))
        page.evaluate("console.log('hello from the relay')")
        wait_until(lambda: "hello from the relay" in messages, 10, what="the console event")
        page.fill("#q", "gasoline")
        page.click("button[type=submit]")
        assert page.text_content("#out") == "submitted gasoline"
        png = page.screenshot()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
        assert relay_status(daemon)["clients"] == 1
    finally:
        cdp_browser.close()
    wait_until(lambda: relay_status(daemon)["clients"] == 0, 10, what="the client to leave")


def test_playwright_new_page_is_a_tab_of_its_own_closed_with_the_client(browser, daemon, site, pw):
    url = exposed_tab(browser, daemon, site)
    cdp_browser = pw.chromium.connect_over_cdp(daemon.url)
    try:
        context = cdp_browser.contexts[0]
        page = context.new_page()
        page.goto(site.url + "/agent.html")
        assert page.evaluate("document.title") == "Gasoline agent page"
        others = [t["url"] for t in relay_targets(daemon)]
        assert others == [url]  # the created tab is not listed for anyone else
        page.close()
    finally:
        cdp_browser.close()


def second_exposed_tab(browser, daemon, site, path):
    """Open another tab, add it to the tracked tabs, wait until the relay lists it."""
    url = site.url + path
    sw = browser.service_worker()
    browser.new_page(url)
    tab = browser.tab_id_for(sw, url)
    browser.cdp.evaluate(sw, "chrome.storage.local.get('gasolineTrackedTabs').then(r => chrome.storage."
                             f"local.set({{gasolineTrackedTabs: [...(r.gasolineTrackedTabs || []), {tab}]}}))"
                             ".then(() => true)")
    wait_until(lambda: any(t["url"] == url for t in relay_targets(daemon)), 20,
               what="the relay to list the second tab")
    return url


def test_two_playwright_clients_share_one_tab_with_no_cross_talk(browser, daemon, site):
    url = exposed_tab(browser, daemon, site, "/agent.html")
    # Two independent clients: each its own Playwright driver (own process), as two agents would.
    with playwright_sync.sync_playwright() as p1:
        b1 = p1.chromium.connect_over_cdp(daemon.url)
        page1 = page_at(b1, url)
        # A second sync_playwright cannot run in the same thread: the other client runs in its own.
        out: dict = {}
        ready = threading.Event()
        go = threading.Event()
        finished = threading.Event()

        def second():
            with playwright_sync.sync_playwright() as p2:
                b2 = p2.chromium.connect_over_cdp(daemon.url)
                page2 = page_at(b2, url)
                ready.set()
                go.wait(30)
                out["b"] = [page2.evaluate(f"(x) => [x, {i}, document.title]", "b") for i in range(200)]
                out["b-after"] = page2.evaluate("document.title")
                b2.close()
            finished.set()

        t = threading.Thread(target=second)
        t.start()
        assert ready.wait(60)
        go.set()
        got_a = [page1.evaluate(f"(x) => [x, {i}, document.title]", "a") for i in range(200)]
        assert finished.wait(90)
        t.join(10)
        title = "Gasoline agent page"
        assert got_a == [["a", i, title] for i in range(200)]
        assert out["b"] == [["b", i, title] for i in range(200)]
        # The other client left: this one goes on working.
        wait_until(lambda: relay_status(daemon)["clients"] == 1, 10, what="client b to leave")
        assert page1.evaluate("40 + 2") == 42
        b1.close()


def test_two_playwright_clients_on_different_tabs_get_only_their_own_events(browser, daemon, site):
    url_a = exposed_tab(browser, daemon, site, "/blank.html")
    url_b = second_exposed_tab(browser, daemon, site, "/agent.html")
    with playwright_sync.sync_playwright() as p1:
        b1 = p1.chromium.connect_over_cdp(daemon.url)
        page1 = page_at(b1, url_a)
        heard_a: list[str] = []
        page1.on("console", lambda m: heard_a.append(m.text))
        out: dict = {}
        ready, go, finished = threading.Event(), threading.Event(), threading.Event()

        def second():
            with playwright_sync.sync_playwright() as p2:
                b2 = p2.chromium.connect_over_cdp(daemon.url)
                # Client b sees both exposed tabs, but drives (and listens on) tab b only.
                page2 = page_at(b2, url_b)
                heard_b: list[str] = []
                page2.on("console", lambda m: heard_b.append(m.text))
                ready.set()
                go.wait(30)
                out["b"] = [page2.evaluate("(i) => { console.log('from-b-' + i); return ['b', i, document.title]; }", i)
                            for i in range(200)]
                wait_until(lambda: len(heard_b) >= 200, 20, what="b's console events")
                out["heard_b"] = list(heard_b)
                b2.close()
            finished.set()

        t = threading.Thread(target=second)
        t.start()
        assert ready.wait(60)
        go.set()
        got_a = [page1.evaluate("(i) => { console.log('from-a-' + i); return ['a', i, document.title]; }", i)
                 for i in range(200)]
        assert finished.wait(90)
        t.join(10)
        wait_until(lambda: len(heard_a) >= 200, 20, what="a's console events")
        assert got_a == [["a", i, "blank"] for i in range(200)]
        assert out["b"] == [["b", i, "Gasoline agent page"] for i in range(200)]
        assert heard_a == [f"from-a-{i}" for i in range(200)]
        assert out["heard_b"] == [f"from-b-{i}" for i in range(200)]
        b1.close()


def test_extension_reconnecting_mid_run_gives_errors_or_answers_never_a_hang(browser, daemon, site, pw):
    import time

    from harness import SECOND_LINK_JS

    url = exposed_tab(browser, daemon, site, "/blank.html")
    cdp_browser = pw.chromium.connect_over_cdp(daemon.url)
    try:
        page = page_at(cdp_browser, url)
        assert page.evaluate("1") == 1
        # Another connection on the extension link replaces the extension's (close 1000); the
        # extension reconnects with back-off and replaces this one in turn. The daemon opens the
        # link only to the extension it pinned, so the second link is opened by the extension
        # itself (its service worker, with its own key: harness.SECOND_LINK_JS).
        sw = browser.service_worker()
        second = browser.cdp.evaluate(sw, f"{SECOND_LINK_JS}({json.dumps(daemon.url)})", timeout=30)
        assert second["link"] == "Gasoline.proof", second
        outcomes = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                outcomes.append(("ok", page.evaluate("2 + 2")))
            except Exception as e:  # an error is an acceptable outcome
                outcomes.append(("error", type(e).__name__))
            assert time.monotonic() - started < 35, "a command hung through the reconnect"
            if outcomes[-1][0] == "error":
                break
        browser.cdp.evaluate(sw, "globalThis.__secondLink.close(1000); 1")
        wait_until(lambda: relay_status(daemon)["extension_connected"], 20,
                   what="the extension to reconnect")
        # The tab comes back as a fresh page for the client, and works.
        wait_until(lambda: any(t["url"] == url for t in relay_targets(daemon)), 20,
                   what="the tab to be announced again")
        context = cdp_browser.contexts[0]

        def come_back():
            found = next((pg for pg in context.pages if pg.url == url and not pg.is_closed()), None)
            if found is None:  # the sync API handles events only inside calls: let it pump
                try:
                    context.wait_for_event("page", timeout=500)
                except playwright_sync.TimeoutError:
                    pass
            return found

        fresh = wait_until(come_back, 20, what="the page to come back")
        assert fresh.evaluate("6 * 7") == 42
        assert ("error", "Error") in outcomes or outcomes[-1][0] == "error"
    finally:
        cdp_browser.close()


def test_only_tracked_tabs_with_the_pilot_on_are_exposed_and_no_attachment_outlives_its_clients(browser, daemon, site):
    from harness import CDP

    url = site.url + "/blank.html"
    sw, harness_session, tab = browser.track_new_tab(url, daemon.url)  # tracked, pilot off
    # The harness's own DevTools session on the tab would count as an attachment: leave.
    browser.cdp.call("Target.detachFromTarget", {"sessionId": harness_session})
    browser.new_page(site.url + "/agent.html")  # an untracked tab
    wait_until(lambda: relay_status(daemon)["extension_connected"], 20, what="the extension's CDP link")
    with urllib.request.urlopen(daemon.url + "/json/version", timeout=5) as r:
        ws_url = json.loads(r.read())["webSocketDebuggerUrl"]
    client = CDP(ws_url)
    try:
        assert client.call("Target.getTargets")["targetInfos"] == []
        browser.storage_set(sw, {"aiWebPilotEnabled": True})
        wait_until(lambda: [t["url"] for t in client.call("Target.getTargets")["targetInfos"]] == [url], 10,
                   what="the tracked tab to be exposed once the pilot is on")
        target_id = client.call("Target.getTargets")["targetInfos"][0]["targetId"]
        session = client.attach(target_id)
        assert client.evaluate(session, "location.href") == url
        attached = lambda: browser.cdp.evaluate(  # noqa: E731
            sw, f"chrome.debugger.getTargets().then(ts => ts.some(t => t.tabId === {tab} && t.attached))")
        assert attached() is True
        # The popup shows the client and can disconnect it; the attachment goes with it.
        eid = browser.extension_id()
        _, popup, _ = browser.new_page(f"chrome-extension://{eid}/popup/popup.html")
        text = lambda sel: browser.cdp.evaluate(popup, f"document.querySelector('{sel}').textContent")  # noqa: E731
        wait_until(lambda: text("#cdp-clients") == "1", 10, interval=0.3, what="the popup to show 1 CDP client")
        browser.cdp.evaluate(popup, "document.getElementById('cdp-disconnect').click(); 1")
        wait_until(lambda: relay_status(daemon)["clients"] == 0, 10, what="the popup to disconnect the client")
        wait_until(lambda: attached() is False, 10, what="the debugger to detach from the tab")
    finally:
        client.close()
    # A second client, then the pilot turned off: its session ends and the tab is released.
    with urllib.request.urlopen(daemon.url + "/json/version", timeout=5) as r:
        client = CDP(json.loads(r.read())["webSocketDebuggerUrl"])
    try:
        session = client.attach(target_id)
        assert attached() is True
        browser.storage_set(sw, {"aiWebPilotEnabled": False})
        wait_until(lambda: attached() is False, 10, what="the tab to be released when the pilot goes off")
        with pytest.raises(Exception):
            client.evaluate(session, "1", timeout=5)
        assert client.call("Target.getTargets")["targetInfos"] == []
    finally:
        client.close()

"""
The CDP hub relay end to end: Debian's Chromium with the extension loaded, the real daemon, and real
CDP clients pointed at the daemon (Playwright for Python ``connect_over_cdp``; puppeteer-core
``connect({browserURL})`` in tests/e2e/test_relay_puppeteer.py).

Each test tracks a page with the AI Web Pilot on (the tabs a CDP client may see), waits until the
extension's CDP link announced it to the relay, and drives it through the relay only.
"""

from __future__ import annotations

import base64
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

"""The popup and the options page, opened as extension pages in Debian's Chromium and driven over CDP."""

from __future__ import annotations

import pytest

from harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_popup_shows_connection_entries_and_tracked_tab_and_toggles_pilot(browser, site, ext_daemon):
    sw = browser.service_worker()
    _, page, _ = browser.new_page(site.url + "/capture.html?m=popup")
    tab = browser.tab_id_for(sw, site.url + "/capture.html?m=popup")
    browser.storage_set(sw, {"serverUrl": ext_daemon.url, "trackedTabId": tab, "trackedTabUrl": site.url + "/capture.html?m=popup"})
    browser.navigate(page, site.url + "/capture.html?m=popup2")
    eid = browser.extension_id()
    _, popup, _ = browser.new_page(f"chrome-extension://{eid}/popup/popup.html")
    text = lambda sel: browser.cdp.evaluate(popup, f"document.querySelector('{sel}').textContent")  # noqa: E731
    wait_until(lambda: text("#state") == "connected", 15, interval=0.3, what="the popup to say connected")
    wait_until(lambda: text("#entries").isdigit() and int(text("#entries")) >= 3, 15, interval=0.3, what="the entry count")
    assert "Gasoline capture page" in text("#tracked")
    assert text("#server") == ext_daemon.url
    assert browser.cdp.evaluate(popup, "document.getElementById('pilot').checked") is False
    browser.cdp.evaluate(popup, "document.getElementById('pilot').click(); 1")
    wait_until(lambda: browser.cdp.evaluate(sw, "chrome.storage.local.get('aiWebPilotEnabled').then(r => r.aiWebPilotEnabled)") is True,
               5, what="the pilot toggle to be stored")
    browser.cdp.evaluate(popup, "document.querySelector('#tracked button').click(); 1")
    wait_until(lambda: browser.cdp.evaluate(sw, "chrome.storage.local.get('trackedTabId').then(r => r.trackedTabId)") == 0,
               5, what="untracking from the popup")
    wait_until(lambda: "none" in text("#tracked"), 5, what="the popup to show no tracked tab")


def test_options_page_sets_the_daemon_port_and_rejects_bad_ones(browser, site, ext_daemon):
    sw = browser.service_worker()
    eid = browser.extension_id()
    _, options, _ = browser.new_page(f"chrome-extension://{eid}/options/options.html")
    wait_until(lambda: browser.cdp.evaluate(options, "document.body.dataset.ready === 'true'"), 5, what="the options page to load")
    assert browser.cdp.evaluate(options, "document.getElementById('port').value") == "7890"  # the default
    browser.cdp.evaluate(options, f"document.getElementById('port').value = '{ext_daemon.port}'; document.getElementById('save').click(); 1")
    stored = wait_until(lambda: browser.cdp.evaluate(sw, "chrome.storage.local.get('serverUrl').then(r => r.serverUrl)"), 5, what="the saved port")
    assert stored == f"http://127.0.0.1:{ext_daemon.port}"
    browser.cdp.evaluate(options, "document.getElementById('test').click(); 1")
    wait_until(lambda: "connected to gasoline" in browser.cdp.evaluate(options, "document.getElementById('result').textContent"),
               10, interval=0.3, what="the connection test")
    browser.cdp.evaluate(options, "document.getElementById('port').value = '70000'; document.getElementById('save').click(); 1")
    wait_until(lambda: "between 1 and 65535" in browser.cdp.evaluate(options, "document.getElementById('result').textContent"),
               5, what="the bad port to be refused")
    assert browser.cdp.evaluate(sw, "chrome.storage.local.get('serverUrl').then(r => r.serverUrl)") == stored

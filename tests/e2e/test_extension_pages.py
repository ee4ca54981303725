"""
How the service worker collects from the page hooks (extension/lib/pages.js), in Debian's Chromium:
no isolated world and no postMessage relay in a tracked page, the capture module only in tracked
pages, the last items of a page taken when its tab navigates on, and a page that loaded before the
extension existed captured once tracked.

Fails (not skips) under CI=true without Chromium (the ``chromium_bin`` fixture).
"""

from __future__ import annotations

import pytest
from harness import EXTENSION_DIR, Chromium, wait_until
from test_extension_commands import ScriptedDaemon

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def posted(fake, path, key):
    with fake.lock:
        return [item for body in fake.posts.get(path, []) for item in body.get(key, [])]


def test_a_tracked_page_sees_no_messages_and_no_isolated_world_from_the_extension(browser, site):
    with ScriptedDaemon([]) as fake:
        sw, page, tab = browser.track_new_tab(site.url + "/blank.html", fake.url)
        # Every message event the page receives, from its very first script on.
        browser.cdp.call("Page.addScriptToEvaluateOnNewDocument", {
            "source": "window.__seen = []; addEventListener('message', (e) => window.__seen.push(JSON.stringify(e.data)));"}, session=page)
        browser.navigate(page, site.url + "/capture.html?m=quiet")
        wait_until(lambda: any("e2e console error quiet" in e.get("message", "") for e in posted(fake, "/logs", "entries")),
                   20, what="the page's console error at the daemon")
        assert browser.cdp.evaluate(page, "window.__seen") == []
        # The worker reaches the page only through executeScript in the page's own world: no
        # content script of ours runs in an isolated world of a tracked page (a command would
        # create one on demand; none was asked for here).
        worlds = browser.cdp.evaluate(sw, f"""chrome.scripting.executeScript({{target: {{tabId: {tab}}},
            func: () => [typeof globalThis.__gasolineCommands, typeof globalThis.__gasolineSelectors]}})
            .then((r) => r[0].result)""")
        assert worlds == ["undefined", "undefined"]


NATIVE = "[console.log, window.fetch, XMLHttpRequest.prototype.open, history.pushState].every((f) => String(f).includes('[native code]'))"
# A module offered to the hooks is refused once ours (content/capture.js) has attached.
MODULE_ATTACHED = "window.__gasolineHooks.attach({receive() {}, start() {}, stop() {}, take() {}}) === null"


def test_only_a_tracked_page_gets_the_capture_module_and_an_untracked_one_its_own_functions_back(browser, site):
    with ScriptedDaemon([]) as fake:
        _, tracked_page, _ = browser.track_new_tab(site.url + "/blank.html?tracked", fake.url)
        _, other_page, _ = browser.new_page(site.url + "/blank.html?other")
        browser.navigate(other_page, site.url + "/capture.html?m=untracked-page")
        browser.navigate(tracked_page, site.url + "/capture.html?m=tracked-page")
        wait_until(lambda: any("e2e console error tracked-page" in e.get("message", "") for e in posted(fake, "/logs", "entries")),
                   20, what="the tracked page's console error at the daemon")
        assert browser.cdp.evaluate(tracked_page, MODULE_ATTACHED) is True
        assert browser.cdp.evaluate(tracked_page, NATIVE) is False  # still hooked
        wait_until(lambda: browser.cdp.evaluate(other_page, NATIVE), 10, what="the untracked page's own functions back")
        assert browser.cdp.evaluate(other_page, MODULE_ATTACHED) is False  # nothing of ours but the hooks
        assert not any("untracked-page" in str(e) for e in posted(fake, "/logs", "entries"))


def test_the_last_items_and_the_snapshot_of_a_page_left_at_once_are_delivered(browser, site):
    """A page left right after its load (before its first pull, and before the 1.5 s snapshot)
    still gets its console output and its performance snapshot to the daemon: the worker takes
    them when the tab starts the next navigation."""
    with ScriptedDaemon([]) as fake:
        _, page, tab = browser.track_new_tab(site.url + "/blank.html", fake.url)
        browser.navigate(page, site.url + "/blank.html?settled")
        first = site.url + "/capture.html?m=leaving"
        browser.navigate(page, first)
        wait_until(lambda: any(a.get("type") == "navigate" and a.get("url") == first for a in posted(fake, "/enhanced-actions", "actions")),
                   10, what="the worker to capture the page")  # its verdict came; the 1.5 s snapshot has not
        # Logged after the load, and left at once: nothing but the final pull can deliver these.
        # The next page answers after 30 ms, as a real server does: the final pull is taken while
        # the old document still exists, which a navigation answered within a millisecond or two
        # (a static file on loopback, on a busy machine) can beat.
        browser.cdp.evaluate(page, "console.warn('last words before leaving'); location.href = '/api/slow?next'; 1")
        wait_until(lambda: any(s.get("url") == first for s in posted(fake, "/performance-snapshots", "snapshots")),
                   20, what="the left page's performance snapshot")
        wait_until(lambda: any(e.get("message") == "last words before leaving" for e in posted(fake, "/logs", "entries")),
                   10, what="the left page's last console line")
        snap = next(s for s in posted(fake, "/performance-snapshots", "snapshots") if s.get("url") == first)
        assert snap["tab_id"] == tab and snap["timing"]["load"] > 0


def test_a_page_loaded_before_the_extension_is_captured_once_its_tab_is_tracked(chromium_bin, site):
    browser = Chromium(executable=chromium_bin, extension_dir=None, pipe=True).start()
    try:
        target = browser.cdp.call("Target.createTarget", {"url": site.url + "/blank.html?before"})["targetId"]
        page = browser.cdp.attach(target)
        wait_until(lambda: browser.cdp.evaluate(page, "document.readyState") == "complete", 10, what="the page to load")
        assert browser.cdp.evaluate(page, "typeof window.__gasolineHooks") == "undefined"
        browser.install_extension(EXTENSION_DIR)
        sw = browser.service_worker()
        tab = browser.tab_id_for(sw, site.url + "/blank.html?before")
        with ScriptedDaemon([]) as fake:
            browser.storage_set(sw, {"serverUrl": fake.url, "trackedTabId": tab})
            wait_until(lambda: browser.cdp.evaluate(page, "typeof window.__gasolineHooks") == "object", 10,
                       what="the hooks injected into the already loaded page")
            browser.cdp.evaluate(page, "console.error('logged after tracking, no reload'); 1")
            entries = wait_until(lambda: [e for e in posted(fake, "/logs", "entries") if e.get("message") == "logged after tracking, no reload"],
                                 15, what="the console error at the daemon")
            assert entries[0]["tabId"] == tab and entries[0]["level"] == "error"
    finally:
        browser.stop()

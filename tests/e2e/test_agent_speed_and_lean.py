"""
Commands at interactive speed and lean answers, through the real daemon, Debian's Chromium with the
unpacked extension, and the official ``mcp`` SDK as the agent.

- the push path: a sequence of commands (type, click, get_text, a slow execute_js) answers right,
  its results go out on pushes (the extension's status counts them) while its poll stays held, and
  the daemon learns the tracked page's new URL after a navigation from a push;
- lean answers: the untrusted-content note once per session and tool; ``observe network_bodies``
  of the current page by default, everything with ``scope: "all"``; ``list_interactive`` in pages
  (``offset``) and as a diff after the page grew; ``observe vitals`` of the current page by default.

Round-trip times are measured by ``bench/commands.py``, not asserted here.
"""

from __future__ import annotations

import asyncio

import pytest
from harness import daemon_get, wait_until
from test_extension_mcp import agents, call, open_tab, track

from gasoline.tools.context import UNTRUSTED_FIELD

pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def test_commands_come_back_on_pushes_and_the_note_comes_once(browser, site, ext_daemon):
    url = site.url + "/agent.html"
    page, tab = open_tab(browser, None, url)
    sw = track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        out = [await call(session, "interact", {"what": "type", "selector": "label=Your name", "text": "Ada"}),
               await call(session, "interact", {"what": "click", "selector": "text=Send greeting"}),
               await call(session, "interact", {"what": "get_text", "selector": "#greeting"}),
               # Slow enough that the extension's next poll is held when its result is ready.
               await call(session, "interact", {"what": "execute_js", "world": "main", "script":
                          "await new Promise((r) => setTimeout(r, 700)); return document.title"})]
        out.append(await call(session, "analyze", {"what": "dom", "selector": "#greeting"}))
        return out

    [(typed, clicked, text, slow, dom)] = agents(ext_daemon, ["e2e-speed"], body)
    # Actions that only confirm: the summary line alone (no JSON).
    assert typed == ("type 'label=Your name' done", {}) and clicked == ("click 'text=Send greeting' done", {})
    assert text[1]["result"]["text"] == "hello Ada"
    assert slow[1]["result"]["result"] == "Gasoline agent page"
    assert dom[1]["dom"]["matches"][0]["text"] == "hello Ada"
    # The note: on the first interact result with page data (the summary lines alone of type and
    # click carry none) and the first analyze result of the session only.
    assert UNTRUSTED_FIELD in text[1] and UNTRUSTED_FIELD in dom[1]
    assert not any(UNTRUSTED_FIELD in r[1] for r in (typed, clicked, slow))
    # No "extension_connected: true" on every answer.
    assert not any("extension_connected" in r[1] for r in (typed, clicked, text, slow, dom))
    # The results went out on pushes, not on the next poll (the status is written after each poll).
    wait_until(lambda: browser.status(sw).get("results_pushed", 0) >= 1, 15, interval=0.2,
               what="the extension's status to count pushed results", describe=lambda: browser.status(sw))


def test_network_bodies_of_the_current_page_and_list_interactive_pages_and_diffs(browser, site, ext_daemon):
    first = site.url + "/blank.html"
    second = site.url + "/commands.html"
    page, tab = open_tab(browser, None, first)
    track(browser, ext_daemon, [(tab, first)])
    fetch = "fetch('/api/ok?from={}', {{method: 'POST', body: 'x'}}).then((r) => r.status)"
    assert browser.cdp.evaluate(page, fetch.format("first")) == 200
    browser.navigate(page, second)
    # The tracked page's URL reaches the daemon from a push, not only at the held poll's end.
    wait_until(lambda: daemon_get(ext_daemon.url, "/health")["capture"]["tracked_tab_url"] == second, 4,
               interval=0.05, what="the daemon to learn the tracked page's new URL")
    assert browser.cdp.evaluate(page, fetch.format("second")) == 200

    def both_bodies():
        bodies = daemon_get(ext_daemon.url, "/snapshot")["network_bodies"]
        return {b["url"].rsplit("=", 1)[-1] for b in bodies if "/api/ok?from=" in b["url"]} >= {"first", "second"}

    wait_until(both_bodies, 20, interval=0.2, what="both pages' bodies in the daemon")

    async def body(client_id, session):
        # Both pages' performance snapshots (each sent once its load settled).
        for _ in range(100):
            every_page = await call(session, "observe", {"what": "vitals", "scope": "all"})
            if {p["url"] for p in every_page[1]["pages"]} >= {first, second}:
                break
            await asyncio.sleep(0.2)
        vitals = await call(session, "observe", {"what": "vitals"})
        current = await call(session, "observe", {"what": "network_bodies"})
        everything = await call(session, "observe", {"what": "network_bodies", "scope": "all", "after_cursor": 0})
        first_page = await call(session, "interact", {"what": "list_interactive", "limit": 2})
        rest = await call(session, "interact", {"what": "list_interactive", "offset": 2})
        await call(session, "interact", {"what": "execute_js", "world": "main", "script":
                   "const b = document.createElement('button'); b.id = 'late-button';"
                   " b.textContent = 'Late button'; document.body.append(b); return true"})
        diff = await call(session, "interact", {"what": "list_interactive", "diff": True})
        clicked = await call(session, "interact", {"what": "click", "element_id": diff[1]["result"]["elements"][0]["element_id"],
                                                         "json": True})
        return every_page, vitals, current, everything, first_page, rest, diff, clicked

    [(every_page, vitals, current, everything, first_page, rest, diff, clicked)] = agents(ext_daemon, ["e2e-lean"], body)
    assert {p["url"] for p in every_page[1]["pages"]} >= {first, second}, every_page
    assert [p["url"] for p in vitals[1]["pages"]] == [second], vitals
    assert vitals[0].startswith(f"web vitals of the current page {second}")
    tags = lambda data: [e["url"].rsplit("=", 1)[-1] for e in data["entries"] if "/api/ok?from=" in e["url"]]  # noqa: E731
    assert tags(current[1]) == ["second"], current
    assert current[1]["filters"]["scope"] == "current_page" and current[1]["filters"]["page"] == second
    assert tags(everything[1]) == ["first", "second"]

    listed = first_page[1]["result"]
    total = listed["count"]
    assert total > 2 and len(listed["elements"]) == 2 and listed["next_offset"] == 2
    more = rest[1]["result"]
    assert len(more["elements"]) == total - 2 and "next_offset" not in more
    assert [e["element_id"] for e in listed["elements"] + more["elements"]] == [f"e{i}" for i in range(1, total + 1)]
    changed = diff[1]["result"]
    assert [e["name"] for e in changed["elements"]] == ["Late button"], changed
    assert changed["unchanged"] == total and changed["gone"] == []
    assert changed["elements"][0]["element_id"] == f"e{total + 1}"
    assert clicked[1]["result"]["element"]["selectors"]["id"] == "late-button"

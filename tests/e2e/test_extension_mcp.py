"""
Real MCP round trips through the real extension: a real daemon (``twistd -n gasoline``), Debian's
Chromium with the unpacked extension, the e2e test site, and the official ``mcp`` SDK over
streamable HTTP as the agent(s). Every command goes agent -> daemon -> ``/sync`` -> service worker
-> page and back.

- ``analyze dom`` returns the page's real elements; ``analyze accessibility`` (axe-core in the
  page) finds the violation planted in ``/agent.html``;
- ``interact`` navigate, type, click, get_text, execute_js (main world) and screenshot (a JPEG
  written under the daemon's state dir);
- two agents run ``analyze dom`` on different selectors at the same time; each gets its own answer;
- two tracked tabs each log a distinct ``console.error``: the agent that selected tab 1's URL sees
  only tab 1's error through ``observe errors``, another agent sees both.

Fails (not skips) under CI=true without Chromium (the ``browser`` fixture).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from harness import daemon_get, wait_until
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gasoline.testing import client_headers

pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

#: Bound on one test's agent conversation (the per-test limit is 120 s, see conftest.py).
AGENT_DEADLINE = 75


# ------------------------------------------------------------------------------------- helpers


def track(browser, daemon, tabs: list[tuple[int, str]], pilot: bool = True) -> str:
    """Point the extension at ``daemon``: the first tab is the primary tracked tab, the others are
    tracked too (``gasolineTrackedTabs``); the pilot on. Wait until the daemon's view of the
    extension says so (a sync carried these settings). Returns the service worker's session."""
    sw = browser.service_worker()
    (primary, primary_url), more = tabs[0], [t for t, _ in tabs[1:]]
    browser.storage_set(sw, {
        "serverUrl": daemon.url, "trackedTabId": primary, "trackedTabUrl": primary_url,
        "gasolineTrackedTabs": more, "aiWebPilotEnabled": pilot,
    })

    def synced():
        c = daemon_get(daemon.url, "/health")["capture"]
        return c["extension_connected"] and c["tracked_tab_id"] == primary and c["pilot_enabled"] is pilot

    wait_until(synced, 25, interval=0.2, what="a /sync with the tracked tab and the pilot setting")
    return sw


def open_tab(browser, sw_or_none, url: str) -> tuple[str, int]:
    """Open a tab at ``url``; return (CDP session, chrome tab id)."""
    sw = sw_or_none or browser.service_worker()
    _, page, _ = browser.new_page(url)
    return page, browser.tab_id_for(sw, url)


def parse(result) -> tuple[str, dict[str, Any]]:
    """A Gasoline tool result: first line the summary, then the JSON data."""
    text = result.content[0].text
    summary, _, payload = text.partition("\n")
    return summary, (json.loads(payload) if payload.strip() else {})


async def call(session: ClientSession, tool: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    result = await session.call_tool(tool, args)
    assert result.is_error is False, f"{tool} {args} failed: {result.content[0].text[:2000]}"
    return parse(result)


def agents(daemon, client_ids: list[str], body: Callable[[str, ClientSession], Awaitable[Any]]) -> list[Any]:
    """Run ``body(client_id, session)`` for one SDK session per client id, all at the same time
    (``X-Gasoline-Client`` names each agent, with its proof); return their results in order."""

    async def one(client_id: str):
        http = create_mcp_http_client(headers=client_headers(daemon, client_id))
        async with (
            http,
            streamable_http_client(daemon.url + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await body(client_id, session)

    async def main():
        return await asyncio.gather(*(one(c) for c in client_ids))

    return asyncio.run(asyncio.wait_for(main(), AGENT_DEADLINE))


def texts(dom: dict[str, Any]) -> list[str]:
    return [m["text"] for m in dom["matches"]]


# ------------------------------------------------------------------------------------- tests


def test_analyze_dom_and_accessibility_round_trip_through_the_extension(browser, site, ext_daemon):
    url = site.url + "/agent.html"
    page, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        dom = await call(session, "analyze", {"what": "dom", "selector": "#fruits li"})
        labelled = await call(session, "analyze", {"what": "dom", "selector": "label=Your name"})
        missing = await session.call_tool("analyze", {"what": "dom", "selector": "#no-such-element"})
        a11y = await call(session, "analyze", {"what": "accessibility", "timeout_ms": 40000})
        return dom, labelled, missing, a11y

    [(dom, labelled, missing, a11y)] = agents(ext_daemon, ["e2e-analyst"], body)

    summary, data = dom
    assert summary.startswith("3 element(s) match '#fruits li'"), summary
    assert data["dom"]["url"] == url and data["dom"]["title"] == "Gasoline agent page"
    assert texts(data["dom"]) == ["apple", "banana", "cherry"]
    assert {m["tag"] for m in data["dom"]["matches"]} == {"li"}
    assert all(m["classes"] == ["fruit"] and m["visible"] is True for m in data["dom"]["matches"])
    # A semantic selector, resolved in the page by the extension.
    assert [m["id"] for m in labelled[1]["dom"]["matches"]] == ["who"]
    # Nothing matched: an empty answer, not an error and never another selector's elements.
    assert missing.is_error is False, missing.content[0].text
    assert parse(missing)[1]["dom"]["count"] == 0 and parse(missing)[1]["dom"]["matches"] == []

    summary, data = a11y
    report = data["accessibility"]
    assert report["url"] == url and report["engine"].startswith("axe-core 4.")
    planted = [v for v in report["violations"] if v["id"] == "image-alt"]
    assert planted, f"image-alt not found in {[v['id'] for v in report['violations']]}"
    assert [n["target"] for n in planted[0]["nodes"]] == [["#planted-no-alt"]]
    assert planted[0]["impact"] in ("critical", "serious")
    assert summary.startswith(f"{len(report['violations'])} accessibility violation(s)")
    # The page is untouched by the read-only analyses.
    assert browser.cdp.evaluate(page, "document.getElementById('greeting').textContent") == "nobody greeted yet"


def test_interact_navigate_type_click_get_text_execute_js_and_screenshot(browser, site, ext_daemon):
    start = site.url + "/blank.html?start"
    target = site.url + "/agent.html"
    page, tab = open_tab(browser, None, start)
    track(browser, ext_daemon, [(tab, start)])

    async def body(client_id, session):
        out = {}
        out["navigate"] = await call(session, "interact", {"what": "navigate", "url": target, "json": True})
        out["type"] = await call(session, "interact", {"what": "type", "selector": "label=Your name", "text": "Ada"})
        out["click"] = await call(session, "interact", {"what": "click", "selector": "text=Send greeting"})
        out["get_text"] = await call(session, "interact", {"what": "get_text", "selector": "#greeting"})
        out["execute_js"] = await call(session, "interact", {
            "what": "execute_js", "world": "main",
            "script": "window.agentWasHere = 'yes'; return [window.pageOnlyValue, document.title, location.pathname];",
        })
        out["screenshot"] = await call(session, "interact", {"what": "screenshot", "format": "jpeg", "timeout_ms": 30000})
        out["actions"] = await call(session, "observe", {"what": "actions", "limit": 1000})
        return out

    [out] = agents(ext_daemon, ["e2e-pilot"], body)

    # navigate: the tracked tab really went there, and the extension answered with its URL.
    summary, data = out["navigate"]
    assert data["result"]["url"] == target and data["result"]["tab_id"] == tab, data
    assert browser.cdp.evaluate(page, "location.href") == target

    # type + click: the page's own submit handler ran with the typed value; get_text reads it back.
    # (Actions that only confirm answer their summary line alone: docs/tools.md "Lean answers".)
    assert out["type"] == ("type 'label=Your name' done", {}), out["type"]
    assert out["click"] == ("click 'text=Send greeting' done", {}), out["click"]
    assert out["get_text"][1]["result"]["text"] == "hello Ada"
    assert browser.cdp.evaluate(page, "document.getElementById('who').value") == "Ada"

    # execute_js in the main world: it sees the page's globals, and what it sets is visible to the page.
    summary, data = out["execute_js"]
    assert summary == "script ran in the main world"
    assert data["result"]["result"] == ["set by the page script", "Gasoline agent page", "/agent.html"]
    assert browser.cdp.evaluate(page, "window.agentWasHere") == "yes"

    # screenshot: uploaded by the extension and saved by the daemon under its state dir.
    summary, data = out["screenshot"]
    shot = Path(data["path"]).resolve()
    state_dir = Path(ext_daemon.state_dir).resolve()
    assert state_dir in shot.parents, (shot, state_dir)
    content = shot.read_bytes()
    assert content[:3] == b"\xff\xd8\xff" or content[:8] == b"\x89PNG\r\n\x1a\n", content[:16]
    assert len(content) > 1000

    # The AI actions are recorded as such.
    ai = [a for a in out["actions"][1]["entries"] if a.get("source") == "ai"]
    assert {"navigate", "input", "click", "execute_js"} <= {a["type"] for a in ai}, [a["type"] for a in ai]


def test_two_agents_running_analyze_dom_at_the_same_time_each_get_their_own_answer(browser, site, ext_daemon):
    url = site.url + "/agent.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])
    selectors = {"e2e-agent-a": ["#fruits li", "#fruits li.fruit", "ul > li"],
                 "e2e-agent-b": ["#planets li", "ol li", "#greeting"]}
    expected = {"#fruits li": ["apple", "banana", "cherry"], "#fruits li.fruit": ["apple", "banana", "cherry"],
                "ul > li": ["apple", "banana", "cherry"], "#planets li": ["mercury", "venus"],
                "ol li": ["mercury", "venus"], "#greeting": ["nobody greeted yet"]}

    async def body(client_id, session):
        # Every call of both agents is in flight at once.
        return await asyncio.gather(*(
            call(session, "analyze", {"what": "dom", "selector": s, "timeout_ms": 30000, "json": True})
            for s in selectors[client_id]))

    out = agents(ext_daemon, list(selectors), body)
    for client_id, answers in zip(selectors, out):
        for selector, (summary, data) in zip(selectors[client_id], answers):
            # (json: the page's own echo of the selector it ran: each answer is its own call's.)
            assert data["selector"] == selector and data["dom"]["selector"] == selector, (client_id, selector, data)
            assert texts(data["dom"]) == expected[selector], (client_id, selector)
            assert summary.startswith(f"{len(expected[selector])} element(s) match {selector!r}")


def test_an_agent_that_selected_tab_one_sees_only_its_errors_another_sees_both(browser, site, ext_daemon):
    url1, url2 = site.url + "/tabs/one", site.url + "/tabs/two"
    sw = browser.service_worker()
    page1, tab1 = open_tab(browser, sw, url1)
    page2, tab2 = open_tab(browser, sw, url2)
    assert tab1 != tab2
    track(browser, ext_daemon, [(tab1, url1), (tab2, url2)], pilot=False)
    # Load both pages again now that they are tracked: each logs its error on load.
    browser.navigate(page1, url1)
    browser.navigate(page2, url2)

    def both_arrived():
        logs = daemon_get(ext_daemon.url, "/snapshot")["logs"]
        return {e.get("tabId") for e in logs if "e2e tab error from" in e.get("message", "")} >= {tab1, tab2}

    wait_until(both_arrived, 25, interval=0.25, what="both tabs' errors in the daemon")

    async def body(client_id, session):
        if client_id == "e2e-tab-one-only":
            selected = await call(session, "configure", {"what": "select_tab", "patterns": [url1]})
            assert selected[1].get("patterns") == [url1], selected
        return await call(session, "observe", {"what": "errors", "limit": 1000})

    (summary1, one), (summary2, both) = agents(ext_daemon, ["e2e-tab-one-only", "e2e-all-tabs"], body)

    def messages(data):
        return {(e.get("tabId"), e.get("message")) for e in data["entries"]}

    err1, err2 = (tab1, "e2e tab error from one"), (tab2, "e2e tab error from two")
    assert err1 in messages(one) and err2 not in messages(one), summary1
    assert {t for t, _ in messages(one)} == {tab1}, messages(one)
    assert one["filters"] == {"tab_filters": [url1]}
    assert "filters" not in both or not both["filters"].get("tab_filters")
    assert {err1, err2} <= messages(both), summary2

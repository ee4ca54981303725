"""
The real-input ``interact`` modes, in Debian's Chromium with the real extension, a real daemon and
the official ``mcp`` SDK (agent -> daemon -> ``/sync`` -> service worker -> the agent's debugger
session on the tab -> page and back). The pages (tests/e2e/actions_pages.py) confirm each success:

- ``dialog``: a click that opens ``confirm()`` answers at once with the dialog; other commands answer
  ``dialog_pending`` instead of hanging; ``dialog {accept}`` answers it, and ``get_text`` and
  ``navigate`` work right after; a ``prompt()`` gets the agent's text; one nobody answers does not
  wedge a navigation; a ``confirm()`` the next page opens while loading answers the ``navigate``;
- ``key_press`` with modifiers: a Ctrl+K handler sees ``ctrlKey`` on a trusted event; Shift+Tab;
- ``hover``: a CSS ``:hover`` menu opens and its item can be clicked;
- ``drag``: an HTML5 drag-and-drop (dataTransfer carried) and a pointer-events drag both complete;
- ``upload``: the page reads the file's text;
- ``emulate`` / ``resize``: the page sees the viewport width, offline and the dark color scheme,
  and ``reset`` restores them;
- a tab opened by a link in a tracked tab is tracked too: the agent switches to it and acts in it.

Fails (not skips) under CI=true without Chromium (the ``browser`` fixture).
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from test_extension_mcp import agents, call, open_tab, track

pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def error_of(result) -> dict:
    assert result.is_error is True, result.content[0].text[:2000]
    return json.loads(result.content[0].text.partition("\n")[2])


async def text_of(session, selector: str) -> str:
    return (await call(session, "interact", {"what": "get_text", "selector": selector}))[1]["result"]["text"]


def test_dialogs_are_reported_answered_and_never_wedge_the_tab(browser, site, ext_daemon):
    url = site.url + "/actions/dialogs.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        out = {}
        started = time.monotonic()
        out["click"] = await call(session, "interact", {"what": "click", "selector": "#confirm"})
        out["click_s"] = time.monotonic() - started
        out["status"] = await call(session, "interact", {"what": "dialog"})
        out["blocked"] = await session.call_tool("interact", {"what": "get_text", "selector": "#out"})
        out["accept"] = await call(session, "interact", {"what": "dialog", "accept": True})
        out["after_accept"] = await text_of(session, "#out")
        await call(session, "interact", {"what": "click", "selector": "#confirm"})
        await call(session, "interact", {"what": "dialog", "accept": False})
        out["after_dismiss"] = await text_of(session, "#out")
        prompt = await call(session, "interact", {"what": "click", "selector": "#prompt"})
        out["prompt_dialog"] = prompt[1]["result"]["dialog"]
        await call(session, "interact", {"what": "dialog", "accept": True, "prompt_text": "new name"})
        out["after_prompt"] = await text_of(session, "#out")
        out["none"] = await session.call_tool("interact", {"what": "dialog", "accept": True})
        # A dialog left open: the next navigation passes it and the tab keeps working.
        await call(session, "interact", {"what": "click", "selector": "#alert"})
        started = time.monotonic()
        out["navigate"] = await call(session, "interact", {"what": "navigate", "url": site.url + "/actions/keys.html"})
        out["navigate_s"] = time.monotonic() - started
        out["after_navigate"] = await text_of(session, "#palette")
        # A dialog the next page opens while loading answers the navigation itself.
        started = time.monotonic()
        out["nav_dialog"] = await call(session, "interact", {"what": "navigate", "url": site.url + "/actions/load-confirm.html"})
        out["nav_dialog_s"] = time.monotonic() - started
        await call(session, "interact", {"what": "dialog", "accept": True})
        out["after_load_confirm"] = await text_of(session, "#out")
        return out

    [out] = agents(ext_daemon, ["e2e-dialogs"], body)
    result = out["click"][1]["result"]
    assert result["dialog"]["type"] == "confirm" and result["dialog"]["message"] == "Delete the file?", result
    assert out["click_s"] < 10, out["click_s"]
    assert out["status"][1]["result"]["pending"]["type"] == "confirm", out["status"]
    blocked = error_of(out["blocked"])
    assert blocked["error"] == "dialog_pending", blocked
    assert out["accept"][1]["result"]["dialog"]["accepted"] is True
    assert out["after_accept"] == "confirmed"
    assert out["after_dismiss"] == "kept"
    assert out["prompt_dialog"]["type"] == "prompt" and out["prompt_dialog"]["default_prompt"] == "old"
    assert out["after_prompt"] == "name: new name"
    assert error_of(out["none"])["error"] == "no_dialog"
    # The summary line names where the tab went; the JSON says only what the navigation did
    # besides (it dismissed the alert left open), not what the call asked.
    assert out["navigate"][0].endswith("/actions/keys.html"), out["navigate"]
    assert list(out["navigate"][1]["result"]) == ["dialog_dismissed"], out["navigate"]
    assert out["navigate"][1]["result"]["dialog_dismissed"]["message"] == "careful", out["navigate"]
    assert out["navigate_s"] < 15, out["navigate_s"]
    assert out["after_navigate"] == "closed"
    assert out["nav_dialog"][1]["result"]["dialog"]["message"] == "Stay signed in?", out["nav_dialog"]
    assert out["nav_dialog_s"] < 10, out["nav_dialog_s"]
    assert out["after_load_confirm"] == "stays"


def test_key_press_with_modifiers_reaches_page_handlers(browser, site, ext_daemon):
    url = site.url + "/actions/keys.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        out = {}
        out["ctrl_k"] = await call(session, "interact", {"what": "key_press", "key": "Control+K", "json": True})
        out["palette"] = await text_of(session, "#palette")
        await call(session, "interact", {"what": "key_press", "key": "Shift+Tab", "selector": "#field"})
        out["seen"] = await text_of(session, "#seen")
        await call(session, "interact", {"what": "key_press", "key": "a b Shift+c", "selector": "#field"})
        out["typed"] = (await call(session, "interact", {"what": "get_value", "selector": "#field"}))[1]["result"]["value"]
        out["bad"] = await session.call_tool("interact", {"what": "key_press", "key": "Control+Nope"})
        return out

    [out] = agents(ext_daemon, ["e2e-keys"], body)
    assert out["ctrl_k"][1]["result"]["key"] == "Control+K", out["ctrl_k"]
    assert out["palette"] == "open (ctrl=true, trusted=true)"
    assert out["seen"] == "shift+tab"
    assert out["typed"] == "abC"
    assert error_of(out["bad"])["error"] == "invalid_param"


def test_hover_opens_a_css_hover_menu(browser, site, ext_daemon):
    url = site.url + "/actions/hover.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        hidden = await session.call_tool("interact", {"what": "wait_for", "selector": "#settings", "timeout_ms": 300})
        hovered = await call(session, "interact", {"what": "hover", "selector": "text=Account", "json": True})
        entered = await text_of(session, "#out")
        shown = await call(session, "interact", {"what": "wait_for", "selector": "#settings", "timeout_ms": 2000})
        await call(session, "interact", {"what": "click", "selector": "#settings"})
        veiled = await call(session, "interact", {"what": "hover", "selector": "#covered"})
        return hidden, hovered, entered, shown, await text_of(session, "#out"), veiled

    [(hidden, hovered, entered, shown, clicked, veiled)] = agents(ext_daemon, ["e2e-hover"], body)
    assert "obscured_by" not in hovered[1]["result"]
    assert veiled[1]["result"]["obscured_by"]["selectors"]["css"] == "#veil", veiled  # real input hits the veil
    assert error_of(hidden)["error"] == "timeout"  # the menu item is hidden until hovered
    assert hovered[1]["result"]["element"]["tag"] == "div", hovered
    assert entered == "entered"
    assert shown[1]["result"]["success"] is True
    assert clicked == "settings opened"


def test_drag_completes_html5_and_pointer_drags(browser, site, ext_daemon):
    url = site.url + "/actions/drag.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        html5 = await call(session, "interact", {"what": "drag", "selector": "#card", "target": "#bin"})
        pointer = await call(session, "interact", {"what": "drag", "selector": "#knob", "target": "#slot"})
        missing = await session.call_tool("interact", {"what": "drag", "selector": "#card"})
        return html5, pointer, missing, await text_of(session, "#html5-out"), await text_of(session, "#pointer-out")

    [(html5, pointer, missing, html5_out, pointer_out)] = agents(ext_daemon, ["e2e-drag"], body)
    assert html5[1]["result"]["html5_drag"] is True, html5
    assert html5_out == "dropped card-42"
    assert pointer[1]["result"]["html5_drag"] is False, pointer
    assert pointer_out == "in slot"
    assert error_of(missing)["error"] == "missing_param"


def test_upload_sets_a_file_the_page_reads(browser, site, ext_daemon):
    url = site.url + "/actions/upload.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])
    folder = ext_daemon.state_dir / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "note.txt").write_text("hello from the agent\n")

    async def body(client_id, session):
        up = await call(session, "interact", {"what": "upload", "selector": "#file",
                                              "file_path": str(folder / "note.txt")})
        outside = await session.call_tool("interact", {"what": "upload", "selector": "#file",
                                                       "file_path": "/etc/hostname"})
        for _ in range(20):
            text = await text_of(session, "#file-out")
            if text != "nothing":
                break
        return up, outside, text

    [(up, outside, text)] = agents(ext_daemon, ["e2e-upload"], body)
    assert up[1]["files"] == [{"name": "note.txt", "type": "text/plain", "size": 21}], up
    assert text == "note.txt: hello from the agent"
    assert error_of(outside)["error"] in ("path_refused", "invalid_param"), outside


def test_emulation_is_visible_to_the_page_and_reset(browser, site, ext_daemon):
    url = site.url + "/actions/emulate.html"
    page, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])
    report = lambda: json.loads(browser.cdp.evaluate(page, "report()"))  # noqa: E731
    before = report()

    async def body(client_id, session):
        out = {}
        out["resize"] = await call(session, "interact", {"what": "resize", "width": 480, "height": 700})
        out["after_resize"] = report()
        out["emulate"] = await call(session, "interact", {"what": "emulate", "offline": True,
                                                          "color_scheme": "dark", "cpu_throttling": 2})
        out["after_emulate"] = report()
        out["fetch"] = await call(session, "interact", {"what": "execute_js", "script":
                                  "fetch('/blank.html').then(() => 'online', () => 'failed')"})
        out["device"] = await call(session, "interact", {"what": "emulate", "device": "iphone-13"})
        out["after_device"] = report()
        out["bad"] = await session.call_tool("interact", {"what": "emulate", "device": "nokia-3310"})
        out["reset"] = await call(session, "interact", {"what": "emulate", "reset": True})
        out["after_reset"] = report()
        return out

    [out] = agents(ext_daemon, ["e2e-emulate"], body)
    assert out["after_resize"]["width"] == 480, out
    assert out["after_emulate"] == {"width": 480, "online": False, "dark": True}, out
    assert out["fetch"][1]["result"]["result"] == "failed", out["fetch"]
    assert out["emulate"][1]["result"]["emulation"]["network"] == "offline"
    assert out["after_device"]["width"] == 390
    assert error_of(out["bad"])["error"] == "invalid_param"
    assert out["after_reset"] == before, (before, out["after_reset"])


def test_a_tab_opened_by_a_link_is_tracked_and_acted_in(browser, site, ext_daemon):
    url = site.url + "/actions/opener.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        await call(session, "interact", {"what": "click", "selector": "#open"})
        child = None
        for _ in range(50):
            tabs = (await call(session, "observe", {"what": "tabs"}))[1]
            entries = tabs.get("tabs") or tabs.get("entries") or []
            child = next((t for t in entries if str(t.get("url", "")).endswith("/actions/child.html")), None)
            if child and child.get("tracked"):
                break
            await asyncio.sleep(0.1)
        switched = await call(session, "interact", {"what": "switch_tab", "tab_id": child["id"], "track": True, "json": True})
        await call(session, "interact", {"what": "click", "selector": "#go"})
        text = await text_of(session, "#out")
        return child, switched, text

    [(child, switched, text)] = agents(ext_daemon, ["e2e-child-tab"], body)
    assert child is not None and child["tracked"] is True, child
    assert child.get("opener_tab_id") == tab, child
    assert switched[1]["result"]["tab_id"] == child["id"], switched
    assert text == "child clicked"


def test_a_performance_trace_answers_lcp_phases_blocking_requests_long_tasks_and_shifts(browser, site, ext_daemon):
    url = site.url + "/actions/perf.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        return await call(session, "interact", {"what": "performance_trace", "settle_ms": 1000})

    [(summary, data)] = agents(ext_daemon, ["e2e-trace"], body)
    trace = data["trace"]
    assert trace["reloaded"] is True and trace["url"] == url, trace
    lcp = trace["lcp"]
    assert lcp["element"] == "#hero" and lcp["url"].endswith("/actions/hero.svg"), lcp
    assert set(lcp["phases"]) == {"ttfb", "load_delay", "load_duration", "render_delay"}
    assert abs(sum(lcp["phases"].values()) - lcp["time"]) < 5, lcp  # the phases add up to LCP
    assert [r["url"].rsplit("/", 1)[-1] for r in trace["render_blocking"]] == ["blocking.css"], trace["render_blocking"]
    assert trace["long_tasks"]["count"] >= 1 and trace["long_tasks"]["longest"][0]["duration"] >= 100, trace["long_tasks"]
    assert trace["long_tasks"]["total_blocking_time"] >= 50
    shifts = trace["layout_shifts"]
    assert shifts["cls"] > 0 and shifts["by_element"], shifts
    assert any("hero" in e["element"] or "below" in e["element"] for e in shifts["by_element"]), shifts
    assert summary.startswith("trace: LCP ") and "#hero" in summary and "render-blocking" in summary, summary


def test_observe_errors_maps_stack_frames_through_the_pages_source_map(browser, site, ext_daemon):
    start = site.url + "/blank.html?before-mapped"
    page, tab = open_tab(browser, None, start)
    track(browser, ext_daemon, [(tab, start)])
    browser.navigate(page, site.url + "/actions/mapped.html")

    async def body(client_id, session):
        for _ in range(100):
            entries = (await call(session, "observe", {"what": "errors"}))[1]["entries"]
            hit = [e for e in entries if "mapped boom" in str(e.get("message"))]
            if hit:
                return hit[0]
            await asyncio.sleep(0.2)
        return None

    [entry] = agents(ext_daemon, ["e2e-sourcemaps"], body)
    assert entry is not None, "the exception never reached observe errors"
    frames = entry["source_stack"]
    assert frames[0]["function"] == "boom" and frames[0]["url"].endswith("/actions/bundle.js"), frames
    assert (frames[0]["source"], frames[0]["source_line"], frames[0]["source_column"], frames[0]["name"]) == (
        site.url + "/actions/src/app.ts", 11, 5, "boom"), frames[0]
    assert (frames[1]["function"], frames[1]["source"], frames[1]["source_line"]) == (
        "later", "webpack://x/src/util.ts", 2), frames[1]
    assert "bundle.js:1:" in entry["stack"]  # the stack as the browser gave it stays


def test_hover_and_drag_take_snapshot_refs(browser, site, ext_daemon):
    url = site.url + "/actions/drag.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        snap = await session.call_tool("observe", {"what": "snapshot"})
        assert snap.is_error is False, snap.content[0].text[:2000]
        tree = snap.content[1].text
        card = re.search(r'button "Card" \[ref=(e\d+)\]', tree)
        bin_ = re.search(r'region "Bin" \[ref=(e\d+)\]', tree)
        assert card and bin_, tree
        hovered = await call(session, "interact", {"what": "hover", "ref": card.group(1), "json": True})
        dragged = await call(session, "interact", {"what": "drag", "ref": card.group(1), "target_ref": bin_.group(1)})
        return hovered, dragged, await text_of(session, "#html5-out")

    [(hovered, dragged, out)] = agents(ext_daemon, ["e2e-refs"], body)
    assert hovered[1]["result"]["element"]["selectors"]["id"] == "card", hovered
    assert dragged[1]["result"]["html5_drag"] is True and out == "dropped card-42", (dragged, out)

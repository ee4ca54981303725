"""
The real-input ``interact`` modes, in Debian's Chromium with the real extension, a real daemon and
the official ``mcp`` SDK (agent -> daemon -> ``/sync`` -> service worker -> the agent's debugger
session on the tab -> page and back). The pages (tests/e2e/actions_pages.py) confirm each success:

- ``dialog``: a click that opens ``confirm()`` answers at once with the dialog; other commands answer
  ``dialog_pending`` instead of hanging; ``dialog {accept}`` answers it, and ``get_text`` and
  ``navigate`` work right after; a ``prompt()`` gets the agent's text; one nobody answers does not
  wedge a navigation;
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

import json
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
    assert out["navigate"][1]["result"]["url"].endswith("/actions/keys.html"), out["navigate"]
    assert out["navigate_s"] < 15, out["navigate_s"]
    assert out["after_navigate"] == "closed"


def test_key_press_with_modifiers_reaches_page_handlers(browser, site, ext_daemon):
    url = site.url + "/actions/keys.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        out = {}
        out["ctrl_k"] = await call(session, "interact", {"what": "key_press", "key": "Control+K"})
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

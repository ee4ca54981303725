"""
The agents' page snapshot through the whole chain: a real daemon, Debian's Chromium with the
unpacked extension, the e2e test site (``/snapshot.html``: a form, an open shadow root, a
same-origin iframe) and the official ``mcp`` SDK as the agents.

- ``observe {what:"snapshot"}`` gives the tree as text with refs; ``interact`` click / type take
  ``ref`` and act inside the shadow root and the iframe;
- a budget cuts the tree with a marker naming the offset (and the part) to ask for next;
- ``diff: true`` gives only what changed since that agent's own last snapshot; two agents'
  diff bases are their own;
- after a navigation an old ref is refused with ``stale_ref``.

Fails (not skips) under CI=true without Chromium (the ``browser`` fixture).
"""

from __future__ import annotations

import re

import pytest
from harness import wait_until
from test_extension_mcp import agents, open_tab, track

pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


async def snap(session, **args):
    """(summary, metadata, tree text) of one observe snapshot."""
    result = await session.call_tool("observe", {"what": "snapshot", **args})
    assert result.is_error is False, result.content[0].text[:2000]
    import json

    summary, _, payload = result.content[0].text.partition("\n")
    return summary, json.loads(payload), result.content[1].text


async def act(session, what, **args):
    result = await session.call_tool("interact", {"what": what, **args})
    return result


def ref_of(tree: str, start: str) -> str:
    for line in tree.splitlines():
        if re.sub(r" \[ref=e\d+\]", "", line.strip()[2:]).startswith(start):
            return re.search(r"\[ref=(e\d+)\]", line).group(1)
    raise AssertionError(f"no {start!r} in:\n{tree}")


def loaded(browser, page):
    return browser.cdp.evaluate(page, "!!(document.getElementById('frame') && document.getElementById('frame')"
                                      ".contentDocument && document.getElementById('frame').contentDocument"
                                      ".getElementById('frame-btn'))")


def test_snapshot_refs_act_in_shadow_root_and_iframe_budget_and_stale_ref(browser, site, ext_daemon):
    url = site.url + "/snapshot.html"
    page, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])
    wait_until(lambda: loaded(browser, page), 10, what="the iframe")

    async def body(client_id, session):
        out = {"full": await snap(session)}
        tree = out["full"][2]
        out["type_shadow"] = await act(session, "type", ref=ref_of(tree, 'textbox "Shadow field"'), text="deep")
        out["click_shadow"] = await act(session, "click", ref=ref_of(tree, 'button "Shadow button"'))
        out["type_frame"] = await act(session, "type", ref=ref_of(tree, 'textbox "Frame field"'), text="framed")
        out["click_frame"] = await act(session, "click", ref=ref_of(tree, 'button "Frame button"'))
        # Read the page before the navigation below replaces it.
        out["shadow_out"] = browser.cdp.evaluate(
            page, "document.getElementById('widget').shadowRoot.getElementById('shadow-out').textContent")
        out["frame_out"] = browser.cdp.evaluate(
            page, "document.getElementById('frame').contentDocument.getElementById('frame-out').textContent")
        out["cut"] = await snap(session, max_nodes=5)
        out["rest"] = await snap(session, max_nodes=5, offset=out["cut"][1]["next_offset"])
        out["part"] = await snap(session, ref=ref_of(tree, "form"))
        out["navigate"] = await act(session, "navigate", url=url + "?again")
        out["stale"] = await act(session, "click", ref=ref_of(tree, 'button "Sign in"'))
        return out

    [out] = agents(ext_daemon, ["e2e-snapshot"], body)
    summary, meta, tree = out["full"]
    assert summary.startswith(f"snapshot of {url}: {meta['nodes']} nodes"), summary
    assert meta["nodes"] > 20
    assert meta["tab_id"] == tab and "next_offset" not in meta
    lines = tree.splitlines()
    assert len(lines) == meta["nodes"]
    assert any(re.fullmatch(r'- main \[ref=e\d+\]', line) for line in lines)
    assert any('button "Shadow button" [ref=' in line for line in lines)
    assert "hunter2" not in tree
    for key in ("type_shadow", "click_shadow", "type_frame", "click_frame"):
        assert out[key].is_error is False, (key, out[key].content[0].text)
    assert out["shadow_out"] == "shadow clicked deep"
    assert out["frame_out"] == "frame clicked framed"
    # The budget: 5 lines, then the marker with the offset to continue from.
    summary, meta, cut = out["cut"]
    shown = cut.splitlines()
    assert shown[:5] == lines[:5] and len(shown) == 6 and meta["next_offset"] == 5
    assert shown[5].startswith("# cut at line 6 of") and "offset:5" in shown[5], shown[5]
    _, meta2, rest = out["rest"]
    rest_lines = rest.splitlines()
    assert rest_lines[0].startswith("# from line 6 of") and rest_lines[1:6] == lines[5:10]
    assert meta2["next_offset"] == 10
    # Only the part under a ref.
    part = out["part"][2].splitlines()
    assert part[0].startswith('- form "Login form" [ref=') and any('button "Sign in"' in x for x in part)
    assert not any("Shadow button" in x for x in part)
    # After the navigation the old ref is refused, saying why.
    assert out["navigate"].is_error is False, out["navigate"].content[0].text
    stale = out["stale"]
    assert stale.is_error is True and "stale_ref" in stale.content[0].text
    assert "navigated" in stale.content[0].text and "snapshot" in stale.content[0].text


def test_diff_gives_what_changed_since_this_agents_own_last_snapshot(browser, site, ext_daemon):
    url = site.url + "/snapshot.html"
    page, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])
    wait_until(lambda: loaded(browser, page), 10, what="the iframe")
    state = {}

    async def first(client_id, session):
        return await snap(session)

    a0, b0 = agents(ext_daemon, ["e2e-diff-a", "e2e-diff-b"], first)
    state["tree"] = a0[2]
    browser.cdp.evaluate(page, "document.getElementById('items').insertAdjacentHTML('beforeend', '<li>third item</li>');"
                               "document.getElementById('status').textContent = 'signed in'; 1")

    # Agent B looks (a diff) after the change; agent A's base must not move.
    async def b_only(client_id, session):
        return await snap(session, diff=True)

    [b1] = agents(ext_daemon, ["e2e-diff-b"], b_only)
    browser.cdp.evaluate(page, "document.querySelector('#items li').remove(); 1")

    async def both(client_id, session):
        return await snap(session, diff=True)

    a2, b2 = agents(ext_daemon, ["e2e-diff-a", "e2e-diff-b"], both)

    summary, meta, text = b1
    assert meta["diff"] == {"added": 1, "changed": 1, "removed": 0}, text
    assert re.search(r"^\+ listitem \[ref=e\d+\]: third item \(in e\d+\)$", text, re.M), text
    assert re.search(r"^~ paragraph \[ref=e\d+\]: signed in \(was: paragraph \[ref=e\d+\]: not signed in\)$", text, re.M), text
    # A saw nothing in between: its diff spans both changes, from its own first snapshot.
    _, meta_a, text_a = a2
    assert meta_a["diff"] == {"added": 1, "changed": 1, "removed": 1}, text_a
    assert "third item" in text_a and "first item" in text_a
    # B's second diff only has the removal.
    _, meta_b, text_b = b2
    assert meta_b["diff"] == {"added": 0, "changed": 0, "removed": 1}, text_b
    assert re.fullmatch(r"- listitem \[ref=e\d+\]: first item \(in e\d+\)", text_b.strip()), text_b

    # Nothing changed: an empty diff says so.
    async def again(client_id, session):
        return await snap(session, diff=True)

    [(summary, meta, text)] = agents(ext_daemon, ["e2e-diff-a"], again)
    assert meta["diff"] == {"added": 0, "changed": 0, "removed": 0} and "no change" in summary

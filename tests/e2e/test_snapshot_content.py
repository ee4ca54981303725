"""
The agents' page snapshot in the page itself (extension/content/snapshot.js with selectors.js and
commands.js, loaded over CDP into Debian's Chromium, the way tests/e2e/test_extension_commands.py
loads the command handlers): roles, names, states, values, the walk through an open shadow root
and a same-origin iframe, refs that stay the same across snapshots and act through ``ref=``, and
the ``stale_ref`` refusal of a ref written for another document.

Fails (not skips) under CI=true without Chromium (the ``browser`` fixture).
"""

from __future__ import annotations

import json
import re

import pytest
from harness import EXTENSION_DIR, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.browser]

SCRIPTS = "\n".join((EXTENSION_DIR / "content" / name).read_text()
                    for name in ("selectors.js", "snapshot.js", "commands.js"))


def run(browser, page, type_, params):
    return browser.cdp.evaluate(page, f"__gasolineCommands.run({json.dumps(type_)}, {json.dumps(params)})")


def ref_of(tree: str, line_start: str) -> str:
    """The ref on the first line whose text (after the indentation and "- ", without the ref)
    starts with ``line_start``."""
    for line in tree.splitlines():
        if re.sub(r" \[ref=e\d+\]", "", line.strip()[2:]).startswith(line_start):
            m = re.search(r"\[ref=(e\d+)\]", line)
            assert m, line
            return m.group(1)
    raise AssertionError(f"no line starting {line_start!r} in:\n{tree}")


@pytest.fixture
def snapshot_page(browser, site):
    _, page, _ = browser.new_page(site.url + "/blank.html")
    browser.navigate(page, site.url + "/snapshot.html")
    wait_until(lambda: browser.cdp.evaluate(
        page, "!!(document.getElementById('frame').contentDocument||{}).getElementById"
              " && !!document.getElementById('frame').contentDocument.getElementById('frame-btn')"),
        10, what="the iframe loaded")
    browser.cdp.evaluate(page, SCRIPTS + "\n;true")
    return page


def test_snapshot_lists_roles_names_states_through_shadow_roots_and_iframes(browser, snapshot_page):
    snap = run(browser, snapshot_page, "snapshot", {})
    tree = snap["tree"]
    lines = [line.strip() for line in tree.splitlines()]
    assert snap["title"] == "Gasoline snapshot page" and snap["nodes"] == len(lines)
    assert re.fullmatch(r"[a-z0-9]+", snap["document"])
    bare = [re.sub(r" \[ref=e\d+\]", "", line) for line in lines]
    # Landmarks, headings with their level, links and the form with its label.
    assert '- navigation "Main"' in bare
    assert '- link "Home"' in bare and '- link "About"' in bare
    assert '- heading "Sign in" [level=1]' in bare
    assert '- form "Login form"' in bare
    # Names from <label for>, a wrapping <label>, states, a value, a redacted secret value.
    assert '- textbox "Email": ada@example.com' in bare
    assert '- textbox "Password": [redacted]' in bare and "hunter2" not in tree
    assert '- checkbox "Remember me" [checked]' in bare
    assert '- button "Sign in"' in bare and '- button "Disabled action" [disabled]' in bare
    assert '- paragraph: not signed in' in bare
    assert '- listitem: first item' in bare
    # Nothing hidden (hidden attribute, display:none, aria-hidden).
    for gone in ("Hidden button", "Not displayed", "Aria hidden"):
        assert gone not in tree
    # The open shadow root, its slotted content where the slot renders it, and the iframe's body
    # one level under the iframe's own line.
    assert '- heading "Slotted title" [level=2]' in bare
    assert '- button "Shadow button"' in bare and '- textbox "Shadow field"' in bare
    frame_line = next(line for line in tree.splitlines() if line.strip().startswith('- iframe "Embedded form"'))
    inner = next(line for line in tree.splitlines() if '- heading "Inside the frame" [level=3]' in line)
    assert len(inner) - len(inner.lstrip()) == len(frame_line) - len(frame_line.lstrip()) + 2
    assert '- textbox "Frame field"' in bare and '- button "Frame button"' in bare
    # Every element line has a ref, and refs are unique.
    refs = re.findall(r"\[ref=(e\d+)\]", tree)
    assert len(refs) == len(set(refs)) == sum(1 for line in lines if not line.startswith("- text:"))


def test_refs_are_stable_and_act_inside_the_shadow_root_and_the_iframe(browser, snapshot_page):
    page = snapshot_page
    first = run(browser, page, "snapshot", {})["tree"]
    # A DOM change does not renumber what was there.
    browser.cdp.evaluate(page, "document.getElementById('items').insertAdjacentHTML('afterbegin', '<li>new item</li>'); 1")
    second = run(browser, page, "snapshot", {})["tree"]
    for name in ("button \"Sign in\"", "button \"Shadow button\"", "button \"Frame button\"", "textbox \"Frame field\""):
        assert ref_of(first, name) == ref_of(second, name)
    assert "- listitem [ref=" in second and "]: new item" in second

    def act(action, ref, **extra):
        return run(browser, page, "dom_action", {"action": action, "selector": "ref=" + ref, **extra})

    assert act("type", ref_of(second, 'textbox "Shadow field"'), text="deep")["success"] is True
    assert act("click", ref_of(second, 'button "Shadow button"'))["success"] is True
    assert browser.cdp.evaluate(page, "document.getElementById('widget').shadowRoot.getElementById('shadow-out').textContent") == "shadow clicked deep"
    assert act("type", ref_of(second, 'textbox "Frame field"'), text="framed")["success"] is True
    assert act("click", ref_of(second, 'button "Frame button"'))["success"] is True
    assert browser.cdp.evaluate(page, "document.getElementById('frame').contentDocument.getElementById('frame-out').textContent") == "frame clicked framed"
    assert act("get_text", ref_of(second, 'button "Sign in"'))["text"] == "Sign in"
    # A subtree: the node of a ref and what is under it.
    sub = run(browser, page, "snapshot", {"selector": "ref=" + re.search(r"^  - list \[ref=(e\d+)\]$", second, re.M).group(1)})["tree"].splitlines()
    assert sub[0].startswith("- list [ref=") and len(sub) == 4
    assert sub[1].startswith("  - listitem [ref=") and sub[1].endswith("]: new item")
    # A removed element's ref, an unknown ref, a ref written for another document.
    gone = next(re.search(r"ref=(e\d+)", line).group(1) for line in second.splitlines() if line.endswith(": new item"))
    browser.cdp.evaluate(page, "document.querySelector('#items li').remove(); 1")
    assert act("click", gone)["error"] == "element_not_found"
    assert act("click", "e99999")["error"] == "element_not_found"
    doc = run(browser, page, "snapshot", {})["document"]
    assert act("get_text", ref_of(second, 'button "Sign in"') + "@" + doc)["text"] == "Sign in"
    stale = act("click", ref_of(second, 'button "Sign in"') + "@zzzzzz")
    assert stale["error"] == "stale_ref" and "navigated" in stale["message"]


def test_a_fresh_document_refuses_refs_as_stale(browser, site, snapshot_page):
    page = snapshot_page
    ref = ref_of(run(browser, page, "snapshot", {})["tree"], 'button "Sign in"')
    browser.navigate(page, site.url + "/snapshot.html")
    browser.cdp.evaluate(page, SCRIPTS + "\n;true")
    # No snapshot taken in this document yet: the ref can only be from a page that is gone.
    stale = run(browser, page, "dom_action", {"action": "click", "selector": "ref=" + ref})
    assert stale["error"] == "stale_ref"


def test_aria_widgets_states_focus_and_acting_on_them_by_ref(browser, snapshot_page):
    page = snapshot_page
    browser.cdp.evaluate(page, "document.getElementById('email').focus(); 1")
    tree = run(browser, page, "snapshot", {})["tree"]
    bare = [re.sub(r" \[ref=e\d+\]", "", line) for line in tree.splitlines()]
    # An ARIA listbox and its options (aria-selected), aria-expanded, a <select> with its value and
    # options, aria-labelledby, aria-level, a click handler on a plain <div>, the focused field.
    assert '  - listbox "Fruit"' in bare
    assert '    - option "Apple" [selected]' in bare and '    - option "Pear"' in bare
    assert '  - button "Menu" [expanded]' in bare
    assert '  - combobox "Size": Large' in bare and '    - option "Large" [selected]' in bare
    assert '  - spinbutton "Quantity": 3' in bare
    assert '  - heading "Custom heading" [level=5]' in bare
    assert '  - generic "Open card" [cursor=pointer]' in bare
    assert '    - textbox "Email" [focused]: ada@example.com' in bare

    def act(action, ref, **extra):
        return run(browser, page, "dom_action", {"action": action, "selector": "ref=" + ref, **extra})

    assert act("select", ref_of(tree, 'combobox "Size"'), value="Small")["value"] == "Small"
    assert act("click", ref_of(tree, 'generic "Open card"'))["success"] is True
    assert act("check", ref_of(tree, 'checkbox "Remember me"'), checked=False)["checked"] is False
    after = run(browser, page, "snapshot", {})["tree"]
    assert re.search(r'- combobox "Size" \[ref=e\d+\]: Small', after)
    assert re.search(r'- generic "card opened" \[cursor=pointer\] \[ref=e\d+\]', after)
    assert re.search(r'- checkbox "Remember me" \[ref=e\d+\]', after)


def test_the_walk_stops_at_its_hard_cap_and_says_so(browser, snapshot_page):
    page = snapshot_page
    browser.cdp.evaluate(page, "const ul = document.getElementById('items');"
                               "ul.insertAdjacentHTML('beforeend', '<li>x</li>'.repeat(20100)); 1")
    snap = browser.cdp.evaluate(page, "(() => { const s = __gasolineCommands.run('snapshot', {}); return s; })()", timeout=60)
    assert snap["capped"] is True and snap["nodes"] == 20000 == len(snap["tree"].splitlines())

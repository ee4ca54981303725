"""The agents' page snapshot (gasoline.tools._snapshot): the budget cut and its marker, the diff
against the caller's own last snapshot (per client, per tab, per document), and ``ref`` on every
interact target (``ref=eN@<document>``). The extension's side is tests/e2e/test_snapshot_*.py."""

from __future__ import annotations

import pytest

from _modes_harness import fired, parse
from gasoline.core.errors import GasolineError
from gasoline.tools import interact
from gasoline.tools._snapshot import cut, diff
from gasoline.tools.observe import MODES

TREE = [
    "- navigation \"Main\" [ref=e1]",
    "  - link \"Home\" [ref=e2]",
    "- main [ref=e3]",
    "  - heading \"Orders\" [level=1] [ref=e4]",
    "  - list [ref=e5]",
    "    - listitem [ref=e6]: one",
    "    - listitem [ref=e7]: two",
    "    - text: footnote",
    "  - button \"Save\" [ref=e8]",
]


def test_cut_stops_at_the_budget_with_a_marker_naming_the_offset_and_the_part():
    shown, nxt = cut(TREE, 0, 5, 10_000)
    assert shown[:5] == TREE[:5] and nxt == 5 and len(shown) == 6
    assert shown[5] == ('# cut at line 6 of 9 (max_nodes 5): 4 more; continue with {what:"snapshot", '
                        'offset:5}, or only the part under e5: {what:"snapshot", ref:"e5"}, or raise '
                        'max_nodes / max_bytes')
    rest, nxt = cut(TREE, 5, 5, 10_000)
    assert rest[0] == "# from line 6 of 9, inside: - main [ref=e3] > - list [ref=e5]"
    assert rest[1:] == TREE[5:] and nxt is None
    small, nxt = cut(TREE, 0, 100, 60)
    assert small[:-1] == TREE[:2] and nxt == 2 and "(max_bytes 60)" in small[-1]
    assert sum(len(x) + 1 for x in small[:-1]) <= 60
    whole, nxt = cut(TREE, 0, 800, 24_000)
    assert whole == TREE and nxt is None


def test_diff_reports_added_changed_and_removed_lines_by_ref():
    after = list(TREE)
    after[3] = "  - heading \"Orders (2)\" [level=1] [ref=e4]"
    after.insert(7, "    - listitem [ref=e9]: three")
    del after[1]
    out, counts = diff(TREE, after)
    assert counts == {"added": 1, "changed": 1, "removed": 1}
    assert out == ['~ heading "Orders (2)" [level=1] [ref=e4] (was: heading "Orders" [level=1] [ref=e4])',
                   "+ listitem [ref=e9]: three (in e5)",
                   '- link "Home" [ref=e2] (in e1)']
    assert diff(TREE, TREE) == ([], {"added": 0, "changed": 0, "removed": 0})
    # Text lines are matched by their holder and their text.
    moved = [x for x in TREE if "footnote" not in x] + ["  - text: footnote"]
    out, counts = diff(TREE, moved)
    assert out == ["+ text: footnote (in e3)", "- text: footnote (in e5)"]


def snap(h, result, client="A", args=None):
    d = h.run(MODES, "snapshot", args, client_id=client, tool="observe")
    [cmd] = h.commands()
    assert cmd.type == "snapshot"
    h.answer(cmd, result)
    out = fired(d)
    summary, meta = parse(out)
    return cmd, summary, meta, out["content"][1]["text"]


def page(lines, document="d1", tab=1):
    return {"document": document, "url": "https://app.test/page", "title": "App", "tab_id": tab,
            "nodes": len(lines), "capped": False, "tree": "\n".join(lines)}


def test_the_diff_base_is_the_callers_own_and_follows_the_document(h):
    changed = TREE[:-1] + ["  - button \"Save\" [disabled] [ref=e8]"]
    _, summary, meta, text = snap(h, page(TREE), client="A", args={"diff": True})
    assert "no earlier snapshot of this tab by you" in summary and text == "\n".join(TREE)
    snap(h, page(TREE), client="B")
    # B's snapshot of the changed page does not move A's base.
    _, _, meta_b, _ = snap(h, page(changed), client="B", args={"diff": True})
    assert meta_b["diff"] == {"added": 0, "changed": 1, "removed": 0}
    _, summary, meta_a, text = snap(h, page(changed), client="A", args={"diff": True})
    assert meta_a["diff"] == {"added": 0, "changed": 1, "removed": 0}
    assert text == '~ button "Save" [disabled] [ref=e8] (was: button "Save" [ref=e8])'
    _, summary, meta_a, text = snap(h, page(changed), client="A", args={"diff": True})
    assert "no change since your last snapshot" in summary and text == "(empty)"
    # Another document (the tab navigated): the whole tree, saying why.
    _, summary, meta, text = snap(h, page(TREE, document="d2"), client="A", args={"diff": True})
    assert "navigated" in summary and meta["diff"] is None and text == "\n".join(TREE)
    # Another tab has its own base.
    _, summary, _, _ = snap(h, page(TREE, tab=2), client="A", args={"diff": True})
    assert "no earlier snapshot of this tab by you" in summary


def test_a_ref_becomes_a_selector_tied_to_the_callers_last_snapshot_document(h):
    snap(h, page(TREE, document="doc7"), client="A")
    for mode, args in (("click", {"ref": "e8"}), ("type", {"ref": "[ref=e4]", "text": "x"}),
                       ("get_text", {"ref": "ref=E2"}), ("highlight", {"ref": "e8"})):
        d = h.run(interact.MODES, mode, args, client_id="A", tool="interact")
        [cmd] = h.commands()
        assert cmd.params["selector"].startswith("ref=e") and cmd.params["selector"].endswith("@doc7"), (mode, cmd.params)
        h.answer(cmd, {"success": True})
        fired(d)
    # B took no snapshot: its ref is sent without a document (the page checks what it can).
    d = h.run(interact.MODES, "click", {"ref": "e8"}, client_id="B", tool="interact")
    [cmd] = h.commands()
    assert cmd.params["selector"] == "ref=e8"
    h.answer(cmd, {"error": "stale_ref", "message": "ref e8 belongs to a page that is gone"}, status="error",
             error="stale_ref")
    with pytest.raises(GasolineError) as info:
        fired(d)
    assert info.value.code == "stale_ref" and "snapshot" in info.value.retry
    with pytest.raises(GasolineError) as info:
        h.run(interact.MODES, "click", {"ref": "button 3"}, client_id="A", tool="interact")
    assert info.value.code == "invalid_param"
    # A part: the ref's selector goes to the extension; no diff of a part.
    cmd, _, _, _ = snap(h, page(TREE[2:], document="doc7"), client="A", args={"ref": "e3"})
    assert cmd.params == {"selector": "ref=e3@doc7"}
    with pytest.raises(GasolineError):
        h.run(MODES, "snapshot", {"ref": "e3", "diff": True}, client_id="A", tool="observe")


def test_fill_form_fields_take_refs(h):
    snap(h, page(TREE, document="doc9"), client="A")
    d = h.run(interact.MODES, "fill_form", {"fields": [{"ref": "e4", "value": "x"}, {"selector": "#b", "value": True}]},
              client_id="A", tool="interact")
    [cmd] = h.commands()
    assert cmd.params == {"action": "type", "selector": "ref=e4@doc9", "text": "x"}
    h.answer(cmd, {"success": True})
    [cmd] = h.commands()
    assert cmd.params["selector"] == "#b"
    h.answer(cmd, {"success": True, "checked": True})
    fired(d)


def test_analyze_snapshot_is_the_same_mode(h):
    from gasoline.tools import analyze

    d = h.run(analyze.MODES, "snapshot", {"max_nodes": 2}, client_id="A", tool="analyze")
    [cmd] = h.commands()
    assert (cmd.type, cmd.params) == ("snapshot", {})
    h.answer(cmd, page(TREE))
    out = fired(d)
    summary, meta = parse(out)
    assert meta["next_offset"] == 2 and out["content"][1]["text"].splitlines()[:2] == TREE[:2]

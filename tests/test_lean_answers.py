"""
Lean answers: what an agent reads per call.

- the untrusted-content note comes once per MCP session and page tool, not on every result;
- the metadata says something or is absent (C{extension_connected} only while false,
  C{data_age_seconds} only on buffer reads);
- C{observe network_bodies} and C{observe vitals} read the current page by default
  (C{scope: "all"}: everything since connect);
- C{interact list_interactive} pages (C{offset}) and diffs (C{diff}) with stable element ids.
"""

from __future__ import annotations

import pytest

from _mcp_calls import call, session_for, start, parsed
from _modes_harness import fired, parse
from gasoline.core.storage.store import CONSOLE, NETWORK_BODIES
from gasoline.tools.context import UNTRUSTED_FIELD, UNTRUSTED_NOTE
from gasoline.tools.interact import MODES as INTERACT

PAGE = "http://app.test/b"


def connect(app, url=PAGE + "?q=1#top", tab=7):
    app.extension.sync({"settings": {"tracked_tab_id": tab, "tracked_tab_url": url,
                                     "pilot_enabled": True, "tracking_enabled": True}})


def answer_all(app, result):
    commands = app.extension.commands.deliverable()
    assert commands, "no command was queued"
    app.extension.sync({"command_results": [{"id": c.id, "status": "complete", "result": result}
                                            for c in commands], "last_command_ack": commands[-1].id})


# -- the untrusted-content note -------------------------------------------------------------------


def test_the_untrusted_note_comes_once_per_session_and_page_tool(app):
    app.store.add(CONSOLE, [{"level": "error", "message": "boom"}])
    s = session_for(app, "agent")
    first = call(app, s, "observe", {"what": "errors"})[2]
    again = call(app, s, "observe", {"what": "logs"})[2]
    assert first[UNTRUSTED_FIELD] == UNTRUSTED_NOTE
    assert UNTRUSTED_FIELD not in again
    # Another page tool in the same session: its first result carries it too.
    connect(app)
    out = start(app, s, "interact", {"what": "get_text", "selector": "#a"})
    answer_all(app, {"success": True, "text": "hi"})
    assert parsed(out)[2][UNTRUSTED_FIELD] == UNTRUSTED_NOTE
    out = start(app, s, "interact", {"what": "get_text", "selector": "#a"}, rid=2)
    answer_all(app, {"success": True, "text": "hi"})
    assert UNTRUSTED_FIELD not in parsed(out)[2]
    # A new session (the same agent reconnecting) is told again; a non-page tool never carries it.
    s2 = session_for(app, "agent")
    assert call(app, s2, "observe", {"what": "logs"})[2][UNTRUSTED_FIELD] == UNTRUSTED_NOTE
    assert UNTRUSTED_FIELD not in call(app, s2, "configure", {"what": "health"})[2]


def test_a_call_without_a_session_always_carries_the_note(h):
    d = h.run(INTERACT, "get_text", {"selector": "#a"}, tool="interact")
    [cmd] = h.commands()
    h.answer(cmd, {"success": True, "text": "x"})
    assert parse(fired(d))[1][UNTRUSTED_FIELD] == UNTRUSTED_NOTE


# -- metadata -------------------------------------------------------------------------------------


def test_metadata_only_where_it_says_something(app, clock):
    s = session_for(app, "agent")
    app.store.add(CONSOLE, [{"level": "error", "message": "boom"}])
    clock.advance(3)
    summary, data = call(app, s, "observe", {"what": "errors"})[1:]
    assert data["extension_connected"] is False and "extension not connected" in summary
    assert data["data_age_seconds"] == 3
    connect(app)
    data = call(app, s, "observe", {"what": "logs", "after_cursor": 0})[2]
    assert "extension_connected" not in data and data["data_age_seconds"] == 3
    out = start(app, s, "interact", {"what": "get_text", "selector": "#a"})
    answer_all(app, {"success": True, "text": "hi"})
    data = parsed(out)[2]
    assert data["result"]["text"] == "hi"
    assert "extension_connected" not in data and "data_age_seconds" not in data


# -- the current page ------------------------------------------------------------------------------


def _bodies(app):
    app.store.add(NETWORK_BODIES, [
        {"method": "GET", "url": "http://app.test/api/old", "status": 200, "tab_id": 7,
         "page_url": "http://app.test/a"},
        {"method": "GET", "url": "http://app.test/api/now", "status": 200, "tab_id": 7,
         "page_url": PAGE + "?other=2"},
        {"method": "GET", "url": "http://app.test/api/other-tab", "status": 200, "tab_id": 8,
         "page_url": PAGE},
        # The published extension's bodies name no page: kept by their tab.
        {"method": "GET", "url": "http://app.test/api/no-page", "status": 200, "tab_id": 7},
    ])


def urls(data):
    return [e["url"].rsplit("/", 1)[1] for e in data["entries"]]


def test_network_bodies_read_the_current_page_by_default(app):
    connect(app)
    _bodies(app)
    s = session_for(app, "agent")
    summary, data = call(app, s, "observe", {"what": "network_bodies"})[1:]
    assert urls(data) == ["now", "no-page"]
    assert data["filters"] == {"scope": "current_page", "page": PAGE}
    # Everything since connect, on request (the cursor moved: read from the start).
    data = call(app, s, "observe", {"what": "network_bodies", "scope": "all", "after_cursor": 0})[2]
    assert urls(data) == ["old", "now", "other-tab", "no-page"]
    # Naming a tab or a URL reads that, not the current page.
    assert urls(call(app, s, "observe", {"what": "network_bodies", "tab_id": 8, "after_cursor": 0})[2]) == ["other-tab"]
    assert urls(call(app, s, "observe", {"what": "network_bodies", "url": "old", "after_cursor": 0})[2]) == ["old"]


def test_network_bodies_without_a_tracked_page_read_everything_and_say_so(app):
    _bodies(app)
    s = session_for(app, "agent")
    data = call(app, s, "observe", {"what": "network_bodies"})[2]
    assert len(data["entries"]) == 4 and data["filters"] == {"scope": "all", "page": None}
    err, _, body = call(app, s, "observe", {"what": "network_bodies", "scope": "current_page"})
    assert err and body["error"] == "no_data"


def _snapshot(url, tab=7, lcp=1000.0):
    return {"url": url, "tab_id": tab, "timestamp": "2026-01-01T00:00:00Z",
            "timing": {"largest_contentful_paint": lcp, "first_contentful_paint": 100.0, "load": 200.0,
                       "dom_content_loaded": 150.0, "time_to_first_byte": 10.0},
            "network": {"request_count": 1, "transfer_size": 1, "decoded_size": 1, "by_type": {},
                        "slowest_requests": []},
            "long_tasks": {"count": 0, "total_blocking_time": 0, "longest": 0}}


def test_vitals_read_the_current_page_by_default(app):
    app.store.add_performance([_snapshot("http://app.test/a", lcp=900.0), _snapshot(PAGE + "?v=3", lcp=1200.0),
                               _snapshot(PAGE + "?v=2", lcp=1300.0), _snapshot("http://app.test/c", tab=8)])
    s = session_for(app, "agent")
    # No tracked page yet: every page.
    assert call(app, s, "observe", {"what": "vitals"})[2]["count"] == 4
    connect(app)
    # The current page's latest load (the newest snapshot of that page: another query string).
    summary, data = call(app, s, "observe", {"what": "vitals"})[1:]
    assert [p["url"] for p in data["pages"]] == [PAGE + "?v=2"]
    assert summary.startswith(f"web vitals of the current page {PAGE}") and 'scope:"all"' in summary
    # The tracked URL's own snapshot when there is one.
    connect(app, url=PAGE + "?v=3")
    assert [p["url"] for p in call(app, s, "observe", {"what": "vitals"})[2]["pages"]] == [PAGE + "?v=3"]
    assert call(app, s, "observe", {"what": "vitals", "scope": "all"})[2]["count"] == 4
    connect(app, url="http://app.test/new")
    summary, data = call(app, s, "observe", {"what": "vitals"})[1:]
    assert data["pages"] == [] and summary.startswith("no web vitals yet for the current page")


# -- list_interactive ------------------------------------------------------------------------------


def el(i, name=None):
    return {"element_id": f"e{i}", "tag": "button", "role": "button", "name": name or f"item {i}",
            "selector": f"#item-{i}"}


def listing(h, args, elements, count=None, url="http://app.test/list", client="A", offset=None):
    d = h.run(INTERACT, "list_interactive", args, client_id=client, tool="interact")
    [cmd] = h.commands()
    result = {"url": url, "count": len(elements) if count is None else count, "elements": elements}
    if offset is not None:
        result["offset"] = offset
    h.answer(cmd, result)
    return cmd, parse(fired(d))


def test_list_interactive_pages_with_offset(h):
    cmd, (summary, data) = listing(h, {"limit": 2}, [el(1), el(2)], count=5)
    assert cmd.params == {"action": "list_interactive", "limit": 2}
    r = data["result"]
    assert [e["element_id"] for e in r["elements"]] == ["e1", "e2"] and r["next_offset"] == 2
    assert "next_offset 2" in summary
    # The extension applies the offset (it says so); ids go on from there.
    cmd, (_, data) = listing(h, {"limit": 2, "offset": 2}, [el(3), el(4)], count=5, offset=2)
    assert cmd.params == {"action": "list_interactive", "limit": 2, "offset": 2}
    r = data["result"]
    assert [e["element_id"] for e in r["elements"]] == ["e3", "e4"] and r["offset"] == 2 and r["next_offset"] == 4
    # A published extension ignores offset: the daemon slices its list.
    _, (_, data) = listing(h, {"limit": 2, "offset": 4}, [el(1), el(2), el(3), el(4), el(5)], count=5)
    r = data["result"]
    assert [e["name"] for e in r["elements"]] == ["item 5"] and "next_offset" not in r
    # Every id handed out for this page still names its element.
    d = h.run(INTERACT, "click", {"element_id": "e3"}, tool="interact")
    [cmd] = h.commands()
    assert cmd.params["selector"] == "#item-3"
    h.answer(cmd, {"success": True})
    fired(d)


def test_list_interactive_diff_answers_only_what_changed_with_stable_ids(h):
    listing(h, {}, [el(1), el(2), el(3)])
    # The list grew at the end and lost its first item: only the new ones come, with new ids.
    cmd, (summary, data) = listing(h, {"diff": True}, [el(2), el(3), el(4), el(5)])
    assert cmd.params == {"action": "list_interactive", "limit": 500}
    r = data["result"]
    assert [(e["element_id"], e["name"]) for e in r["elements"]] == [("e4", "item 4"), ("e5", "item 5")]
    assert r["unchanged"] == 2 and r["gone"] == ["e1"] and r["diff"] is True
    assert summary == "4 interactive element(s): 2 new, 2 unchanged, 1 gone"
    # Nothing changed: nothing to read.
    _, (_, data) = listing(h, {"diff": True}, [el(2), el(3), el(4), el(5)])
    assert data["result"]["elements"] == [] and data["result"]["unchanged"] == 4 and data["result"]["gone"] == []
    # A diff cut at limit: the rest come on the next one.
    _, (_, data) = listing(h, {"diff": True, "limit": 1}, [el(2), el(3), el(4), el(5), el(6), el(7)])
    assert [e["element_id"] for e in data["result"]["elements"]] == ["e6"] and data["result"]["more_new"] == 1
    _, (_, data) = listing(h, {"diff": True}, [el(2), el(3), el(4), el(5), el(6), el(7)])
    assert [e["element_id"] for e in data["result"]["elements"]] == ["e7"]
    # Another page starts again (ids restart; nothing of the old page is "unchanged").
    _, (_, data) = listing(h, {"diff": True}, [el(1)], url="http://app.test/other")
    assert [e["element_id"] for e in data["result"]["elements"]] == ["e1"] and data["result"]["unchanged"] == 0
    # Another agent has its own ids and its own diff.
    _, (_, data) = listing(h, {"diff": True}, [el(9)], client="B")
    assert [e["element_id"] for e in data["result"]["elements"]] == ["e1"]


@pytest.mark.parametrize("args", [{"offset": -1}, {"offset": "x"}, {"limit": 0}])
def test_list_interactive_bad_paging_is_a_clear_error(h, args):
    from gasoline.core.errors import GasolineError

    with pytest.raises(GasolineError) as e:
        h.run(INTERACT, "list_interactive", args, tool="interact")
    assert e.value.code == "invalid_param"


# -- DOM action answers -----------------------------------------------------------------------------


def _dom(h, mode, args, result):
    d = h.run(INTERACT, mode, args, tool="interact")
    [cmd] = h.commands()
    h.answer(cmd, result)
    return parse(fired(d))


def test_dom_action_answers_do_not_echo_the_call(h):
    element = {"tag": "button", "selectors": {"css": "#send", "role": {"role": "button", "name": "Send"}}}
    got = {"success": True, "action": "get_text", "selector": "#out", "text": "done", "element": element}
    summary, data = _dom(h, "get_text", {"selector": "#out"}, got)
    assert summary == "text of '#out'" and data["result"] == {"success": True, "text": "done"}
    # json:true: the result as the extension gave it (the published shape).
    assert _dom(h, "get_text", {"selector": "#out", "json": True}, got)[1]["result"] == got
    # An action whose result only confirms it: the summary line alone, no JSON.
    clicked = {"success": True, "action": "click", "selector": "text=Send", "element": element}
    answer = _answer(h, "click", {"selector": "text=Send"}, clicked)
    assert _text(answer) == "click 'text=Send' done"
    # json:true: the whole result, which element the selector reached included.
    summary, data = _dom(h, "click", {"selector": "text=Send", "json": True}, clicked)
    assert summary == "click 'text=Send' done" and data["result"] == clicked
    # A failure is passed on whole.
    failed = {"success": False, "error": "element_not_found", "action": "click", "selector": "#nope"}
    assert _dom(h, "click", {"selector": "#nope"}, failed)[1]["result"] == failed


def _answer(h, mode, args, result):
    d = h.run(INTERACT, mode, args, tool="interact")
    [cmd] = h.commands()
    h.answer(cmd, result)
    return fired(d)


def _text(answer):
    [block] = answer["content"]
    return block["text"]


_ELEMENT = {"tag": "a", "selectors": {"css": "#x"}, "input_type": "text", "input_name": "",
            "input_id": "x", "autocomplete": ""}
#: Every action mode whose answer is lean, with a call and the extension's answer to it when it
#: only confirms the action (the shapes of extension/content/commands.js, worker/commands.js,
#: worker/tabs.js and worker/devtools.js).
_CONFIRMING = [
    ("click", {"selector": "#x"}, {"action": "click", "selector": "#x", "element": _ELEMENT}),
    ("type", {"selector": "#x", "text": "Ada"},
     {"action": "type", "selector": "#x", "element": _ELEMENT, "typed_length": 3}),
    ("paste", {"selector": "#x", "text": "Ada"},
     {"action": "paste", "selector": "#x", "element": _ELEMENT}),
    ("hover", {"selector": "#x"},
     {"action": "hover", "selector": "#x", "element": _ELEMENT, "x": 10, "y": 20}),
    ("key_press", {"key": "Control+K"},
     {"action": "key_press", "key": ["Control+K"], "element": _ELEMENT}),
    ("key_press", {"key": "Enter", "selector": "#x"},
     {"action": "key_press", "selector": "#x", "key": ["Enter"]}),
    ("navigate", {"url": "https://app.test/next"},
     {"action": "navigate", "tab_id": 1, "url": "https://app.test/next", "title": "Next"}),
    ("refresh", {}, {"action": "refresh", "tab_id": 1, "url": "https://app.test/page", "title": "App"}),
    ("back", {}, {"action": "back", "tab_id": 1, "url": "https://app.test/a", "title": "A"}),
    ("forward", {}, {"action": "forward", "tab_id": 1, "url": "https://app.test/b", "title": "B"}),
    ("switch_tab", {"tab_id": 3}, {"action": "switch_tab", "tab_id": 3, "url": "https://app.test/", "title": "T"}),
    ("close_tab", {}, {"action": "close_tab", "tab_id": 1}),
    ("emulate", {"reset": True}, {"reset": True, "emulation": {}}),
]


@pytest.mark.parametrize("mode, args, result", _CONFIRMING,
                         ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(_CONFIRMING)])
def test_an_action_that_only_confirms_answers_its_summary_line_alone(h, mode, args, result):
    result = {"success": True, **result}
    text = _text(_answer(h, mode, args, result))
    assert "\n" not in text and text.strip(), text
    # The published shape, on request: the same line and the extension's whole result.
    summary, data = parse(_answer(h, mode, {**args, "json": True}, result))
    assert summary == text and data["result"] == result


#: Action results that say more than that the action was done: the JSON carries what they say.
_SAYING_MORE = [
    ("select", {"selector": "#x", "value": "Pear"},
     {"action": "select", "selector": "#x", "element": _ELEMENT, "value": "pear"}, {"value": "pear"}),
    ("check", {"selector": "#x"},
     {"action": "check", "selector": "#x", "element": _ELEMENT, "checked": True}, {"checked": True}),
    ("scroll_to", {"selector": "#x"},
     {"action": "scroll_to", "selector": "#x", "element": _ELEMENT, "scroll_y": 40}, {"scroll_y": 40}),
    ("hover", {"selector": "#x"},
     {"action": "hover", "selector": "#x", "element": _ELEMENT, "x": 1, "y": 2, "obscured_by": "div#cover"},
     {"obscured_by": "div#cover"}),
    # A click a dialog interrupted: the dialog and what to do about it.
    ("click", {"selector": "#x"},
     {"action": "click", "selector": "#x", "dialog": {"type": "confirm", "message": "Sure?"}, "note": "answer it"},
     {"dialog": {"type": "confirm", "message": "Sure?"}, "note": "answer it"}),
    ("new_tab", {"url": "https://app.test/n"},
     {"action": "new_tab", "tracked": False, "tab_id": 4, "url": "https://app.test/n", "title": "N",
      "note": "the new tab is not tracked"}, {"tracked": False, "note": "the new tab is not tracked"}),
    ("emulate", {"device": "pixel-7"}, {"emulation": {"device": "pixel-7"}},
     {"emulation": {"device": "pixel-7"}}),
    ("resize", {"width": 480, "height": 700}, {"emulation": {"viewport": {"width": 480, "height": 700}}},
     {"emulation": {"viewport": {"width": 480, "height": 700}}}),
    ("focus", {"selector": "#x"},
     {"action": "focus", "selector": "#x", "element": _ELEMENT, "focused": False}, {"focused": False}),
    ("set_attribute", {"selector": "#x", "attribute": "data-k", "value": "v"},
     {"action": "set_attribute", "selector": "#x", "element": _ELEMENT, "name": "data-k", "value": "v"},
     {"name": "data-k", "value": "v"}),
    ("drag", {"selector": "#card", "target": "#bin"},
     {"action": "drag", "selector": "#card", "target": "#bin", "element": _ELEMENT,
      "target_element": _ELEMENT, "html5_drag": True}, {"html5_drag": True}),
    ("dialog", {"accept": True},
     {"action": "accept", "dialog": {"type": "confirm", "message": "Sure?", "accepted": True}},
     {"dialog": {"type": "confirm", "message": "Sure?", "accepted": True}}),
]


@pytest.mark.parametrize("mode, args, result, said", _SAYING_MORE,
                         ids=[f"{m}-{i}" for i, (m, _, _, _) in enumerate(_SAYING_MORE)])
def test_an_action_result_that_says_more_keeps_it_in_the_json(h, mode, args, result, said):
    result = {"success": True, **result}
    assert parse(_answer(h, mode, args, result))[1]["result"] == said


def test_the_lean_modes_are_every_action_mode():
    # The class, enumerated: every interact mode that acts and answers through the extension
    # with a plain confirmation is in the table above (a new action mode must be added there).
    from gasoline.tools.interact import BROWSER_ACTIONS, DOM_ACTIONS, READ_ONLY_DOM_ACTIONS
    tested = {m for m, _, _ in _CONFIRMING} | {m for m, _, _, _ in _SAYING_MORE}
    actions = (set(DOM_ACTIONS) - READ_ONLY_DOM_ACTIONS) | set(BROWSER_ACTIONS) | {
        "hover", "drag", "key_press", "emulate", "resize", "dialog"}
    assert actions <= tested, actions - tested


def test_a_summary_line_alone_says_when_the_extension_is_not_connected(tmp_path):
    from _modes_harness import Harness

    ctx = Harness.create(tmp_path, connected=False).ctx(tool="interact", mode="click")
    summary, data = parse(ctx.said("click '#x' done"))
    assert "extension not connected" in summary and data["extension_connected"] is False


def test_json_must_be_a_boolean_and_is_refused_before_the_command_is_sent(h):
    from gasoline.core.errors import InvalidParam

    with pytest.raises(InvalidParam) as e:
        h.run(INTERACT, "click", {"selector": "#x", "json": "yes"}, tool="interact")
    assert e.value.details.get("param") == "json" or "json" in str(e.value)
    assert h.commands() == []


def test_a_summary_line_alone_does_not_use_up_the_untrusted_note(app):
    connect(app)
    s = session_for(app, "agent")
    out = start(app, s, "interact", {"what": "click", "selector": "#a"})
    answer_all(app, {"success": True, "action": "click", "selector": "#a"})
    assert parsed(out)[2] is None  # the summary line alone
    out = start(app, s, "interact", {"what": "get_text", "selector": "#a"}, rid=2)
    answer_all(app, {"success": True, "text": "hi"})
    assert parsed(out)[2][UNTRUSTED_FIELD] == UNTRUSTED_NOTE


def test_analyze_dom_answers_what_the_page_said_without_the_selector_echo(h):
    from gasoline.tools.analyze import MODES as ANALYZE

    page = {"url": "https://app.test/page", "title": "App", "selector": "#fruits li", "count": 1,
            "matches": [{"tag": "li", "text": "apple"}], "truncated": False}

    def run(args):
        d = h.run(ANALYZE, "dom", {"selector": "#fruits li", **args})
        [cmd] = h.commands()
        h.answer(cmd, page)
        return parse(fired(d))

    summary, data = run({})
    assert summary == "1 element(s) match '#fruits li'"
    assert data["dom"] == {k: v for k, v in page.items() if k != "selector"} and "selector" not in data
    # json:true: the published shape, the call's selector and the page's echo of it included.
    data = run({"json": True})[1]
    assert data["selector"] == "#fruits li" and data["dom"] == page

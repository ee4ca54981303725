"""interact modes (gasoline.tools.interact): the command each mode sends, pilot refusal,
AI actions recorded with source "ai", composite modes, saved states."""

from __future__ import annotations

import html
import json
import subprocess

import pytest

from _modes_harness import fired, parse
from support import require_tool
from gasoline.core.errors import GasolineError
from gasoline.core.storage.store import ACTIONS
from gasoline.generate import reproduction
from gasoline.tools._actions import selectors_for
from gasoline.tools._page_text import MARKDOWN_SCRIPT, READABLE_SCRIPT
from gasoline.tools.interact import MODES


def run(h, mode, args=None, client="A"):
    return h.run(MODES, mode, args, client_id=client, tool="interact")


def actions(h):
    return h.app.store.read(ACTIONS).items


def one_command(h, mode, args, result=None):
    d = run(h, mode, args)
    [cmd] = h.commands()
    h.answer(cmd, result if result is not None else {"success": True})
    return cmd, parse(fired(d))


@pytest.mark.parametrize("mode,args,params", [
    ("navigate", {"url": "https://app.test/next"}, {"action": "navigate", "url": "https://app.test/next"}),
    ("refresh", {"bypass_cache": True}, {"action": "refresh", "bypass_cache": True}),
    ("back", {}, {"action": "back"}),
    ("forward", {}, {"action": "forward"}),
    ("new_tab", {"url": "about:blank", "track": True}, {"action": "new_tab", "url": "about:blank", "track": True}),
    ("switch_tab", {"tab_id": 7}, {"action": "switch_tab", "tab_id": 7}),
    ("close_tab", {}, {"action": "close_tab"}),
])
def test_browser_actions_send_browser_action_and_are_recorded_as_ai(h, mode, args, params):
    cmd, (summary, body) = one_command(h, mode, args, {"success": True, "url": "https://app.test/next"})
    assert (cmd.type, cmd.params) == ("browser_action", params)
    [entry] = actions(h)
    assert entry["source"] == "ai" and entry["type"] == mode and entry["client_id"] == "A"
    assert summary.startswith(f"{mode} done")


@pytest.mark.parametrize("mode,args,params", [
    ("click", {"selector": "role=button[name=\"Save\"]"},
     {"action": "click", "selector": "role=button[name=\"Save\"]"}),
    ("type", {"selector": "label=Email", "text": "a@b.c"},
     {"action": "type", "selector": "label=Email", "text": "a@b.c"}),
    ("select", {"selector": "#country", "value": "fr"}, {"action": "select", "selector": "#country", "value": "fr"}),
    ("check", {"selector": "#tos", "checked": False}, {"action": "check", "selector": "#tos", "checked": False}),
    ("focus", {"selector": "#q"}, {"action": "focus", "selector": "#q"}),
    ("scroll_to", {"selector": "footer"}, {"action": "scroll_to", "selector": "footer"}),
    ("key_press", {"selector": "#q", "key": "Enter"}, {"action": "key_press", "selector": "#q", "key": "Enter"}),
    ("paste", {"selector": "#q", "text": "hi"}, {"action": "paste", "selector": "#q", "text": "hi"}),
    ("set_attribute", {"selector": "#q", "attribute": "data-x", "value": "1"},
     {"action": "set_attribute", "selector": "#q", "name": "data-x", "value": "1"}),
])
def test_dom_actions_send_the_extensions_params_and_are_recorded(h, mode, args, params):
    cmd, _ = one_command(h, mode, args, {"success": True})
    assert (cmd.type, cmd.params) == ("dom_action", params)
    [entry] = actions(h)
    assert entry["source"] == "ai" and entry["command"] == mode


@pytest.mark.parametrize("mode,args,params", [
    ("get_text", {"selector": "h1"}, {"action": "get_text", "selector": "h1"}),
    ("get_value", {"selector": "#q"}, {"action": "get_value", "selector": "#q"}),
    ("get_attribute", {"selector": "a", "attribute": "href"},
     {"action": "get_attribute", "selector": "a", "name": "href"}),
    ("wait_for", {"selector": "text=Done", "timeout_ms": 3000},
     {"action": "wait_for", "selector": "text=Done", "timeout_ms": 3000}),
    ("list_interactive", {"limit": 20}, {"action": "list_interactive", "limit": 20}),
])
def test_reading_dom_actions_are_not_recorded_and_work_with_the_pilot_off(h, mode, args, params):
    h.app.extension.settings["pilot_enabled"] = False
    cmd, _ = one_command(h, mode, args, {"success": True, "elements": []})
    assert (cmd.type, cmd.params) == ("dom_action", params)
    assert actions(h) == []


@pytest.mark.parametrize("mode,args", [
    ("navigate", {"url": "https://x.test/"}), ("click", {"selector": "#a"}),
    ("type", {"selector": "#a", "text": "x"}), ("execute_js", {"script": "1"}),
    ("fill_form", {"fields": {"#a": "x"}}), ("set_storage", {"key": "k", "value": "v"}),
    ("set_cookie", {"name": "n", "value": "v"}), ("get_markdown", {}),
    ("navigate_and_wait_for", {"url": "https://x.test/", "wait_for": "#a"}),
])
def test_acting_modes_are_refused_when_the_pilot_is_disabled(h, mode, args):
    h.app.extension.settings["pilot_enabled"] = False
    with pytest.raises(GasolineError) as e:
        run(h, mode, args)
    assert e.value.code == "pilot_disabled"
    assert "AI Web Pilot" in e.value.retry
    assert h.commands() == [] and actions(h) == []


@pytest.mark.parametrize("launched,words,not_words", [
    (None, ["popup"], ["--pilot"]),  # the user's own browser: the popup's switch
    ({"headless": False}, ["gasoline browser --pilot"], ["in the Gasoline extension popup"]),
    ({"headless": True}, ["gasoline browser --pilot", "headless: it has no popup"],
     ["in the Gasoline extension popup"]),
])
def test_the_pilot_hint_fits_how_the_browser_was_started(h, launched, words, not_words):
    """A browser `gasoline browser` started says so in its settings (`launched`): the fix is
    its --pilot option, not a popup (a headless browser has none)."""
    h.app.extension.settings["pilot_enabled"] = False
    if launched is not None:
        h.app.extension.settings["launched"] = launched
    with pytest.raises(GasolineError) as e:
        run(h, "click", {"selector": "#a"})
    assert e.value.code == "pilot_disabled"
    for w in words:
        assert w in e.value.retry
    for w in not_words:
        assert w not in e.value.retry


def test_recorded_actions_carry_the_extensions_selectors_and_replay(h):
    d = run(h, "click", {"selector": "text=Save"})
    [cmd] = h.commands()
    h.answer(cmd, {"success": True, "element": {"tag": "button",
                                                "selectors": {"testId": "save", "css": "#save"}}})
    fired(d)
    run(h, "type", {"selector": "placeholder=Search", "text": "shoes"})
    [cmd2] = h.commands()
    h.answer(cmd2, {"success": True})
    recorded = actions(h)
    assert recorded[0]["selectors"] == {"testId": "save", "css": "#save"}
    assert recorded[1]["type"] == "input" and recorded[1]["value"] == "shoes"
    assert recorded[1]["selectors"]["placeholder"] == "Search"
    script = reproduction(recorded)["script"]
    assert 'page.getByTestId("save").click()' in script
    assert '.fill("shoes")' in script


def test_typing_into_a_password_field_records_no_secret(h):
    fired_d = run(h, "type", {"selector": "#password", "text": "hunter2"})
    [cmd] = h.commands()
    h.answer(cmd, {"success": True})
    fired(fired_d)
    [entry] = actions(h)
    assert entry["value"] == "[REDACTED:input]" and entry["input_type"] == "password"


def test_failed_action_is_not_recorded(h):
    d = run(h, "click", {"selector": "#nope"})
    [cmd] = h.commands()
    h.answer(cmd, status="error", error="element_not_found")
    with pytest.raises(GasolineError):
        fired(d)
    assert actions(h) == []


def test_background_action_is_recorded_at_submission(h):
    _, body = parse(run(h, "click", {"selector": "#a", "background": True}))
    [entry] = actions(h)
    assert entry["status"] == "submitted" and entry["correlation_id"] == body["correlation_id"]


def test_selectors_for_semantic_forms():
    assert selectors_for("text=Save") == {"text": "Save"}
    assert selectors_for('role=button[name="Save"]') == {"role": {"role": "button", "name": "Save"}}
    assert selectors_for("role=link name='Home'") == {"role": {"role": "link", "name": "Home"}}
    assert selectors_for("aria-label=Close") == {"ariaLabel": "Close"}
    assert selectors_for("label=Email") == {"label": "Email"}
    assert selectors_for("#a .b") == {"css": "#a .b"}


def test_element_ids_from_list_interactive_are_per_client(h):
    d = run(h, "list_interactive")
    [cmd] = h.commands()
    h.answer(cmd, {"count": 1, "elements": [{"element_id": "e1", "selector": "#buy"}]})
    fired(d)
    d2 = run(h, "click", {"element_id": "e1"})
    [cmd2] = h.commands()
    assert cmd2.params["selector"] == "#buy"
    h.answer(cmd2, {"success": True})
    fired(d2)
    with pytest.raises(GasolineError) as e:
        run(h, "click", {"element_id": "e1"}, client="B")
    assert e.value.code == "invalid_param"


def test_click_needs_a_selector(h):
    with pytest.raises(GasolineError) as e:
        run(h, "click", {})
    assert e.value.code == "missing_param"


def test_navigate_refuses_javascript_urls(h):
    with pytest.raises(GasolineError) as e:
        run(h, "navigate", {"url": "javascript:alert(1)"})
    assert e.value.code == "invalid_param"


def test_highlight_subtitle_execute_js_send_their_commands(h):
    c1, _ = one_command(h, "highlight", {"selector": "#a", "duration_ms": 500})
    assert (c1.type, c1.params) == ("highlight", {"selector": "#a", "duration_ms": 500})
    c2, _ = one_command(h, "subtitle", {"text": "Step 1"})
    assert (c2.type, c2.params) == ("subtitle", {"text": "Step 1"})
    assert actions(h) == []
    c3, (_, body) = one_command(h, "execute_js", {"script": "document.title", "world": "isolated"},
                                {"success": True, "result": "App", "world": "isolated"})
    assert (c3.type, c3.params) == ("execute", {"script": "document.title", "world": "isolated"})
    assert body["result"]["result"] == "App"
    assert actions(h)[-1]["type"] == "execute_js"


def test_execute_js_rejects_an_unknown_world(h):
    with pytest.raises(GasolineError) as e:
        run(h, "execute_js", {"script": "1", "world": "page"})
    assert e.value.code == "invalid_param"


def test_screenshot_returns_the_saved_path(h):
    d = run(h, "screenshot", {"format": "png"})
    [cmd] = h.commands()
    assert (cmd.type, cmd.params) == ("screenshot", {"format": "png"})
    # What POST /screenshots with query_id resolves the command with.
    h.answer(cmd, {"filename": "shot.png", "path": "/state/screenshots/shot.png",
                   "url": "https://app.test/"})
    summary, body = parse(fired(d))
    assert body["path"] == "/state/screenshots/shot.png"
    # No image was uploaded through POST /screenshots here: nothing to inline, and it says so.
    assert summary.startswith("screenshot saved to /state/screenshots/shot.png (no inline image")


def test_fill_form_and_submit_types_checks_and_clicks_in_order(h):
    d = run(h, "fill_form_and_submit", {"fields": [
        {"selector": "#email", "value": "a@b.c"}, {"selector": "#tos", "value": True},
        {"selector": "#plan", "value": "pro", "action": "select"}]})
    sent = []
    for _ in range(4):
        [cmd] = h.commands()
        sent.append(cmd.params)
        h.answer(cmd, {"success": True})
    assert sent == [
        {"action": "type", "selector": "#email", "text": "a@b.c"},
        {"action": "check", "selector": "#tos", "checked": True},
        {"action": "select", "selector": "#plan", "value": "pro"},
        {"action": "click", "selector": "button[type=submit], input[type=submit]"},
    ]
    summary, _ = parse(fired(d))
    assert summary == "filled 3 field(s) and submitted the form"
    assert [a["type"] for a in actions(h)] == ["input", "check", "select", "click"]


def test_fill_form_stops_at_the_first_failing_field_and_says_which(h):
    d = run(h, "fill_form", {"fields": {"#a": "1", "#b": "2", "#c": "3"}})
    [c1] = h.commands()
    h.answer(c1, {"success": True})
    [c2] = h.commands()
    h.answer(c2, status="error", error="element_not_found")
    with pytest.raises(GasolineError) as e:
        fired(d)
    assert e.value.details["failed_field"] == "#b" and e.value.details["filled"] == ["#a"]
    assert h.commands() == []


def test_fill_form_validates_fields(h):
    for bad in ({}, [], "x", [{"value": 1}], {"#a": {"nested": 1}}):
        with pytest.raises(GasolineError) as e:
            run(h, "fill_form", {"fields": bad})
        assert e.value.code == "invalid_param", bad


def test_navigate_and_wait_for(h):
    d = run(h, "navigate_and_wait_for", {"url": "https://app.test/b", "wait_for": "#ready"})
    [nav] = h.commands()
    assert nav.params == {"action": "navigate", "url": "https://app.test/b"}
    h.answer(nav, {"success": True, "url": "https://app.test/b"})
    [wait] = h.commands()
    assert wait.params == {"action": "wait_for", "selector": "#ready", "timeout_ms": 10000}
    h.answer(wait, {"success": True, "count": 1})
    summary, _ = parse(fired(d))
    assert summary == "navigated to https://app.test/b and found '#ready'"
    assert actions(h)[0]["to_url"] == "https://app.test/b"


def test_get_markdown_and_get_readable_run_a_page_script(h):
    cmd, (summary, body) = one_command(h, "get_markdown", {}, {
        "success": True, "world": "main",
        "result": {"url": "https://app.test/", "title": "T", "markdown": "# Hi", "length": 4}})
    assert cmd.type == "execute" and "markdown" in cmd.params["script"]
    assert body["markdown"] == "# Hi"
    cmd2, (_, body2) = one_command(h, "get_readable", {}, {
        "success": True, "result": {"url": "https://app.test/", "text": "Hello", "length": 5}})
    assert body2["text"] == "Hello"


def test_storage_and_cookie_modes_embed_params_as_json(h):
    cmd, _ = one_command(h, "set_storage", {"key": "k'); alert(1); ('", "value": {"a": 1},
                                            "storage_type": "session"})
    assert "sessionStorage.setItem(p.key, p.value)" in cmd.params["script"]
    assert json.dumps({"key": "k'); alert(1); ('", "value": '{"a": 1}'}) in cmd.params["script"]
    for mode, args in (("delete_storage", {"key": "k"}), ("clear_storage", {}),
                       ("set_cookie", {"name": "theme", "value": "dark", "max_age": 60}),
                       ("delete_cookie", {"name": "theme"})):
        c, _ = one_command(h, mode, args, {"success": True, "result": {}})
        assert c.type == "execute", mode
    assert [a["type"] for a in actions(h)] == ["set_storage", "delete_storage", "clear_storage",
                                               "set_cookie", "delete_cookie"]
    with pytest.raises(GasolineError):
        run(h, "set_cookie", {"name": "bad name;", "value": "x"})


def test_states_are_saved_listed_loaded_and_deleted_per_client(h):
    d = run(h, "save_state", {"name": "cart"})
    [cap] = h.commands()
    assert cap.type == "state_capture"
    h.answer(cap, {"url": "https://app.test/page", "local_storage": {"cart": "[1]"},
                   "session_storage": {}, "form_values": [{"selector": "#q", "value": "x"}]})
    parse(fired(d))
    _, listed = parse(run(h, "list_states"))
    assert [s["name"] for s in listed["states"]] == ["cart"]
    _, other = parse(run(h, "list_states", client="B"))
    assert other["states"] == []
    # Loading: same URL as the tracked tab, so no navigation; one execute restores it.
    d2 = run(h, "load_state", {"name": "cart"})
    [restore] = h.commands()
    assert restore.type == "execute" and '"cart": "[1]"' in restore.params["script"]
    h.answer(restore, {"success": True, "result": {"local": 1, "fields": 1}})
    _, loaded = parse(fired(d2))
    assert loaded["restored"] == {"local": 1, "fields": 1}
    with pytest.raises(GasolineError) as e:
        run(h, "load_state", {"name": "cart"}, client="B")
    assert e.value.code == "no_data"
    parse(run(h, "delete_state", {"name": "cart"}))
    assert parse(run(h, "list_states"))[1]["states"] == []


def test_load_state_navigates_first_when_the_page_differs(h):
    h.ctx("A").state.kv["interact:states"] = {"s": {"url": "https://app.test/other",
                                                    "local_storage": {}}}
    d = run(h, "load_state", {"name": "s"})
    [nav] = h.commands()
    assert nav.params == {"action": "navigate", "url": "https://app.test/other"}
    h.answer(nav, {"success": True})
    [restore] = h.commands()
    h.answer(restore, {"success": True, "result": {}})
    assert parse(fired(d))[1]["navigated"] is True


def test_run_a11y_and_export_sarif(h):
    d = run(h, "run_a11y_and_export_sarif")
    [cmd] = h.commands()
    assert cmd.type == "a11y"
    h.answer(cmd, {"violations": []})
    assert parse(fired(d))[0].startswith("SARIF 2.1.0 with 0 result(s)")


def test_every_issue_4_interact_mode_has_a_handler():
    listed = {"navigate", "refresh", "back", "forward", "new_tab", "switch_tab", "close_tab",
              "click", "type", "select", "check", "focus", "scroll_to", "wait_for", "key_press",
              "paste", "get_text", "get_value", "get_attribute", "set_attribute",
              "list_interactive", "highlight", "subtitle", "execute_js", "screenshot", "fill_form",
              "fill_form_and_submit", "navigate_and_wait_for", "get_readable", "get_markdown",
              "save_state", "load_state", "list_states", "delete_state", "set_storage",
              "delete_storage", "clear_storage", "set_cookie", "delete_cookie"}
    assert listed <= set(MODES)


def test_an_unencodable_extension_answer_still_records_the_action(h):
    d = run(h, "click", {"selector": "#a"})
    [cmd] = h.commands()
    h.answer(cmd, {"success": True, "element": {"selectors": {"css": "#a", "n": 2**80}}})
    fired(d)
    [entry] = actions(h)
    assert entry["selectors"] == {"css": "#a"} and entry["source"] == "ai"


PAGE = """<!doctype html><html><head><title>Doc</title></head><body>
<nav><a href="/home">Home</a></nav>
<main>
  <h1>Getting started</h1>
  <p>Install <strong>Gasoline</strong> and read the <a href="https://docs.test/guide">guide</a>.</p>
  <ul><li>one</li><li>two</li></ul>
  <pre>npm i gasoline</pre>
  <table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>
  <script>var hidden = "not content";</script>
  <form><input id="q" value=""><input type="checkbox" id="tos"></form>
</main>
<pre id="gasoline-out"></pre>
<script>
(async () => {
  const out = {};
  for (const [name, code] of Object.entries(__CODES__)) {
    try {
      // The same wrapping as the extension's runUserScript.
      const fn = new Function('return (async () => (\\n' + code + '\\n))()');
      out[name] = await fn();
    } catch (e) { out[name] = { thrown: String(e) }; }
  }
  document.getElementById('gasoline-out').textContent = JSON.stringify(out);
})();
</script></body></html>"""


def _scripts_sent(h):
    """The execute scripts the storage and state modes send (captured from their commands)."""
    codes = {}
    h.ctx("A").state.kv["interact:states"] = {"s": {
        "url": "https://app.test/page", "local_storage": {"restored": "yes"},
        "form_values": [{"selector": "#q", "value": "typed"}, {"selector": "#tos", "value": "true"},
                        {"selector": "#gone", "value": "x"}]}}
    for name, mode, args in (("set", "set_storage", {"key": "k", "value": {"a": 1}}),
                             ("delete", "delete_storage", {"key": "k"}),
                             ("restore", "load_state", {"name": "s"})):
        run(h, mode, args)
        [cmd] = h.commands()
        codes[name] = cmd.params["script"]
        h.answer(cmd, {"success": True})
    return codes


def test_page_scripts_run_in_chromium_and_extract_markdown_text_storage_and_state(h, tmp_path):
    """get_markdown / get_readable / storage / load_state scripts, run in headless Chromium with the
    extension's wrapping (no extension needed: the scripts are plain page JavaScript)."""
    chromium = require_tool("chromium", why="runs the interact page scripts")
    codes = {"markdown": MARKDOWN_SCRIPT, "readable": READABLE_SCRIPT, **_scripts_sent(h)}
    codes["check"] = "({ k: localStorage.getItem('k'), restored: localStorage.getItem('restored'), " \
                     "q: document.getElementById('q').value, tos: document.getElementById('tos').checked })"
    page = tmp_path / "page.html"
    page.write_text(PAGE.replace("__CODES__", json.dumps(codes).replace("</", "<\\/")))
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
         "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
        capture_output=True, timeout=60, text=True)
    start = proc.stdout.index('<pre id="gasoline-out">') + len('<pre id="gasoline-out">')
    out = json.loads(html.unescape(proc.stdout[start:proc.stdout.index("</pre>", start)]))
    md = out["markdown"]["markdown"]
    assert md.startswith("# Getting started")
    assert "**Gasoline**" in md and "[guide](https://docs.test/guide)" in md
    assert "- one\n- two" in md and "```\nnpm i gasoline\n```" in md
    assert "| k | v |" in md and "| a | 1 |" in md
    assert "Home" not in md and "not content" not in md
    text = out["readable"]["text"]
    assert "Getting started" in text and "Home" not in text and "not content" not in text
    assert out["set"] == {"key": "k", "stored": True}
    assert out["delete"] == {"key": "k", "removed": True}
    assert out["restore"]["local"] == 1 and out["restore"]["fields"] == 2
    assert out["restore"]["missing_fields"] == ["#gone"]
    assert out["check"] == {"k": None, "restored": "yes", "q": "typed", "tos": True}


# -- the field's nature decides, for the agent's typing as for the user's ------------------

@pytest.mark.parametrize("element, secret", [
    ({"input_type": "password", "input_name": "pw", "input_id": "pw", "autocomplete": ""}, True),
    ({"input_type": "text", "input_name": "code", "input_id": "",
      "autocomplete": "one-time-code"}, True),
    ({"input_type": "tel", "input_name": "cc", "input_id": "", "autocomplete": "cc-number"}, True),
    ({"input_type": "text", "input_name": "user_pin", "input_id": "", "autocomplete": ""}, True),
    ({"input_type": "text", "input_name": "q", "input_id": "search", "autocomplete": "off"}, False),
])
def test_the_field_nature_the_extension_reports_decides_what_is_recorded(h, element, secret):
    d = run(h, "type", {"selector": "#f", "text": "hunter2"})  # the selector says nothing
    [cmd] = h.commands()
    h.answer(cmd, {"success": True, "element": {"tag": "input", "selectors": {"css": "#f"},
                                                **element}})
    fired(d)
    [entry] = actions(h)
    assert entry["input_type"] == element["input_type"]
    assert entry["autocomplete"] == element["autocomplete"]
    assert entry["value"] == ("[REDACTED:input]" if secret else "hunter2")
    if secret:
        text = reproduction(actions(h))["script"]
        assert "hunter2" not in text and "GASOLINE_TEST_PASSWORD" in text


def test_a_user_and_an_agent_typing_into_one_field_are_recorded_alike(h):
    """The same rule at ingest (the user's action, as the extension sends it) and for the
    agent's: both keep the field's nature, neither keeps the value."""
    nature = {"input_type": "password", "input_name": "pw", "input_id": "pw", "autocomplete": ""}
    from gasoline.core.redaction.fields import redact_typed_values
    user = [{"type": "input", "selectors": {"css": "#pw"}, "value": "hunter2", **nature}]
    redact_typed_values(user)
    d = run(h, "type", {"selector": "#pw", "text": "hunter2"})
    [cmd] = h.commands()
    h.answer(cmd, {"success": True, "element": {"tag": "input", "selectors": {"css": "#pw"},
                                                **nature}})
    fired(d)
    [agent] = actions(h)
    assert user[0]["value"] == agent["value"] == "[REDACTED:input]"
    assert {k: agent[k] for k in nature} == {k: user[0][k] for k in nature}

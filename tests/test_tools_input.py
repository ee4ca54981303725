"""The real-input interact modes (gasoline.tools._input): hover, drag, key_press with modifiers,
dialog, emulate and resize send the extension's params, are refused with the pilot off, reject bad
arguments before anything is sent, record the AI's actions, and surface the extension's dialog
codes (dialog_pending, no_dialog) with their hint."""

from __future__ import annotations

import pytest

from _modes_harness import fired, parse
from gasoline.core.errors import GasolineError, InvalidParam, MissingParam
from gasoline.core.storage.store import ACTIONS
from gasoline.tools.interact import MODES
from gasoline.tools.schemas import INTERACT_MODES


def run(h, mode, args=None):
    return h.run(MODES, mode, args, client_id="A", tool="interact")


def one_command(h, mode, args, result=None):
    d = run(h, mode, args)
    [cmd] = h.commands()
    h.answer(cmd, result if result is not None else {"success": True})
    return cmd, parse(fired(d))


def actions(h):
    return h.app.store.read(ACTIONS).items


@pytest.mark.parametrize("mode,args,type_,params", [
    ("hover", {"selector": "text=Account"}, "dom_action", {"action": "hover", "selector": "text=Account"}),
    ("drag", {"selector": "#card", "target": "#bin"}, "dom_action",
     {"action": "drag", "selector": "#card", "target": "#bin"}),
    ("key_press", {"key": "Control+K"}, "dom_action", {"action": "key_press", "key": "Control+K"}),
    ("key_press", {"key": "Shift+Tab", "selector": "#q"}, "dom_action",
     {"action": "key_press", "key": "Shift+Tab", "selector": "#q"}),
    ("key_press", {}, "dom_action", {"action": "key_press", "key": "Enter"}),
    ("dialog", {}, "dialog", {"action": "status"}),
    ("dialog", {"accept": True, "prompt_text": "hi"}, "dialog", {"action": "accept", "prompt_text": "hi"}),
    ("dialog", {"accept": False}, "dialog", {"action": "dismiss"}),
    ("emulate", {"device": "Pixel-7", "offline": True}, "emulate", {"device": "pixel-7", "offline": True}),
    ("emulate", {"viewport": {"width": 400, "height": 800, "mobile": 1}, "color_scheme": "dark",
                 "cpu_throttling": 4, "network": "slow-3g", "geolocation": {"latitude": 1, "longitude": 2}},
     "emulate", {"viewport": {"width": 400, "height": 800, "mobile": True}, "color_scheme": "dark",
                 "cpu_throttling": 4, "network": "slow-3g", "geolocation": {"latitude": 1, "longitude": 2}}),
    ("emulate", {"network_conditions": {"latency_ms": 100, "download_kbps": 500}, "geolocation": {}},
     "emulate", {"network": {"latency_ms": 100, "download_kbps": 500}, "geolocation": None}),
    ("emulate", {"reset": True, "device": "ignored-when-resetting"}, "emulate", {"reset": True}),
    ("resize", {"width": 480, "height": 700}, "emulate", {"viewport": {"width": 480, "height": 700}}),
])
def test_each_mode_sends_the_extensions_command(h, mode, args, type_, params):
    cmd, (summary, _) = one_command(h, mode, args, {"success": True, "emulation": {"viewport": {}}})
    assert (cmd.type, cmd.params) == (type_, params)
    assert summary


def test_input_actions_are_recorded_as_ai_actions(h):
    one_command(h, "hover", {"selector": "#menu"})
    one_command(h, "drag", {"selector": "#a", "target": "#b"})
    one_command(h, "key_press", {"key": "Control+K"})
    recorded = actions(h)
    assert [(e["type"], e["source"], e["client_id"]) for e in recorded] == [
        ("hover", "ai", "A"), ("drag", "ai", "A"), ("keypress", "ai", "A")]
    assert recorded[1]["target"] == "#b" and recorded[2]["key"] == "Control+K"


def test_a_dialog_in_the_answer_is_named_in_the_summary(h):
    _, (summary, body) = one_command(h, "key_press", {"key": "Enter", "selector": "#q"},
                                     {"success": True, "dialog": {"type": "confirm", "message": "Sure?"}})
    assert "confirm dialog opened" in summary and body["result"]["dialog"]["type"] == "confirm"
    _, (summary, _) = one_command(h, "dialog", {}, {"pending": {"type": "prompt", "message": "Name?"}})
    assert summary == "a prompt dialog is open: 'Name?'"
    _, (summary, _) = one_command(h, "dialog", {}, {"pending": None})
    assert summary == "no dialog is open"


@pytest.mark.parametrize("mode,args", [
    ("hover", {"selector": "#a"}), ("drag", {"selector": "#a", "target": "#b"}),
    ("key_press", {"key": "Control+K"}), ("dialog", {}), ("emulate", {"offline": True}),
    ("resize", {"width": 500, "height": 500}),
])
def test_every_new_mode_needs_the_pilot(h, mode, args):
    h.app.extension.settings["pilot_enabled"] = False
    with pytest.raises(GasolineError) as e:
        run(h, mode, args)
    assert e.value.code == "pilot_disabled"
    assert h.commands() == [] and actions(h) == []


@pytest.mark.parametrize("mode,args,error,param", [
    ("hover", {}, MissingParam, "selector"),
    ("drag", {"selector": "#a"}, MissingParam, "target"),
    ("key_press", {"key": "x" * 201}, InvalidParam, "key"),
    ("dialog", {"accept": True, "prompt_text": 5}, InvalidParam, "prompt_text"),
    ("emulate", {}, MissingParam, "device"),
    ("emulate", {"device": "nokia-3310"}, InvalidParam, "device"),
    ("emulate", {"width": 50, "height": 500}, InvalidParam, "width"),
    ("emulate", {"width": 500}, InvalidParam, "height"),
    ("emulate", {"viewport": "big"}, InvalidParam, "viewport"),
    ("emulate", {"viewport": {"width": 500, "height": 500, "device_scale_factor": 0}}, InvalidParam,
     "device_scale_factor"),
    ("emulate", {"cpu_throttling": 0.5}, InvalidParam, "cpu_throttling"),
    ("emulate", {"cpu_throttling": True}, InvalidParam, "cpu_throttling"),
    ("emulate", {"network": "5g"}, InvalidParam, "network"),
    ("emulate", {"network": "offline", "network_conditions": {}}, InvalidParam, "network_conditions"),
    ("emulate", {"network_conditions": {"latency_ms": -1}}, InvalidParam, "network_conditions"),
    ("emulate", {"color_scheme": "sepia"}, InvalidParam, "color_scheme"),
    ("emulate", {"geolocation": {"latitude": 91, "longitude": 0}}, InvalidParam, "geolocation"),
    ("emulate", {"geolocation": [1, 2]}, InvalidParam, "geolocation"),
    ("resize", {"offline": True}, MissingParam, "width"),
])
def test_bad_arguments_are_refused_before_anything_is_sent(h, mode, args, error, param):
    with pytest.raises(error) as e:
        run(h, mode, args)
    assert e.value.details.get("param") == param, e.value.details
    assert h.commands() == []


@pytest.mark.parametrize("code", ["dialog_pending", "no_dialog"])
def test_the_extensions_dialog_codes_reach_the_agent_with_a_hint(h, code):
    d = run(h, "hover", {"selector": "#a"})
    [cmd] = h.commands()
    h.answer(cmd, {"error": code, "message": "a confirm dialog is open",
                   "dialog": {"type": "confirm", "message": "Sure?"}}, status="error", error=code)
    failure = []
    d.addErrback(failure.append)
    [f] = failure
    assert f.value.code == code and "dialog" in f.value.retry
    if code == "dialog_pending":
        assert f.value.details["dialog"] == {"type": "confirm", "message": "Sure?"}
    assert actions(h) == []


def test_the_schema_lists_the_new_modes():
    assert {"hover", "drag", "dialog", "emulate", "resize", "key_press"} <= set(INTERACT_MODES)
    assert set(INTERACT_MODES) <= set(MODES)


def test_performance_trace_sends_trace_and_summarizes_the_insights(h):
    result = {"success": True, "lcp": {"time": 812.4, "element": "#hero", "phases": {
        "ttfb": 100, "load_delay": 500, "load_duration": 150, "render_delay": 62.4}},
        "layout_shifts": {"cls": 0.12, "by_element": [{"element": "#ad", "value": 0.1}]},
        "long_tasks": {"count": 2, "total_blocking_time": 130}, "render_blocking": [{"url": "a.css"}]}
    cmd, (summary, body) = one_command(h, "performance_trace", {"settle_ms": 500, "reload": False}, result)
    assert (cmd.type, cmd.params) == ("trace", {"settle_ms": 500, "reload": False})
    assert summary == ("trace: LCP 812 ms (#hero; largest phase load_delay 500 ms); CLS 0.12 (most from "
                       "#ad); 2 long task(s), TBT 130 ms; 1 render-blocking request(s)")
    assert body["trace"] == result
    _, (summary, _) = one_command(h, "performance_trace", {}, {"success": True, "lcp": None})
    assert summary == "trace: no LCP; CLS 0; 0 long task(s), TBT n/a; 0 render-blocking request(s)"


def test_performance_trace_bounds_and_pilot(h):
    with pytest.raises(InvalidParam):
        run(h, "performance_trace", {"settle_ms": 60_000})
    h.app.extension.settings["pilot_enabled"] = False
    with pytest.raises(GasolineError) as e:
        run(h, "performance_trace", {})
    assert e.value.code == "pilot_disabled" and h.commands() == []


def test_hover_and_drag_replay_and_generate_playwright_steps():
    from gasoline.generate.scripts import action_lines
    from gasoline.tools._playback import step_for

    hover = {"type": "hover", "selectors": {"css": "#menu"}}
    drag = {"type": "drag", "selectors": {"css": "#card"}, "target": "#bin"}
    assert action_lines(hover) == ['await page.locator("#menu").hover();']
    assert action_lines(drag) == ['await page.locator("#card").dragTo(page.locator("#bin"));']
    assert step_for(hover) == ("hover", {"selector": "#menu"}, "")
    assert step_for(drag) == ("drag", {"selector": "#card", "target": "#bin"}, "")
    assert step_for({"type": "drag", "selectors": {"css": "#card"}})[0] is None


def test_drag_takes_refs_for_both_ends(h):
    d = run(h, "drag", {"ref": "e3", "target_ref": "E7"})
    [cmd] = h.commands()
    assert cmd.params == {"action": "drag", "selector": "ref=e3", "target": "ref=e7"}
    h.answer(cmd, {"success": True})
    fired(d)
    with pytest.raises(InvalidParam) as e:
        run(h, "drag", {"ref": "e3", "target_ref": "#bin"})
    assert e.value.details.get("param") == "ref"

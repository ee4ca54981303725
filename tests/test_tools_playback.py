"""configure playback / observe playback_results: a saved recording replayed through the router."""

from __future__ import annotations

import pytest

from _modes_harness import Harness, parse
from gasoline.core.errors import GasolineError
from gasoline.core.storage.store import ACTIONS
from gasoline.tools.configure import MODES as CONFIGURE
from gasoline.tools.observe import MODES as OBSERVE
from gasoline.tools._playback import selector_for, step_for

RECORDED = [
    {"type": "click", "selectors": {"testId": "go-button", "css": "#go"}, "url": "https://app.test/a"},
    {"type": "input", "selectors": {"css": "#q"}, "value": "shoes"},
    {"type": "input", "selectors": {"css": "#pw"}, "value": "[redacted]", "input_type": "password"},
    {"type": "select", "selectors": {"ariaLabel": "Colour"}, "value": "g"},
    {"type": "scroll", "scroll_y": 600},
    {"type": "keypress", "key": "Enter", "selectors": {"css": "#q"}},
]


def record(h, client="A", actions=RECORDED, name="checkout"):
    h.run(CONFIGURE, "recording_start", {"name": name}, client_id=client, tool="configure")
    h.app.store.add(ACTIONS, [dict(a) for a in actions])
    h.run(CONFIGURE, "recording_stop", {}, client_id=client, tool="configure")


def results(h, playback_id, client="A"):
    return parse(h.run(OBSERVE, "playback_results", {"playback_id": playback_id},
                       client_id=client, tool="observe"))[1]


def answer_all(h, result=None):
    for command in h.commands():
        h.answer(command, result if result is not None else {"success": True})


def test_selectors_prefer_test_id_then_css_then_aria_then_role_then_text():
    assert selector_for({"selectors": {"testId": "go", "css": "#x"}}) == '[data-testid="go"]'
    assert selector_for({"selectors": {"css": "#x", "ariaLabel": "Go"}}) == "#x"
    assert selector_for({"selectors": {"ariaLabel": "Go", "text": "Go"}}) == "aria-label=Go"
    assert selector_for({"selectors": {"role": {"role": "button", "name": "Go"}}}) == 'role=button[name="Go"]'
    assert selector_for({"selectors": {"text": "Go"}}) == "text=Go"
    assert selector_for({"selectors": {}}) is None


def test_password_values_and_scrolls_are_skipped_not_replayed():
    assert step_for(RECORDED[2])[0] is None and "password" in step_for(RECORDED[2])[2]
    assert step_for(RECORDED[4])[0] is None
    assert step_for({"type": "navigate", "to_url": "javascript:alert(1)"})[0] is None


def test_playback_replays_each_step_through_the_extension_in_order(h):
    record(h)
    _, started = parse(h.run(CONFIGURE, "playback", {"name": "checkout"}, tool="configure"))
    pid = started["playback_id"]
    assert started["status"] == "running"
    sent = []
    for _ in range(10):
        commands = h.commands()
        if not commands:
            break
        assert len(commands) == 1, "steps run one at a time"
        sent.append((commands[0].type, commands[0].params))
        answer_all(h)
    kinds = [(t, p.get("action")) for t, p in sent]
    assert kinds == [("browser_action", "navigate"), ("dom_action", "click"), ("dom_action", "type"),
                     ("dom_action", "select"), ("dom_action", "key_press")]
    assert sent[1][1]["selector"] == '[data-testid="go-button"]'
    assert sent[2][1]["text"] == "shoes"
    body = results(h, pid)
    assert body["status"] == "complete"
    assert body["counts"] == {"complete": 5, "skipped": 2}
    ai = [a for a in h.app.store.read(ACTIONS).items if a.get("source") == "ai"]
    assert len(ai) >= 4  # every replayed page action is recorded as an AI action


def test_a_failed_step_stops_the_playback_and_later_steps_do_not_run(h):
    record(h)
    pid = parse(h.run(CONFIGURE, "playback", {"name": "checkout"}, tool="configure"))[1]["playback_id"]
    answer_all(h)  # the navigate
    [click] = h.commands()
    h.answer(click, {"error": "element_not_found"}, status="error", error="element_not_found")
    assert h.commands() == []
    body = results(h, pid)
    assert body["status"] == "failed"
    statuses = [s["status"] for s in body["steps"]]
    assert statuses[:2] == ["complete", "error"] and set(statuses[2:]) <= {"not_run", "skipped"}


def test_playback_results_belong_to_their_owner_only(h):
    record(h, client="A")
    pid = parse(h.run(CONFIGURE, "playback", {"name": "checkout"}, tool="configure"))[1]["playback_id"]
    with pytest.raises(GasolineError) as e:
        results(h, pid, client="B")
    assert e.value.code == "no_data"
    listed = parse(h.run(OBSERVE, "playback_results", {}, client_id="B", tool="observe"))[1]
    assert listed["playbacks"] == []
    with pytest.raises(GasolineError) as e:  # nor can B replay A's recording
        h.run(CONFIGURE, "playback", {"name": "checkout"}, client_id="B", tool="configure")
    assert e.value.code == "no_data"
    while h.commands():
        answer_all(h)


@pytest.mark.parametrize("setting, code", [({"pilot_enabled": False}, "pilot_disabled"),
                                           ({"connected": False}, "extension_disconnected")])
def test_playback_is_refused_at_once_with_the_pilot_off_or_no_extension(tmp_path, setting, code):
    harness = Harness.create(tmp_path, **setting)
    record(harness)
    with pytest.raises(GasolineError) as e:
        harness.run(CONFIGURE, "playback", {"name": "checkout"}, tool="configure")
    assert e.value.code == code
    harness.close()


def test_playback_of_an_unknown_recording_or_without_a_name_is_a_clear_error(h):
    with pytest.raises(GasolineError) as e:
        h.run(CONFIGURE, "playback", {}, tool="configure")
    assert e.value.code == "missing_param"
    with pytest.raises(GasolineError) as e:
        h.run(CONFIGURE, "playback", {"name": "nope"}, tool="configure")
    assert e.value.code == "no_data"

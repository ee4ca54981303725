"""A tab tracked after it loaded: the agent's next answer says its load was not captured and how to
reload; once per agent, until the extension reports the tab reloaded."""

from __future__ import annotations

from _modes_harness import Harness, parse

from gasoline.tools.observe import MODES as OBSERVE


def test_the_next_answer_of_each_agent_says_to_reload_once(tmp_path):
    h = Harness.create(tmp_path, loaded_before_tracking=[5])
    try:
        summary, data = parse(h.run(OBSERVE, "errors", client_id="A", tool="observe"))
        assert "had already loaded when tracking began" in summary
        assert 'interact {what:"refresh"}' in data["reload_needed"]
        summary, data = parse(h.run(OBSERVE, "errors", client_id="A", tool="observe"))
        assert "reload_needed" not in data and "already loaded" not in summary  # told once
        summary, data = parse(h.run(OBSERVE, "logs", client_id="B", tool="observe"))
        assert "tracked tab 5" in data["reload_needed"]  # another agent is told too
        # The extension reports the tab reloaded (the list is empty): nothing more to say.
        h.app.extension.settings = {**h.app.extension.settings, "loaded_before_tracking": []}
        summary, data = parse(h.run(OBSERVE, "errors", client_id="C", tool="observe"))
        assert "reload_needed" not in data
        # Junk from the extension is ignored.
        h.app.extension.settings = {**h.app.extension.settings,
                                    "loaded_before_tracking": ["x", True, None]}
        assert "reload_needed" not in parse(h.run(OBSERVE, "errors", client_id="D",
                                                  tool="observe"))[1]
    finally:
        h.close()

"""configure: per-client state, noise rules, checkpoints, diagnostics (real MCP server, Clock)."""

from __future__ import annotations

import json

import pytest

from _mcp_calls import call, session_for, tool_calls

from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE
from gasoline.tools.configure import MODES
from gasoline.tools.schemas import CONFIGURE_MODES


def make_app(tmp_path, clock, **kw):
    return build(Config(state_dir=tmp_path, persist=False, **kw), clock)


@pytest.fixture
def app(tmp_path, clock):
    return make_app(tmp_path, clock)


@pytest.fixture
def s(app):
    return session_for(app, "me")


ok, error = tool_calls("configure")


def test_configure_builds_every_mode_the_issue_lists_and_streaming():
    wanted = {"store", "load", "noise_rule", "clear", "checkpoint", "select_tab", "health",
              "describe_capabilities", "test_boundary_start", "test_boundary_end", "telemetry",
              "audit_log", "doctor", "recording_start", "recording_stop"}
    assert wanted <= set(MODES) <= set(CONFIGURE_MODES)
    assert "streaming" in MODES  # (tests/test_streaming.py tests the mode itself)


def test_store_and_load_by_namespace_with_action_alias(app, s):
    ok(app, s, action="store", key="k", value={"a": [1, 2]})
    ok(app, s, what="store", key="k", value="other", namespace="ns2")
    assert ok(app, s, what="load", key="k")[1]["value"] == {"a": [1, 2]}
    assert ok(app, s, what="load", key="k", namespace="ns2")[1]["value"] == "other"
    _, listing = ok(app, s, what="load")
    assert listing["keys"] == ["k"] and listing["namespaces"] == ["default", "ns2"]
    ok(app, s, what="store", key="k", value=None)
    assert error(app, s, what="load", key="k")["error"] == "no_data"
    assert error(app, s, what="store", key="k")["error"] == "missing_param"
    assert error(app, s, what="store", key="big", value="x" * 70_000)["error"] == "invalid_param"


def test_client_state_persists_kv_checkpoints_noise_rules_and_tab_filters(tmp_path, clock):
    app = make_app(tmp_path, clock)
    s = session_for(app, "persisted")
    ok(app, s, what="store", key="k", value=42)
    ok(app, s, what="checkpoint", name="cp")
    ok(app, s, what="noise_rule", noise_action="add", pattern="hmr", field="message")
    ok(app, s, what="select_tab", patterns=["localhost:3000"])
    app.registry.flush(force=True)
    again = make_app(tmp_path, clock)
    s2 = session_for(again, "persisted")
    assert ok(again, s2, what="load", key="k")[1]["value"] == 42
    assert [c["name"] for c in ok(again, s2, what="checkpoint",
                                  checkpoint_action="list")[1]["checkpoints"]] == ["cp"]
    rules = ok(again, s2, what="noise_rule")[1]["rules"]
    assert any(r["pattern"] == "hmr" for r in rules)
    assert ok(again, s2, what="select_tab")[1]["patterns"] == ["localhost:3000"]


def test_global_noise_rules_survive_a_restart_and_reach_every_client(tmp_path, clock):
    app = make_app(tmp_path, clock)
    services = app.services
    services.startService()
    s = session_for(app, "one")
    ok(app, s, what="noise_rule", noise_action="add", pattern="shared chatter",
       kind="substring", scope="global")
    clock.advance(5)  # the document's timer writes it (never the request itself)
    path = tmp_path / "noise-global.json"
    assert path.exists() and oct(path.stat().st_mode & 0o777) == "0o600"
    services.stopService()
    again = make_app(tmp_path, clock)
    other = session_for(again, "somebody-else")
    rules = ok(again, other, what="noise_rule", scope="global")[1]["rules"]
    assert [r["pattern"] for r in rules] == ["shared chatter"]
    # Removing it is persisted the same way (the service's stop flushes what is pending).
    again.services.startService()
    ok(again, other, what="noise_rule", noise_action="reset", scope="global")
    again.services.stopService()
    third = make_app(tmp_path, clock)
    assert third.noise_global.rules == []


def test_a_corrupt_global_noise_file_is_ignored(tmp_path, clock):
    (tmp_path / "noise-global.json").write_text("{not json")
    app = make_app(tmp_path, clock)
    assert app.noise_global.rules == []
    assert app.noise_global.scope == "global"


def test_noise_rule_actions(app, s):
    _, listed = ok(app, s, what="noise_rule", noise_action="list")
    builtins = [r for r in listed["rules"] if r.get("built_in")]
    assert builtins, "built-in rules (favicon, source maps, HMR, extensions) are listed"
    _, added = ok(app, s, what="noise_rule", noise_action="add", pattern="^noisy",
                  field="message", rule_id="mine")
    assert added["rule"]["id"] == "mine"
    assert error(app, s, what="noise_rule", noise_action="add",
                 pattern="(unclosed")["error"] == "invalid_param"
    assert error(app, s, what="noise_rule", noise_action="add")["error"] == "missing_param"
    ok(app, s, what="noise_rule", noise_action="remove", rule_id=builtins[0]["id"])
    _, after = ok(app, s, what="noise_rule")
    ids = [r["id"] for r in after["rules"]]
    assert "mine" in ids and builtins[0]["id"] not in ids
    _, reset = ok(app, s, what="noise_rule", noise_action="reset")
    assert reset["dropped"] == 1
    assert builtins[0]["id"] in [r["id"] for r in ok(app, s, what="noise_rule")[1]["rules"]]
    assert error(app, s, what="noise_rule", noise_action="remove",
                 rule_id="nope")["error"] == "invalid_param"


def test_noise_rule_auto_detect_proposes_then_applies(app, s):
    app.store.add(CONSOLE, [{"level": "warn", "message": f"poll tick {i} ok"} for i in range(12)]
                  + [{"level": "error", "message": "real"}])
    _, proposed = ok(app, s, what="noise_rule", noise_action="auto_detect")
    assert len(proposed["proposals"]) == 1 and proposed["applied"] is False
    assert ok(app, s, what="noise_rule")[1]["rules"][0].get("built_in")
    ok(app, s, what="noise_rule", noise_action="auto_detect", apply=True)
    err, _, data = call(app, s, "observe", {"what": "logs"})
    assert [e["message"] for e in data["entries"]] == ["real"] and data["noise_hidden"] == 12


def test_checkpoint_create_list_delete_and_name_rules(app, s):
    app.store.add(CONSOLE, [{"level": "error", "message": "known"}])
    summary, cp = ok(app, s, what="checkpoint", name="before")
    assert cp["heads"][CONSOLE] == 1 and cp["reference"] == "me:before"
    stored = s.state.checkpoints["before"]
    assert stored["name"] == "before" and len(stored["error_fingerprints"]) == 1
    assert error(app, s, what="checkpoint", name="a:b")["error"] == "invalid_param"
    assert error(app, s, what="checkpoint")["error"] == "missing_param"
    ok(app, s, what="checkpoint", checkpoint_action="delete", name="before")
    assert error(app, s, what="checkpoint", checkpoint_action="delete",
                 name="before")["error"] == "no_data"


def test_select_tab_set_add_list_clear_and_validation(app, s):
    ok(app, s, what="select_tab", patterns=["a"])
    ok(app, s, what="select_tab", tab_action="add", url="b")
    assert ok(app, s, what="select_tab")[1]["patterns"] == ["a", "b"]
    assert error(app, s, what="select_tab", patterns="a")["error"] == "invalid_param"
    assert error(app, s, what="select_tab", patterns=[1])["error"] == "invalid_param"
    ok(app, s, what="select_tab", tab_action="clear")
    assert s.state.tab_filters == []


def test_test_boundaries_tag_later_entries_like_the_http_route(app, s):
    ok(app, s, what="test_boundary_start", test_id="login-test")
    assert "login-test" in app.store.test_boundaries.active
    _, ended = ok(app, s, what="test_boundary_end", test_id="login-test")
    assert ended["active_tests"] == [] and ended["action"] == "end"
    assert error(app, s, what="test_boundary_start")["error"] == "missing_param"


def test_audit_log_holds_only_the_callers_calls_with_redacted_params(app, s):
    other = session_for(app, "other")
    ok(app, s, what="store", key="login", value={"password": "hunter2"})
    call(app, other, "observe", {"what": "errors"})
    _, audit = ok(app, s, what="audit_log")
    tools = [(c["tool"], c["mode"], c["outcome"]) for c in audit["calls"]]
    assert tools == [("configure", "store", "ok")]
    assert "hunter2" not in json.dumps(audit)
    assert audit["calls"][0]["params"]["key"] == "login"
    assert audit["calls"][0]["duration_ms"] >= 0
    _, audit_other = ok(app, other, what="audit_log")
    assert [c["tool"] for c in audit_other["calls"]] == ["observe"]
    error(app, s, what="load", key="missing")
    _, audit = ok(app, s, what="audit_log", limit=2)
    assert [(c["mode"], c["outcome"], c.get("error")) for c in audit["calls"]] == [
        ("audit_log", "ok", None), ("load", "error", "no_data")]


def test_telemetry_counts_calls_per_tool_and_mode(app, s):
    call(app, s, "observe", {"what": "errors"})
    call(app, s, "observe", {"what": "errors"})
    _, t = ok(app, s, what="telemetry")
    assert t["calls_per_tool"]["observe"] == 2 and t["calls_per_mode"]["observe.errors"] == 2
    assert CONSOLE in t["buffers"] and t["your_rate_limit"]["used"] == 3


def test_health_doctor_and_capabilities(app, s):
    summary, health = ok(app, s, what="health")
    assert health["you"]["client_id"] == "me" and health["status"] == "ok"
    summary, doctor = ok(app, s, what="doctor")
    checks = {c["check"]: c for c in doctor["checks"]}
    assert checks["extension_connected"]["status"] == "fail" and "fix" in checks[
        "extension_connected"]
    assert checks["persistence_writable"]["status"] == "ok"
    assert {"buffers", "clients", "version", "last_sync_age"} <= set(checks)
    app.extension.sync({"settings": {}})
    _, doctor = ok(app, s, what="doctor")
    assert {c["check"]: c["status"] for c in doctor["checks"]}["extension_connected"] == "ok"
    _, caps = ok(app, s, what="describe_capabilities")
    assert "errors" in caps["tools"]["observe"]["built"]
    assert "streaming" in caps["tools"]["configure"]["built"]
    assert caps["features"]["rate_limit_per_minute"] == 100


def test_streaming_status_answers_for_an_unsubscribed_client(app, s):
    summary, data = ok(app, s, what="streaming", streaming_action="status")
    assert summary.startswith("streaming is off") and data["streaming_enabled"] is False

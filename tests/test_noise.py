"""Noise rules (gasoline.core.clients.noise): matching, scopes, built-ins, limits, RE2, auto-detect."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gasoline.core.errors import InvalidParam
from gasoline.core.clients.noise import (
    BUILTIN_RULES,
    MAX_PATTERN_LENGTH,
    MAX_RULES,
    NoiseRule,
    NoiseRules,
    auto_detect,
    normalize_message,
)


def err(message, **extra):
    return {"level": "error", "message": message, **extra}


@pytest.mark.parametrize("entry, rule_id", [
    ({"level": "error", "type": "network", "url": "http://localhost:3000/favicon.ico",
      "status": 404, "message": "GET /favicon.ico 404"}, "builtin:favicon"),
    ({"level": "warn", "url": "http://localhost:3000/static/app.js.map", "message": "404"},
     "builtin:source-map"),
    ({"level": "warn", "message": "DevTools failed to load source map: Could not load content"},
     "builtin:source-map-warning"),
    ({"level": "log", "message": "[vite] connecting..."}, "builtin:hmr"),
    ({"level": "log", "message": "[HMR] Waiting for update signal from WDS..."}, "builtin:hmr"),
    ({"level": "info", "message": "Download the React DevTools for a better development experience"},
     "builtin:react-devtools"),
    ({"level": "error", "message": "Unchecked runtime.lastError",
      "source": "chrome-extension://abcdef/background.js:1"}, "builtin:extension"),
    ({"level": "log", "url": "http://localhost:5173/@vite/client", "message": "x"},
     "builtin:hmr-endpoints"),
])
def test_builtin_rules_hide_common_noise(entry, rule_id):
    rule = NoiseRules().matches(entry)
    assert rule is not None and rule.id == rule_id and rule.built_in


def test_real_errors_are_not_hidden_by_builtins():
    rules = NoiseRules()
    for entry in (err("TypeError: cannot read properties of undefined (reading 'map')",
                      url="http://localhost:3000/app", source="http://localhost:3000/app.js:10:4"),
                  {"level": "error", "type": "network", "url": "http://localhost:3000/api/users",
                   "status": 500, "method": "GET"}):
        assert rules.matches(entry) is None


def test_rule_fields_and_levels_restrict_what_matches():
    rules = NoiseRules()
    rules.add("analytics", field="url", kind="substring", level="warn")
    assert rules.matches({"level": "warn", "url": "https://x.test/analytics.js"}) is not None
    assert rules.matches({"level": "error", "url": "https://x.test/analytics.js"}) is None
    assert rules.matches({"level": "warn", "message": "analytics failed"}) is None


def test_matching_is_case_insensitive_for_regex_and_substring():
    rules = NoiseRules()
    rules.add("resizeobserver loop", kind="substring", field="message")
    rules.add(r"^warning: \w+ is deprecated", field="message")
    assert rules.matches(err("ResizeObserver loop limit exceeded")) is not None
    assert rules.matches(err("Warning: componentWillMount is deprecated")) is not None


def test_client_rules_do_not_affect_another_client_but_global_rules_affect_all():
    global_rules = NoiseRules(scope="global")
    a = NoiseRules(parent=global_rules)
    b = NoiseRules(parent=global_rules)
    a.add("flaky widget", kind="substring")
    entry = err("flaky widget exploded")
    assert a.matches(entry) is not None
    assert b.matches(entry) is None
    rule = global_rules.add("third-party tracker", kind="substring")
    assert rule.scope == "global"
    assert a.matches(err("third-party tracker blocked")).id == rule.id
    assert b.matches(err("third-party tracker blocked")).id == rule.id


def test_removing_a_builtin_disables_it_for_that_client_only():
    a, b = NoiseRules(), NoiseRules()
    favicon = {"level": "error", "url": "http://x/favicon.ico"}
    a.remove("builtin:favicon")
    assert a.matches(favicon) is None
    assert b.matches(favicon).id == "builtin:favicon"
    assert "builtin:favicon" not in [r["id"] for r in a.list()]
    a.reset()
    assert a.matches(favicon).id == "builtin:favicon"


def test_add_remove_list_reset():
    rules = NoiseRules()
    r1 = rules.add("one", kind="substring", reason="because")
    r2 = rules.add("two", kind="substring")
    assert r1.id != r2.id
    listed = rules.list()
    assert [r["id"] for r in listed[:2]] == [r1.id, r2.id]
    assert len(listed) == 2 + len(BUILTIN_RULES)
    assert rules.remove(r1.id) == r1
    with pytest.raises(InvalidParam):
        rules.remove(r1.id)
    assert rules.reset() == 1
    assert rules.rules == []


def test_explicit_ids_must_be_unique_and_not_builtin():
    rules = NoiseRules()
    rules.add("x", id="mine")
    with pytest.raises(InvalidParam):
        rules.add("y", id="mine")
    with pytest.raises(InvalidParam):
        rules.add("y", id="builtin:favicon")


@pytest.mark.parametrize("pattern", [
    "a(?=b)",          # look-ahead: not RE2
    r"(a)\1",          # back-reference
    "(unclosed",
    "",
    "x" * (MAX_PATTERN_LENGTH + 1),
])
def test_invalid_or_oversized_patterns_raise_invalid_param(pattern):
    with pytest.raises(InvalidParam) as info:
        NoiseRules().add(pattern)
    assert info.value.code == "invalid_param"


@pytest.mark.parametrize("field, kind, level", [
    ("body", "regex", None), ("any", "glob", None), ("any", "regex", "fatal")])
def test_invalid_rule_parts_raise_invalid_param(field, kind, level):
    with pytest.raises(InvalidParam):
        NoiseRules().add("x", field=field, kind=kind, level=level)


def test_rule_count_is_limited():
    rules = NoiseRules()
    for i in range(MAX_RULES):
        rules.add(f"rule {i}", kind="substring")
    with pytest.raises(InvalidParam):
        rules.add("one too many", kind="substring")


def test_catastrophic_backtracking_pattern_runs_in_linear_time():
    rules = NoiseRules()
    rules.add("(a+)+$", field="message")
    start = time.perf_counter()
    for _ in range(20):
        assert rules.matches(err("a" * 5000 + "!")) is None
    assert time.perf_counter() - start < 1.0


def test_round_trip_through_json_keeps_rules_and_disabled_builtins():
    rules = NoiseRules()
    rules.add("one", kind="substring", reason="r", level="warn")
    rules.add(r"^two\d+", field="url")
    rules.remove("builtin:hmr")
    data = json.loads(json.dumps(rules.to_json()))
    again = NoiseRules.from_json(data)
    assert again.list() == rules.list()
    assert again.matches({"level": "warn", "message": "one"}) is not None
    assert again.matches({"level": "log", "message": "[vite] connected."}) is None
    # New ids keep counting after a restore.
    assert again.add("three", kind="substring").id not in [r.id for r in rules.rules]


def test_from_json_drops_rules_that_no_longer_validate():
    data = {"scope": "client", "rules": [
        {"id": "ok", "pattern": "fine"}, {"id": "bad", "pattern": "a(?=b)"}, "junk"],
        "disabled_builtins": ["builtin:favicon", "nonsense"]}
    rules = NoiseRules.from_json(data)
    assert [r.id for r in rules.rules] == ["ok"]
    assert rules.disabled_builtins == {"builtin:favicon"}


def test_filter_reports_how_many_were_hidden():
    rules = NoiseRules()
    entries = [err("real"), {"level": "info", "message": "Download the React DevTools now"}]
    kept, hidden = rules.filter(entries)
    assert kept == [entries[0]] and hidden == 1


def test_auto_detect_proposes_without_applying_unless_asked():
    rules = NoiseRules()
    entries = [{"level": "warn", "message": f"Polling /api/status took {i} ms"} for i in range(30)]
    entries += [err("a real error once")]
    proposals = auto_detect(entries, rules, threshold=10)
    assert len(proposals) == 1
    assert proposals[0].count == 30 and proposals[0].rule.level == "warn"
    assert rules.rules == [], "nothing applied"
    assert proposals[0].rule.matches({"level": "warn", "message": "Polling /api/status took 999 ms"})
    applied = auto_detect(entries, rules, threshold=10, apply=True)
    assert len(applied) == 1 and len(rules.rules) == 1
    assert rules.matches({"level": "warn", "message": "Polling /api/status took 5 ms"}) is not None
    assert auto_detect(entries, rules, threshold=10) == [], "already hidden entries are not proposed"


def test_normalize_message_replaces_variable_parts():
    a = normalize_message("Failed to fetch https://api.x.test/users/42?x=1 after 350ms (id 9f8e7d6c5b4a)")
    b = normalize_message("Failed to fetch https://api.x.test/users/7 after 12ms (id 0a1b2c3d4e5f)")
    assert a == b
    assert normalize_message("User 'bob' not found") == normalize_message('User "alice" not found')


@given(st.text(max_size=100), st.text(max_size=300))
@settings(max_examples=200)
def test_any_user_pattern_either_compiles_or_raises_invalid_param(pattern, message):
    try:
        rule = NoiseRule.create(id="r", pattern=pattern)
    except InvalidParam:
        return
    assert rule.matches({"level": "error", "message": message}) in (True, False)


def test_the_daemon_builds_one_global_noise_rule_set(tmp_path):
    from twisted.internet.task import Clock

    from gasoline.app import Config, build

    app = build(Config(state_dir=tmp_path, persist=False), Clock())
    global_rules = app.noise_global
    assert global_rules.scope == "global" and global_rules.rules == []
    client = NoiseRules.from_json({}, parent=global_rules)
    global_rules.add("shared noise", kind="substring")
    assert client.matches(err("some shared noise here")) is not None

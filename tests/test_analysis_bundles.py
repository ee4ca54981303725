"""Error bundles (gasoline.analysis.bundles)."""

from __future__ import annotations

from gasoline.analysis import error_bundles

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def test_each_error_gets_the_requests_actions_and_logs_in_its_window():
    errors = [{"level": "error", "message": "Save failed", "ts": (T0 + 10) * 1000},
              {"level": "error", "message": "Later failure", "ts": "2026-01-01T00:01:00Z"}]
    network = [{"method": "POST", "url": "https://api.test/save", "status": 500, "ts": T0 + 9.5,
                "response_body": "{\"error\":\"db down\"}"},
               {"method": "GET", "url": "https://api.test/early", "status": 200, "ts": T0 + 1}]
    actions = [{"type": "click", "timestamp": (T0 + 9) * 1000, "selectors": {"testId": "save"}},
               {"type": "click", "timestamp": (T0 + 2) * 1000}]
    logs = [{"level": "info", "message": "saving…", "ts": (T0 + 9.8) * 1000},
            {"level": "error", "message": "errors are not context logs", "ts": (T0 + 9.9) * 1000}]
    out = error_bundles(errors, network, actions, logs, window_seconds=3)
    assert out["bundle_count"] == 2
    later, save = out["bundles"]
    assert later["error"]["message"] == "Later failure"
    assert later["network"] == [] and later["actions"] == []
    assert save["error"]["at"] == "2026-01-01T00:00:10.000Z"
    assert [r["url"] for r in save["network"]] == ["https://api.test/save"]
    assert save["network"][0]["failed"] is True and "db down" in save["network"][0]["response_body"]
    assert [a["selector"] for a in save["actions"]] == ["save"]
    assert [e["message"] for e in save["logs"]] == ["saving…"]


def test_untimed_entries_are_counted_not_placed():
    out = error_bundles([{"level": "error", "message": "x", "ts": T0}],
                        network=[{"url": "https://a.test/"}], actions=[], logs=[])
    assert out["untimed"]["network"] == 1 and out["bundles"][0]["network"] == []


def test_window_is_clamped_and_limit_honoured():
    errors = [{"level": "error", "message": f"e{i}", "ts": T0 + i} for i in range(30)]
    out = error_bundles(errors, window_seconds=10_000, limit=5)
    assert out["window_seconds"] == 300.0 and out["bundle_count"] == 5
    assert out["bundles"][0]["error"]["message"] == "e29"

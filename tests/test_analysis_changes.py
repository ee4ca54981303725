"""Checkpoints and the changes diff (gasoline.analysis.changes)."""

from __future__ import annotations

import json

from gasoline.analysis import changes, make_checkpoint


def test_checkpoint_records_heads_counters_and_known_error_kinds():
    cp = make_checkpoint("before", {"console": 10, "network_bodies": 3}, 1000.0,
                         counters={"errors_total": 4},
                         errors_so_far=[{"level": "error", "message": "old 1"},
                                        {"level": "error", "message": "old 2"},
                                        {"level": "info", "message": "not an error"}])
    assert cp["name"] == "before" and cp["heads"] == {"console": 10, "network_bodies": 3}
    assert len(cp["error_fingerprints"]) == 1, "old 1 and old 2 are one kind"
    assert json.loads(json.dumps(cp)) == cp, "persistable as JSON"


def test_changes_lists_new_errors_failed_requests_ws_events_and_actions():
    cp = make_checkpoint("before", {"console": 0}, 1000.0, counters={"errors_total": 1},
                         errors_so_far=[{"level": "error", "message": "Known error 1"}])
    snapshot = {
        "at": 1012.5,
        "counters": {"errors_total": 4},
        "entries": {
            "console": [
                {"level": "error", "message": "Known error 2"},
                {"level": "error", "message": "Brand new failure"},
                {"level": "warn", "message": "meh"},
                {"level": "error", "type": "network", "method": "POST",
                 "url": "https://api.test/save", "status": 502, "message": "POST /save 502"},
            ],
            "network_bodies": [
                {"method": "GET", "url": "https://api.test/ok", "status": 200},
                {"method": "GET", "url": "https://api.test/missing", "status": 404},
                {"method": "GET", "url": "https://api.test/down", "status": 0, "error": "net::ERR"},
            ],
            "websocket_events": [{"event": "open", "id": "c1"}, {"event": "message", "id": "c1",
                                                                   "data": "x" * 500}],
            "actions": [{"type": "click", "selectors": {"testId": "save"}, "timestamp": 1}],
        },
        "missed": {"console": 3, "actions": 0},
    }
    out = changes(cp, snapshot)
    assert out["errors"]["count"] == 3
    kinds = {c["template"]: c["new_kind"] for c in out["errors"]["clusters"]}
    assert kinds["Known error <num>"] is False
    assert kinds["Brand new failure"] is True
    assert out["errors"]["new_kinds"] == 2
    assert [r["url"] for r in out["failed_requests"]["items"]] == [
        "https://api.test/missing", "https://api.test/down", "https://api.test/save"]
    assert out["websocket_events"] == {
        "count": 2, "by_event": {"open": 1, "message": 1},
        "items": [{"event": "open", "id": "c1"}, {"event": "message", "id": "c1", "data": "x" * 200}]}
    assert out["actions"]["items"] == [{"type": "click", "timestamp": 1, "selector": "save"}]
    assert out["console_by_level"] == {"error": 3, "warn": 1}
    assert out["counters"] == {"errors_total": 3}
    assert out["missed"] == {"console": 3}
    assert out["duration_seconds"] == 12.5
    assert out["summary"].startswith("3 new error(s) (2 new kind(s)), 3 failed request(s)")


def test_changes_with_nothing_new_is_empty_not_an_error():
    cp = make_checkpoint("x", {}, 5.0)
    out = changes(cp, {"at": 6.0, "entries": {}})
    assert out["errors"]["count"] == 0 and out["failed_requests"]["count"] == 0
    assert out["actions"]["count"] == 0 and out["missed"] == {}


def test_changes_survives_hostile_snapshot_contents():
    cp = {"name": "bad", "created_at": "yesterday", "error_fingerprints": None}
    out = changes(cp, {"at": None, "entries": {"console": "nope", "actions": [1, None]},
                       "counters": {"a": "x"}})
    assert out["duration_seconds"] is None and out["actions"]["count"] == 0

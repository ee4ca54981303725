"""Error clusters and log summaries (gasoline.analysis.clusters)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gasoline.analysis import error_clusters, fingerprint, summarize_logs


def err(message, ts, **extra):
    return {"level": "error", "message": message, "ts": ts, **extra}


def test_errors_differing_only_in_numbers_ids_urls_and_strings_share_a_cluster():
    errors = [
        err("Failed to load user 42 from https://api.test/users/42: 'timeout'", 1_767_225_600_000),
        err("Failed to load user 7 from https://api.test/users/7: 'reset'", 1_767_225_601_000),
        err("Failed to load user 9 from https://api.test/users/9: \"gone\"", 1_767_225_602_000),
        err("TypeError: cannot read properties of undefined", 1_767_225_603_000,
            url="http://localhost:3000/", source="app.js:3:1"),
    ]
    out = error_clusters(errors)
    assert out["total_errors"] == 4 and out["cluster_count"] == 2
    top = out["clusters"][0]
    assert top["count"] == 3
    assert top["template"] == "Failed to load user <num> from <url>: <str>"
    assert top["first_seen"] == "2026-01-01T00:00:00.000Z"
    assert top["last_seen"] == "2026-01-01T00:00:02.000Z"
    assert "gone" in top["sample"]["message"], "the sample is the latest occurrence"
    assert out["clusters"][1]["sample"]["source"] == "app.js:3:1"


def test_only_error_level_entries_are_clustered():
    out = error_clusters([{"level": "warn", "message": "w"}, err("e", 1)])
    assert out["total_errors"] == 1 and out["clusters"][0]["template"] == "e"


def test_ties_are_ordered_most_recent_first_and_limit_is_honoured():
    errors = [err(f"distinct error {'x' * i}", i + 1) for i in range(5)]
    out = error_clusters(errors, limit=2)
    assert [c["template"] for c in out["clusters"]] == ["distinct error xxxx", "distinct error xxx"]
    assert out["truncated"] is True


def test_failed_requests_cluster_by_method_path_and_status():
    a = {"level": "error", "type": "network", "method": "GET", "status": 500,
         "url": "https://api.test/orders/1?x=1"}
    b = {**a, "url": "https://api.test/orders/2?x=2"}
    c = {**a, "status": 404}
    assert fingerprint(a) == fingerprint(b) != fingerprint(c)


def test_summarize_logs_groups_every_level_and_counts_levels():
    entries = [{"level": "log", "message": f"render took {i} ms"} for i in range(4)]
    entries += [{"level": "warn", "message": "deprecated API"}, err("boom", 5)]
    out = summarize_logs(entries)
    assert out["total"] == 6 and out["distinct"] == 3
    assert out["by_level"] == {"log": 4, "warn": 1, "error": 1}
    assert out["groups"][0]["count"] == 4 and out["groups"][0]["template"] == "render took <num> ms"


def test_hostile_entries_are_ignored_not_fatal():
    out = summarize_logs([None, 3, "x", {"message": {"nested": True}}, {"level": 5}])
    assert out["total"] == 2
    assert error_clusters("not a list")["total_errors"] == 0


@given(st.lists(st.dictionaries(st.sampled_from(["level", "message", "ts", "url", "stack"]),
                                st.one_of(st.text(max_size=50), st.integers(), st.none(),
                                          st.floats(allow_nan=True))), max_size=20))
def test_any_entries_give_consistent_counts(entries):
    out = summarize_logs(entries)
    assert sum(g["count"] for g in out["groups"]) == out["total"] == len(entries)

"""Performance ratings (gasoline.analysis.perf)."""

from __future__ import annotations

import pytest

from gasoline.analysis import performance
from gasoline.analysis.perf import rate


@pytest.mark.parametrize("metric, value, rating", [
    ("lcp", 2500, "good"), ("lcp", 2501, "needs-improvement"), ("lcp", 4001, "poor"),
    ("inp", 200, "good"), ("inp", 500, "needs-improvement"), ("inp", 501, "poor"),
    ("cls", 0.1, "good"), ("cls", 0.2, "needs-improvement"), ("cls", 0.26, "poor"),
    ("fcp", 1800, "good"), ("fcp", 3001, "poor"),
    ("ttfb", 800, "good"), ("ttfb", 1000, "needs-improvement"), ("ttfb", 1801, "poor"),
    ("tbt", 150, "good"), ("tbt", 601, "poor"),
])
def test_web_vitals_thresholds(metric, value, rating):
    assert rate(metric, value) == rating


def snapshot(url, lcp=None, cls=None, inp=None, tbt=None):
    timing = {"dom_content_loaded": 500, "load": 900, "first_contentful_paint": 700,
              "time_to_first_byte": 100, "dom_interactive": 400}
    if lcp is not None:
        timing["largest_contentful_paint"] = lcp
    if inp is not None:
        timing["interaction_to_next_paint"] = inp
    snap = {"url": url, "timestamp": 1, "timing": timing,
            "network": {"request_count": 3, "transfer_size": 10, "slowest_requests": []},
            "long_tasks": {"count": 0, "total_blocking_time": tbt or 0, "longest": 0}}
    if cls is not None:
        snap["cumulative_layout_shift"] = cls
    return snap


def test_each_page_is_rated_by_its_worst_metric_with_advice():
    out = performance([snapshot("https://a/", lcp=1000, cls=0.01),
                       snapshot("https://a/slow", lcp=5000, cls=0.3, inp=300)])
    fast, slow = out["pages"]
    assert fast["rating"] == "good" and fast["advice"] == []
    assert slow["rating"] == "poor"
    assert slow["metrics"]["lcp"]["rating"] == "poor"
    assert slow["metrics"]["inp"]["rating"] == "needs-improvement"
    assert len(slow["advice"]) == 3
    assert out["overall"] == "poor"


def test_missing_and_hostile_values_are_skipped():
    snap = snapshot("https://a/", lcp="fast", cls=float("nan"))
    snap["timing"]["first_contentful_paint"] = -5
    out = performance([snap, None, "x"])
    metrics = out["pages"][0]["metrics"]
    assert "lcp" not in metrics and "cls" not in metrics and "fcp" not in metrics
    assert out["page_count"] == 1


def test_no_snapshots_is_unknown():
    assert performance([])["overall"] == "unknown"

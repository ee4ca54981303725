"""
Performance: Core Web Vitals and friends from the extension's performance snapshots, rated by the
web-vitals thresholds (good / needs-improvement / poor).

Thresholds (the value at the 75th percentile in the web-vitals library; here per snapshot):
LCP 2500 / 4000 ms, INP 200 / 500 ms, CLS 0.1 / 0.25, FCP 1800 / 3000 ms, TTFB 800 / 1800 ms;
Total Blocking Time uses Lighthouse's 200 / 600 ms.
"""

from __future__ import annotations

import math
from typing import Any

from gasoline.analysis._util import dicts, text

GOOD = "good"
NEEDS_IMPROVEMENT = "needs-improvement"
POOR = "poor"
_RANK = {GOOD: 0, NEEDS_IMPROVEMENT: 1, POOR: 2}

#: name → (where in the snapshot, unit, good-up-to, poor-above, label)
METRICS: dict[str, tuple[tuple[str, ...], str, float, float, str]] = {
    "lcp": (("timing", "largest_contentful_paint"), "ms", 2500, 4000, "Largest Contentful Paint"),
    "inp": (("timing", "interaction_to_next_paint"), "ms", 200, 500, "Interaction to Next Paint"),
    "cls": (("cumulative_layout_shift",), "", 0.1, 0.25, "Cumulative Layout Shift"),
    "fcp": (("timing", "first_contentful_paint"), "ms", 1800, 3000, "First Contentful Paint"),
    "ttfb": (("timing", "time_to_first_byte"), "ms", 800, 1800, "Time to First Byte"),
    "tbt": (("long_tasks", "total_blocking_time"), "ms", 200, 600, "Total Blocking Time"),
}
ADVICE = {
    "lcp": "Speed up the largest element: preload its image/font, cut render-blocking CSS/JS, "
           "serve it from a CDN.",
    "inp": "Break up long event handlers, defer non-urgent work (requestIdleCallback, "
           "scheduler.yield), avoid layout thrash in handlers.",
    "cls": "Reserve space for images, ads and embeds (width/height, aspect-ratio); do not insert "
           "content above existing content.",
    "fcp": "Reduce render-blocking resources and server response time; inline critical CSS.",
    "ttfb": "Speed up the server response: caching, fewer redirects, a closer edge.",
    "tbt": "Split long tasks (> 50 ms), ship less JavaScript, move work off the main thread.",
}


def rate(metric: str, value: float) -> str:
    _, _, good, poor, _ = METRICS[metric]
    if value <= good:
        return GOOD
    if value <= poor:
        return NEEDS_IMPROVEMENT
    return POOR


def vital(snapshot: dict[str, Any], path: tuple[str, ...]) -> float | None:
    """The number at C{path} in a performance snapshot, or C{None} when it is missing or is not
    a finite, non-negative number (a page may report anything)."""
    value: Any = snapshot
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return float(value)


def page_performance(snapshot: dict[str, Any]) -> dict[str, Any]:
    metrics = {}
    worst = None
    for name, (path, unit, _good, _poor, label) in METRICS.items():
        value = vital(snapshot, path)
        if value is None:
            continue
        rating = rate(name, value)
        metrics[name] = {"label": label, "value": round(value, 4 if name == "cls" else 1),
                         "unit": unit, "rating": rating}
        if worst is None or _RANK[rating] > _RANK[worst]:
            worst = rating
    network = raw_network if isinstance(raw_network := snapshot.get("network"), dict) else {}
    long_tasks = raw_long_tasks if isinstance(raw_long_tasks := snapshot.get("long_tasks"), dict) else {}
    slowest = [
        {k: r.get(k) for k in ("url", "duration", "size", "type") if k in r}
        for r in dicts(network.get("slowest_requests"))[:5]
    ]
    return {
        "url": text(snapshot.get("url"), 500),
        "rating": worst or "unknown",
        "metrics": metrics,
        "load_ms": vital(snapshot, ("timing", "load")),
        "dom_content_loaded_ms": vital(snapshot, ("timing", "dom_content_loaded")),
        "requests": network.get("request_count"),
        "transfer_size": network.get("transfer_size"),
        "long_tasks": long_tasks.get("count"),
        "slowest_requests": slowest,
        "advice": [ADVICE[n] for n, m in metrics.items() if m["rating"] != GOOD],
    }


def performance(snapshots: Any) -> dict[str, Any]:
    """Rated vitals per page (snapshot), the worst rating overall, and what to do about it."""
    pages = [page_performance(s) for s in dicts(snapshots)]
    overall = None
    counts = {GOOD: 0, NEEDS_IMPROVEMENT: 0, POOR: 0}
    for page in pages:
        for metric in page["metrics"].values():
            counts[metric["rating"]] += 1
        if page["rating"] in _RANK and (overall is None or _RANK[page["rating"]] > _RANK[overall]):
            overall = page["rating"]
    return {
        "page_count": len(pages),
        "overall": overall or "unknown",
        "ratings": counts,
        "pages": pages,
        "thresholds": {n: {"good": g, "poor": p, "unit": u}
                       for n, (_, u, g, p, _) in METRICS.items()},
    }

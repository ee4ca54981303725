"""
Error bundles: each error with the network requests, actions and logs around it in time.

Entries are placed in time by their own time field (C{ts}, C{timestamp}, ...: see
L{gasoline.analysis._util.entry_time}); entries without a time cannot be placed and are left out
of the windows (the result counts them).
"""

from __future__ import annotations

import bisect
from typing import Any

from gasoline.analysis._util import dicts, entry_time, is_error, is_failed_request, iso, text
from gasoline.analysis.clusters import fingerprint
from gasoline.core.redaction.redactor import clip

MAX_WINDOW = 300.0


def _timed(entries: Any) -> tuple[list[float], list[dict[str, Any]], int]:
    pairs = []
    untimed = 0
    for entry in dicts(entries):
        at = entry_time(entry)
        if at is None:
            untimed += 1
        else:
            pairs.append((at, entry))
    pairs.sort(key=lambda p: p[0])
    return [p[0] for p in pairs], [p[1] for p in pairs], untimed


def _window(times: list[float], items: list[dict[str, Any]], start: float, end: float,
            cap: int) -> list[dict[str, Any]]:
    lo = bisect.bisect_left(times, start)
    hi = bisect.bisect_right(times, end)
    return items[max(lo, hi - cap):hi]


def _request(entry: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: entry.get(k) for k in ("method", "url", "status", "duration") if k in entry}
    out["failed"] = is_failed_request(entry)
    body = entry.get("response_body")
    if out["failed"] and isinstance(body, str):
        out["response_body"] = clip(body, 500)
    return out


def _log(entry: dict[str, Any]) -> dict[str, Any]:
    return {"level": entry.get("level"), "message": text(entry.get("message"), 300),
            "ts": entry.get("ts")}


def _action(entry: dict[str, Any]) -> dict[str, Any]:
    keep = ("type", "timestamp", "url", "to_url", "value", "key", "source")
    out = {k: entry[k] for k in keep if k in entry}
    selectors = entry.get("selectors")
    if isinstance(selectors, dict):
        out["selector"] = selectors.get("testId") or selectors.get("css") or selectors.get("text")
    return out


def error_bundles(errors: Any, network: Any = (), actions: Any = (), logs: Any = (),
                  window_seconds: float = 3.0, limit: int = 20,
                  per_kind: int = 10) -> dict[str, Any]:
    """The most recent C{limit} errors, each with what happened C{window_seconds} before it."""
    window = min(max(float(window_seconds), 0.0), MAX_WINDOW)
    error_times, error_items, untimed_errors = _timed([e for e in dicts(errors) if is_error(e)])
    net_t, net_i, net_untimed = _timed(network)
    act_t, act_i, act_untimed = _timed(actions)
    log_t, log_i, log_untimed = _timed([e for e in dicts(logs) if not is_error(e)])
    bundles: list[dict[str, Any]] = []
    for at, error in reversed(list(zip(error_times, error_items))):
        if len(bundles) >= limit:
            break
        start, end = at - window, at + 0.5
        bundles.append({
            "error": {"message": text(error.get("message"), 1000), "source": error.get("source"),
                      "url": error.get("url"), "at": iso(at), "fingerprint": fingerprint(error),
                      "stack": text(error.get("stack"), 2000) or None},
            "network": [_request(e) for e in _window(net_t, net_i, start, end, per_kind)],
            "actions": [_action(e) for e in _window(act_t, act_i, start, end, per_kind)],
            "logs": [_log(e) for e in _window(log_t, log_i, start, at, per_kind)],
        })
    return {
        "window_seconds": window,
        "bundle_count": len(bundles),
        "bundles": bundles,
        "untimed": {"errors": untimed_errors, "network": net_untimed, "actions": act_untimed,
                    "logs": log_untimed},
    }

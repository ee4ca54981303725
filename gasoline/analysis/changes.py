"""
Checkpoints and the C{changes} diff (what happened since a named point in time).

A checkpoint is a plain JSON object (so it persists as is in client state)::

    {"name": "before", "created_at": 1700000000.0,
     "heads": {"console": 120, "network_bodies": 40, ...},      # ring-buffer heads at creation
     "counters": {...},                                          # any numbers worth diffing
     "error_fingerprints": ["3fa2…", ...]}                       # errors already known then

The caller reads each buffer from the checkpoint's head (C{store.read(name, cursor=head)}) and
passes what it read as C{now_snapshot}::

    {"at": 1700000100.0, "heads": {...}, "counters": {...},
     "entries": {"console": [...], "network_bodies": [...], "websocket_events": [...],
                 "actions": [...]},
     "missed": {"console": 0, ...}}                              # evicted before it was read
"""

from __future__ import annotations

from typing import Any, Iterable

from gasoline.analysis._util import dicts, is_error, is_failed_request, iso, status_of, text
from gasoline.analysis.clusters import error_clusters, fingerprint

CONSOLE = "console"
NETWORK_BODIES = "network_bodies"
WEBSOCKET_EVENTS = "websocket_events"
ACTIONS = "actions"
MAX_KNOWN_FINGERPRINTS = 500


def make_checkpoint(
    name: str,
    heads: dict[str, int],
    at: float,
    counters: dict[str, float] | None = None,
    errors_so_far: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A checkpoint value: buffer heads, counters, and the fingerprints of errors seen so far."""
    known: list[str] = []
    seen = set()
    for entry in dicts(list(errors_so_far)):
        if not is_error(entry):
            continue
        fp = fingerprint(entry)
        if fp not in seen:
            seen.add(fp)
            known.append(fp)
    return {
        "name": name,
        "created_at": at,
        "heads": {k: int(v) for k, v in heads.items()},
        "counters": dict(counters or {}),
        "error_fingerprints": known[-MAX_KNOWN_FINGERPRINTS:],
    }


def _request_summary(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "method": text(entry.get("method") or "GET", 10),
        "url": text(entry.get("url"), 500),
        "status": status_of(entry),
        "error": text(entry.get("error"), 300) or None,
        "duration": entry.get("duration"),
    }


def _ws_summary(entry: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: entry[k] for k in ("event", "id", "url", "direction", "code", "reason", "size")
           if k in entry}
    if isinstance(entry.get("data"), str):
        out["data"] = entry["data"][:200]
    return out


def _action_summary(entry: dict[str, Any]) -> dict[str, Any]:
    keep = ("type", "timestamp", "url", "to_url", "from_url", "value", "key", "source")
    out = {k: entry[k] for k in keep if k in entry}
    selectors = entry.get("selectors")
    if isinstance(selectors, dict):
        out["selector"] = selectors.get("testId") or selectors.get("css") or selectors.get("text")
    return out


def changes(since_checkpoint: dict[str, Any], now_snapshot: dict[str, Any],
            limit: int = 50) -> dict[str, Any]:
    """What happened since the checkpoint: new errors, failed requests, WebSocket events, actions."""
    entries = now_snapshot.get("entries") or {}
    console = dicts(entries.get(CONSOLE))
    bodies = dicts(entries.get(NETWORK_BODIES))
    ws = dicts(entries.get(WEBSOCKET_EVENTS))
    actions = dicts(entries.get(ACTIONS))

    errors = [e for e in console if is_error(e)]
    clusters = error_clusters(errors, limit=limit)
    known = set(since_checkpoint.get("error_fingerprints") or [])
    for cluster in clusters["clusters"]:
        cluster["new_kind"] = cluster["fingerprint"] not in known
    failed = [b for b in bodies if is_failed_request(b)]
    failed += [e for e in console if e.get("type") == "network" and is_failed_request(e)]

    ws_by_event: dict[str, int] = {}
    for event in ws:
        kind = text(event.get("event"), 20) or "unknown"
        ws_by_event[kind] = ws_by_event.get(kind, 0) + 1
    by_level: dict[str, int] = {}
    for entry in console:
        level = text(entry.get("level"), 20) or "unknown"
        by_level[level] = by_level.get(level, 0) + 1

    before = since_checkpoint.get("counters") or {}
    after = now_snapshot.get("counters") or {}
    counter_deltas = {
        k: after[k] - before[k]
        for k in sorted(set(before) & set(after))
        if isinstance(before[k], (int, float)) and isinstance(after[k], (int, float))
    }
    created = since_checkpoint.get("created_at")
    at = now_snapshot.get("at")
    new_kinds = sum(1 for c in clusters["clusters"] if c["new_kind"])
    summary = (
        f"{len(errors)} new error(s) ({new_kinds} new kind(s)), {len(failed)} failed request(s), "
        f"{len(ws)} WebSocket event(s), {len(actions)} action(s) since '{since_checkpoint.get('name')}'"
    )
    return {
        "checkpoint": since_checkpoint.get("name"),
        "since": iso(created) if isinstance(created, (int, float)) else None,
        "until": iso(at) if isinstance(at, (int, float)) else None,
        "duration_seconds": (
            round(at - created, 3)
            if isinstance(at, (int, float)) and isinstance(created, (int, float)) else None
        ),
        "summary": summary,
        "errors": {
            "count": len(errors),
            "new_kinds": new_kinds,
            "clusters": clusters["clusters"],
        },
        "failed_requests": {
            "count": len(failed),
            "items": [_request_summary(f) for f in failed[-limit:]],
        },
        "websocket_events": {
            "count": len(ws),
            "by_event": ws_by_event,
            "items": [_ws_summary(e) for e in ws[-limit:]],
        },
        "actions": {"count": len(actions), "items": [_action_summary(a) for a in actions[-limit:]]},
        "console_by_level": by_level,
        "counters": counter_deltas,
        "missed": {k: v for k, v in (now_snapshot.get("missed") or {}).items() if v},
    }

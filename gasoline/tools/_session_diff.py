"""
C{configure diff_sessions}: what changed between two checkpoints (or a checkpoint and now): new
and resolved errors, failing and recovered URLs, changed vitals. L{session_snapshot} is what a
checkpoint records for it.
"""

from __future__ import annotations

from typing import Any

from gasoline.analysis._util import is_failed_request
from gasoline.analysis.changes import changes
from gasoline.analysis.clusters import fingerprint
from gasoline.core.errors import MissingParam
from gasoline.core.redaction.redactor import clip
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    NETWORK_BODIES,
    WEBSOCKET_EVENTS,
)
from gasoline.tools._shared import noise_filter, view
from gasoline.tools._state import resolve_checkpoint
from gasoline.tools.context import ToolContext, decode_entries, newest_entries

# -- session snapshots and diff_sessions ----------------------------------------------------------

#: What a checkpoint keeps beyond heads/fingerprints, so diff_sessions can name what changed.
#: (Kept small: checkpoints live in the client state file, up to 100 of them per client.)
MAX_SNAPSHOT_MESSAGES = 30
MAX_SNAPSHOT_URLS = 50
MAX_SNAPSHOT_VITALS = 20
SNAPSHOT_ENTRIES = 2000
#: Entries per buffer diff_sessions reads between the two points (the newest kept).
DIFF_ENTRIES = 10_000
#: Vitals compared by diff_sessions (C{timing} keys plus CLS and total blocking time).
VITAL_KEYS = ("time_to_first_byte", "first_contentful_paint", "largest_contentful_paint",
              "dom_content_loaded", "load", "interaction_to_next_paint")
#: A vital "changed" when it moved by more than this fraction and this many ms (CLS: 0.05).
VITAL_CHANGE = 0.10
VITAL_MIN_MS = 50.0


def _url_key(entry: dict[str, Any]) -> str | None:
    """C{METHOD url} (query dropped) of a request, to compare failing URLs across sessions."""
    url = entry.get("url")
    if not isinstance(url, str) or not url:
        return None
    method = raw_method if isinstance(raw_method := entry.get("method"), str) else "GET"
    return f"{method.upper()[:10]} {url.split('?', 1)[0][:200]}"


def _vitals_of(snapshot: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    timing = raw_timing if isinstance(raw_timing := snapshot.get("timing"), dict) else {}
    for key in VITAL_KEYS:
        value = timing.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
                and abs(value) < 1e12:
            out[key] = float(value)
    cls = snapshot.get("cumulative_layout_shift")
    if isinstance(cls, (int, float)) and not isinstance(cls, bool) and cls == cls and abs(cls) < 1e6:
        out["cumulative_layout_shift"] = float(cls)
    tasks = snapshot.get("long_tasks")
    tbt = tasks.get("total_blocking_time") if isinstance(tasks, dict) else None
    if isinstance(tbt, (int, float)) and not isinstance(tbt, bool) and tbt == tbt and abs(tbt) < 1e12:
        out["total_blocking_time"] = float(tbt)
    return out


def session_snapshot(ctx: ToolContext) -> dict[str, Any]:
    """The parts of "now" a checkpoint keeps for diff_sessions: the messages of recent errors by
    fingerprint, the request URLs failing recently, and the latest vitals per page URL."""
    messages: dict[str, str] = {}
    failing: dict[str, None] = {}  # ordered set, most recent last
    for e in newest_entries(ctx, CONSOLE, SNAPSHOT_ENTRIES):
        if e.get("level") != "error":
            continue
        if e.get("type") == "network" and is_failed_request(e):
            key = _url_key(e)
            if key:
                failing.pop(key, None)
                failing[key] = None
        fp = fingerprint(e)
        messages.pop(fp, None)
        messages[fp] = clip(e.get("message", ""), 160)
    for b in newest_entries(ctx, NETWORK_BODIES, SNAPSHOT_ENTRIES):
        if is_failed_request(b):
            key = _url_key(b)
            if key:
                failing.pop(key, None)
                failing[key] = None
    vitals = {}
    for url, snap in list(ctx.app.store.performance.items())[-MAX_SNAPSHOT_VITALS:]:
        if isinstance(snap, dict):
            values = _vitals_of(snap)
            if values:
                vitals[str(url)[:200]] = values
    return {"error_messages": dict(list(messages.items())[-MAX_SNAPSHOT_MESSAGES:]),
            "failing_urls": list(failing)[-MAX_SNAPSHOT_URLS:], "vitals": vitals}


def _window(ctx: ToolContext, buffer: str, start: int, stop: int, limit: int
            ) -> tuple[list[dict[str, Any]], int]:
    """Entries of C{buffer} with sequence numbers in [start, stop) (the newest C{limit}), and
    how many of them were evicted before this read."""
    ring = ctx.app.store.buffers.get(buffer)
    if ring is None or stop <= start:
        return [], 0
    raw = ring.read(start)
    items = raw.items[:max(0, stop - raw.first_seq)]
    lost = max(0, min(stop, ring.tail) - start)
    cut = max(0, len(items) - limit)
    return decode_entries(items[cut:]), lost + cut


def _compare_vitals(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    changed = []
    for url in sorted(set(before) & set(after)):
        a, b = before[url], after[url]
        if not isinstance(a, dict) or not isinstance(b, dict):
            continue
        for key in sorted(set(a) & set(b)):
            x, y = a[key], b[key]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y)):
                continue
            delta = y - x
            floor = 0.05 if key == "cumulative_layout_shift" else VITAL_MIN_MS
            if abs(delta) > floor and abs(delta) > VITAL_CHANGE * max(abs(x), 1e-9):
                changed.append({"url": url, "metric": key, "before": x, "after": y,
                                "delta": round(delta, 3),
                                "direction": "worse" if delta > 0 else "better"})
    return changed


def configure_diff_sessions(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    ref_a = ctx.str_arg(args, "from_checkpoint") or ctx.str_arg(args, "checkpoint") \
        or ctx.str_arg(args, "name")
    if not ref_a:
        raise MissingParam("diff_sessions needs 'from_checkpoint' (a checkpoint name; "
                           "to_checkpoint defaults to now)", param="from_checkpoint",
                           retry="configure {what:'checkpoint', checkpoint_action:'list'} "
                           "lists yours.")
    ref_b = ctx.str_arg(args, "to_checkpoint") or "now"
    limit = ctx.int_arg(args, "limit", 50, 1, 1000)
    a = resolve_checkpoint(ctx, ref_a)
    heads_now = {n: ring.head for n, ring in ctx.app.store.buffers.items()}
    if ref_b == "now":
        b = {"name": "now", "created_at": ctx.now(), "heads": heads_now,
             **session_snapshot(ctx)}
    else:
        b = resolve_checkpoint(ctx, ref_b)
    notes = []

    def heads_of(cp: dict[str, Any]) -> dict[str, int]:
        h = raw_h if isinstance(raw_h := cp.get("heads"), dict) else {}
        return {k: v for k, v in h.items() if isinstance(v, int) and not isinstance(v, bool)}

    ha, hb = heads_of(a), heads_of(b)
    if sum(hb.values()) < sum(ha.values()):
        a, b, ha, hb = b, a, hb, ha
        notes.append("from_checkpoint is newer than to_checkpoint: compared the other way round")
    keep, _ = view(ctx, args)
    entries: dict[str, list[dict[str, Any]]] = {}
    missed: dict[str, int] = {}
    for buffer in (CONSOLE, NETWORK_BODIES, WEBSOCKET_EVENTS, ACTIONS):
        items, lost = _window(ctx, buffer, ha.get(buffer, 0), hb.get(buffer, heads_now.get(buffer, 0)),
                              DIFF_ENTRIES)
        if keep is not None:
            items = [e for e in items if keep(e)]
        entries[buffer] = items
        missed[buffer] = lost
    entries[CONSOLE], hidden = noise_filter(ctx, entries[CONSOLE])
    snapshot = {"at": b.get("created_at"), "heads": hb, "entries": entries, "missed": missed,
                "counters": {}}
    diff = changes(a, snapshot, limit=limit)

    counts = {name: {"at_from": ha.get(name, 0), "at_to": hb.get(name, 0),
                     "added": max(0, hb.get(name, 0) - ha.get(name, 0))}
              for name in sorted(set(ha) | set(hb))}
    clusters = diff["errors"]["clusters"]
    new_errors = [{"message": (c.get("sample") or {}).get("message") or c.get("template"),
                   "count": c.get("count"), "fingerprint": c.get("fingerprint")}
                  for c in clusters if c.get("new_kind")]
    seen_between = {c.get("fingerprint") for c in clusters}
    a_messages = raw_a_messages if isinstance(raw_a_messages := a.get("error_messages"), dict) else {}
    # Resolved: error kinds known at `from` that did not occur between `from` and `to`.
    resolved = [{"fingerprint": fp, "message": a_messages.get(fp)}
                for fp in (a.get("error_fingerprints") or []) if isinstance(fp, str)
                and fp not in seen_between]
    if not a_messages and a.get("error_fingerprints"):
        notes.append("the from checkpoint predates error messages in checkpoints: resolved "
                     "errors are named by fingerprint only")
    failing_before = a.get("failing_urls") if isinstance(a.get("failing_urls"), list) else None
    between: dict[str, None] = {}
    for item in entries[NETWORK_BODIES] + [e for e in entries[CONSOLE]
                                           if e.get("type") == "network"]:
        key = _url_key(item) if is_failed_request(item) else None
        if key:
            between[key] = None
    failing_between = list(between)
    if failing_before is None:
        notes.append("the from checkpoint predates failing-URL tracking: every failing URL "
                     "between the two counts as new")
        failing_before = []
    known_failing = set(failing_before)
    new_failing = [u for u in failing_between if u not in known_failing]
    va = a.get("vitals") if isinstance(a.get("vitals"), dict) else None
    vb = b.get("vitals") if isinstance(b.get("vitals"), dict) else None
    vitals = {"changed": _compare_vitals(va, vb)} if va is not None and vb is not None else \
        {"changed": [], "note": "a checkpoint predates vitals tracking"}
    if any(missed.values()):
        notes.append("some entries between the two were evicted from the buffers before this "
                     "read (see missed)")
    body = {
        "from": a.get("name"), "to": b.get("name"),
        "from_created_at": a.get("created_at"), "to_created_at": b.get("created_at"),
        "buffers": counts, "missed": missed,
        "new_errors": new_errors, "resolved_errors": resolved[:limit],
        "new_failing_urls": new_failing[:limit], "failing_urls_between": failing_between[:limit],
        "vitals": vitals, "errors_between": diff["errors"]["count"],
        "failed_requests_between": diff["failed_requests"]["count"],
        "websocket_events_between": diff["websocket_events"]["count"],
        "actions_between": diff["actions"]["count"], "noise_hidden": hidden, "notes": notes,
    }
    summary = (f"{a.get('name')} -> {b.get('name')}: {len(new_errors)} new error kind(s), "
               f"{len(resolved)} resolved, {len(new_failing)} new failing URL(s), "
               f"{len(vitals['changed'])} vital change(s)")
    return ctx.ok(summary, body)

"""Error clusters and log summaries: group entries by a fingerprint of their normalised message."""

from __future__ import annotations

import hashlib
from typing import Any

from gasoline.analysis._util import dicts, entry_time, is_error, iso, text
from gasoline.core.clients.noise import normalize_message
from gasoline.core.redaction.redactor import redact_entries


def message_of(entry: dict[str, Any]) -> str:
    """The human message of a log entry of any §4 shape."""
    for key in ("message", "error", "statusText"):
        value = entry.get(key)
        if isinstance(value, str) and value.strip():
            return value
    if entry.get("type") == "network":
        return f"{entry.get('method', 'GET')} {entry.get('url', '')} {entry.get('status', '')}"
    args = entry.get("args")
    if isinstance(args, list) and args:
        return " ".join(text(a, 200) for a in args[:5])
    return ""


def template_of(entry: dict[str, Any]) -> str:
    message = message_of(entry)
    if entry.get("type") == "network":
        # A failed request: the method, the URL without its query and the status identify it.
        url = text(entry.get("url"), 300).split("?", 1)[0]
        request = normalize_message(f"{entry.get('method', 'GET')} {url}")
        return f"{request} {text(entry.get('status'), 5)}".strip()
    return normalize_message(message)


def fingerprint(entry: dict[str, Any]) -> str:
    """A stable 12-hex-digit id of the entry's level and normalised message."""
    level = str(entry.get("level", "")).lower()
    basis = f"{level}\x00{template_of(entry)}"
    return hashlib.sha256(basis.encode("utf-8", "replace")).hexdigest()[:12]


def _group(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(entries):
        fp = fingerprint(entry)
        at = entry_time(entry)
        group = groups.get(fp)
        if group is None:
            group = groups[fp] = {
                "fingerprint": fp,
                "template": template_of(entry)[:300],
                "level": str(entry.get("level", "")),
                "count": 0,
                "first_seen": at,
                "last_seen": at,
                "first_index": index,
                "urls": [],
                "sample": None,
            }
        group["count"] += 1
        if at is not None:
            if group["first_seen"] is None or at < group["first_seen"]:
                group["first_seen"] = at
            if group["last_seen"] is None or at >= group["last_seen"]:
                group["last_seen"] = at
        group["last_index"] = index
        group["sample"] = entry  # the latest one
        url = entry.get("url")
        if isinstance(url, str) and url and url not in group["urls"] and len(group["urls"]) < 5:
            group["urls"].append(url[:300])
    return list(groups.values())


def _sample(entry: dict[str, Any]) -> dict[str, Any]:
    keep = ("message", "level", "type", "url", "source", "filename", "lineno", "colno", "status",
            "method", "tabId", "tab_id")
    out = {k: entry[k] for k in keep if k in entry}
    if isinstance(out.get("message"), str):
        out["message"] = out["message"][:1000]
    stack = entry.get("stack")
    if isinstance(stack, str) and stack:
        out["stack"] = "\n".join(stack.splitlines()[:8])[:2000]
    return out


def _finish(group: dict[str, Any]) -> dict[str, Any]:
    return {
        "fingerprint": group["fingerprint"],
        "template": group["template"],
        "level": group["level"],
        "count": group["count"],
        "first_seen": iso(group["first_seen"]),
        "last_seen": iso(group["last_seen"]),
        "urls": group["urls"],
        "sample": _sample(group["sample"]),
    }


def error_clusters(errors: Any, limit: int = 50) -> dict[str, Any]:
    """
    Group error entries (console errors, exceptions, failed requests) by fingerprint, most frequent
    first (ties: most recent first). Entries whose level is not C{error} are ignored.
    """
    # Values are redacted before anything is templated, grouped or cut.
    entries = redact_entries([e for e in dicts(errors) if is_error(e)])
    groups = _group(entries)
    groups.sort(key=lambda g: (-g["count"], -g["last_index"]))
    return {
        "total_errors": len(entries),
        "cluster_count": len(groups),
        "clusters": [_finish(g) for g in groups[:limit]],
        "truncated": len(groups) > limit,
    }


def summarize_logs(entries: Any, limit: int = 100) -> dict[str, Any]:
    """Group log entries of every level by fingerprint, with counts per level."""
    items = redact_entries(dicts(entries))
    groups = _group(items)
    by_level: dict[str, int] = {}
    for entry in items:
        level = str(entry.get("level", "unknown"))
        by_level[level] = by_level.get(level, 0) + 1
    groups.sort(key=lambda g: (-g["count"], -g["last_index"]))
    return {
        "total": len(items),
        "distinct": len(groups),
        "by_level": by_level,
        "groups": [_finish(g) for g in groups[:limit]],
        "truncated": len(groups) > limit,
    }

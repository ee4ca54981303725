"""Small helpers shared by the analyses: entry times, URLs, failure tests, bounded lists."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Iterable

from gasoline.core.redaction.redactor import clip
from urllib.parse import urlsplit

from gasoline.common import rfc3339 as iso  # noqa: F401  (the one timestamp formatter)

#: An epoch number above this is in milliseconds (1e11 s is the year 5138).
_MS_THRESHOLD = 1e11
_TIME_KEYS = ("ts", "timestamp", "time", "received_at", "_received_at")


def to_seconds(value: Any) -> float | None:
    """Epoch seconds from a number (seconds or milliseconds) or an ISO 8601 string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value <= 0:
            return None
        return value / 1000.0 if value > _MS_THRESHOLD else float(value)
    if isinstance(value, str) and value:
        text = value.strip()
        try:
            return to_seconds(float(text))
        except ValueError:
            pass
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        return parsed.timestamp()
    return None


def entry_time(entry: dict[str, Any]) -> float | None:
    """When an entry happened, in epoch seconds, from the first time field it has."""
    for key in _TIME_KEYS:
        if key in entry:
            seconds = to_seconds(entry[key])
            if seconds is not None:
                return seconds
    return None


def dicts(items: Any) -> list[dict[str, Any]]:
    """Only the dict items of C{items} (hostile input may hold anything)."""
    if not isinstance(items, (list, tuple)):
        return []
    return [item for item in items if isinstance(item, dict)]


def text(value: Any, limit: int = 500) -> str:
    if value is None:
        return ""
    # Redacted before it is cut (gasoline.core.redaction.redactor.clip): no half secret survives the cut.
    return clip(value, limit)


def status_of(entry: dict[str, Any]) -> int | None:
    status = entry.get("status")
    if isinstance(status, bool):
        return None
    if isinstance(status, (int, float)) and math.isfinite(status):
        return int(status)
    # isdigit() alone admits "²" and other Unicode digits that int() rejects.
    if isinstance(status, str) and status.isascii() and status.isdigit() and len(status) <= 6:
        return int(status)
    return None


def is_failed_request(entry: dict[str, Any]) -> bool:
    """A network body or a console C{type:"network"} entry that failed (>= 400, 0, or error)."""
    status = status_of(entry)
    if status is not None:
        return status >= 400 or status == 0
    return bool(entry.get("error"))


def is_error(entry: dict[str, Any]) -> bool:
    return str(entry.get("level", "")).lower() == "error"


def origin_of(url: Any) -> str | None:
    """C{scheme://host[:port]} of an http(s)/ws(s) URL, lower-cased, default ports dropped."""
    if not isinstance(url, str) or not url:
        return None
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https", "ws", "wss") or not host:
        return None
    default = {"http": 80, "https": 443, "ws": 80, "wss": 443}[scheme]
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == default:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def host_of(url: Any) -> str | None:
    if not isinstance(url, str):
        return None
    try:
        return urlsplit(url.strip()).hostname
    except ValueError:
        return None


def site_of(host: str | None) -> str | None:
    """A rough registrable domain: the last two labels (three under C{co.uk}-style suffixes)."""
    if not host:
        return None
    host = host.lower().rstrip(".")
    if host.replace(".", "").isdigit() or ":" in host:
        return host
    labels = host.split(".")
    if len(labels) >= 3 and len(labels[-1]) == 2 and labels[-2] in (
        "co", "com", "org", "net", "gov", "ac", "edu", "ne", "or",
    ):
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


def take(items: Iterable[Any], limit: int) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if len(out) >= limit:
            break
        out.append(item)
    return out

"""
HAR 1.2 export from captured network bodies and the resource-timing waterfall.

Each captured body becomes one entry (request and response bodies, status, content type);
waterfall resources without a captured body become entries too (status C{0}: unknown, with a
comment), so the archive shows every resource the page loaded. Timing fields come from the
waterfall entry of the same URL when there is one. Headers and bodies are redacted.
"""

from __future__ import annotations

import math

import json
from collections.abc import Generator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson

from gasoline._version import __version__
from gasoline.analysis._util import dicts, entry_time, iso, status_of, text
from gasoline.analysis.security import headers_of
from gasoline.core.redaction.redactor import redact_text, redact_value

HAR_VERSION = "1.2"
_STATUS_TEXT = {200: "OK", 201: "Created", 204: "No Content", 301: "Moved Permanently",
                302: "Found", 304: "Not Modified", 400: "Bad Request", 401: "Unauthorized",
                403: "Forbidden", 404: "Not Found", 409: "Conflict", 422: "Unprocessable Entity",
                429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
                503: "Service Unavailable", 504: "Gateway Timeout"}
MAX_ENTRIES = 5000


def _number(value: Any, default: float = -1) -> float:
    """A finite number from captured data, else C{default} (NaN, infinities and non-numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return default
    return number if math.isfinite(number) else default


def _header_list(headers: dict[str, list[str]]) -> list[dict[str, str]]:
    out = []
    for name, values in headers.items():
        for value in values:
            out.append({"name": name, "value": value})
    redacted = redact_value(out)
    return [{"name": str(h["name"]), "value": str(h["value"])} for h in redacted]


def _query(url: str) -> list[dict[str, str]]:
    try:
        pairs = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    except ValueError:
        return []
    redacted = redact_value({k: v for k, v in pairs[:200]})
    return [{"name": k, "value": str(v)} for k, v in redacted.items()]


def _body_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        redacted = redact_value(value)
        try:
            return orjson.dumps(redacted).decode("utf-8")
        except TypeError:  # e.g. an integer beyond 64 bits from a hand-built entry
            return json.dumps(redacted, default=str)
    return redact_value(value if isinstance(value, str) else str(value))


def _timings(wf: dict[str, Any] | None, fallback_ms: float) -> tuple[float, dict[str, float]]:
    total = _number(wf.get("duration") if wf else None, fallback_ms)
    if total < 0:
        total = 0.0
    timings = {"blocked": -1.0, "dns": -1.0, "connect": -1.0, "ssl": -1.0, "send": 0.0,
               "wait": total, "receive": 0.0}
    if wf:
        fetch_start = _number(wf.get("fetch_start"))
        response_end = _number(wf.get("response_end"))
        start = _number(wf.get("start_time"))
        if fetch_start >= 0 and start >= 0 and fetch_start >= start:
            timings["blocked"] = round(fetch_start - start, 3)
        if response_end >= 0 and fetch_start >= 0 and response_end >= fetch_start:
            timings["wait"] = round(response_end - fetch_start, 3)
        timings["receive"] = max(0.0, round(total - max(timings["wait"], 0)
                                            - max(timings["blocked"], 0), 3))
    return total, timings


def _entry(body: dict[str, Any] | None, wf: dict[str, Any] | None, started_at: float) -> dict[str, Any]:
    source = body or {}
    url = text(source.get("url") or (wf or {}).get("url") or (wf or {}).get("name"), 8000)
    method = text(source.get("method") or "GET", 16).upper()
    status = status_of(source) if body else None
    at = entry_time(source) if body else None
    if at is None:
        offset = _number((wf or {}).get("start_time"), 0)
        at = started_at + max(offset, 0) / 1000.0
    total, timings = _timings(wf, _number(source.get("duration"), 0))
    mime = text(source.get("content_type") or "", 200) or "x-unknown"
    response_body = _body_text(source.get("response_body"))
    content: dict[str, Any] = {
        "size": len(response_body.encode("utf-8")) if response_body is not None
        else int(max(_number((wf or {}).get("decoded_body_size"), 0), 0)),
        "mimeType": mime,
    }
    if response_body is not None:
        content["text"] = response_body
    request: dict[str, Any] = {
        "method": method,
        "url": redact_text(url),
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": _header_list(headers_of(source, "request")),
        "queryString": _query(url),
        "headersSize": -1,
        "bodySize": -1,
    }
    request_body = _body_text(source.get("request_body"))
    if request_body is not None:
        request["postData"] = {"mimeType": "application/octet-stream", "text": request_body}
        request["bodySize"] = len(request_body.encode("utf-8"))
    response = {
        "status": status if status is not None else 0,
        "statusText": _STATUS_TEXT.get(status or 0, ""),
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": _header_list(headers_of(source, "response")),
        "content": content,
        "redirectURL": "",
        "headersSize": -1,
        "bodySize": int(max(_number((wf or {}).get("encoded_body_size"), -1), -1)),
    }
    entry: dict[str, Any] = {
        "startedDateTime": iso(at) or "1970-01-01T00:00:00.000Z",
        "time": round(total, 3),
        "request": request,
        "response": response,
        "cache": {},
        "timings": timings,
        "pageref": "page_1",
    }
    comments = []
    if body is None:
        comments.append("From resource timing only; the body and status were not captured.")
    if source.get("request_truncated") or source.get("response_truncated"):
        comments.append("The extension truncated a body.")
    if comments:
        entry["comment"] = " ".join(comments)
    return entry


def har_steps(network_bodies: Any, waterfall: Any = (), page_url: str | None = None,
              started_at: float = 0.0, page_title: str | None = None
              ) -> Generator[tuple[int, int], None, dict[str, Any]]:
    """
    L{har} one entry at a time: a generator that yields C{(entries done, entries in all)} after
    each entry and returns the HAR log (C{StopIteration.value}). Redacting and encoding a full
    buffer of large bodies takes seconds, so the C{generate har} tool runs it in slices between
    which the reactor runs and progress is reported (L{gasoline.tools.generate}).
    """
    bodies = dicts(network_bodies)[:MAX_ENTRIES]
    waterfall_by_url: dict[str, dict[str, Any]] = {}
    for wf in dicts(waterfall):
        url = wf.get("url") or wf.get("name")
        if isinstance(url, str):
            waterfall_by_url.setdefault(url, wf)
    plan: list[tuple[dict[str, Any] | None, dict[str, Any] | None]] = []
    used = set()
    for body in bodies:
        url = body.get("url")
        paired = waterfall_by_url.get(url) if isinstance(url, str) else None
        if paired is not None:
            used.add(url)
        plan.append((body, paired))
    for url, wf in waterfall_by_url.items():
        if url not in used and len(plan) < MAX_ENTRIES:
            plan.append((None, wf))
    entries = []
    for captured, timing in plan:
        entries.append(_entry(captured, timing, started_at))
        yield len(entries), len(plan)
    entries.sort(key=lambda e: e["startedDateTime"])
    page_start = entries[0]["startedDateTime"] if entries else (iso(started_at) or
                                                               "1970-01-01T00:00:00.000Z")
    return {
        "log": {
            "version": HAR_VERSION,
            "creator": {"name": "Gasoline", "version": __version__},
            "pages": [{
                "startedDateTime": page_start,
                "id": "page_1",
                "title": text(page_title or page_url or "", 500),
                "pageTimings": {"onContentLoad": -1, "onLoad": -1},
            }],
            "entries": entries,
        }
    }


def har(network_bodies: Any, waterfall: Any = (), page_url: str | None = None,
        started_at: float = 0.0, page_title: str | None = None) -> dict[str, Any]:
    """
    A HAR 1.2 log. C{started_at} (epoch seconds) places entries that carry no time of their own
    (waterfall offsets are relative to the page's navigation start).
    """
    return drain(har_steps(network_bodies, waterfall, page_url, started_at, page_title))


def drain(steps: Generator[Any, None, Any]) -> Any:
    """Run a step generator (such as L{har_steps}) to its end; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value

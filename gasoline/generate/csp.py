"""
A Content-Security-Policy built from the origins the page was seen loading, per resource type.

Input: C{{type: [url or origin, ...]}} where type is a resource kind (C{script}, C{style},
C{img}, C{font}, C{fetch} / C{xmlhttprequest} / C{websocket}, C{iframe}, C{media},
C{worker}, C{manifest}, ...); L{origins_by_type} derives it from the waterfall and captured
bodies. The page's own origin becomes C{'self'}. The policy is a starting point: inline scripts,
C{eval} and anything the page did not load while observed are not covered (the notes say so).
"""

from __future__ import annotations

from typing import Any

from gasoline.analysis._util import dicts, origin_of, text

_DIRECTIVE_BY_TYPE = {
    "script": "script-src", "js": "script-src",
    "style": "style-src", "css": "style-src", "stylesheet": "style-src", "link": "style-src",
    "img": "img-src", "image": "img-src",
    "font": "font-src",
    "fetch": "connect-src", "xmlhttprequest": "connect-src", "xhr": "connect-src",
    "connect": "connect-src", "websocket": "connect-src", "beacon": "connect-src",
    "eventsource": "connect-src", "ping": "connect-src",
    "iframe": "frame-src", "frame": "frame-src", "subdocument": "frame-src",
    "media": "media-src", "video": "media-src", "audio": "media-src", "track": "media-src",
    "worker": "worker-src", "manifest": "manifest-src", "object": "object-src",
    "embed": "object-src",
}
_ORDER = ["default-src", "script-src", "style-src", "img-src", "font-src", "connect-src",
          "frame-src", "media-src", "worker-src", "manifest-src", "object-src", "base-uri",
          "form-action", "frame-ancestors"]
_SCHEME_SOURCES = {"data:": "data:", "blob:": "blob:"}
MAX_SOURCES_PER_DIRECTIVE = 50


def _source(value: str, page_origin: str | None) -> str | None:
    value = value.strip()
    for prefix, source in _SCHEME_SOURCES.items():
        if value.lower().startswith(prefix):
            return source
    origin = origin_of(value)
    if origin is None:
        return None
    if page_origin is not None and origin == page_origin:
        return "'self'"
    return origin


def csp(observed_origins_by_type: Any, page_origin: str | None = None,
        report_uri: str | None = None) -> dict[str, Any]:
    """C{{policy, directives, notes}}: a policy that allows what was observed and little else."""
    page = origin_of(page_origin) if page_origin else None
    directives: dict[str, list[str]] = {"default-src": ["'self'"]}
    unknown_types: list[str] = []
    observed = observed_origins_by_type if isinstance(observed_origins_by_type, dict) else {}
    for kind, values in observed.items():
        directive = _DIRECTIVE_BY_TYPE.get(str(kind).lower())
        if directive is None:
            unknown_types.append(text(kind, 40))
            directive = "default-src"
        items = values if isinstance(values, (list, tuple, set)) else [values]
        for value in items:
            if not isinstance(value, str):
                continue
            source = _source(value, page)
            if source is None:
                continue
            sources = directives.setdefault(directive, ["'self'"])
            if source not in sources and len(sources) < MAX_SOURCES_PER_DIRECTIVE:
                if source.startswith(("ws:", "wss:")) and directive != "connect-src":
                    continue
                sources.append(source)
    directives.setdefault("object-src", ["'none'"])
    directives["base-uri"] = ["'self'"]
    directives["form-action"] = ["'self'"]
    directives["frame-ancestors"] = ["'self'"]
    ordered = sorted(directives.items(), key=lambda kv: _ORDER.index(kv[0])
                     if kv[0] in _ORDER else len(_ORDER))
    parts = [f"{name} {' '.join(sources)}" for name, sources in ordered]
    if report_uri and isinstance(report_uri, str) and origin_of(report_uri):
        parts.append(f"report-uri {report_uri}")
    notes = [
        "Built from what the page loaded while observed: exercise every page and feature first.",
        "Inline <script>/<style> and eval are not allowed; move them to files or add nonces/hashes.",
        "frame-ancestors only works as an HTTP header, not in a <meta> tag.",
        "Deploy as Content-Security-Policy-Report-Only first and watch the reports.",
    ]
    if page is None:
        notes.append("No page origin given: the page's own origin is listed explicitly, not as 'self'.")
    if unknown_types:
        notes.append(f"Unrecognised resource types went to default-src: {', '.join(unknown_types)}.")
    return {
        "policy": "; ".join(parts),
        "directives": dict(ordered),
        "header": "Content-Security-Policy",
        "notes": notes,
    }


def origins_by_type(waterfall: Any = (), network_bodies: Any = ()) -> dict[str, list[str]]:
    """C{{initiator type: [origin, ...]}} from waterfall entries (and bodies as C{fetch})."""
    out: dict[str, list[str]] = {}

    def add(kind: str, url: Any) -> None:
        origin = origin_of(url) if isinstance(url, str) else None
        if origin is None and isinstance(url, str) and url.startswith(("data:", "blob:")):
            origin = url.split(":", 1)[0] + ":"
        if origin is not None:
            bucket = out.setdefault(kind, [])
            if origin not in bucket:
                bucket.append(origin)

    for entry in dicts(waterfall):
        add(text(entry.get("initiator_type"), 40).lower() or "other", entry.get("url") or entry.get("name"))
    for body in dicts(network_bodies):
        add("fetch", body.get("url"))
    return out

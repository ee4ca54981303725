"""
C{observe}: read what the browser did, through the caller's own view.

This module holds the buffer views (console, network, WebSocket, actions, history) and the views
derived from the buffers (timeline, error bundles, summarized logs), and the mode table. The
buffer reader they share (cursors, noise rules, tab filters, the read budget) is
L{gasoline.tools._reader}; the views of the page, the tabs and the extension's state (vitals,
page, tabs, pilot, screenshot, storage, IndexedDB, commands, recordings) are
L{gasoline.tools._page_views}.

A buffer read carries C{data_age_seconds}; any result says C{extension_connected: false} while
the extension is not connected (L{ToolContext.meta}).
"""

from __future__ import annotations

from typing import Any, Callable

import orjson
from twisted.internet.defer import Deferred

from gasoline.analysis import error_bundles, summarize_logs
from gasoline.analysis._util import entry_time
from gasoline.core.redaction.redactor import clip
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    EXTENSION_LOGS,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)
from gasoline.tools._page_scope import current_page
from gasoline.tools._page_views import (
    observe_command_result,
    observe_failed_commands,
    observe_indexeddb,
    observe_page,
    observe_pending_commands,
    observe_pilot,
    observe_recording_actions,
    observe_recordings,
    observe_screenshot,
    observe_storage,
    observe_tabs,
    observe_vitals,
)
from gasoline.tools._reader import DEFAULT_LIMIT, MAX_LIMIT, buffer_result, read_buffer
from gasoline.tools._views import (
    ERRORS_CURSOR,
    tab_of,
    view_filter,
)
from gasoline.tools.context import ToolContext, client_noise_rules, newest_entries
from gasoline.tools.schemas import MODE_PROPERTIES

#: How far back the derived views (timeline, bundles, summaries, history) look.
VIEW_ENTRIES = 2000
CONSOLE_LEVELS = ("debug", "log", "info", "warn", "error")
_RANK = {name: i for i, name in enumerate(CONSOLE_LEVELS)}


# -- filters ------------------------------------------------------------------------------------


def _levels(ctx: ToolContext, args: dict[str, Any]) -> tuple[str | None, int | None]:
    level = ctx.str_arg(args, "level", None, CONSOLE_LEVELS)
    min_level = ctx.str_arg(args, "min_level", None, CONSOLE_LEVELS)
    return level, (_RANK[min_level] if min_level is not None else None)

# -- console ------------------------------------------------------------------------------------


def _console_match(ctx: ToolContext, args: dict[str, Any],
                   errors_only: bool) -> Callable[[dict[str, Any]], bool] | None:
    level, min_rank = _levels(ctx, args)
    source = ctx.str_arg(args, "source")
    url = ctx.str_arg(args, "url")
    if not errors_only and level is None and min_rank is None and source is None and url is None:
        return None

    def match(e: dict[str, Any]) -> bool:
        lvl = e.get("level")
        if errors_only and lvl != "error" and e.get("type") != "exception":
            return False
        if level is not None and lvl != level:
            return False
        if min_rank is not None and _RANK.get(str(lvl), 0) < min_rank:
            return False
        if source is not None and source not in str(e.get("source", "")):
            return False
        if url is not None and url not in str(e.get("url", "")):
            return False
        return True

    return match


def _error_bytes(b: bytes) -> bool:
    return b"error" in b or b"exception" in b


def observe_errors(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    entries, meta = read_buffer(ctx, args, CONSOLE, _console_match(ctx, args, True),
                                prefilter=_error_bytes, cursor_key=ERRORS_CURSOR)
    return buffer_result(ctx, CONSOLE, ("error", "errors"), entries, meta)


def observe_logs(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    entries, meta = read_buffer(ctx, args, CONSOLE, _console_match(ctx, args, False))
    return buffer_result(ctx, CONSOLE, ("log entry", "log entries"), entries, meta)


def observe_extension_logs(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    level, min_rank = _levels(ctx, args)
    source = ctx.str_arg(args, "source")

    def match(e: dict[str, Any]) -> bool:
        lvl = e.get("level")
        if level is not None and lvl != level:
            return False
        if min_rank is not None and _RANK.get(str(lvl), 0) < min_rank:
            return False
        if source is not None and source not in str(e.get("source", e.get("category", ""))):
            return False
        return True

    entries, meta = read_buffer(ctx, args, EXTENSION_LOGS, match, noise=False)
    return buffer_result(ctx, EXTENSION_LOGS, ("extension log entry", "extension log entries"),
                         entries, meta)


# -- network ------------------------------------------------------------------------------------


def _status(e: dict[str, Any]) -> int | None:
    s = e.get("status")
    return s if isinstance(s, int) and not isinstance(s, bool) else None


def _network_match(ctx: ToolContext,
                   args: dict[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    url = ctx.str_arg(args, "url")
    method = ctx.str_arg(args, "method")
    smin = ctx.int_arg(args, "status_min", None, 0, 999)
    smax = ctx.int_arg(args, "status_max", None, 0, 999)
    if url is None and method is None and smin is None and smax is None:
        return None
    method_u = method.upper() if method else None

    def match(e: dict[str, Any]) -> bool:
        if url is not None and url not in str(e.get("url", "")):
            return False
        if method_u is not None and str(e.get("method", "GET")).upper() != method_u:
            return False
        if smin is not None or smax is not None:
            s = _status(e)
            if s is None or (smin is not None and s < smin) or (smax is not None and s > smax):
                return False
        return True

    return match


def parse_path(path: str) -> list[str | int]:
    """C{data.items[0].id} / C{$.data.items.0.id} / C{/data/items/0} -> keys and indexes."""
    p = path.strip()
    if p.startswith("$"):
        p = p[1:]
    sep = "/" if p.startswith("/") else "."
    parts: list[str | int] = []
    for raw in p.replace("[", sep).replace("]", "").split(sep):
        if raw == "":
            continue
        if raw.lstrip("-").isdecimal() and len(raw) <= 18:
            parts.append(int(raw))
        else:
            parts.append(raw.strip("'\""))
    return parts


_MISSING = object()


def extract(value: Any, parts: list[str | int]) -> Any:
    for part in parts:
        if isinstance(part, int) and isinstance(value, list):
            if -len(value) <= part < len(value):
                value = value[part]
                continue
            return _MISSING
        if isinstance(value, dict):
            key = str(part)
            if key in value:
                value = value[key]
                continue
        return _MISSING
    return value


def find_key(value: Any, key: str, out: list[Any], depth: int = 0, cap: int = 50) -> None:
    if depth > 64 or len(out) >= cap:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key:
                out.append(v)
            find_key(v, key, out, depth + 1, cap)
    elif isinstance(value, list):
        for v in value:
            find_key(v, key, out, depth + 1, cap)


def _json_body(text: Any) -> Any:
    if isinstance(text, (dict, list)):
        return text
    if not isinstance(text, str) or text.lstrip()[:1] not in ("{", "["):
        return _MISSING
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return _MISSING


def observe_network_bodies(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    body_path = ctx.str_arg(args, "body_path")
    body_key = ctx.str_arg(args, "body_key")
    parts = parse_path(body_path) if body_path else None
    transform = None
    if parts is not None or body_key is not None:

        def transform(e: dict[str, Any]) -> dict[str, Any]:
            out = {k: v for k, v in e.items() if k not in ("response_body", "request_body")}
            for field in ("response_body", "request_body"):
                parsed = _json_body(e.get(field))
                if parsed is _MISSING:
                    continue
                if parts is not None:
                    got = extract(parsed, parts)
                    if got is not _MISSING:
                        out.setdefault("extracted", {})[field] = got
                if body_key is not None:
                    found: list[Any] = []
                    find_key(parsed, body_key, found)
                    if found:
                        out.setdefault("extracted_key", {})[field] = found
            if "extracted" not in out and "extracted_key" not in out:
                out["extracted"] = None
            return out

    match = _network_match(ctx, args)
    # By default the current page only (gasoline.tools._page_scope); scope "all" for everything.
    on_page, page_filters = current_page(ctx, args)
    if on_page is not None:
        also = match

        def match(e: dict[str, Any]) -> bool:
            return on_page(e) and (also is None or also(e))

    entries, meta = read_buffer(ctx, args, NETWORK_BODIES, match, transform=transform)
    if page_filters:
        meta["filters"] = {**meta.get("filters", {}), **page_filters}
    if body_path:
        meta["body_path"] = body_path
    if body_key:
        meta["body_key"] = body_key
    return buffer_result(ctx, NETWORK_BODIES, ("network body", "network bodies"), entries, meta)


def observe_network_waterfall(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """Resource timing for the page: asked of the extension (C{waterfall}) when it is
    connected, else what it last posted to C{/network-waterfall}."""
    match = _network_match(ctx, args)
    limit = ctx.int_arg(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)

    def answer(items: list[Any], source: str) -> dict[str, Any]:
        rows = [e for e in items if isinstance(e, dict) and (match is None or match(e))]
        view, applied = view_filter(ctx, args)
        if view is not None:
            rows = [e for e in rows if view(e)]
        total = len(rows)
        rows = rows[-limit:]
        data = {"count": len(rows), "total": total, "source": source, "entries": rows}
        if applied:
            data["filters"] = applied
        return ctx.ok(f"{len(rows)} waterfall entries (from {source})", data, buffer=WATERFALL)

    def buffered() -> dict[str, Any]:
        return answer(newest_entries(ctx, WATERFALL, VIEW_ENTRIES), "buffer")

    if not ctx.extension_connected:
        return buffered()
    d: Deferred = ctx.router_call("waterfall", {}, tab_id=ctx.int_arg(args, "tab_id", None))

    def got(result: Any) -> dict[str, Any]:
        items = result.get("entries") if isinstance(result, dict) else result
        if not isinstance(items, list):
            items = []
        return answer(items, "extension")

    return d.addCallback(got)


# -- websocket ----------------------------------------------------------------------------------


def observe_websocket_events(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    connection_id = ctx.str_arg(args, "connection_id")
    direction = ctx.str_arg(args, "direction", None, ("incoming", "outgoing"))
    url = ctx.str_arg(args, "url")

    def match(e: dict[str, Any]) -> bool:
        if connection_id is not None and e.get("id") != connection_id:
            return False
        if direction is not None and e.get("direction") != direction:
            return False
        if url is not None and url not in str(e.get("url", "")):
            return False
        return True

    any_filter = connection_id is not None or direction is not None or url is not None
    entries, meta = read_buffer(ctx, args, WEBSOCKET_EVENTS, match if any_filter else None,
                                noise=False)
    return buffer_result(ctx, WEBSOCKET_EVENTS, ("WebSocket event", "WebSocket events"),
                         entries, meta)


def observe_websocket_status(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    connection_id = ctx.str_arg(args, "connection_id")
    url = ctx.str_arg(args, "url")
    view, applied = view_filter(ctx, args)
    status = ctx.app.store.websocket_status()

    def keep(c: dict[str, Any]) -> bool:
        if connection_id is not None and c.get("id") != connection_id:
            return False
        if url is not None and url not in str(c.get("url", "")):
            return False
        return view is None or view(c)

    active = [c for c in status["active"] if keep(c)]
    closed = [c for c in status["closed"] if keep(c)]
    data: dict[str, Any] = {"active": active, "closed": closed}
    if applied:
        data["filters"] = applied
    return ctx.ok(f"{len(active)} open WebSocket connections, {len(closed)} recently closed",
                  data, buffer=WEBSOCKET_EVENTS)


# -- actions, history ---------------------------------------------------------------------------


def observe_actions(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    url = ctx.str_arg(args, "url")
    source = ctx.str_arg(args, "source")

    def match(e: dict[str, Any]) -> bool:
        if url is not None and url not in str(e.get("url", "")):
            return False
        if source is not None and e.get("source", "user") != source:
            return False
        return True

    entries, meta = read_buffer(ctx, args, ACTIONS,
                                match if url is not None or source is not None else None,
                                noise=False)
    return buffer_result(ctx, ACTIONS, ("action", "actions"), entries, meta)


def _view_entries(ctx: ToolContext, args: dict[str, Any], buffer: str,
                  noise: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any], int]:
    """The newest entries of C{buffer} for a derived view (no cursor moves), filtered by the
    caller's tab selection / scope and, optionally, its noise rules."""
    view, applied = view_filter(ctx, args)
    items = newest_entries(ctx, buffer, VIEW_ENTRIES)
    if view is not None:
        items = [e for e in items if view(e)]
    hidden = 0
    if noise:
        rules = client_noise_rules(ctx)
        kept = []
        for e in items:
            if rules.matches(e) is None:
                kept.append(e)
            else:
                hidden += 1
        items = kept
    return items, applied, hidden


def observe_history(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Navigations: C{navigate} actions (and any action with C{to_url}), newest last."""
    limit = ctx.int_arg(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    url = ctx.str_arg(args, "url")
    items, applied, _ = _view_entries(ctx, args, ACTIONS)
    nav = []
    for e in items:
        if e.get("type") not in ("navigate", "navigation") and not e.get("to_url"):
            continue
        target = e.get("to_url") or e.get("url")
        if url is not None and url not in str(target or ""):
            continue
        nav.append({"at": e.get("timestamp", e.get("ts")), "from_url": e.get("from_url"),
                    "to_url": target, "tab_id": tab_of(e), "source": e.get("source", "user")})
    total = len(nav)
    nav = nav[-limit:]
    data: dict[str, Any] = {"count": len(nav), "total": total, "entries": nav}
    if applied:
        data["filters"] = applied
    return ctx.ok(f"{len(nav)} navigations", data, buffer=ACTIONS)

# -- timeline, bundles, summaries ---------------------------------------------------------------


_TIMELINE_SOURCES = {
    "console": CONSOLE, "network": NETWORK_BODIES, "websocket": WEBSOCKET_EVENTS,
    "actions": ACTIONS,
}


def _seconds(e: dict[str, Any]) -> float | None:
    try:
        return entry_time(e)
    except Exception:
        return None


def _timeline_item(kind: str, e: dict[str, Any]) -> dict[str, Any]:
    if kind == "console":
        return {"level": e.get("level"), "message": clip(e.get("message", ""), 500),
                "url": e.get("url"), "type": e.get("type")}
    if kind == "network":
        return {"method": e.get("method"), "url": e.get("url"), "status": e.get("status"),
                "duration": e.get("duration")}
    if kind == "websocket":
        return {"event": e.get("event"), "id": e.get("id"), "direction": e.get("direction"),
                "url": e.get("url"), "size": e.get("size")}
    return {"type": e.get("type"), "url": e.get("url"), "source": e.get("source", "user"),
            "selectors": e.get("selectors"), "value": e.get("value")}


def observe_timeline(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Console, network, WebSocket and action entries merged in time order (the newest
    C{limit}); entries without a time are left out. No cursor moves."""
    limit = ctx.int_arg(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    source = ctx.str_arg(args, "source", None, tuple(_TIMELINE_SOURCES))
    rows: list[tuple[float, int, dict[str, Any]]] = []
    applied: dict[str, Any] = {}
    hidden = 0
    n = 0
    for kind, buffer in _TIMELINE_SOURCES.items():
        if source is not None and kind != source:
            continue
        items, applied, h = _view_entries(ctx, args, buffer, noise=kind in ("console", "network"))
        hidden += h
        for e in items:
            t = _seconds(e)
            if t is None:
                continue
            item = _timeline_item(kind, e)
            item = {"t": t, "kind": kind, **{k: v for k, v in item.items() if v is not None}}
            rows.append((t, n, item))
            n += 1
    rows.sort(key=lambda r: (r[0], r[1]))
    total = len(rows)
    picked = [r[2] for r in rows[-limit:]]
    data: dict[str, Any] = {"count": len(picked), "total": total, "noise_hidden": hidden,
                            "entries": picked}
    if applied:
        data["filters"] = applied
    return ctx.ok(f"{len(picked)} timeline events (of {total}, oldest first)", data)


def observe_error_bundles(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    window = ctx.num_arg(args, "window_seconds", 3.0, 0, 3600)
    limit = ctx.int_arg(args, "limit", 20, 1, 100)
    logs, applied, hidden = _view_entries(ctx, args, CONSOLE, noise=True)
    network, _, _ = _view_entries(ctx, args, NETWORK_BODIES)
    actions, _, _ = _view_entries(ctx, args, ACTIONS)
    result = error_bundles(logs, network, actions, logs, window_seconds=window, limit=limit)
    result["noise_hidden"] = hidden
    if applied:
        result["filters"] = applied
    n = len(result.get("bundles", []))
    return ctx.ok(f"{n} error bundles ({window:g} s of context before each error)", result,
                  buffer=CONSOLE)


def observe_summarized_logs(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    limit = ctx.int_arg(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    match = _console_match(ctx, args, False)
    logs, applied, hidden = _view_entries(ctx, args, CONSOLE, noise=True)
    if match is not None:
        logs = [e for e in logs if match(e)]
    result = summarize_logs(logs, limit=limit)
    result["noise_hidden"] = hidden
    if applied:
        result["filters"] = applied
    return ctx.ok(f"{result['total']} log entries in {result['distinct']} groups", result,
                  buffer=CONSOLE)

MODES: dict[str, Callable[[ToolContext, dict[str, Any]], Any]] = {
    "errors": observe_errors,
    "logs": observe_logs,
    "extension_logs": observe_extension_logs,
    "network_waterfall": observe_network_waterfall,
    "network_bodies": observe_network_bodies,
    "websocket_events": observe_websocket_events,
    "websocket_status": observe_websocket_status,
    "actions": observe_actions,
    "vitals": observe_vitals,
    "page": observe_page,
    "tabs": observe_tabs,
    "history": observe_history,
    "pilot": observe_pilot,
    "timeline": observe_timeline,
    "error_bundles": observe_error_bundles,
    "screenshot": observe_screenshot,
    "storage": observe_storage,
    "indexeddb": observe_indexeddb,
    "command_result": observe_command_result,
    "pending_commands": observe_pending_commands,
    "failed_commands": observe_failed_commands,
    "summarized_logs": observe_summarized_logs,
    "recordings": observe_recordings,
    "recording_actions": observe_recording_actions,
}

# The outcome of playbacks started with configure {what:"playback"} (gasoline.tools._playback).
from gasoline.tools._playback import observe_playback_results  # noqa: E402

MODES["playback_results"] = observe_playback_results

# Context streaming: the caller's event inbox (gasoline.tools._events).
from gasoline.tools._events import observe_events  # noqa: E402

MODES["events"] = observe_events

# The agents' page snapshot with refs (gasoline.tools._snapshot).
from gasoline.tools._snapshot import observe_snapshot  # noqa: E402

MODES["snapshot"] = observe_snapshot
#: Arguments these modes read beyond OBSERVE_SCHEMA (they live in L{gasoline.tools.schemas}:
#: tools/list is answered without importing this module).
PROPERTIES: dict[str, Any] = MODE_PROPERTIES["observe"]

__all__ = ["MODES", "PROPERTIES"]

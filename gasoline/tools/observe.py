"""
``observe``: read what the browser did, through the caller's own view.

Buffer reads (errors, logs, extension_logs, network_bodies, websocket_events, actions) go through
L{read_buffer}, which applies, in order:

 - the caller's read cursor (``state.cursors[<buffer>]``; ``observe errors`` has its own,
   ``console:errors``): a new client sees everything buffered;
   each read returns what is new since its last one and advances its cursor only. Explicit
   pagination: ``after_cursor``/``since_cursor`` (read forwards from there; the caller's cursor then
   moves to where the page ends), ``before_cursor`` / ``last_n`` (newest first backwards, the cursor
   does not move). ``limit`` default 100, max 1000;
 - the caller's noise rules (client scope + built-ins + global; L{client_noise_rules});
 - the caller's tab filters (``configure select_tab``; URL patterns matched against the entry's
   URLs and its tab's URL) and ``scope: "current_page"`` (the tab the extension tracks) or
   ``tab_id``;
 - the mode's own filters (level, url, method, status, connection, direction, ...).

Every result carries ``extension_connected`` and ``data_age_seconds``; buffer reads also carry
``cursor``, ``has_more``, ``total``, ``missed`` (entries evicted before the caller read them),
``noise_hidden`` and, when another client emptied the buffer since the caller's cursor, ``cleared``.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson
from twisted.internet.defer import Deferred

from gasoline.core.errors import GasolineError, InvalidParam, MissingParam
from gasoline.core.store import (
    ACTIONS,
    CONSOLE,
    EXTENSION_LOGS,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)
from gasoline.tools._views import (
    ERRORS_CURSOR,
    tab_of,
    view_filter,
)
from gasoline.tools.context import ToolContext, client_noise_rules, newest_entries

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
#: Payload bytes one read returns at most (the rest waits behind ``has_more``).
READ_BUDGET = 90_000
#: How far back the derived views (timeline, bundles, summaries, history) look.
VIEW_ENTRIES = 2000
CONSOLE_LEVELS = ("debug", "log", "info", "warn", "error")
_RANK = {name: i for i, name in enumerate(CONSOLE_LEVELS)}
_BIG = 2**62


#: A cut oversized entry's strings keep at most this many characters each (first try).
_CUT_STEPS = (8192, 2048, 512, 128, 32)


def _cut(value: Any, chars: int, depth: int = 0) -> Any:
    if isinstance(value, str):
        return value if len(value) <= chars else f"{value[:chars]}… [{len(value) - chars} more chars]"
    if depth > 16:
        return "…"
    if isinstance(value, dict):
        items = list(value.items())
        out = {k: _cut(v, chars, depth + 1) for k, v in items[:200]}
        if len(items) > 200:
            out["…"] = f"{len(items) - 200} more keys"
        return out
    if isinstance(value, list):
        out_list = [_cut(v, chars, depth + 1) for v in value[:50]]
        if len(value) > 50:
            out_list.append(f"… {len(value) - 50} more items")
        return out_list
    return value


def truncate_entry(entry: Any, size: int, budget: int = READ_BUDGET // 2) -> dict[str, Any]:
    """C{entry} (C{size} bytes of JSON, more than one read returns) cut to fit C{budget} bytes:
    long strings are shortened and long lists and objects cut, each cut saying how much went."""
    cut: Any = entry
    for chars in _CUT_STEPS:
        cut = _cut(entry, chars)
        if len(orjson.dumps(cut, default=str)) <= budget:
            break
    else:
        cut = {k: _cut(v, 32, 16) for k, v in list(entry.items())[:20]} \
            if isinstance(entry, dict) else {}
    if not isinstance(cut, dict):
        cut = {"value": cut}
    cut["_truncated"] = (f"this entry is {size} bytes, more than one read returns "
                         f"({READ_BUDGET}); it was cut to fit")
    return cut


# -- filters ------------------------------------------------------------------------------------


def _levels(ctx: ToolContext, args: dict[str, Any]) -> tuple[str | None, int | None]:
    level = ctx.str_arg(args, "level", None, CONSOLE_LEVELS)
    min_level = ctx.str_arg(args, "min_level", None, CONSOLE_LEVELS)
    return level, (_RANK[min_level] if min_level is not None else None)


# -- the generic buffer reader -------------------------------------------------------------------


def read_buffer(
    ctx: ToolContext,
    args: dict[str, Any],
    buffer: str,
    match: Callable[[dict[str, Any]], bool] | None = None,
    *,
    prefilter: Callable[[bytes], bool] | None = None,
    noise: bool = True,
    transform: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    cursor_key: str | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read C{buffer} for the caller (see the module docstring); return (entries, metadata).

    C{cursor_key} names the caller's cursor when one buffer has several views that must not move
    each other's cursor (``console:errors`` beside ``console`` for the logs); default C{buffer}.
    """
    key = cursor_key or buffer
    limit = ctx.int_arg(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    last_n = ctx.int_arg(args, "last_n", None, 1, MAX_LIMIT)
    explicit = None
    for name in ("after_cursor", "since_cursor"):
        if args.get(name) is not None:
            explicit = ctx.int_arg(args, name, None, 0, _BIG)
            break
    before = ctx.int_arg(args, "before_cursor", None, 0, _BIG)
    view, applied = view_filter(ctx, args)
    rules = client_noise_rules(ctx) if noise else None
    hidden = 0

    def accept(e: dict[str, Any]) -> bool:
        nonlocal hidden
        if match is not None and not match(e):
            return False
        if view is not None and not view(e):
            return False
        if rules is not None and rules.matches(e) is not None:
            hidden += 1
            return False
        return True

    ring = ctx.app.store.buffers[buffer]
    ctx.app.store.note_read(buffer)
    state = ctx.state
    entries: list[dict[str, Any]] = []
    size = 0
    truncated = False
    backwards = last_n is not None or before is not None
    meta: dict[str, Any] = {}
    stored_cursor = state.cursors.get(key, 0)
    if backwards:
        want = last_n if last_n is not None else limit
        raw = ring.read(0)
        n = len(raw.items)
        stop = n if before is None else max(0, min(n, before - raw.first_seq))
        has_more = False
        oldest_seq = None
        for i in range(stop - 1, -1, -1):
            b = raw.items[i]
            if prefilter is not None and not prefilter(b):
                continue
            e = orjson.loads(b)
            if not accept(e):
                continue
            if not entries and len(b) > READ_BUDGET:
                # One entry larger than the whole budget: return it cut, never block on it.
                entries.append(truncate_entry(e, len(b)))
                size = READ_BUDGET
                oldest_seq = raw.first_seq + i
                continue
            if len(entries) == want or size + len(b) > READ_BUDGET:
                truncated = len(entries) < want
                has_more = True
                break
            entries.append(e)
            size += len(b)
            oldest_seq = raw.first_seq + i
        entries.reverse()
        cursor = stored_cursor
        next_cursor, missed = cursor, 0
        meta["before_cursor"] = oldest_seq
    else:
        cursor = explicit if explicit is not None else stored_cursor
        raw = ring.read(cursor)
        next_cursor, has_more, missed = raw.next_cursor, False, raw.missed
        for i, b in enumerate(raw.items):
            if prefilter is not None and not prefilter(b):
                continue
            e = orjson.loads(b)
            if not accept(e):
                continue
            if not entries and len(b) > READ_BUDGET:
                # One entry larger than the whole budget (issue 11 §3): it is returned cut, with
                # a note, and the cursor moves past it, so no page can wedge every agent's cursor.
                entries.append(truncate_entry(e, len(b)))
                size = READ_BUDGET
                continue
            if len(entries) == limit or size + len(b) > READ_BUDGET:
                truncated = len(entries) < limit
                next_cursor, has_more = raw.first_seq + i, True
                break
            entries.append(e)
            size += len(b)
        if state.cursors.get(key) != next_cursor:
            state.cursors[key] = next_cursor
    cleared = ctx.runtime.buffer_clears.get(buffer)
    if cleared is not None and cursor < cleared["seq"] and not backwards:
        # Entries before the clear were removed by a client, not evicted.
        missed = max(0, ring.tail - max(cursor, cleared["seq"]))
        meta["cleared"] = {"at": cleared["at"], "by_you": cleared["by"] == ctx.client_id,
                           "removed": cleared["removed"]}
    if transform is not None:
        entries = [t for t in (transform(e) for e in entries) if t is not None]
    meta.update({
        "count": len(entries),
        "cursor": next_cursor,
        "has_more": has_more,
        "total": len(ring),
        "missed": missed,
        "oldest_timestamp": _ts(entries[0]) if entries else None,
        "newest_timestamp": _ts(entries[-1]) if entries else None,
        "noise_hidden": hidden,
    })
    if applied:
        meta["filters"] = applied
    if truncated:
        meta["truncated"] = f"page cut at {READ_BUDGET} bytes; call again for the rest"
    meta["_backwards"] = backwards
    meta["_from"] = cursor
    return entries, meta


def _ts(entry: dict[str, Any]) -> Any:
    for key in ("ts", "timestamp", "time"):
        if entry.get(key) is not None:
            return entry[key]
    return None


def buffer_result(ctx: ToolContext, buffer: str, kind: tuple[str, str],
                  entries: list[dict[str, Any]], meta: dict[str, Any],
                  key: str = "entries") -> dict[str, Any]:
    """The standard answer for a buffer read: one summary line and the metadata + entries."""
    backwards = meta.pop("_backwards")
    start = meta.pop("_from")
    n = len(entries)
    noun = kind[0] if n == 1 else kind[1]
    has_more = meta["has_more"]
    if backwards:
        summary = f"{n} {noun} (the newest"
        if meta.get("before_cursor") is not None and has_more:
            summary += "; older ones waiting)"
        else:
            summary += ")"
    else:
        summary = f"{n} new {noun} (cursor {start} -> {meta['cursor']}"
        summary += ", more waiting)" if has_more else ")"
    if meta.get("cleared"):
        who = "you" if meta["cleared"]["by_you"] else "another client"
        summary += f"; the buffer was cleared by {who} since your last read"
    if meta.get("missed"):
        summary += (f"; {meta['missed']} older entries were evicted before you read them "
                    "(cursor_expired: the buffer is a ring; read more often or use last_n)")
    if meta.get("noise_hidden"):
        summary += f"; {meta['noise_hidden']} hidden by noise rules"
    meta[key] = entries
    return ctx.ok(summary, meta, buffer=buffer)


# -- console ------------------------------------------------------------------------------------


def _console_match(ctx: ToolContext, args: dict[str, Any], errors_only: bool):
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
        if min_rank is not None and _RANK.get(lvl, 0) < min_rank:
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
        if min_rank is not None and _RANK.get(lvl, 0) < min_rank:
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


def _network_match(ctx: ToolContext, args: dict[str, Any]):
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
    """``data.items[0].id`` / ``$.data.items.0.id`` / ``/data/items/0`` -> keys and indexes."""
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
    if not isinstance(text, str) or not text.lstrip()[:1] in ("{", "["):
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

    entries, meta = read_buffer(ctx, args, NETWORK_BODIES, _network_match(ctx, args),
                                transform=transform)
    if body_path:
        meta["body_path"] = body_path
    if body_key:
        meta["body_key"] = body_key
    return buffer_result(ctx, NETWORK_BODIES, ("network body", "network bodies"), entries, meta)


def observe_network_waterfall(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """Resource timing for the page: asked of the extension (``waterfall``) when it is
    connected, else what it last posted to ``/network-waterfall``."""
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
    """Navigations: ``navigate`` actions (and any action with ``to_url``), newest last."""
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


# -- vitals, page, tabs, pilot ------------------------------------------------------------------


def observe_vitals(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    from gasoline.analysis.perf import page_performance  # noqa: PLC0415

    url = ctx.str_arg(args, "url")
    view, applied = view_filter(ctx, args)
    pages = []
    for snap in reversed(list(ctx.app.store.performance.values())):
        if not isinstance(snap, dict):
            continue
        if url is not None and url not in str(snap.get("url", "")):
            continue
        if view is not None and not view(snap):
            continue
        try:
            pages.append(page_performance(snap))
        except Exception:  # a malformed snapshot: show it raw rather than fail the read
            pages.append({"url": snap.get("url"), "raw": snap})
    limit = ctx.int_arg(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    pages = pages[:limit]
    data: dict[str, Any] = {"count": len(pages), "pages": pages}
    if applied:
        data["filters"] = applied
    return ctx.ok(f"web vitals for {len(pages)} pages (newest first)", data,
                  buffer="performance")


def _settings(ctx: ToolContext) -> dict[str, Any]:
    return dict(getattr(ctx.app.extension, "settings", None) or {})


def observe_page(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    s = _settings(ctx)
    url = s.get("tracked_tab_url") or None
    page = {
        "url": url, "title": s.get("tracked_tab_title") or None,
        "tab_id": s.get("tracked_tab_id") or None,
        "tracking_enabled": s.get("tracking_enabled"),
        "csp_restricted": s.get("csp_restricted"), "csp_level": s.get("csp_level"),
    }
    perf = ctx.app.store.performance.get(url) if url else None
    if perf is not None:
        from gasoline.analysis.perf import page_performance  # noqa: PLC0415

        try:
            page["vitals"] = page_performance(perf)
        except Exception:
            page["vitals"] = None
    last_sync = getattr(ctx.app.extension, "last_sync", None)
    page["settings_age_seconds"] = None if last_sync is None else round(ctx.now() - last_sync, 3)
    summary = f"tracked page: {url}" if url else "no tracked page"
    return ctx.ok(summary, {"page": page})


def observe_tabs(ctx: ToolContext, args: dict[str, Any]) -> Any:
    def from_settings(note: str) -> dict[str, Any]:
        s = _settings(ctx)
        tabs = []
        if s.get("tracked_tab_id"):
            tabs.append({"id": s.get("tracked_tab_id"), "url": s.get("tracked_tab_url"),
                         "title": s.get("tracked_tab_title"), "tracked": True})
        return ctx.ok(f"{len(tabs)} tabs known ({note})", {"tabs": tabs, "source": "settings"})

    if not ctx.extension_connected:
        return from_settings("from the extension's last settings")
    d: Deferred = ctx.router_call("tabs", {})

    def got(result: Any) -> dict[str, Any]:
        tabs = result.get("tabs") if isinstance(result, dict) else result
        tabs = [t for t in tabs if isinstance(t, dict)] if isinstance(tabs, list) else []
        known = {t.get("id"): t.get("url") for t in tabs
                 if t.get("id") is not None and isinstance(t.get("url"), str)}
        if known:
            ctx.runtime.tab_urls = dict(list(known.items())[:500])
        tracked = _settings(ctx).get("tracked_tab_id")
        for t in tabs:
            t.setdefault("tracked", t.get("id") == tracked)
        return ctx.ok(f"{len(tabs)} tabs open", {"tabs": tabs, "source": "extension"})

    return d.addCallback(got)


def observe_pilot(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    s = _settings(ctx)
    keys = ("pilot_enabled", "tracking_enabled", "capture_logs", "capture_network",
            "capture_websocket", "capture_actions")
    data = {k: s.get(k) for k in keys}
    data["extension_version"] = getattr(ctx.app.extension, "extension_version", None)
    pilot = s.get("pilot_enabled")
    word = "enabled" if pilot else ("disabled" if pilot is False else "unknown")
    return ctx.ok(f"AI pilot {word}", data)


# -- timeline, bundles, summaries ---------------------------------------------------------------


_TIMELINE_SOURCES = {
    "console": CONSOLE, "network": NETWORK_BODIES, "websocket": WEBSOCKET_EVENTS,
    "actions": ACTIONS,
}


def _seconds(e: dict[str, Any]) -> float | None:
    from gasoline.analysis._util import entry_time  # noqa: PLC0415

    try:
        return entry_time(e)
    except Exception:
        return None


def _timeline_item(kind: str, e: dict[str, Any]) -> dict[str, Any]:
    if kind == "console":
        return {"level": e.get("level"), "message": str(e.get("message", ""))[:500],
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
    from gasoline.analysis import error_bundles  # noqa: PLC0415

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
    from gasoline.analysis import summarize_logs  # noqa: PLC0415

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


# -- extension-bound views ----------------------------------------------------------------------


def observe_screenshot(ctx: ToolContext, args: dict[str, Any]) -> Deferred:
    """A screenshot of the tab (X ``screenshot``): the extension uploads it to
    ``POST /screenshots`` (saved under ``<state-dir>/screenshots/``); the answer is its path."""
    tab_id = ctx.int_arg(args, "tab_id", None)
    d: Deferred = ctx.router_call("screenshot", {}, tab_id=tab_id)

    def got(result: Any) -> dict[str, Any]:
        result = result if isinstance(result, dict) else {"result": result}
        data_url = result.get("data_url") or result.get("dataUrl")
        if not result.get("path") and isinstance(data_url, str):
            result = _save_data_url(ctx, data_url, result)
        result.pop("data_url", None)
        result.pop("dataUrl", None)
        path = result.get("path")
        if not path:
            raise GasolineError("the extension answered the screenshot without an image",
                                code="screenshot_failed", retry="Retry; the tab may be hidden.")
        return ctx.ok(f"screenshot saved to {path}", result)

    return d.addCallback(got)


def _save_data_url(ctx: ToolContext, data_url: str, result: dict[str, Any]) -> dict[str, Any]:
    import base64  # noqa: PLC0415
    import binascii  # noqa: PLC0415
    import re  # noqa: PLC0415

    m = re.match(r"^data:image/(jpeg|jpg|png|webp);base64,", data_url)
    if m is None:
        raise GasolineError("the extension's screenshot is not a base64 image data URL",
                            code="screenshot_failed")
    try:
        image = base64.b64decode(data_url[m.end():], validate=True)
    except (binascii.Error, ValueError):
        raise GasolineError("the extension's screenshot is not valid base64",
                            code="screenshot_failed") from None
    ext = m.group(1).replace("jpeg", "jpg")
    path = ctx.app.screenshots.save(image, ext, result.get("url"), None, ctx.now())
    return dict(result, path=str(path), filename=path.name)


def observe_storage(ctx: ToolContext, args: dict[str, Any]) -> Deferred:
    """The page's localStorage / sessionStorage / cookies (X ``state_capture``)."""
    d: Deferred = ctx.router_call("state_capture", {"include": ["localStorage", "sessionStorage",
                                                                "cookies"]},
                                  tab_id=ctx.int_arg(args, "tab_id", None))

    def got(result: Any) -> dict[str, Any]:
        result = result if isinstance(result, dict) else {"result": result}
        counts = {k: len(v) for k, v in result.items() if isinstance(v, (dict, list))}
        return ctx.ok(f"page storage ({', '.join(f'{k}: {n}' for k, n in counts.items())})",
                      {"storage": result})

    return d.addCallback(got)


#: Read-only: lists databases and their object stores with record counts and a few records.
INDEXEDDB_SCRIPT = """
(async () => {
  const out = [];
  const dbs = indexedDB.databases ? await indexedDB.databases() : [];
  for (const info of dbs.slice(0, 20)) {
    const db = await new Promise((ok, ko) => {
      const r = indexedDB.open(info.name); r.onsuccess = () => ok(r.result); r.onerror = ko;
      r.onupgradeneeded = () => { r.transaction.abort(); ko(new Error('no such database')); };
    }).catch(() => null);
    if (!db) continue;
    const stores = [];
    for (const name of Array.from(db.objectStoreNames).slice(0, 50)) {
      const s = db.transaction(name, 'readonly').objectStore(name);
      const count = await new Promise(ok => { const r = s.count(); r.onsuccess = () => ok(r.result); r.onerror = () => ok(null); });
      const sample = await new Promise(ok => { const r = s.getAll(null, 5); r.onsuccess = () => ok(r.result); r.onerror = () => ok([]); });
      stores.push({name, count, sample});
    }
    db.close();
    out.push({name: info.name, version: info.version, stores});
  }
  return {databases: out};
})()
""".strip()


def observe_indexeddb(ctx: ToolContext, args: dict[str, Any]) -> Deferred:
    d: Deferred = ctx.router_call("execute", {"script": INDEXEDDB_SCRIPT, "world": "main",
                                              "read_only": True},
                                  tab_id=ctx.int_arg(args, "tab_id", None))

    def got(result: Any) -> dict[str, Any]:
        value = result.get("result", result) if isinstance(result, dict) else result
        dbs = value.get("databases") if isinstance(value, dict) else None
        n = len(dbs) if isinstance(dbs, list) else 0
        return ctx.ok(f"{n} IndexedDB databases", {"indexeddb": value})

    return d.addCallback(got)


# -- commands -----------------------------------------------------------------------------------


def observe_command_result(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    cid = ctx.str_arg(args, "correlation_id")
    if not cid:
        raise MissingParam("command_result needs correlation_id", param="correlation_id",
                           retry="Pass the correlation_id a background call returned.")
    outcome = ctx.router.command_result(ctx.client_id, cid)
    status = outcome.get("status") if isinstance(outcome, dict) else None
    return ctx.ok(f"command {cid}: {status}", outcome)


def observe_pending_commands(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    items = ctx.router.pending_commands(ctx.client_id)
    return ctx.ok(f"{len(items)} of your commands pending", {"count": len(items),
                                                              "commands": items})


def observe_failed_commands(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    items = ctx.router.failed_commands(ctx.client_id)
    return ctx.ok(f"{len(items)} of your commands failed recently", {"count": len(items),
                                                                      "commands": items})


# -- recordings (made with configure recording_start / recording_stop) -------------------------


def observe_recordings(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    from gasoline.tools._state import recordings_of  # noqa: PLC0415

    rec = recordings_of(ctx)
    items = [{k: v for k, v in r.items() if k != "actions"} for r in rec["saved"].values()
             if isinstance(r, dict)]
    active = rec.get("active")
    summary = f"{len(items)} recordings" + (f"; {active['name']} is running" if active else "")
    return ctx.ok(summary, {"recordings": items, "active": active})


def observe_recording_actions(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    from gasoline.tools._state import recordings_of  # noqa: PLC0415

    name = ctx.str_arg(args, "name")
    if not name:
        raise MissingParam("recording_actions needs 'name' (observe {what:'recordings'} lists "
                           "them)", param="name")
    rec = recordings_of(ctx)["saved"].get(name)
    if not isinstance(rec, dict):
        raise GasolineError(f"no recording {name!r}", code="no_data",
                            retry="observe {what:'recordings'} lists yours.")
    limit = ctx.int_arg(args, "limit", MAX_LIMIT, 1, MAX_LIMIT)
    actions = rec.get("actions", [])[:limit]
    return ctx.ok(f"recording {name}: {len(actions)} actions",
                  {"name": name, "count": len(actions), "actions": actions,
                   "start_url": rec.get("start_url")})


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

# Context streaming (seed 004): the caller's event inbox (gasoline.tools._events).
from gasoline.tools._events import OBSERVE_PROPERTIES, observe_events  # noqa: E402

MODES["events"] = observe_events
PROPERTIES: dict[str, Any] = dict(OBSERVE_PROPERTIES)

__all__ = ["MODES", "read_buffer", "view_filter", "InvalidParam"]

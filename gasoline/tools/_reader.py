"""
The buffer reader behind C{observe}'s buffer modes (and the derived views that page through a
buffer): L{read_buffer} and the standard answer, L{buffer_result}.

Buffer reads (errors, logs, extension_logs, network_bodies, websocket_events, actions) apply, in
order:

 - the caller's read cursor (C{state.cursors[<buffer>]}; C{observe errors} has its own,
   C{console:errors}): a new client sees everything buffered;
   each read returns what is new since its last one and advances its cursor only. Explicit
   pagination: C{after_cursor}/C{since_cursor} (read forwards from there; the caller's cursor then
   moves to where the page ends), C{before_cursor} / C{last_n} (newest first backwards, the cursor
   does not move). C{limit} default 100, max 1000;
 - the caller's noise rules (client scope + built-ins + global; L{client_noise_rules});
 - the caller's tab filters (C{configure select_tab}; URL patterns matched against the entry's
   URLs and its tab's URL) and C{scope: "current_page"} (the tab the extension tracks) or
   C{tab_id};
 - the mode's own filters (level, url, method, status, connection, direction, ...).

A page holds at most L{READ_BUDGET} bytes of entries; one entry larger than that is returned cut
(L{truncate_entry}) so it can never wedge a cursor. Buffer reads carry C{cursor}, C{has_more},
C{total}, C{missed} (entries evicted before the caller read them), C{noise_hidden} and, when
another client emptied the buffer since the caller's cursor, C{cleared}.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
import orjson

from gasoline.core.redaction.once import ReadCache, RedactedEntries
from gasoline.tools._views import view_filter
from gasoline.tools.context import ToolContext, client_noise_rules, noise_rules_key

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
#: Payload bytes one read returns at most (the rest waits behind C{has_more}).
READ_BUDGET = 90_000
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

# -- the generic buffer reader -------------------------------------------------------------------


@attrs.define
class _Page:
    """What one pass over a buffer's items took."""

    entries: list[dict[str, Any]] = attrs.Factory(list)
    #: Index of the last item taken (C{None}: none).
    last: int | None = None
    #: Index of the first accepted item left for the next page (C{None}: nothing left).
    stop: int | None = None
    #: The page ended on the byte budget before it had C{want} entries.
    truncated: bool = False
    #: Entries the caller's noise rules hid.
    hidden: int = 0
    #: An entry was cut to fit (L{truncate_entry}): the page is no longer only cached entries.
    cut: bool = False


def _fill(items: list[bytes], first_seq: int, order: range, want: int,
          prefilter: Callable[[bytes], bool] | None,
          accept: Callable[[dict[str, Any]], bool], cache: ReadCache,
          noise: tuple[Any, Callable[[dict[str, Any], bytes], bool]] | None) -> _Page:
    """Take accepted entries from C{items} (the first at sequence number C{first_seq}), in
    C{order}, until C{want} of them or L{READ_BUDGET} bytes.

    Entries are the redacted ones (C{cache}: redacted the first time any agent reads them);
    C{accept} runs on them, then C{noise} (C{(rule-set key, hides)}), whose verdict is kept per
    entry and rule set."""
    entries: list[dict[str, Any]] = []
    last: int | None = None
    stop: int | None = None
    truncated = cut = False
    hidden_count = size = 0
    redacted, hidden = cache.redacted, cache.hidden
    for i in order:
        raw = items[i]
        if prefilter is not None and not prefilter(raw):
            continue
        seq = first_seq + i
        b = redacted(seq, raw)
        e = orjson.loads(b)
        if not accept(e):
            continue
        if noise is not None and hidden(seq, raw, noise[0], noise[1], e):
            hidden_count += 1
            continue
        if not entries and len(b) > READ_BUDGET:
            # One entry larger than the whole budget: it is returned cut, with a
            # note, and the cursor moves past it, so no page can wedge every agent's cursor.
            cut = True
            entries.append(truncate_entry(e, len(b)))
            size = READ_BUDGET
            last = i
            continue
        if len(entries) == want or size + len(b) > READ_BUDGET:
            truncated = len(entries) < want
            stop = i
            break
        entries.append(e)
        size += len(b)
        last = i
    return _Page(entries, last, stop, truncated, hidden_count, cut)


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
    each other's cursor (C{console:errors} beside C{console} for the logs); default C{buffer}.
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
    noise_test = None
    if rules is not None:
        noise_test = (noise_rules_key(ctx), lambda e, b: rules.matches(e, b) is not None)

    def accept(e: dict[str, Any]) -> bool:
        if match is not None and not match(e):
            return False
        if view is not None and not view(e):
            return False
        return True

    ring = ctx.app.store.buffers[buffer]
    cache = ctx.app.store.read_cache(buffer)
    ctx.app.store.note_read(buffer)
    state = ctx.state
    backwards = last_n is not None or before is not None
    meta: dict[str, Any] = {}
    stored_cursor = state.cursors.get(key, 0)
    if backwards:
        want = last_n if last_n is not None else limit
        raw = ring.read(0)
        n = len(raw.items)
        stop = n if before is None else max(0, min(n, before - raw.first_seq))
        page = _fill(raw.items, raw.first_seq, range(stop - 1, -1, -1), want, prefilter,
                     accept, cache, noise_test)
        entries, truncated, has_more = page.entries[::-1], page.truncated, page.stop is not None
        oldest_seq = None if page.last is None else raw.first_seq + page.last
        cursor = stored_cursor
        next_cursor, missed = cursor, 0
        meta["before_cursor"] = oldest_seq
    else:
        cursor = explicit if explicit is not None else stored_cursor
        raw = ring.read(cursor)
        next_cursor, has_more, missed = raw.next_cursor, False, raw.missed
        page = _fill(raw.items, raw.first_seq, range(len(raw.items)), limit, prefilter, accept,
                     cache, noise_test)
        entries, truncated = page.entries, page.truncated
        if page.stop is not None:
            next_cursor, has_more = raw.first_seq + page.stop, True
        if state.cursors.get(key) != next_cursor:
            state.set_cursor(key, next_cursor)
    cleared = ctx.runtime.buffer_clears.get(buffer)
    if cleared is not None and cursor < cleared["seq"] and not backwards:
        # Entries before the clear were removed by a client, not evicted.
        missed = max(0, ring.tail - max(cursor, cleared["seq"]))
        meta["cleared"] = {"at": cleared["at"], "by_you": cleared["by"] == ctx.client_id,
                           "removed": cleared["removed"]}
    hidden = page.hidden
    if transform is not None:
        entries = [t for t in (transform(e) for e in entries) if t is not None]
    elif not page.cut:
        # Only entries straight from the cache: the result splices them as they are
        # (L{gasoline.core.redaction.once.compose_text}).
        entries = RedactedEntries(entries)
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

"""
Helpers shared by the C{analyze}, C{generate} and C{interact} mode tables.

 - L{extension_mode}: run one extension-bound command for the caller (through the query router,
   as C{ctx.router_call}) and turn its result into a tool result, or, with C{background: true}
   (C{sync: false} / C{wait: false}), start it with C{ctx.router_submit} and answer
   C{{correlation_id, status: "pending"}} at once;
 - buffer readers that decode only the newest entries of a ring;
 - the caller's noise rules (client scope plus global) for analyses that look at errors.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from twisted.internet.defer import Deferred

from gasoline.core.errors import InvalidParam, MissingParam
from gasoline.tools._views import view_filter
from gasoline.tools.context import (
    client_noise_rules,
    decode_entries,
)

#: Default and largest number of entries an analysis reads from one buffer.
DEFAULT_ANALYSIS_ENTRIES = 1000
MAX_ANALYSIS_ENTRIES = 10_000
#: Largest C{timeout_ms} an agent may ask for (the schema's maximum).
MAX_TIMEOUT_MS = 120_000


def nulls_absent(table: dict[str, Callable[[Any, dict[str, Any]], Any]]
                 ) -> dict[str, Callable[[Any, dict[str, Any]], Any]]:
    """Wrap every handler of a mode table so that an argument given as JSON C{null} counts as
    not given (its default applies)."""

    def wrap(handler: Callable[[Any, dict[str, Any]], Any]) -> Callable[[Any, dict[str, Any]], Any]:
        @functools.wraps(handler)
        def handle(ctx: Any, args: dict[str, Any]) -> Any:
            return handler(ctx, {k: v for k, v in args.items() if v is not None})

        return handle

    return {name: wrap(handler) for name, handler in table.items()}


def timeout_of(ctx: Any, args: dict[str, Any]) -> float | None:
    """C{timeout_ms} as seconds for the router (None: the router's default)."""
    ms = ctx.int_arg(args, "timeout_ms", None, 1, MAX_TIMEOUT_MS)
    return None if ms is None else ms / 1000.0


def tab_of(ctx: Any, args: dict[str, Any]) -> int | None:
    """C{tab_id} (None: the tab the extension tracks)."""
    return ctx.int_arg(args, "tab_id", None, 0, 2**53)


def extension_mode(
    ctx: Any,
    args: dict[str, Any],
    type: str,
    params: dict[str, Any],
    describe: Callable[[Any], tuple[str, dict[str, Any] | None]],
    *,
    on_submit: Callable[[str], object] | None = None,
    timeout: float | None = None,
) -> Any:
    """Send command C{type} with C{params} for the caller.

    Synchronous: a Deferred firing with C{ctx.ok(*describe(result))} (C{ctx.said(summary)} when
    C{describe} gives no data: L{action_data}). Background: a result with the
    correlation id at once (C{on_submit(correlation_id)} runs first).
    """
    tab_id = tab_of(ctx, args)
    if timeout is None:
        timeout = timeout_of(ctx, args)
    ctx.wants_json(args)  # a bad C{json} is refused before the command is sent
    if ctx.wants_background(args):
        correlation_id = ctx.router_submit(type, params, timeout=timeout, tab_id=tab_id)
        if on_submit is not None:
            on_submit(correlation_id)
        return ctx.ok(
            f"{type} command started in the background; fetch it with "
            f"observe {{what:\"command_result\", correlation_id:\"{correlation_id}\"}}",
            {"correlation_id": correlation_id, "status": "pending", "command_type": type},
        )
    d: Deferred = ctx.router_call(type, params, timeout=timeout, tab_id=tab_id)

    def answered(result: Any) -> dict[str, Any]:
        summary, data = describe(result)
        return ctx.said(summary) if data is None else ctx.ok(summary, data)

    return d.addCallback(answered)


#: What a successful action's result (the extension's C{dom_action}, C{browser_action}, real
#: input, C{dialog}, C{emulate}) holds that only confirms it: it succeeded, what the call asked
#: (the mode, the selector and drop target, the key, the URL) and where it landed (the element
#: a selector reached, the point, the tab and its title; the summary line names the rest).
ACTION_CONFIRMATIONS = frozenset({
    "success", "action", "selector", "element", "target", "target_element", "key", "x", "y",
    "typed_length", "tab_id", "url", "title", "reset",
})


def action_data(ctx: Any, args: dict[str, Any], result: dict[str, Any]
                ) -> dict[str, Any] | None:
    """The JSON of a successful action's answer: None (the summary line alone) when the result
    only confirms the action (L{ACTION_CONFIRMATIONS}, and empty values), else C{{"result": what else it says}}
    (a dialog it opened, the option it picked, the state it left); the whole result when the call
    passes C{json: true} or the result is not a plain success."""
    if ctx.wants_json(args) or result.get("success") is not True:
        return {"result": result}
    rest = {k: v for k, v in result.items()
            if k not in ACTION_CONFIRMATIONS and v not in (None, {}, [])}
    return {"result": rest} if rest else None


def call(ctx: Any, args: dict[str, Any], type: str, params: dict[str, Any],
         timeout: float | None = None) -> Deferred:
    """One synchronous extension command (for modes made of several commands)."""
    return ctx.router_call(type, params, timeout=timeout if timeout is not None
                           else timeout_of(ctx, args), tab_id=tab_of(ctx, args))


def lst(value: Any) -> list[Any]:
    """C{value} if it is a list, else an empty list (extension answers are not trusted)."""
    return value if isinstance(value, list) else []


def as_dict(result: Any) -> dict[str, Any]:
    """The extension's result as a dict (a non-dict result is wrapped as C{{"result": ...}})."""
    return result if isinstance(result, dict) else {"result": result}


# -- buffers ---------------------------------------------------------------------------------------


def view(ctx: Any, args: dict[str, Any] | None) -> tuple[Callable[[dict[str, Any]], bool] | None,
                                                     dict[str, Any]]:
    """The caller's tab selection (C{configure select_tab}), C{scope: "current_page"} and
    C{tab_id} as one predicate, exactly as observe applies them (None: everything)."""
    if args is None:
        return None, {}
    return view_filter(ctx, args)


def newest(ctx: Any, buffer: str, limit: int, args: dict[str, Any] | None = None
           ) -> list[dict[str, Any]]:
    """The newest C{limit} entries of C{buffer}, oldest first (decoding only those); with
    C{args}, only those the caller's view (L{view}) keeps."""
    ring = ctx.app.store.buffers.get(buffer)
    if ring is None:
        return []
    ctx.app.store.note_read(buffer)
    return decode_entries(ring.read_last(limit).items, view(ctx, args)[0])


def since(ctx: Any, buffer: str, cursor: int, limit: int, args: dict[str, Any] | None = None
          ) -> tuple[list[dict[str, Any]], int, int]:
    """Entries of C{buffer} from sequence C{cursor} on (at most C{limit}, the newest ones kept;
    with C{args}, those the caller's view keeps): C{(entries, missed, head)}."""
    ring = ctx.app.store.buffers.get(buffer)
    if ring is None:
        return [], 0, 0
    ctx.app.store.note_read(buffer)
    raw = ring.read(max(0, int(cursor)))
    items = raw.items[-limit:] if limit and len(raw.items) > limit else raw.items
    skipped = len(raw.items) - len(items)
    return decode_entries(items, view(ctx, args)[0]), raw.missed + skipped, raw.next_cursor


def heads(ctx: Any) -> dict[str, int]:
    return {name: ring.head for name, ring in ctx.app.store.buffers.items()}


def entries_limit(ctx: Any, args: dict[str, Any], name: str = "last_n") -> int:
    return ctx.int_arg(args, name, DEFAULT_ANALYSIS_ENTRIES, 1, MAX_ANALYSIS_ENTRIES)


def noise_filter(ctx: Any, entries: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The caller's noise rules (client scope, built-ins, then global) applied to C{entries}."""
    return client_noise_rules(ctx).filter(entries)


def page_url(ctx: Any) -> str | None:
    """The URL of the tab the extension tracks, when it reported one."""
    settings = ctx.app.extension.settings
    url = settings.get("tracked_tab_url")
    return url if isinstance(url, str) and url else None


def require_str(ctx: Any, args: dict[str, Any], *names: str) -> str:
    """The first of C{names} present as a non-empty string, else L{MissingParam}."""

    for name in names:
        value = ctx.str_arg(args, name)
        if value is not None:
            if not value.strip():
                raise InvalidParam(f"{name} must not be empty", param=name)
            return value
    raise MissingParam(f"{ctx.tool or 'this'} {ctx.mode or 'mode'} needs '{names[0]}'",
                       param=names[0])


MAX_RESULT_ITEMS = 1000


def result_limit(ctx: Any, args: dict[str, Any], default: int = 50) -> int:
    return ctx.int_arg(args, "limit", default, 1, MAX_RESULT_ITEMS)


def str_list(ctx: Any, args: dict[str, Any], name: str, max_items: int = 100) -> list[str] | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidParam(f"{name} must be an array of strings", param=name)
    if len(value) > max_items:
        raise InvalidParam(f"{name} may hold at most {max_items} items", param=name)
    return value

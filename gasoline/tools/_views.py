"""
Which entries a read shows: the tab and URL of an entry, URL patterns (glob or substring), the
known tabs' URLs, and the caller's tab selection, C{scope} and C{tab_id} as one predicate over
entries (with a description of what applies, for the result's metadata).
"""

from __future__ import annotations

import fnmatch
from typing import Any, Callable

from gasoline.core.errors import GasolineError
from gasoline.core.storage.store import (
    CONSOLE,
)
from gasoline.tools.context import ToolContext


def tab_of(entry: dict[str, Any]) -> Any:
    tab = entry.get("tabId")
    return entry.get("tab_id") if tab is None else tab


def urls_of(entry: dict[str, Any]) -> list[str]:
    out = []
    for key in ("url", "page_url", "pageUrl", "tab_url", "from_url", "to_url"):
        value = entry.get(key)
        if isinstance(value, str) and value:
            out.append(value)
    return out


def pattern_matcher(pattern: str) -> Callable[[str], bool]:
    """A URL pattern: glob (C{*}, C{?}) when it has wildcards, else a substring."""
    if any(c in pattern for c in "*?["):
        return lambda url: fnmatch.fnmatchcase(url, pattern)
    return lambda url: pattern in url


def known_tab_urls(ctx: ToolContext) -> dict[Any, str]:
    """Tab id -> URL, from the extension's settings and the last C{tabs} answer."""
    tabs: dict[Any, str] = dict(ctx.runtime.tab_urls)
    settings = ctx.app.extension.settings
    tid, url = settings.get("tracked_tab_id"), settings.get("tracked_tab_url")
    if tid and isinstance(url, str):
        tabs[tid] = url
    return tabs


def view_filter(ctx: ToolContext, args: dict[str, Any]) -> tuple[Callable[[dict[str, Any]], bool]
                                                               | None, dict[str, Any]]:
    """The caller's tab selection, C{scope} and C{tab_id} as one predicate (None: no filter),
    and a description of what applies (for the result's metadata)."""
    scope = ctx.str_arg(args, "scope", None, ("current_page", "all"))
    tab_id = ctx.int_arg(args, "tab_id", None)
    applied: dict[str, Any] = {}
    want_tab = tab_id
    if want_tab is None and scope == "current_page":
        settings = ctx.app.extension.settings
        want_tab = settings.get("tracked_tab_id") or None
        applied["scope"] = "current_page"
        applied["tracked_tab_id"] = want_tab
        if want_tab is None:
            raise GasolineError("scope current_page: the extension tracks no tab",
                                code="no_data", retry="Track a tab in the extension popup, "
                                "or read with scope:\"all\".")
    elif tab_id is not None:
        applied["tab_id"] = tab_id
    patterns = [p for p in (ctx.state.tab_filters or []) if isinstance(p, str)]
    matchers = [pattern_matcher(p) for p in patterns]
    if patterns and scope != "all":
        applied["tab_filters"] = patterns
    else:
        matchers = []
    if want_tab is None and not matchers:
        return None, applied
    tab_urls = known_tab_urls(ctx) if matchers else {}

    def keep(entry: dict[str, Any]) -> bool:
        tab = tab_of(entry)
        if want_tab is not None and tab != want_tab:
            return False
        if matchers:
            urls = urls_of(entry)
            tab_url = tab_urls.get(tab)
            if tab_url:
                urls.append(tab_url)
            return any(m(u) for m in matchers for u in urls)
        return True

    return keep, applied


#: The caller's cursor for C{observe errors}: reading errors must not skip logs for
#: C{observe logs} (which keeps the console buffer's own cursor), nor the other way round.
ERRORS_CURSOR = f"{CONSOLE}:errors"


#: Every view cursor a buffer has beside its own (C{configure clear} moves them all).
VIEW_CURSORS: dict[str, tuple[str, ...]] = {CONSOLE: (ERRORS_CURSOR,)}

"""
The current page: what C{observe network_bodies} and C{observe vitals} show by default.

The current page is the page the tracked tab shows now: the extension's C{tracked_tab_url} without
its query and fragment (a redacted query must not make the same page look like another one), in
the tracked tab. An entry belongs to it when its tab is the tracked tab (an entry without a tab,
as the published extension sends, is not ruled out by its tab) and its page URL
(C{page_url}; a performance snapshot's C{url}) is that page; an entry without a page URL is kept
by its tab alone.

C{observe vitals} shows the current page's latest load: the snapshot of the tracked URL itself,
else the newest one of the same page.

C{scope: "all"} reads everything since the agent connected (the earlier default); C{tab_id} or
C{url} name what to read explicitly, and then no page scope applies. With no tracked tab the
default reads everything and says so (C{scope: "current_page"} asked for explicitly then is an
error, as for the other reads: L{gasoline.tools._views.view_filter}).
"""

from __future__ import annotations

from typing import Any, Callable
from urllib.parse import urlsplit

from gasoline.tools._views import tab_of
from gasoline.tools.context import ToolContext


def page_key(url: Any) -> str | None:
    """C{scheme://host[:port]/path} of C{url} (no query, no fragment); None for no URL."""
    if not isinstance(url, str) or not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme:
        return url.split("#", 1)[0].split("?", 1)[0]
    return f"{parts.scheme}://{parts.netloc}{parts.path or '/'}"


def current_page(ctx: ToolContext, args: dict[str, Any], url_fields: tuple[str, ...] = ("page_url",)
                 ) -> tuple[Callable[[dict[str, Any]], bool] | None, dict[str, Any]]:
    """The current-page predicate for a read with C{args} (None: no page scope) and what to add to
    its C{filters}. C{url_fields}: where an entry says which page it belongs to."""
    scope = ctx.str_arg(args, "scope", None, ("current_page", "all"))
    if scope == "all" or args.get("tab_id") is not None or args.get("url") is not None:
        return None, {}
    settings = ctx.app.extension.settings
    tab = settings.get("tracked_tab_id") or None
    key = page_key(settings.get("tracked_tab_url"))
    if tab is None or key is None:
        # No tracked page: everything (an explicit current_page fails in view_filter).
        return None, {"scope": "all", "page": None}

    def keep(entry: dict[str, Any]) -> bool:
        entry_tab = tab_of(entry)
        if entry_tab is not None and entry_tab != tab:
            return False
        for field in url_fields:
            entry_key = page_key(entry.get(field))
            if entry_key is not None:
                return entry_key == key
        return True

    return keep, {"scope": "current_page", "page": key}

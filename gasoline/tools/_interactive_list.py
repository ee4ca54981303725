"""
C{interact list_interactive} without a full resend: pages (C{offset}, C{limit}) and a C{diff}.

The extension lists a page's visible interactive elements in document order. Element ids are
stable per agent and page: an element (known by its selector, role and name) keeps the id it was
first given while the agent's lists are of the same page (its URL without query and fragment), so
an id from an earlier list or page of the list still names the same element; a list of another
page starts again at C{e1}. C{offset} skips that many elements (the extension does; a published
extension that does not is sliced here) and the result says C{next_offset} when more follow.
C{diff: true} answers only the elements the agent has not been shown yet on this page (at most
C{limit}, the first ones; C{more_new} counts the rest), the ids of elements it was shown that
are no longer there (C{gone}) and how many it was shown that are still there (C{unchanged}); the
extension lists up to 500 elements for it.
"""

from __future__ import annotations

from typing import Any

import attrs

from gasoline.tools._page_scope import page_key

#: Elements remembered per agent and page (the ids handed out; the oldest agents go first).
MAX_KNOWN_ELEMENTS = 5000


@attrs.define(eq=False)
class KnownElements:
    """One agent's ids for one page."""

    page: str | None
    ids: dict[tuple[Any, Any, Any], str] = attrs.field(factory=dict)
    #: The keys of the elements the agent was shown (what a diff compares with).
    shown: set[tuple[Any, Any, Any]] = attrs.field(factory=set)
    next: int = 1

    def id_for(self, key: tuple[Any, Any, Any]) -> str:
        """The element's id on this page: the one it was given, else the next one (kept while
        fewer than L{MAX_KNOWN_ELEMENTS} are)."""
        eid = self.ids.get(key)
        if eid is None:
            eid = f"e{self.next}"
            self.next += 1
            if len(self.ids) < MAX_KNOWN_ELEMENTS:
                self.ids[key] = eid
        return eid

    def saw(self, keys: set[tuple[Any, Any, Any]]) -> None:
        """The agent was shown these elements."""
        self.shown |= keys

    def lost(self, keys: set[tuple[Any, Any, Any]]) -> None:
        """These elements it was shown are no longer on the page."""
        self.shown -= keys


def params(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The extension's params for a list (C{limit}, C{offset})."""
    out: dict[str, Any] = {"action": "list_interactive"}
    limit = 500 if args.get("diff") is True else ctx.int_arg(args, "limit", None, 1, 500)
    if limit is not None:
        out["limit"] = limit
    offset = ctx.int_arg(args, "offset", None, 0, 100_000)
    if offset:
        out["offset"] = offset
    return out


def _key(element: dict[str, Any]) -> tuple[Any, Any, Any]:
    return (element.get("selector"), element.get("role"), element.get("name"))


def shape(ctx: Any, args: dict[str, Any], result: dict[str, Any],
          table: dict[str, KnownElements]) -> dict[str, Any]:
    """The list the agent gets from the extension's C{result}: stable ids, the page asked for,
    or only what changed (C{diff}). Updates the agent's entry in C{table}."""
    elements = [e for e in result.get("elements") or [] if isinstance(e, dict)]
    offset = ctx.int_arg(args, "offset", 0, 0, 100_000)
    limit = ctx.int_arg(args, "limit", 100, 1, 500)
    asked = 500 if args.get("diff") is True else limit
    if offset and result.get("offset") != offset:
        # A published extension ignores offset: its list starts at the first element.
        elements = elements[offset:offset + asked]
    total = result.get("count")
    if not isinstance(total, int):
        total = offset + len(elements)
    page = page_key(result.get("url"))
    known = table.pop(ctx.client_id, None)
    if known is None or known.page != page:
        known = KnownElements(page)
    while len(table) and sum(len(k.ids) for k in table.values()) > MAX_KNOWN_ELEMENTS:
        table.pop(next(iter(table)))
    table[ctx.client_id] = known
    listed = []
    for element in elements:
        listed.append({**element, "element_id": known.id_for(_key(element))})
    out: dict[str, Any] = {k: v for k, v in result.items() if k not in ("elements", "offset")}
    out["count"] = total
    if offset:
        out["offset"] = offset
    keys = {_key(e) for e in listed}
    if args.get("diff") is True:
        new = [e for e in listed if _key(e) not in known.shown]
        out["elements"] = new[:limit]
        if len(new) > limit:
            out["more_new"] = len(new) - limit
        out["unchanged"] = sum(1 for k in keys if k in known.shown)
        if not offset and len(elements) >= total:  # the whole list: what is gone is known
            gone = {k for k in known.shown if k not in keys}
            out["gone"] = sorted((known.ids[k] for k in gone if k in known.ids), key=lambda i: int(i[1:]))
            known.lost(gone)
        out["diff"] = True
        known.saw({_key(e) for e in out["elements"]})
    else:
        out["elements"] = listed
        if offset + len(elements) < total:
            out["next_offset"] = offset + len(elements)
        known.saw(keys)
    return out


def selectors(table: dict[str, KnownElements], client_id: str) -> dict[str, str]:
    """Element id -> selector for the agent's ids."""
    known = table.get(client_id)
    if known is None:
        return {}
    return {eid: key[0] for key, eid in known.ids.items() if isinstance(key[0], str)}

"""
C{dom_change}: the agents' DOM watches, the list the extension watches, and the events it reports.

An agent subscribes with C{subscribe: ["dom_change"]} and C{watch: [{selector, condition, text?}]}
(L{gasoline.streaming.subscription}). L{DomWatches.update} merges every active agent's watches
into one list with opaque ids (a hash of the client id and the watch: the extension never learns
whose watch it is) and hands it to the extension link when it changed (its next C{/sync} answer
carries it; a held poll is answered at once). The extension watches them in the tracked tab (one
C{MutationObserver} per tab, C{extension/content/domwatch.js}) and C{POST}s each condition met to
C{/dom-changes}; L{DomWatches.events} turns a report into one L{StreamEvent} per change, each for
the one agent that owns the watch: no other agent is ever told.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterable

from gasoline.streaming.events import MAX_MESSAGE, StreamEvent, _text
from gasoline.streaming.subscription import CONDITIONS, MAX_SELECTOR

#: Changes one report may carry (the rest are ignored, counted).
MAX_CHANGES = 100
#: Characters of the element's text a change carries.
MAX_TEXT = 200


def watch_id(client_id: str, selector: str, condition: str, text: str | None) -> str:
    raw = "\0".join((client_id, selector, condition, text or "")).encode()
    return "w" + hashlib.sha256(raw).hexdigest()[:20]


class DomWatches:
    """Watch id -> (client id, watch); the merged list the extension gets."""

    def __init__(self, publish: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        #: Called with the merged list when it changes (the extension link's setter).
        self.publish = publish
        self.owners: dict[str, tuple[str, tuple[str, str, str | None]]] = {}
        self.current: list[dict[str, Any]] = []
        #: Changes reported for watches no active agent owns (a watch removed meanwhile).
        self.orphans = 0

    def update(self, agents: Iterable[Any]) -> bool:
        """Recompute from the active agents (each with C{client_id} and C{subscription});
        publish when the list changed. True if it did."""
        owners: dict[str, tuple[str, tuple[str, str, str | None]]] = {}
        merged: list[dict[str, Any]] = []
        for agent in agents:
            subscription = agent.subscription
            types = agent.matcher.types
            if not subscription.watches or (types is not None and "dom_change" not in types):
                continue
            for watch in subscription.watches:
                wid = watch_id(agent.client_id, *watch)
                if wid in owners:
                    continue
                owners[wid] = (agent.client_id, watch)
                selector, condition, text = watch
                merged.append({"id": wid, "selector": selector, "condition": condition,
                               **({"text": text} if text else {})})
        self.owners = owners
        if merged == self.current:
            return False
        self.current = merged
        if self.publish is not None:
            self.publish(merged)
        return True

    def events(self, report: dict[str, Any], at: float) -> list[tuple[str, StreamEvent]]:
        """C{(client id, event)} for each change of one C{POST /dom-changes} body
        C{{changes: [{watch, condition, text?, count?, ts?}], tab_id?, url?}} whose watch an
        agent owns; malformed changes are skipped."""
        changes = report.get("changes")
        if not isinstance(changes, list):
            return []
        tab = report.get("tab_id")
        tab_id = tab if isinstance(tab, int) and not isinstance(tab, bool) else None
        url = report.get("url")
        url = _text(url, 2000) if isinstance(url, str) else ""
        out: list[tuple[str, StreamEvent]] = []
        for change in changes[:MAX_CHANGES]:
            if not isinstance(change, dict):
                continue
            owner = self.owners.get(change.get("watch"))  # type: ignore[arg-type]
            if owner is None:
                self.orphans += 1
                continue
            client_id, (selector, condition, text) = owner
            if change.get("condition") not in CONDITIONS or change.get("condition") != condition:
                continue
            count = change.get("count")
            count = count if isinstance(count, int) and not isinstance(count, bool) \
                and 0 <= count < 1_000_000 else None
            seen = change.get("text")
            seen = _text(seen, MAX_TEXT) if isinstance(seen, str) else None
            what = {"appears": "appeared", "disappears": "disappeared",
                    "text_matches": f"now contains {text!r}"}[condition]
            message = f"{_text(selector, MAX_SELECTOR)} {what}"
            if seen:
                message += f": {seen}"
            ts = change.get("ts")
            entry = {"tabId": tab_id, **({"ts": ts} if isinstance(ts, str) else {})}
            event = StreamEvent("dom_change", "low", url, _text(message, MAX_MESSAGE), None,
                                entry, at, None, {
                                    "selector": selector, "condition": condition,
                                    "watch_text": text, "element_text": seen, "count": count})
            out.append((client_id, event))
        return out

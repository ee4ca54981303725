"""
What the tools keep between calls, in memory, for the daemon's lifetime.

Per-client state that must survive a restart lives in L{gasoline.core.clients.registry.ClientState}; this
is the rest: in-flight playbacks and screen recordings, the element ids C{list_interactive} handed
out, the last tab list seen, parsed noise rules, the link validator, and the marks C{configure
clear scope:"all"} left on shared buffers. One L{ToolRuntime} belongs to the daemon's
L{gasoline.tools.GasolineTools}.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

import attrs

if TYPE_CHECKING:  # built at the first link check (gasoline.tools._links), not at start-up
    from gasoline.tools._links import LinkValidator
    from gasoline.tools._snapshot import SnapshotBases


@attrs.define(eq=False)
class ToolRuntime:
    """The tools' daemon-wide, in-memory state (typed; one owner: L{gasoline.tools.GasolineTools})."""

    #: client id -> playback id -> the playback's record (L{gasoline.tools._playback}).
    playbacks: dict[str, OrderedDict[str, dict[str, Any]]] = attrs.field(factory=dict)
    #: client id -> active screen recordings (L{gasoline.tools.interact}).
    screen_recordings: dict[str, Any] = attrs.field(factory=dict)
    #: element id -> selector, from C{interact {what:"list_interactive"}}.
    interact_elements: dict[str, dict[str, str]] = attrs.field(factory=dict)
    #: client id -> tab id -> its last whole-page snapshot (diff bases and ref documents; built
    #: at the first snapshot).
    snapshots: SnapshotBases | None = None
    #: client id -> the element ids handed out for its current page
    #: (L{gasoline.tools._interactive_list.KnownElements}).
    interactive_lists: dict[str, Any] = attrs.field(factory=dict)
    #: tab id -> URL, from the last C{observe {what:"tabs"}} answer.
    tab_urls: dict[Any, str] = attrs.field(factory=dict)
    #: client id -> (persisted form, parsed L{gasoline.core.clients.noise.NoiseRules}).
    noise_cache: dict[str, Any] = attrs.field(factory=dict)
    #: buffer -> the last C{configure clear scope:"all"} of it (C{{"seq", "at", "by"}}).
    buffer_clears: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    #: Server-side link checks (built on first use, on the daemon's clock).
    link_validator: LinkValidator | None = None

    def snapshot_bases(self, make: Callable[[], SnapshotBases]) -> SnapshotBases:
        """L{snapshots}, made by C{make} at the first snapshot."""
        if self.snapshots is None:
            self.snapshots = make()
        return self.snapshots

    def saw_tabs(self, urls: dict[Any, str]) -> None:
        """The last C{observe {what:"tabs"}} answer's tab id -> URL (replaces L{tab_urls})."""
        self.tab_urls = urls

    def cache_noise(self, client_id: str, key: bytes, rules: Any) -> None:
        """Keep C{client_id}'s parsed noise rules with the persisted form they were parsed
        from (L{noise_cache})."""
        self.noise_cache[client_id] = (key, rules)

    def link_checker(self, make: Callable[[], LinkValidator]) -> LinkValidator:
        """L{link_validator}, made by C{make} at the first link check."""
        if self.link_validator is None:
            self.link_validator = make()
        return self.link_validator

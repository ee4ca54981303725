"""
C{_meta.data_counts}: how many entries each buffer holds beyond the caller's read cursors, on every
tool result, so an agent knows whether there is anything to read without a C{configure health}.

Counters only: for each cursor, C{head - max(cursor, tail)} of its ring (two integers; no entry is
decoded or scanned). So the counts are of raw entries, before the caller's noise rules, tab
filters and a mode's own filters: C{errors} counts every console entry after the caller's errors
cursor (the errors view shares the console buffer), not only errors. A buffer with nothing new is
left out: C{{}} means nothing to read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    EXTENSION_LOGS,
    NETWORK_BODIES,
    WEBSOCKET_EVENTS,
)
from gasoline.tools._views import ERRORS_CURSOR

if TYPE_CHECKING:
    from gasoline.core.daemon import Daemon
    from gasoline.core.interfaces import ITelemetryStore
    from gasoline.mcp.session import McpSession

#: C{observe} mode -> (buffer, the caller's cursor key for that mode).
COUNTED: tuple[tuple[str, str, str], ...] = (
    ("errors", CONSOLE, ERRORS_CURSOR),
    ("logs", CONSOLE, CONSOLE),
    ("extension_logs", EXTENSION_LOGS, EXTENSION_LOGS),
    ("network_bodies", NETWORK_BODIES, NETWORK_BODIES),
    ("websocket_events", WEBSOCKET_EVENTS, WEBSOCKET_EVENTS),
    ("actions", ACTIONS, ACTIONS),
)


def data_counts(store: ITelemetryStore, cursors: dict[str, int]) -> dict[str, int]:
    """Entries beyond C{cursors} per C{observe} mode (modes with none left out)."""
    out: dict[str, int] = {}
    buffers = store.buffers
    for mode, buffer, key in COUNTED:
        ring = buffers.get(buffer)
        if ring is None:
            continue
        cursor = cursors.get(key, 0)
        n = ring.head - (cursor if cursor > ring.tail else ring.tail)
        if n > 0:
            out[mode] = n
    return out


def meta_provider(daemon: Daemon) -> Callable[[McpSession], dict[str, Any] | None]:
    """The L{gasoline.mcp.tools.ToolRegistry.meta_providers} entry: C{{"data_counts": ...}} for
    the calling session's client (C{daemon.store}'s rings)."""

    def provide(session: McpSession) -> dict[str, Any] | None:
        return {"data_counts": data_counts(daemon.store, session.state.cursors)}

    return provide

"""
What changed since a checkpoint: the new console, network-body, WebSocket and action entries
since the caller's checkpoint (or another client's, named C{client:name}), for C{analyze} and
C{generate}.
"""

from __future__ import annotations

from typing import Any

from gasoline.analysis import (
    changes,
)
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    NETWORK_BODIES,
    WEBSOCKET_EVENTS,
)
from gasoline.tools._shared import (
    entries_limit,
    heads,
    noise_filter,
    result_limit,
    since,
)
from gasoline.tools._state import resolve_checkpoint

#: Buffers a checkpoint diff reads (errors, failed requests, WebSocket events, actions).
CHANGE_BUFFERS = (CONSOLE, NETWORK_BODIES, WEBSOCKET_EVENTS, ACTIONS)


def _checkpoint(ctx: Any, name: str) -> dict[str, Any]:
    """The caller's checkpoint C{name}; C{client:name} reaches another client's on purpose
    (the same resolution as configure's checkpoint modes)."""
    return resolve_checkpoint(ctx, name)


def compute_changes(ctx: Any, args: dict[str, Any], name: str) -> dict[str, Any]:
    """The diff since checkpoint C{name} (the caller's, or C{client:name})."""
    checkpoint = _checkpoint(ctx, name)
    cp_heads = raw_cp_heads if isinstance(raw_cp_heads := checkpoint.get("heads"), dict) else {}
    n = entries_limit(ctx, args, "last_n")
    entries: dict[str, list[dict[str, Any]]] = {}
    missed: dict[str, int] = {}
    now_heads = heads(ctx)
    hidden = 0
    for buffer in CHANGE_BUFFERS:
        start = cp_heads.get(buffer, 0)
        if not isinstance(start, int) or isinstance(start, bool):
            start = 0
        items, lost, _ = since(ctx, buffer, start, n, args)
        if buffer == CONSOLE:
            items, hidden = noise_filter(ctx, items)
        entries[buffer] = items
        missed[buffer] = lost
    snapshot = {"at": ctx.now(), "heads": now_heads,
                "counters": {f"{b}_head": now_heads.get(b, 0) for b in CHANGE_BUFFERS},
                "entries": entries, "missed": missed}
    result = changes(checkpoint, snapshot, limit=result_limit(ctx, args))
    result["noise_hidden"] = hidden
    return result

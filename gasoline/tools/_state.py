"""DOC"""

from __future__ import annotations

from typing import Any

from gasoline.core.errors import GasolineError, InvalidParam
from gasoline.tools.context import (
    ToolContext,
    state_of_ref,
)


def resolve_checkpoint(ctx: ToolContext, ref: Any) -> dict[str, Any]:
    """The checkpoint C{ref} names: the caller's own ``name``, or ``client:name`` for another
    client's (on purpose). @raise GasolineError: ``no_data`` when there is none."""
    if not isinstance(ref, str) or not ref:
        raise InvalidParam("checkpoint must be a non-empty string", param="checkpoint")
    state, name = state_of_ref(ctx, ref, "checkpoint")
    cp = state.checkpoints.get(name) if isinstance(state.checkpoints, dict) else None
    if not isinstance(cp, dict):
        raise GasolineError(f"no checkpoint {ref!r}", code="no_data",
                            retry="configure {what:'checkpoint', checkpoint_action:'list'} "
                            "lists yours.")
    return cp


#: Reserved kv namespace holding the caller's recordings (hidden from ``load`` listings).
RECORDINGS_NS = "gasoline:recordings"


def recordings_of(ctx: ToolContext) -> dict[str, Any]:
    """``{"active": {...} | None, "saved": {name: recording}}`` in the caller's kv."""
    rec = ctx.state.kv.get(RECORDINGS_NS)
    if not isinstance(rec, dict) or not isinstance(rec.get("saved"), dict):
        rec = ctx.state.kv[RECORDINGS_NS] = {"active": None, "saved": {}}
    return rec

"""
Per-client tool state shared by several tools' modes: checkpoints and saved recordings.

L{resolve_checkpoint} finds the checkpoint a tool argument names (the caller's own, or
C{client:name} for another client's, on purpose); L{recordings_of} and L{recording_named} read
the caller's recordings (the active one and the saved ones) from its key-value namespace.
"""

from __future__ import annotations

from typing import Any

from gasoline.core.errors import GasolineError, InvalidParam, MissingParam
from gasoline.tools.context import (
    ToolContext,
    state_of_ref,
)


def resolve_checkpoint(ctx: ToolContext, ref: Any) -> dict[str, Any]:
    """The checkpoint C{ref} names: the caller's own C{name}, or C{client:name} for another
    client's (on purpose). @raise GasolineError: C{no_data} when there is none."""
    if not isinstance(ref, str) or not ref:
        raise InvalidParam("checkpoint must be a non-empty string", param="checkpoint")
    state, name = state_of_ref(ctx, ref, "checkpoint")
    cp = state.checkpoints.get(name) if isinstance(state.checkpoints, dict) else None
    if not isinstance(cp, dict):
        raise GasolineError(f"no checkpoint {ref!r}", code="no_data",
                            retry="configure {what:'checkpoint', checkpoint_action:'list'} "
                            "lists yours.")
    return cp


#: Reserved kv namespace holding the caller's recordings (hidden from C{load} listings).
RECORDINGS_NS = "gasoline:recordings"


def recordings_of(ctx: ToolContext) -> dict[str, Any]:
    """C{{"active": {...} | None, "saved": {name: recording}}} in the caller's kv."""
    rec = ctx.state.kv.get(RECORDINGS_NS)
    if not isinstance(rec, dict) or not isinstance(rec.get("saved"), dict):
        rec = {"active": None, "saved": {}}
        ctx.state.put(RECORDINGS_NS, rec)
    return rec


def recording_named(ctx: ToolContext, args: dict[str, Any],
                    mode: str) -> tuple[str, dict[str, Any]]:
    """C{(name, recording)} of the caller's saved recording that C{args["name"]} names.

    @raise MissingParam: no C{name}.
    @raise GasolineError: C{no_data}, the caller has no recording of that name.
    """
    name = ctx.str_arg(args, "name")
    if not name:
        raise MissingParam(f"{mode} needs 'name': one of your recordings "
                           "(observe {what:'recordings'} lists them)", param="name")
    recording = recordings_of(ctx)["saved"].get(name)
    if not isinstance(recording, dict):
        raise GasolineError(f"no recording {name!r}", code="no_data",
                            retry="observe {what:'recordings'} lists yours.")
    return name, recording

"""
Artifacts the generators write for an agent (C{save_to}): where they may go (the agent's working
directory or the state dir's C{artifacts/}, checked by L{gasoline.core.paths}), the size cap, and
the answer that says where the file went.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gasoline.core.errors import GasolineError, InvalidParam
from gasoline.core.paths import PathRefused, inside, real, resolve_inside
from gasoline.common import NOFOLLOW, make_private_dir
from gasoline.core.storage.files import thread_runner
from gasoline.core.redaction.redactor import redact_value

if TYPE_CHECKING:
    from gasoline.tools.context import ToolContext

MAX_ARTIFACT_BYTES = 5 * 1024 * 1024


ARTIFACTS_DIR = "artifacts"


#: With save_to, the answer carries at most this many characters of the artifact.
INLINE_WHEN_SAVED = 20_000


#: What a refused C{save_to} tells the agent to do.
SAVE_TO_RETRY = ("save_to must be a path inside your working directory (relative paths are taken "
                 "from it) or inside the daemon's state dir artifacts/ folder.")


def artifact_roots(ctx: ToolContext) -> list[Path]:
    """Where C{save_to} may write: the agent's working directory and the state dir's artifacts/."""
    roots = []
    if ctx.cwd:
        roots.append(real(ctx.cwd))
    roots.append(real(Path(ctx.app.config.state_dir) / ARTIFACTS_DIR))
    return roots


def resolve_save_path(ctx: ToolContext, save_to: str) -> Path:
    """The real path C{save_to} names (L{gasoline.core.paths.resolve_inside}: no C{..}, inside
    L{artifact_roots}, not a directory), or L{PathRefused}."""
    resolved = resolve_inside(save_to, artifact_roots(ctx), param="save_to", parent_refs=False,
                              retry=SAVE_TO_RETRY)
    if resolved.is_dir():
        raise PathRefused(f"save_to names a directory, not a file: {save_to!r}",
                          param="save_to", retry=SAVE_TO_RETRY)
    return resolved


def write_artifact(ctx: ToolContext, save_to: str, content: str) -> dict[str, Any]:
    """Write C{content} (UTF-8) to the checked path; return C{{path, bytes}}."""
    data = content.encode("utf-8")
    if len(data) > MAX_ARTIFACT_BYTES:
        raise InvalidParam(f"the artifact is {len(data)} bytes, over the "
                           f"{MAX_ARTIFACT_BYTES} byte save limit", param="save_to")
    path = resolve_save_path(ctx, save_to)
    roots = artifact_roots(ctx)
    parent = path.parent
    private_root = real(Path(ctx.app.config.state_dir) / ARTIFACTS_DIR)
    private = inside(path, private_root)
    if private:  # in the state dir: private, as everything there
        make_private_dir(private_root)
        for level in reversed([p for p in parent.parents if inside(p, private_root)]):
            make_private_dir(level)
        make_private_dir(parent)
    else:  # in the agent's project: the user's own tree, made as the user's tools make it
        parent.mkdir(parents=True, exist_ok=True)
    # Re-check after creating directories: nothing on the way may have become a symlink out.
    real_parent = real(parent)
    if not any(inside(real_parent, r) for r in roots):
        raise PathRefused(f"save_to {save_to!r} resolves outside the allowed roots",
                          param="save_to", retry=SAVE_TO_RETRY)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW
    try:
        fd = os.open(real_parent / path.name, flags, 0o600 if private else 0o644)
    except OSError as e:
        raise GasolineError(f"could not write {path}: {e.strerror or e}", code="write_failed",
                            param="save_to") from None
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)
    return {"path": str(real_parent / path.name), "bytes": len(data)}


def _finish(ctx: Any, args: dict[str, Any], what: str, summary: str, artifact: str,
            data: dict[str, Any]) -> Any:
    """The artifact as a result; with C{save_to}, a Deferred of it once the file is written in
    the reactor's thread pool (directories, symlink checks and the write stay off the reactor)."""
    body = {"format": what, **data, "artifact": artifact}
    save_to = ctx.str_arg(args, "save_to")
    if save_to is None:
        return ctx.ok(summary, body)

    def saved(saved: dict[str, Any]) -> dict[str, Any]:
        body["saved_to"] = saved["path"]
        body["saved_bytes"] = saved["bytes"]
        written = saved["content"]
        if len(written) > INLINE_WHEN_SAVED:
            # The file has it all; keep the answer small instead of hitting the result cap. The
            # cut is made in the redacted artifact: it cannot split a secret the redactor knows.
            body["artifact"] = written[:INLINE_WHEN_SAVED]
            body["artifact_truncated"] = f"first {INLINE_WHEN_SAVED} characters; the file has all"
        else:
            body["artifact"] = written
        return ctx.ok(summary + f"; saved to {saved['path']}", body)

    resolve_save_path(ctx, save_to)  # refuse a bad path at once, before any thread work
    return thread_runner(ctx.app.clock)(_redact_and_write, ctx, save_to, artifact) \
        .addCallback(saved)


def _redact_and_write(ctx: Any, save_to: str, artifact: str) -> dict[str, Any]:
    """In the thread pool: the artifact redacted (what an agent reads in the file is an exit
    too), then written; C{{path, bytes, content}}."""
    content = redact_value(artifact)
    out = write_artifact(ctx, save_to, content)
    out["content"] = content
    return out

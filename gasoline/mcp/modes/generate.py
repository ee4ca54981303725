"""
``generate`` modes: artifacts built from what was captured (L{gasoline.generate}).

Every mode answers the artifact in its result (``artifact``: the text; plus the generator's
structured output). ``save_to`` also writes the artifact to a file: a relative path is taken from
the agent's working directory (C{ctx.cwd}, sent by its connector) or, when the agent sent none,
from ``<state-dir>/artifacts/``; the resolved path (symlinks followed) must stay inside one of
those two roots, ``..`` components are refused, and the final component is opened with
``O_NOFOLLOW``. Artifacts are capped at L{MAX_ARTIFACT_BYTES} (5 MB), so the write is one small
bounded write on the reactor thread (a few milliseconds at most) rather than a thread hop.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
from twisted.internet.defer import succeed

from gasoline.analysis._util import entry_time, is_error
from gasoline.core.errors import GasolineError, InvalidParam
from gasoline.core.store import ACTIONS, CONSOLE, NETWORK_BODIES, WATERFALL
from gasoline.generate import (
    csp,
    har,
    origins_by_type,
    playwright_test,
    pr_summary,
    reproduction,
    sarif,
    sri,
)
from gasoline.mcp.modes._shared import (
    as_dict,
    call,
    lst,
    newest,
    noise_filter,
    nulls_absent,
    page_url,
)

MAX_ARTIFACT_BYTES = 5 * 1024 * 1024
DEFAULT_ACTIONS = 200
DEFAULT_ENTRIES = 1000
MAX_ENTRIES = 10_000
ARTIFACTS_DIR = "artifacts"
#: With save_to, the answer carries at most this many characters of the artifact.
INLINE_WHEN_SAVED = 20_000


class PathRefused(GasolineError):
    code = "path_refused"
    retry = ("save_to must be a path inside your working directory (relative paths are taken "
             "from it) or inside the daemon's state dir artifacts/ folder.")


# -- save_to ------------------------------------------------------------------------------------------


def artifact_roots(ctx: Any) -> list[Path]:
    """Where ``save_to`` may write: the agent's working directory and the state dir's artifacts/."""
    roots = []
    if ctx.cwd:
        roots.append(Path(os.path.realpath(ctx.cwd)))
    state_dir = getattr(getattr(ctx.app, "config", None), "state_dir", None)
    if state_dir is not None:
        roots.append(Path(os.path.realpath(Path(state_dir) / ARTIFACTS_DIR)))
    return roots


def resolve_save_path(ctx: Any, save_to: str) -> Path:
    """The real path ``save_to`` names, or L{PathRefused}."""
    if not save_to.strip() or "\x00" in save_to:
        raise PathRefused("save_to is empty or not a valid path", param="save_to")
    raw = Path(save_to)
    if ".." in raw.parts:
        raise PathRefused(f"save_to may not contain '..' components: {save_to!r}", param="save_to")
    roots = artifact_roots(ctx)
    if not roots:
        raise PathRefused("no working directory or state dir to save artifacts in",
                          param="save_to")
    candidate = raw if raw.is_absolute() else roots[0] / raw
    resolved = Path(os.path.realpath(candidate))
    for root in roots:
        if resolved == root or resolved.is_relative_to(root):
            if resolved == root or resolved.is_dir():
                raise PathRefused(f"save_to names a directory, not a file: {save_to!r}",
                                  param="save_to")
            return resolved
    raise PathRefused(
        f"save_to {save_to!r} resolves outside your working directory and the state dir",
        param="save_to", allowed_roots=[str(r) for r in roots],
    )


def write_artifact(ctx: Any, save_to: str, content: str) -> dict[str, Any]:
    """Write C{content} (UTF-8) to the checked path; return ``{path, bytes}``."""
    data = content.encode("utf-8")
    if len(data) > MAX_ARTIFACT_BYTES:
        raise InvalidParam(f"the artifact is {len(data)} bytes, over the "
                           f"{MAX_ARTIFACT_BYTES} byte save limit", param="save_to")
    path = resolve_save_path(ctx, save_to)
    roots = artifact_roots(ctx)
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    # Re-check after creating directories: nothing on the way may have become a symlink out.
    real_parent = Path(os.path.realpath(parent))
    if not any(real_parent == r or real_parent.is_relative_to(r) for r in roots):
        raise PathRefused(f"save_to {save_to!r} resolves outside the allowed roots",
                          param="save_to")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(real_parent / path.name, flags, 0o644)
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
            data: dict[str, Any]) -> dict[str, Any]:
    body = {"format": what, **data, "artifact": artifact}
    save_to = ctx.str_arg(args, "save_to")
    if save_to is not None:
        saved = write_artifact(ctx, save_to, artifact)
        body["saved_to"] = saved["path"]
        body["saved_bytes"] = saved["bytes"]
        summary += f"; saved to {saved['path']}"
        if len(artifact) > INLINE_WHEN_SAVED:
            # The file has it all; keep the answer small instead of hitting the result cap.
            body["artifact"] = artifact[:INLINE_WHEN_SAVED]
            body["artifact_truncated"] = f"first {INLINE_WHEN_SAVED} characters; the file has all"
    return ctx.ok(summary, body)


def _n(ctx: Any, args: dict[str, Any], default: int) -> int:
    return ctx.int_arg(args, "last_n", default, 1, MAX_ENTRIES)


def _url_filter(ctx: Any, args: dict[str, Any], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    url = ctx.str_arg(args, "url")
    if not url:
        return items
    return [i for i in items if url in str(i.get("url", "")) or url in str(i.get("page_url", ""))]


def _errors(ctx: Any, args: dict[str, Any], n: int) -> list[dict[str, Any]]:
    kept, _ = noise_filter(ctx, [e for e in newest(ctx, CONSOLE, n, args) if is_error(e)])
    return kept


# -- modes ---------------------------------------------------------------------------------------------


def reproduction_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    actions = newest(ctx, ACTIONS, _n(ctx, args, DEFAULT_ACTIONS), args)
    base = ctx.str_arg(args, "base_url") or None
    result = reproduction(actions, base_url=base)
    return _finish(ctx, args, "reproduction",
                   f"reproduction script with {result['steps']} step(s) from "
                   f"{len(actions)} recorded action(s)",
                   result["script"], {k: v for k, v in result.items() if k != "script"})


def test_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    n = _n(ctx, args, DEFAULT_ACTIONS)
    actions = newest(ctx, ACTIONS, n, args)
    name = ctx.str_arg(args, "test_name") or "reproduces the recorded session"
    result = playwright_test(actions, _errors(ctx, args, DEFAULT_ENTRIES),
                             base_url=ctx.str_arg(args, "base_url") or None, name=name)
    return _finish(ctx, args, "test",
                   f"Playwright test with {result['steps']} step(s)",
                   result["script"], {k: v for k, v in result.items() if k != "script"})


def har_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    n = _n(ctx, args, DEFAULT_ENTRIES)
    bodies = _url_filter(ctx, args, newest(ctx, NETWORK_BODIES, n, args))
    waterfall = _url_filter(ctx, args, newest(ctx, WATERFALL, n, args))
    times = [t for t in (entry_time(b) for b in bodies) if t is not None]
    started_at = min(times) if times else ctx.now()
    page = page_url(ctx)
    title = getattr(ctx.app.extension, "settings", {}).get("tracked_tab_title")
    doc = har(bodies, waterfall, page_url=page, started_at=started_at,
              page_title=title if isinstance(title, str) else None)
    n_entries = len(doc["log"]["entries"])
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()
    return _finish(ctx, args, "har", f"HAR 1.2 with {n_entries} entr{'y' if n_entries == 1 else 'ies'}",
                   text, {"entries": n_entries})


def csp_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    n = _n(ctx, args, DEFAULT_ENTRIES)
    observed = origins_by_type(newest(ctx, WATERFALL, n, args),
                               newest(ctx, NETWORK_BODIES, n, args))
    page = ctx.str_arg(args, "url") or page_url(ctx)
    result = csp(observed, page_origin=page, report_uri=ctx.str_arg(args, "report_uri"))
    return _finish(ctx, args, "csp", f"Content-Security-Policy with {len(result['directives'])} "
                   "directive(s)", result["policy"], result)


def sri_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    n = _n(ctx, args, DEFAULT_ENTRIES)
    algorithm = ctx.str_arg(args, "algorithm", "sha384")
    result = sri(_url_filter(ctx, args, newest(ctx, NETWORK_BODIES, n, args)),
                 algorithm=algorithm)
    tags = "\n".join(r["tag"] for r in result["resources"])
    return _finish(ctx, args, "sri", f"SRI hashes for {len(result['resources'])} resource(s), "
                   f"{len(result['unhashable'])} not hashable", tags, result)


def normalize_a11y(result: Any) -> dict[str, Any]:
    """The extension's a11y result (snake_case ``help_url``/``failure_summary``) in the axe shape
    the SARIF generator reads (``helpUrl``/``failureSummary``); axe-shaped input passes as is."""
    r = as_dict(result)
    violations = []
    for v in lst(r.get("violations")):
        if not isinstance(v, dict):
            continue
        v = dict(v)
        if "helpUrl" not in v and "help_url" in v:
            v["helpUrl"] = v["help_url"]
        nodes = []
        for node in lst(v.get("nodes")):
            if isinstance(node, dict):
                node = dict(node)
                if "failureSummary" not in node and "failure_summary" in node:
                    node["failureSummary"] = node["failure_summary"]
                nodes.append(node)
        v["nodes"] = nodes
        violations.append(v)
    return {**r, "violations": violations}


def sarif_document(ctx: Any, a11y_result: Any) -> tuple[dict[str, Any], int]:
    normalized = normalize_a11y(a11y_result)
    url = normalized.get("url") if isinstance(normalized.get("url"), str) else page_url(ctx)
    doc = sarif(normalized, page_url=url)
    results = sum(len(run.get("results") or []) for run in doc.get("runs") or [])
    return doc, results


def sarif_mode(ctx: Any, args: dict[str, Any]) -> Any:
    provided = args.get("a11y_result", args.get("result"))
    if provided is not None and not isinstance(provided, dict):
        raise InvalidParam("a11y_result must be an accessibility result object "
                           "({violations: [...]})", param="a11y_result")

    def build(a11y: Any) -> dict[str, Any]:
        doc, count = sarif_document(ctx, a11y)
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()
        return _finish(ctx, args, "sarif", f"SARIF 2.1.0 with {count} result(s)", text,
                       {"results": count})

    if provided is not None:
        return succeed(provided).addCallback(build)
    from gasoline.mcp.modes.analyze import a11y_params  # noqa: PLC0415

    return call(ctx, args, "a11y", a11y_params(ctx, args)).addCallback(build)


def pr_summary_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    n = _n(ctx, args, DEFAULT_ENTRIES)
    diff = None
    checkpoint = ctx.str_arg(args, "checkpoint")
    if checkpoint:
        from gasoline.mcp.modes.analyze import compute_changes  # noqa: PLC0415

        diff = compute_changes(ctx, args, checkpoint)
    result = pr_summary(_errors(ctx, args, n), newest(ctx, NETWORK_BODIES, n, args),
                        newest(ctx, ACTIONS, n, args), list(ctx.app.store.performance.values()),
                        changes=diff, title=ctx.str_arg(args, "title"))
    return _finish(ctx, args, "pr_summary", "PR summary (Markdown)", result["markdown"],
                   {"stats": result.get("stats")})


#: Arguments these modes read beyond the tool schema's common ones (JSON Schema fragments for
#: the tools-infrastructure to merge into ``generate``'s inputSchema).
PROPERTIES: dict[str, Any] = {
    "base_url": {"type": "string", "description": "reproduction/test: make recorded URLs "
                 "relative to this origin."},
    "a11y_result": {"type": "object", "description": "sarif: an accessibility result "
                    "({violations: [...]}); without it the extension's audit runs."},
    "selector": {"type": "string", "description": "sarif: audit only this part of the page."},
    "tags": {"type": "array", "items": {"type": "string"}, "description": "sarif: axe rule tags."},
    "checkpoint": {"type": "string", "description": "pr_summary: include the changes since "
                   "this checkpoint."},
    "title": {"type": "string", "description": "pr_summary: the heading."},
    "algorithm": {"type": "string", "enum": ["sha256", "sha384", "sha512"],
                  "description": "sri: hash algorithm (default sha384)."},
    "report_uri": {"type": "string", "description": "csp: add a report-uri directive."},
}

MODES = nulls_absent({
    "reproduction": reproduction_mode,
    "test": test_mode,
    "har": har_mode,
    "csp": csp_mode,
    "sri": sri_mode,
    "sarif": sarif_mode,
    "pr_summary": pr_summary_mode,
})

"""
C{generate} modes: artifacts built from what was captured (L{gasoline.generate}).

Every mode answers the artifact in its result (C{artifact}: the text; plus the generator's
structured output), except C{test_classify} (a classification, no artifact); C{test_heal}'s
artifact is the healed code when code was given. C{test_from_context}, C{visual_test},
C{test_heal} and C{test_classify} are described in docs/generate-configure-more.md. C{save_to} also writes the artifact to a file: a relative path is taken from
the agent's working directory (C{ctx.cwd}, sent by its connector) or, when the agent sent none,
from C{<state-dir>/artifacts/}; the resolved path (symlinks followed) must stay inside one of
those two roots, C{..} components are refused, and the final component is opened with
C{O_NOFOLLOW}. Artifacts are capped at L{MAX_ARTIFACT_BYTES} (5 MB), so the write is one small
bounded write on the reactor thread (a few milliseconds at most) rather than a thread hop.
"""

from __future__ import annotations

import os
import stat
from typing import Any

import orjson
from twisted.internet.defer import Deferred

from gasoline.analysis._util import entry_time, is_error, is_failed_request
from gasoline.analysis.clusters import fingerprint
from gasoline.common import NOFOLLOW, NONBLOCK
from gasoline.core.errors import GasolineError, InvalidParam
from gasoline.core.paths import PathRefused, resolve_inside
from gasoline.core.redaction.redactor import clip
from gasoline.core.storage.store import ACTIONS, CONSOLE, NETWORK_BODIES, WATERFALL
from gasoline.generate import (
    csp,
    origins_by_type,
    playwright_test,
    pr_summary,
    reproduction,
    sri,
)
from gasoline.generate.classify import classify
from gasoline.generate.context import context_test, visual_test
from gasoline.generate.har import har_steps
from gasoline.generate.heal import (
    apply_count,
    forms,
    heal_code,
    parse_selector,
    rank_candidates,
    rerank,
)
from gasoline.tools._a11y import sarif_mode
from gasoline.tools._artifacts import _finish
from gasoline.tools._changes import compute_changes
from gasoline.tools._shared import (
    as_dict,
    call,
    lst,
    newest,
    noise_filter,
    nulls_absent,
    page_url,
    require_str,
    tab_of,
    timeout_of,
)
from gasoline.tools._slices import run_in_slices
from gasoline.tools.schemas import MAX_CONTEXT_WINDOW, MODE_PROPERTIES

DEFAULT_ACTIONS = 200
DEFAULT_ENTRIES = 1000
MAX_ENTRIES = 10_000


# -- save_to ------------------------------------------------------------------------------------------


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


def har_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any] | Deferred[Any]:
    n = _n(ctx, args, DEFAULT_ENTRIES)
    bodies = _url_filter(ctx, args, newest(ctx, NETWORK_BODIES, n, args))
    waterfall = _url_filter(ctx, args, newest(ctx, WATERFALL, n, args))
    times = [t for t in (entry_time(b) for b in bodies) if t is not None]
    started_at = min(times) if times else ctx.now()
    page = page_url(ctx)
    title = ctx.app.extension.settings.get("tracked_tab_title")

    def finish(doc: dict[str, Any]) -> Any:
        n_entries = len(doc["log"]["entries"])
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()
        return _finish(ctx, args, "har",
                       f"HAR 1.2 with {n_entries} entr{'y' if n_entries == 1 else 'ies'}",
                       text, {"entries": n_entries})

    # Seconds of redaction over a full buffer: in slices, with progress (gasoline.tools._slices).
    doc = run_in_slices(ctx, har_steps(bodies, waterfall, page_url=page, started_at=started_at,
                                       page_title=title if isinstance(title, str) else None),
                        "HAR")
    return doc.addCallback(finish) if isinstance(doc, Deferred) else finish(doc)


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


def pr_summary_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    n = _n(ctx, args, DEFAULT_ENTRIES)
    diff = None
    checkpoint = ctx.str_arg(args, "checkpoint")
    if checkpoint:
        diff = compute_changes(ctx, args, checkpoint)
    result = pr_summary(_errors(ctx, args, n), newest(ctx, NETWORK_BODIES, n, args),
                        newest(ctx, ACTIONS, n, args), list(ctx.app.store.performance.values()),
                        changes=diff, title=ctx.str_arg(args, "title"))
    return _finish(ctx, args, "pr_summary", "PR summary (Markdown)", result["markdown"],
                   {"stats": result.get("stats")})


# -- test_from_context, visual_test, test_heal, test_classify ----------------------------------------

#: Seconds of actions before the error that test_from_context replays (default; the maximum,
#: C{MAX_CONTEXT_WINDOW}, is in its schema).
CONTEXT_WINDOW = 30.0
#: Seconds after the error in which failed requests still count as "around" it.
AFTER_ERROR = 5.0
#: Failed requests without any time field count when they are among this many newest requests.
UNTIMED_RECENT = 20
MAX_TEST_FILE_BYTES = 512 * 1024
MAX_TEST_CODE = 512 * 1024
#: test_heal live check: candidates counted on the page, and seconds per extension command.
LIVE_CHECKS = 3
LIVE_TIMEOUT = 5.0


def _error_ids(entry: dict[str, Any]) -> list[str]:
    ids = [str(entry[k]) for k in ("_errorId", "errorId", "error_id", "id") if entry.get(k)]
    try:
        ids.append(fingerprint(entry))
    except Exception:  # a hostile entry must not break the lookup
        pass
    return ids


def find_error(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The error C{error_id} / C{message} names, else the newest one, in the caller's view
    (tab selection, scope) after its noise rules; read without moving any cursor."""
    error_id = ctx.str_arg(args, "error_id")
    message = ctx.str_arg(args, "message")
    errors = _errors(ctx, args, _n(ctx, args, DEFAULT_ENTRIES))
    errors = [e for e in errors if e.get("type") != "network"] or errors
    if error_id:
        errors = [e for e in errors if error_id in _error_ids(e)]
    if message:
        low = message.lower()
        errors = [e for e in errors if low in str(e.get("message", "")).lower()]
    if not errors:
        wanted = " matching " + ", ".join(
            f"{k} {v!r}" for k, v in (("error_id", error_id), ("message", message)) if v) \
            if error_id or message else ""
        raise GasolineError(f"no captured error{wanted} in your view", code="no_data",
                            retry="observe {what:'errors'} lists them; noise rules and "
                            "select_tab hide some.")
    return errors[-1]


def test_from_context_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    error = find_error(ctx, args)
    window = ctx.num_arg(args, "window_seconds", CONTEXT_WINDOW, 0, MAX_CONTEXT_WINDOW)
    at = entry_time(error)
    actions = newest(ctx, ACTIONS, DEFAULT_ACTIONS, args)
    if at is not None:
        actions = [a for a in actions if (t := entry_time(a)) is not None and at - window <= t <= at]
    else:
        actions = actions[-20:]
    bodies = newest(ctx, NETWORK_BODIES, DEFAULT_ENTRIES, args)
    console_net = [e for e in newest(ctx, CONSOLE, DEFAULT_ENTRIES, args)
                   if e.get("type") == "network"]
    failed = []
    recent = {id(b) for b in bodies[-UNTIMED_RECENT:]}
    for req in bodies + console_net:
        if not is_failed_request(req):
            continue
        t = entry_time(req)
        if t is None:
            if at is None or id(req) in recent:
                failed.append(req)
        elif at is None or at - window <= t <= at + AFTER_ERROR:
            failed.append(req)
    result = context_test(error, actions, failed, base_url=ctx.str_arg(args, "base_url") or None,
                          name=ctx.str_arg(args, "test_name") or None, page_url=page_url(ctx))
    summary = (f"Playwright test for error {clip(result['error']['message'], 80)!r}: "
               f"{result['actions_replayed']} preceding action(s), "
               f"{len(result['failed_requests'])} failed request(s) asserted")
    return _finish(ctx, args, "test_from_context", summary, result["script"],
                   {k: v for k, v in result.items() if k != "script"})


def visual_test_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    actions = newest(ctx, ACTIONS, _n(ctx, args, DEFAULT_ACTIONS), args)
    url = ctx.str_arg(args, "url") or page_url(ctx)
    threshold = ctx.num_arg(args, "threshold", None, 0, 1)
    selector = ctx.str_arg(args, "selector") or None
    result = visual_test(actions, url, base_url=ctx.str_arg(args, "base_url") or None,
                         name=ctx.str_arg(args, "name") or None, selector=selector,
                         full_page=ctx.bool_arg(args, "full_page", False), threshold=threshold,
                         test_name=ctx.str_arg(args, "test_name") or None)
    where = result["url"] or "(no page URL known: pass url)"
    return _finish(ctx, args, "visual_test",
                   f"visual test of {where} after {result['steps']} step(s), screenshot "
                   f"{result['screenshot']}", result["script"],
                   {k: v for k, v in result.items() if k != "script"})


def read_test_file(ctx: Any, path: str) -> str:
    """The text of C{path}, a regular file inside the caller's working directory (at most
    L{MAX_TEST_FILE_BYTES}; opened non-blocking so a FIFO cannot hang the daemon)."""
    if not ctx.cwd:
        raise PathRefused("test_file needs your working directory (your connector sends it); "
                          "pass the code as test_code instead", param="test_file")
    resolved = resolve_inside(path, [ctx.cwd], param="test_file", parent_refs=False,
                              where="your working directory")
    try:
        fd = os.open(resolved, os.O_RDONLY | NONBLOCK | NOFOLLOW)
    except OSError as e:
        raise InvalidParam(f"cannot open test_file {path!r}: {e.strerror or e}",
                           param="test_file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidParam(f"test_file {path!r} is not a regular file", param="test_file")
        if info.st_size > MAX_TEST_FILE_BYTES:
            raise InvalidParam(f"test_file is {info.st_size} bytes; at most "
                               f"{MAX_TEST_FILE_BYTES}", param="test_file")
        chunks, size = [], 0
        while size <= MAX_TEST_FILE_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_TEST_FILE_BYTES:
        raise InvalidParam(f"test_file is over {MAX_TEST_FILE_BYTES} bytes", param="test_file")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidParam("test_file is not UTF-8 text", param="test_file") from None


async def test_heal_mode(ctx: Any, args: dict[str, Any]) -> Any:
    broken = require_str(ctx, args, "selector").strip()
    if len(broken) > 2000:
        raise InvalidParam("selector has at most 2000 characters", param="selector")
    code = ctx.str_arg(args, "test_code")
    test_file = ctx.str_arg(args, "test_file")
    if code is not None and len(code) > MAX_TEST_CODE:
        raise InvalidParam(f"test_code has at most {MAX_TEST_CODE} characters", param="test_code")
    if code is None and test_file is not None:
        code = read_test_file(ctx, test_file)
    actions = newest(ctx, ACTIONS, _n(ctx, args, DEFAULT_ENTRIES), args)
    live = ctx.bool_arg(args, "live", True)
    # Validate the arguments the live commands use before anything is sent.
    tab_of(ctx, args)
    timeout = min(timeout_of(ctx, args) or LIVE_TIMEOUT, LIVE_TIMEOUT)
    live_info: dict[str, Any] = {"checked": False}
    if not live:
        live_info["reason"] = "live:false"
    elif not ctx.extension_connected:
        live_info["reason"] = "extension not connected: candidates come from recorded actions"
    cands = await _heal_live(ctx, args, broken, actions, live and ctx.extension_connected,
                             timeout, live_info)

    def answer(cands: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"selector": broken, "parsed": parse_selector(broken),
                                "candidates": cands, "live": live_info,
                                "actions_searched": len(actions)}
        best = cands[0] if cands else None
        summary = (f"{len(cands)} replacement(s) for {clip(broken, 80)!r}" +
                   (f"; best {clip(best['selector'], 80)!r} ({best['confidence']:.2f}, "
                    f"{best['strategy']})" if best else
                    ": no recorded or live element resembles it"))
        if code is None:
            return ctx.ok(summary, body)
        if best is None:
            body["healed"] = False
            return _finish(ctx, args, "test_heal", summary + "; code left unchanged", code, body)
        healed = heal_code(code, broken, best)
        body["healed"] = bool(healed["replacements"])
        body["replacements"] = healed["replacements"][:100]
        if test_file is not None:
            body["test_file"] = test_file
        summary += f"; {len(healed['replacements'])} replacement(s) in the code"
        return _finish(ctx, args, "test_heal", summary, healed["code"], body)

    return answer(cands)


async def _heal_live(ctx: Any, args: dict[str, Any], broken: str, actions: list[dict[str, Any]],
               live: bool, timeout: float, info: dict[str, Any]) -> Any:
    """Rank candidates; with C{live}, list the page's interactive elements and count the best
    candidates on it. The first failed command ends the live checks (recorded ranking stays)."""
    elements: list[Any] = []
    if live:
        try:
            listed = await call(ctx, args, "dom_action",
                                {"action": "list_interactive", "limit": 500}, timeout=timeout)
            elements = lst(as_dict(listed).get("elements"))
            info.update(checked=True, elements_listed=len(elements))
        except GasolineError as e:
            info.update(checked=False, reason=f"list_interactive failed: {e.code}")
            live = False
    cands = rank_candidates(broken, actions, elements)
    if live:
        target = parse_selector(broken)
        probe = forms(target["kind"], target["value"], target.get("role"))["selector"] \
            if target["kind"] != "css" else broken
        try:
            found = await call(ctx, args, "dom", {"selector": probe, "limit": 2,
                                                  "include_html": False}, timeout=timeout)
            count = as_dict(found).get("count")
            info["broken_selector_count"] = count if isinstance(count, int) and \
                not isinstance(count, bool) else None
            for cand in cands[:LIVE_CHECKS]:
                found = await call(ctx, args, "dom", {"selector": cand["selector"], "limit": 2,
                                                      "include_html": False}, timeout=timeout)
                apply_count(cand, as_dict(found).get("count"))
            cands = rerank(cands)
        except GasolineError as e:
            info["counts_stopped"] = e.code
    return cands


def test_classify_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    failure = require_str(ctx, args, "failure", "error", "message")
    if len(failure) > 200_000:
        raise InvalidParam("failure has at most 200000 characters", param="failure")
    use_captured = ctx.bool_arg(args, "use_captured", True)
    n = ctx.int_arg(args, "last_n", 200, 1, MAX_ENTRIES)
    errors: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    perf: list[dict[str, Any]] = []
    if use_captured:
        errors = _errors(ctx, args, n)
        requests = [r for r in newest(ctx, NETWORK_BODIES, n, args) if is_failed_request(r)]
        requests += [e for e in errors if e.get("type") == "network" and is_failed_request(e)]
        perf = list(ctx.app.store.performance.values())[-20:]
    result = classify(failure, errors, requests, perf)
    result["captured"] = {"used": use_captured, "errors": len(errors),
                          "failed_requests": len(requests), "performance_snapshots": len(perf)}
    return ctx.ok(f"test failure classified as {result['category']} "
                  f"(confidence {result['confidence']:.2f})", result)


#: Arguments these modes read beyond the tool schema's common ones (they live in
#: L{gasoline.tools.schemas}: tools/list is answered without importing this module).
PROPERTIES: dict[str, Any] = MODE_PROPERTIES["generate"]

MODES = nulls_absent({
    "reproduction": reproduction_mode,
    "test": test_mode,
    "har": har_mode,
    "csp": csp_mode,
    "sri": sri_mode,
    "sarif": sarif_mode,
    "pr_summary": pr_summary_mode,
    "test_from_context": test_from_context_mode,
    "visual_test": visual_test_mode,
    "test_heal": test_heal_mode,
    "test_classify": test_classify_mode,
})

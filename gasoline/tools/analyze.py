"""
C{analyze} modes: answers computed from the shared buffers (S) or asked of the extension (X).

X modes go through the query router as the caller (C{ctx.router_call}); with C{background: true}
(or C{sync: false} / C{wait: false}) they answer a C{correlation_id} at once. S modes read the
newest entries of the buffers (C{last_n}, default 1000) and call the pure analyses of
L{gasoline.analysis}. C{visual_baseline} / C{visual_diff} keep screenshots per client under the
state dir and compare them in the extension; C{annotations} / C{annotation_detail} read what the
user drew in draw mode. See docs/analyze-generate-interact.md.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from twisted.internet.defer import Deferred

from gasoline.analysis import (
    api_validation,
    error_clusters,
    media,
    performance,
    security_audit,
    select_links,
    third_party_audit,
)
from gasoline.analysis._util import (
    entry_time,
    is_error,
    is_failed_request,
    iso,
    origin_of,
)
from gasoline.core import paths
from gasoline.core.errors import GasolineError, InvalidParam, MissingParam
from gasoline.core.storage.files import thread_runner
from gasoline.core.storage.screenshots import MIME_OF_EXT, image_content
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    NETWORK_BODIES,
    WATERFALL,
)
from gasoline.tools._a11y import a11y_params
from gasoline.tools._changes import compute_changes
from gasoline.tools._commands import needs_newer_extension, newer_command
from gasoline.tools._links import default_validator
from gasoline.tools._snapshot import observe_snapshot
from gasoline.tools._shared import (
    as_dict,
    call,
    entries_limit,
    extension_mode,
    lst,
    newest,
    noise_filter,
    nulls_absent,
    page_url,
    require_str,
    result_limit,
    str_list,
    tab_of,
)
from gasoline.tools.context import reserved_dict, store_reserved_dict
from gasoline.tools.schemas import MODE_PROPERTIES
from gasoline.core.redaction.redactor import clip

# -- X: the extension answers -----------------------------------------------------------------------


def dom(ctx: Any, args: dict[str, Any]) -> Any:
    selector = ctx.str_arg(args, "selector", "body")
    params: dict[str, Any] = {"selector": selector, "limit": result_limit(ctx, args)}
    if args.get("include_html") is not None:
        params["include_html"] = ctx.bool_arg(args, "include_html")

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        count = r.get("count", r.get("match_count"))
        if not isinstance(count, int):
            count = len(lst(r.get("matches")))
        if ctx.wants_json(args):
            return f"{count} element(s) match {selector!r}", {"selector": selector, "dom": r}
        # The summary line names the selector: the JSON is what the page answered.
        return f"{count} element(s) match {selector!r}", {
            "dom": {k: v for k, v in r.items() if k != "selector"}}

    return extension_mode(ctx, args, "dom", params, describe)


def accessibility(ctx: Any, args: dict[str, Any]) -> Any:
    params = a11y_params(ctx, args)

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        violations = [v for v in lst(r.get("violations")) if isinstance(v, dict)]
        by_impact: dict[str, int] = {}
        for v in violations:
            impact = str(v.get("impact") or "unknown")
            by_impact[impact] = by_impact.get(impact, 0) + 1
        detail = ", ".join(f"{n} {k}" for k, n in sorted(by_impact.items()))
        summary = f"{len(violations)} accessibility violation(s)" + (f" ({detail})" if detail else "")
        streaming = ctx.tools.streaming if ctx.tools is not None else None
        if streaming is not None and violations:  # streamed as accessibility_violation events
            url = r.get("url") if isinstance(r.get("url"), str) else page_url(ctx) or ""
            streaming.publish_audit(violations, url, tab_of(ctx, args))
        return summary, {"by_impact": by_impact, "accessibility": r}

    return extension_mode(ctx, args, "a11y", params, describe)


def link_health(ctx: Any, args: dict[str, Any]) -> Any:
    params = {"limit": ctx.int_arg(args, "limit", 50, 1, 200)}

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        return (f"{r.get('checked', 0)} link(s) checked by the browser, {r.get('broken', 0)} broken",
                {"link_health": r})

    return extension_mode(ctx, args, "link_health", params, describe)


def computed_styles(ctx: Any, args: dict[str, Any]) -> Any:
    selector = require_str(ctx, args, "selector")
    params: dict[str, Any] = {"selector": selector}
    props = str_list(ctx, args, "properties")
    if props:
        params["properties"] = props

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        styles = raw_styles if isinstance(raw_styles := r.get("styles"), dict) else {}
        return f"{len(styles)} computed style(s) of {selector!r}", {"computed_styles": r}

    return extension_mode(ctx, args, "computed_styles", params, describe)


def forms(ctx: Any, args: dict[str, Any]) -> Any:
    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        found = [f for f in lst(r.get("forms")) if isinstance(f, dict)]
        fields = sum(len(lst(f.get("fields"))) for f in found)
        return f"{len(found)} form(s) with {fields} field(s)", {"forms": r}

    return extension_mode(ctx, args, "form_discovery", {}, describe)


def form_issues(discovery: dict[str, Any]) -> list[dict[str, Any]]:
    """Problems visible in a C{form_discovery} result: unlabeled or unnamed fields, passwords
    sent with GET or over plain HTTP, forms without a submit control."""
    issues: list[dict[str, Any]] = []
    page = raw_page if isinstance(raw_page := discovery.get("url"), str) else ""
    for form in lst(discovery.get("forms")):
        if not isinstance(form, dict):
            continue
        where = form.get("selector")
        fields = [f for f in lst(form.get("fields")) if isinstance(f, dict)]
        inputs = [f for f in fields if f.get("type") not in ("submit", "button", "reset", "hidden",
                                                                "image", "fieldset")]
        has_password = any(f.get("type") == "password" for f in fields)
        for field in inputs:
            if not str(field.get("label") or "").strip():
                issues.append({"form": where, "field": field.get("selector"), "severity": "warning",
                               "issue": "missing_label",
                               "detail": "field has no accessible name (label, aria-label)"})
            if not str(field.get("name") or "").strip() and field.get("tag") != "fieldset":
                issues.append({"form": where, "field": field.get("selector"), "severity": "info",
                               "issue": "missing_name",
                               "detail": "field has no name, so it is not submitted"})
        if has_password and str(form.get("method") or "get").lower() == "get":
            issues.append({"form": where, "severity": "error", "issue": "password_in_get",
                           "detail": "a password field in a GET form ends up in the URL"})
        action = str(form.get("action") or "")
        if has_password and (action.startswith("http://") or
                             (not action and page.startswith("http://"))):
            host = origin_of(action or page) or ""
            if "localhost" not in host and "127.0.0.1" not in host:
                issues.append({"form": where, "severity": "error", "issue": "password_over_http",
                               "detail": "the form posts a password over plain HTTP"})
        if inputs and not any(f.get("type") in ("submit", "image") or
                              (f.get("tag") == "button" and f.get("type") in ("submit", ""))
                              for f in fields):
            issues.append({"form": where, "severity": "info", "issue": "no_submit_control",
                           "detail": "no submit button: Enter may not submit the form"})
    return issues


def form_validation(ctx: Any, args: dict[str, Any]) -> Any:
    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        issues = form_issues(r)
        n_forms = len([f for f in lst(r.get("forms")) if isinstance(f, dict)])
        return (f"{len(issues)} issue(s) in {n_forms} form(s)",
                {"issues": issues, "forms": r})

    return extension_mode(ctx, args, "form_discovery", {}, describe)


def page_summary(ctx: Any, args: dict[str, Any]) -> Any:
    """The page as the extension sees it (C{page_info}) plus what the buffers say about it."""

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        url = r.get("url") if isinstance(r.get("url"), str) else page_url(ctx)
        console = newest(ctx, CONSOLE, 1000)
        bodies = newest(ctx, NETWORK_BODIES, 1000)
        on_page = [e for e in console if url and (e.get("url") == url or e.get("page_url") == url)]
        errors = [e for e in (on_page or console) if is_error(e)]
        failed = [b for b in bodies if is_failed_request(b)]
        perf = ctx.app.store.performance.get(url) if url else None
        vitals = performance([perf])["pages"][0] if isinstance(perf, dict) else None
        data = {
            "page": r,
            "telemetry": {
                "recent_errors": len(errors),
                "recent_failed_requests": len(failed),
                "error_samples": [clip(e.get("message", ""), 300) for e in errors[-5:]],
                "vitals": vitals,
            },
        }
        title = r.get("title") or ""
        return (f"{title or url or 'page'}: {len(errors)} recent error(s), "
                f"{len(failed)} failed request(s)", data)

    return extension_mode(ctx, args, "page_info", {}, describe)


# -- S: computed from the buffers -------------------------------------------------------------------


def _errors(ctx: Any, args: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    console = newest(ctx, CONSOLE, entries_limit(ctx, args), args)
    errors = [e for e in console if is_error(e)]
    return noise_filter(ctx, errors)


#: From this many errors on, clustering runs in a worker process (docs/operations.md, "Worker
#: processes"): below it, encoding the input for the worker costs more than the work.
POOL_MIN_ERRORS = 500


def error_clusters_mode(ctx: Any, args: dict[str, Any]) -> Any:
    errors, hidden = _errors(ctx, args)
    limit = result_limit(ctx, args)

    def answer(result: dict[str, Any]) -> dict[str, Any]:
        result["noise_hidden"] = hidden
        n = len(result.get("clusters") or [])
        return ctx.ok(f"{len(errors)} error(s) in {n} cluster(s)"
                      + (f"; {hidden} hidden by noise rules" if hidden else ""),
                      result, buffer=CONSOLE)

    workers = ctx.app.workers
    if workers is not None and len(errors) >= POOL_MIN_ERRORS:
        d: Deferred = workers.run("gasoline.analysis:error_clusters", errors, limit=limit)
        return d.addCallback(answer)
    return answer(error_clusters(errors, limit=limit))


def performance_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    snapshots = list(ctx.app.store.performance.values())
    url = ctx.str_arg(args, "url")
    if url:
        snapshots = [s for s in snapshots if url in str(s.get("url", ""))]
    result = performance(snapshots)
    pages = result.get("pages") or []
    rating = result.get("overall")
    summary = f"performance of {len(pages)} page(s)" + (f": {rating}" if isinstance(rating, str) else "")
    if not snapshots:
        summary = "no performance snapshots captured yet"
    return ctx.ok(summary, result, buffer="performance")


def security_audit_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    n = entries_limit(ctx, args)
    result = security_audit(newest(ctx, NETWORK_BODIES, n, args), newest(ctx, CONSOLE, n, args),
                            newest(ctx, ACTIONS, n, args),
                            page_url=ctx.str_arg(args, "url") or page_url(ctx))
    findings = result.get("findings") or []
    return ctx.ok(f"{len(findings)} security finding(s)", result, buffer=NETWORK_BODIES)


def third_party_audit_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    n = entries_limit(ctx, args)
    page = ctx.str_arg(args, "url") or page_url(ctx)
    result = third_party_audit(newest(ctx, NETWORK_BODIES, n, args),
                               newest(ctx, WATERFALL, n, args),
                               origin_of(page) if page else None)
    return ctx.ok(f"{result.get('third_party_count', 0)} third-party origin(s)", result,
                  buffer=WATERFALL)


def api_validation_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    bodies = newest(ctx, NETWORK_BODIES, entries_limit(ctx, args), args)
    url = ctx.str_arg(args, "url")
    if url:
        bodies = [b for b in bodies if url in str(b.get("url", ""))]
    result = api_validation(bodies, limit=result_limit(ctx, args))
    return ctx.ok(f"{result.get('violation_count', 0)} API contract violation(s) across "
                  f"{result.get('endpoint_count', 0)} endpoint(s)",
                  result, buffer=NETWORK_BODIES)


def history(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Pages visited (from actions, console entries and performance snapshots), oldest first,
    with the navigations and per-page counts of actions and errors."""
    n = entries_limit(ctx, args)
    pages: dict[str, dict[str, Any]] = {}

    def visit(url: Any, at: float | None, kind: str) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://", "file:")):
            return
        page = pages.get(url)
        if page is None:
            page = pages[url] = {"url": url, "first_seen": at, "last_seen": at,
                                 "actions": 0, "errors": 0, "logs": 0, "navigations": 0}
        if at is not None:
            if page["first_seen"] is None or at < page["first_seen"]:
                page["first_seen"] = at
            if page["last_seen"] is None or at > page["last_seen"]:
                page["last_seen"] = at
        page[kind] += 1

    navigations = []
    for action in newest(ctx, ACTIONS, n, args):
        at = entry_time(action)
        if action.get("type") in ("navigate", "navigation", "page_load"):
            target = action.get("to_url") or action.get("url")
            visit(target, at, "navigations")
            navigations.append({"at": iso(at), "from": action.get("from_url"), "to": target,
                                "source": action.get("source", "user")})
        else:
            visit(action.get("url"), at, "actions")
    for entry in newest(ctx, CONSOLE, n, args):
        if entry.get("type") == "network":
            continue  # its url is the request's, not the page's
        visit(entry.get("page_url") or entry.get("url"), entry_time(entry),
              "errors" if is_error(entry) else "logs")
    for snap in ctx.app.store.performance.values():
        visit(snap.get("url"), entry_time(snap), "logs")
    ordered = sorted(pages.values(), key=lambda p: (p["first_seen"] is None, p["first_seen"] or 0))
    limit = result_limit(ctx, args)
    for page in ordered:
        page["first_seen"] = iso(page["first_seen"])
        page["last_seen"] = iso(page["last_seen"])
    current = page_url(ctx)
    return ctx.ok(f"{len(ordered)} page(s) visited, {len(navigations)} navigation(s)",
                  {"current_page": current, "pages": ordered[-limit:],
                   "navigations": navigations[-limit:]}, buffer=ACTIONS)


def changes_mode(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    name = ctx.str_arg(args, "checkpoint") or ctx.str_arg(args, "name")
    if not name:
        raise MissingParam("analyze changes needs 'checkpoint' (a name from configure checkpoint)",
                           param="checkpoint",
                           retry="Create a checkpoint with configure {what:\"checkpoint\", "
                           "name:\"before\"}, act, then call analyze {what:\"changes\", "
                           "checkpoint:\"before\"}.")
    result = compute_changes(ctx, args, name)
    return ctx.ok(result["summary"], result)


# -- link_validation: server-side, with the SSRF guard -------------------------------------------------


def _validator(ctx: Any) -> Any:
    return ctx.runtime.link_checker(lambda: default_validator(ctx.app.clock))


def link_validation(ctx: Any, args: dict[str, Any]) -> Any:
    allow_private = ctx.bool_arg(args, "allow_private", False)
    limit = ctx.int_arg(args, "limit", 50, 1, 200)
    urls = str_list(ctx, args, "urls", 200)
    single = ctx.str_arg(args, "url")
    validator = _validator(ctx)

    def check(hrefs: list[str], base: str | None) -> Any:
        picked = select_links(hrefs, base, limit)
        if ctx.request is not None and ctx.request.reporter is not None:
            def progress(done: int, total: int, url: str) -> None:
                ctx.progress(done, total, f"{done} of {total} links checked")

            d = validator.validate(picked["links"], allow_private=allow_private,
                                   on_progress=progress)
        else:
            d = validator.validate(picked["links"], allow_private=allow_private)

        def done(summary: dict[str, Any]) -> dict[str, Any]:
            summary["skipped"] = picked["skipped"]
            by_class = summary.get("by_class") or {}
            bad = sum(by_class.get(k, 0) for k in ("broken", "server_error", "error"))
            text = (f"{summary['checked']} link(s) checked from the daemon: {bad} broken or "
                    f"failing, {summary['refused']} refused by the SSRF guard")
            return ctx.ok(text, summary)

        return d.addCallback(done)

    if urls is not None or single is not None:
        return check((urls or []) + ([single] if single else []), page_url(ctx))
    # No URLs given: the links of the tracked page, read through the extension.
    d = call(ctx, args, "dom", {"selector": "a[href]", "limit": 500, "include_html": False})

    def from_dom(result: Any) -> Any:
        r = as_dict(result)
        base = r.get("url") if isinstance(r.get("url"), str) else page_url(ctx)
        hrefs = []
        for match in lst(r.get("matches")):
            attrs = match.get("attributes") if isinstance(match, dict) else None
            href = attrs.get("href") if isinstance(attrs, dict) else None
            if isinstance(href, str):
                hrefs.append(urljoin(base, href) if base else href)
        return check(hrefs, base)

    return d.addCallback(from_dom)


# -- X: annotations drawn by the user (interact draw_mode_start) ------------------------------------

_ANNOTATION_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")


def annotations_mode(ctx: Any, args: dict[str, Any]) -> Any:
    params: dict[str, Any] = {"limit": result_limit(ctx, args, 100)}
    tab_id = ctx.int_arg(args, "tab_id", None, 0, 2**53)
    if tab_id is not None:
        params["tab_id"] = tab_id

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        items = [a for a in lst(r.get("annotations")) if isinstance(a, dict)]
        active = r.get("draw_mode_active")
        summary = f"{len(items)} annotation(s)"
        if active is True:
            summary += " (draw mode is still on in the tab)"
        return summary, {"annotations": items, "count": len(items), "total": r.get("total"),
                         "draw_mode_active": active}

    return newer_command(ctx, args, "annotations", params, describe, "analyze annotations")


def annotation_detail(ctx: Any, args: dict[str, Any]) -> Any:
    annotation_id = require_str(ctx, args, "annotation_id", "id")
    if not _ANNOTATION_ID.match(annotation_id):
        raise InvalidParam("annotation_id is not an annotation id (see analyze annotations)",
                           param="annotation_id")

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        annotation = raw_annotation if isinstance(raw_annotation := r.get("annotation"), dict) else r
        element = raw_element if isinstance(raw_element := annotation.get("element"), dict) else {}
        tag = element.get("tag") or "no element"
        return (f"annotation {annotation_id}: {clip(annotation.get('note') or '', 80)!r} on <{tag}>",
                {"annotation": annotation})

    return newer_command(ctx, args, "annotation_detail", {"annotation_id": annotation_id},
                         describe, "analyze annotation_detail")


# -- X + daemon: visual baselines and diffs -----------------------------------------------------------

VISUAL_KEY = "analyze:visual_baselines"
MAX_BASELINES = 50
SCREENSHOT_TIMEOUT = 30.0
VISUAL_DIFF_TIMEOUT = 60.0
MAX_REGIONS = 50


def _visual_dir(ctx: Any) -> Path:
    return media.client_dir(ctx.app.config.state_dir, media.VISUAL_DIR, ctx.client_id)


def _baselines(ctx: Any) -> dict[str, Any]:
    return reserved_dict(ctx, VISUAL_KEY)


def _save_baselines(ctx: Any, baselines: dict[str, Any]) -> None:
    store_reserved_dict(ctx, VISUAL_KEY, baselines)


def _baseline_name(ctx: Any, args: dict[str, Any]) -> str:
    name = ctx.str_arg(args, "name")
    return "default" if name is None else media.valid_name(name)


def _png_screenshot(ctx: Any, args: dict[str, Any]) -> Deferred:
    d = call(ctx, args, "screenshot", {"format": "png"}, timeout=SCREENSHOT_TIMEOUT)
    return d.addCallback(lambda r: (media.screenshot_file(ctx.app.config.state_dir,
                                                          as_dict(r).get("path")), as_dict(r)))


def _stamp(ctx: Any) -> str:
    now = ctx.now()
    return (datetime.fromtimestamp(now, timezone.utc).strftime("%Y%m%dT%H%M%S")
            + f"{int(now * 1000) % 1000:03d}")


async def visual_baseline(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Screenshot the tracked tab (PNG) and keep it as the caller's baseline C{name}."""
    name = _baseline_name(ctx, args)
    baselines = _baselines(ctx)
    if name not in baselines and len(baselines) >= MAX_BASELINES:
        raise InvalidParam(f"you already have {MAX_BASELINES} baselines; reuse a name",
                           param="name", valid=sorted(baselines)[:MAX_BASELINES])
    run = thread_runner(ctx.app.clock)

    shot, result = await _png_screenshot(ctx, args)
    target = await run(media.move_into, shot, _visual_dir(ctx) / f"{name}{shot.suffix}")
    url = result.get("url") if isinstance(result.get("url"), str) else page_url(ctx)
    entry = {"name": name, "path": str(target), "url": url, "created_at": iso(ctx.now()),
             "bytes": target.stat().st_size}
    current = _baselines(ctx)
    current[name] = entry
    _save_baselines(ctx, current)
    return ctx.ok(f"baseline {name!r} saved ({entry['bytes']} bytes, {url or 'the page'})",
                  {"baseline": entry})


def _num(value: Any, default: float = 0) -> float:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _size(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return {k: int(_num(value.get(k))) for k in ("width", "height")}


def _regions(value: Any) -> list[dict[str, int]]:
    out = []
    for r in lst(value)[:MAX_REGIONS]:
        if isinstance(r, dict):
            out.append({k: int(_num(r.get(k))) for k in ("x", "y", "width", "height", "pixels")})
    return out


async def visual_diff(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Screenshot the tracked tab and compare it with baseline C{name} in the extension's service
    worker (C{createImageBitmap} + C{OffscreenCanvas}): changed pixels, their ratio, the bounding
    boxes of changed regions and a diff image saved under the state dir."""
    name = _baseline_name(ctx, args)
    entry = _baselines(ctx).get(name)
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise GasolineError(f"you have no baseline named {name!r}", code="no_data", param="name",
                            valid=sorted(_baselines(ctx))[:MAX_BASELINES],
                            retry="Take one first with analyze {what:\"visual_baseline\", name}.")
    baseline = paths.real(entry["path"])
    if not paths.inside(baseline, paths.real(_visual_dir(ctx))) or not baseline.is_file():
        raise GasolineError(f"baseline {name!r} is gone from the state dir; take it again",
                            code="no_data", param="name")
    pixel_threshold = ctx.int_arg(args, "pixel_threshold", 24, 0, 255)
    max_ratio = ctx.num_arg(args, "max_diff_ratio", 0.001, 0.0, 1.0)
    run = thread_runner(ctx.app.clock)

    shot, shot_result = await _png_screenshot(ctx, args)
    stamp = _stamp(ctx)
    diffs = _visual_dir(ctx) / "diffs"
    current = await run(media.move_into, shot, diffs / f"{name}-{stamp}-current{shot.suffix}")
    before = await run(media.read_bounded, baseline, media.MAX_IMAGE_BYTES, "name")
    after = await run(media.read_bounded, current, media.MAX_IMAGE_BYTES, "name")
    params = {"baseline": media.data_url(before, baseline),
              "current": media.data_url(after, current),
              "pixel_threshold": pixel_threshold, "max_regions": MAX_REGIONS}
    d = call(ctx, args, "visual_diff", params, timeout=VISUAL_DIFF_TIMEOUT)
    d.addErrback(needs_newer_extension("analyze visual_diff"))
    r = as_dict(await d)
    total = int(_num(r.get("total_pixels")))
    changed = int(_num(r.get("changed_pixels")))
    ratio = _num(r.get("changed_ratio"), changed / total if total else 0.0)
    data: dict[str, Any] = {
        "name": name, "baseline_path": str(baseline), "current_path": str(current),
        "url": shot_result.get("url") if isinstance(shot_result.get("url"), str) else None,
        "changed_pixels": changed, "total_pixels": total, "changed_ratio": ratio,
        "size_changed": r.get("size_changed") is True,
        "baseline_size": _size(r.get("baseline_size")),
        "current_size": _size(r.get("current_size")),
        "region_count": int(_num(r.get("region_count"), len(lst(r.get("regions"))))),
        "regions": _regions(r.get("regions")),
        "pixel_threshold": pixel_threshold, "max_diff_ratio": max_ratio,
        "passed": ratio <= max_ratio and r.get("size_changed") is not True,
    }
    image = media.decode_image_data_url(r.get("diff_data_url"))
    if image is not None:
        raw, ext = image
        written = await run(media.write_new, diffs / f"{name}-{stamp}-diff.{ext}", raw)
        data["diff_path"] = str(written)
    else:
        data["diff_path"] = None
    verdict = "matches" if data["passed"] else "differs from"
    answer = ctx.ok(f"the page {verdict} baseline {name!r}: {changed} of {total} pixels changed "
                    f"({ratio:.4%}) in {data['region_count']} region(s)", data)
    # The diff image inline (MCP image content, size-bounded), next to its path.
    block = image_content(image[0], MIME_OF_EXT[image[1]]) if image is not None else None
    if block is not None:
        answer["content"].append(block)
    return answer


#: Arguments these modes read beyond the tool schema's common ones (they live in
#: L{gasoline.tools.schemas}: tools/list is answered without importing this module).
PROPERTIES: dict[str, Any] = MODE_PROPERTIES["analyze"]

MODES = nulls_absent({
    "dom": dom,
    "accessibility": accessibility,
    "performance": performance_mode,
    "error_clusters": error_clusters_mode,
    "history": history,
    "security_audit": security_audit_mode,
    "third_party_audit": third_party_audit_mode,
    "link_health": link_health,
    "link_validation": link_validation,
    "page_summary": page_summary,
    "computed_styles": computed_styles,
    "forms": forms,
    "form_validation": form_validation,
    "api_validation": api_validation_mode,
    "changes": changes_mode,
    "annotations": annotations_mode,
    "annotation_detail": annotation_detail,
    "visual_baseline": visual_baseline,
    "visual_diff": visual_diff,
    "snapshot": observe_snapshot,  # the same as observe {what:"snapshot"}
})

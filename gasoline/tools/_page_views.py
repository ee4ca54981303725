"""
C{observe}'s views of the page, the tabs and the extension's state: vitals, page, tabs, pilot,
the views that ask the extension (screenshot, storage, IndexedDB), the command queue
(command_result, pending_commands, failed_commands) and the caller's recordings.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from twisted.internet.defer import Deferred

from gasoline.analysis.perf import page_performance
from gasoline.core.errors import GasolineError, MissingParam
from gasoline.tools._page_scope import current_page
from gasoline.tools._reader import DEFAULT_LIMIT, MAX_LIMIT
from gasoline.tools._state import recording_named, recordings_of
from gasoline.tools._views import view_filter
from gasoline.tools.context import ToolContext

# -- vitals, page, tabs, pilot ------------------------------------------------------------------


def observe_vitals(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    url = ctx.str_arg(args, "url")
    view, applied = view_filter(ctx, args)
    # By default the current page only (gasoline.tools._page_scope); scope "all" for every page.
    on_page, page_filters = current_page(ctx, args, url_fields=("url",))
    applied.update(page_filters)
    pages = []
    for snap in reversed(list(ctx.app.store.performance.values())):
        if not isinstance(snap, dict):
            continue
        if url is not None and url not in str(snap.get("url", "")):
            continue
        if view is not None and not view(snap):
            continue
        if on_page is not None and not on_page(snap):
            continue
        try:
            pages.append(page_performance(snap))
        except Exception:  # a malformed snapshot: show it raw rather than fail the read
            pages.append({"url": snap.get("url"), "raw": snap})
    limit = ctx.int_arg(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    if on_page is not None:
        # The current page's latest load: the snapshot of the tracked URL itself, else the newest
        # of the same page (another query string).
        tracked = ctx.app.extension.settings.get("tracked_tab_url")
        exact = [p for p in pages if p.get("url") == tracked]
        limit = 1
        pages = exact or pages
    pages = pages[:limit]
    data: dict[str, Any] = {"count": len(pages), "pages": pages}
    if applied:
        data["filters"] = applied
    if on_page is not None:
        summary = (f"web vitals of the current page {page_filters['page']}" if pages else
                   f"no web vitals yet for the current page {page_filters['page']}")
        summary += " (scope:\"all\" for every page since you connected)"
    else:
        summary = f"web vitals for {len(pages)} pages (newest first)"
    return ctx.ok(summary, data, buffer="performance")


def _settings(ctx: ToolContext) -> dict[str, Any]:
    return dict(ctx.app.extension.settings)


def observe_page(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    s = _settings(ctx)
    url = s.get("tracked_tab_url") or None
    page = {
        "url": url, "title": s.get("tracked_tab_title") or None,
        "tab_id": s.get("tracked_tab_id") or None,
        "tracking_enabled": s.get("tracking_enabled"),
        "csp_restricted": s.get("csp_restricted"), "csp_level": s.get("csp_level"),
    }
    perf = ctx.app.store.performance.get(url) if url else None
    if perf is not None:
        try:
            page["vitals"] = page_performance(perf)
        except Exception:
            page["vitals"] = None
    last_sync = ctx.app.extension.last_sync
    page["settings_age_seconds"] = None if last_sync is None else round(ctx.now() - last_sync, 3)
    summary = f"tracked page: {url}" if url else "no tracked page"
    return ctx.ok(summary, {"page": page})


def observe_tabs(ctx: ToolContext, args: dict[str, Any]) -> Any:
    def from_settings(note: str) -> dict[str, Any]:
        s = _settings(ctx)
        tabs = []
        if s.get("tracked_tab_id"):
            tabs.append({"id": s.get("tracked_tab_id"), "url": s.get("tracked_tab_url"),
                         "title": s.get("tracked_tab_title"), "tracked": True})
        return ctx.ok(f"{len(tabs)} tabs known ({note})", {"tabs": tabs, "source": "settings"})

    if not ctx.extension_connected:
        return from_settings("from the extension's last settings")
    d: Deferred = ctx.router_call("tabs", {})

    def got(result: Any) -> dict[str, Any]:
        tabs = result.get("tabs") if isinstance(result, dict) else result
        tabs = [t for t in tabs if isinstance(t, dict)] if isinstance(tabs, list) else []
        known = {t.get("id"): t.get("url") for t in tabs
                 if t.get("id") is not None and isinstance(t.get("url"), str)}
        if known:
            ctx.runtime.saw_tabs(dict(list(known.items())[:500]))
        tracked = _settings(ctx).get("tracked_tab_id")
        for t in tabs:
            t.setdefault("tracked", t.get("id") == tracked)
        return ctx.ok(f"{len(tabs)} tabs open", {"tabs": tabs, "source": "extension"})

    return d.addCallback(got)


def observe_pilot(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    s = _settings(ctx)
    keys = ("pilot_enabled", "tracking_enabled", "capture_logs", "capture_network",
            "capture_websocket", "capture_actions")
    data = {k: s.get(k) for k in keys}
    data["extension_version"] = ctx.app.extension.extension_version
    pilot = s.get("pilot_enabled")
    word = "enabled" if pilot else ("disabled" if pilot is False else "unknown")
    return ctx.ok(f"AI pilot {word}", data)

# -- extension-bound views ----------------------------------------------------------------------


def observe_screenshot(ctx: ToolContext, args: dict[str, Any]) -> Deferred:
    """A screenshot of the tab (X C{screenshot}): the extension uploads it to
    C{POST /screenshots} (saved under C{<state-dir>/screenshots/}); the answer is its path."""
    tab_id = ctx.int_arg(args, "tab_id", None)
    d: Deferred = ctx.router_call("screenshot", {}, tab_id=tab_id)

    def got(result: Any) -> dict[str, Any]:
        result = result if isinstance(result, dict) else {"result": result}
        data_url = result.get("data_url") or result.get("dataUrl")
        if not result.get("path") and isinstance(data_url, str):
            result = _save_data_url(ctx, data_url, result)
        result.pop("data_url", None)
        result.pop("dataUrl", None)
        path = result.get("path")
        if not path:
            raise GasolineError("the extension answered the screenshot without an image",
                                code="screenshot_failed", retry="Retry; the tab may be hidden.")
        return ctx.ok(f"screenshot saved to {path}", result)

    return d.addCallback(got)


def _save_data_url(ctx: ToolContext, data_url: str, result: dict[str, Any]) -> dict[str, Any]:
    m = re.match(r"^data:image/(jpeg|jpg|png|webp);base64,", data_url)
    if m is None:
        raise GasolineError("the extension's screenshot is not a base64 image data URL",
                            code="screenshot_failed")
    try:
        image = base64.b64decode(data_url[m.end():], validate=True)
    except (binascii.Error, ValueError):
        raise GasolineError("the extension's screenshot is not valid base64",
                            code="screenshot_failed") from None
    ext = m.group(1).replace("jpeg", "jpg")
    path = ctx.app.screenshots.save(image, ext, result.get("url"), None, ctx.now())
    return dict(result, path=str(path), filename=path.name)


def observe_storage(ctx: ToolContext, args: dict[str, Any]) -> Deferred:
    """The page's localStorage / sessionStorage / cookies (X C{state_capture})."""
    d: Deferred = ctx.router_call("state_capture", {"include": ["localStorage", "sessionStorage",
                                                                "cookies"]},
                                  tab_id=ctx.int_arg(args, "tab_id", None))

    def got(result: Any) -> dict[str, Any]:
        result = result if isinstance(result, dict) else {"result": result}
        counts = {k: len(v) for k, v in result.items() if isinstance(v, (dict, list))}
        return ctx.ok(f"page storage ({', '.join(f'{k}: {n}' for k, n in counts.items())})",
                      {"storage": result})

    return d.addCallback(got)


#: Read-only: lists databases and their object stores with record counts and a few records.
INDEXEDDB_SCRIPT = """
(async () => {
  const out = [];
  const dbs = indexedDB.databases ? await indexedDB.databases() : [];
  for (const info of dbs.slice(0, 20)) {
    const db = await new Promise((ok, ko) => {
      const r = indexedDB.open(info.name); r.onsuccess = () => ok(r.result); r.onerror = ko;
      r.onupgradeneeded = () => { r.transaction.abort(); ko(new Error('no such database')); };
    }).catch(() => null);
    if (!db) continue;
    const stores = [];
    for (const name of Array.from(db.objectStoreNames).slice(0, 50)) {
      const s = db.transaction(name, 'readonly').objectStore(name);
      const count = await new Promise(ok => { const r = s.count(); r.onsuccess = () => ok(r.result); r.onerror = () => ok(null); });
      const sample = await new Promise(ok => { const r = s.getAll(null, 5); r.onsuccess = () => ok(r.result); r.onerror = () => ok([]); });
      stores.push({name, count, sample});
    }
    db.close();
    out.push({name: info.name, version: info.version, stores});
  }
  return {databases: out};
})()
""".strip()


def observe_indexeddb(ctx: ToolContext, args: dict[str, Any]) -> Deferred:
    d: Deferred = ctx.router_call("execute", {"script": INDEXEDDB_SCRIPT, "world": "main",
                                              "read_only": True},
                                  tab_id=ctx.int_arg(args, "tab_id", None))

    def got(result: Any) -> dict[str, Any]:
        value = result.get("result", result) if isinstance(result, dict) else result
        dbs = value.get("databases") if isinstance(value, dict) else None
        n = len(dbs) if isinstance(dbs, list) else 0
        return ctx.ok(f"{n} IndexedDB databases", {"indexeddb": value})

    return d.addCallback(got)


# -- commands -----------------------------------------------------------------------------------


def observe_command_result(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    cid = ctx.str_arg(args, "correlation_id")
    if not cid:
        raise MissingParam("command_result needs correlation_id", param="correlation_id",
                           retry="Pass the correlation_id a background call returned.")
    outcome = ctx.router.command_result(ctx.client_id, cid)
    status = outcome.get("status") if isinstance(outcome, dict) else None
    return ctx.ok(f"command {cid}: {status}", outcome)


def observe_pending_commands(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    items = ctx.router.pending_commands(ctx.client_id)
    return ctx.ok(f"{len(items)} of your commands pending", {"count": len(items),
                                                              "commands": items})


def observe_failed_commands(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    items = ctx.router.failed_commands(ctx.client_id)
    return ctx.ok(f"{len(items)} of your commands failed recently", {"count": len(items),
                                                                      "commands": items})


# -- recordings (made with configure recording_start / recording_stop) -------------------------


def observe_recordings(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    rec = recordings_of(ctx)
    items = [{k: v for k, v in r.items() if k != "actions"} for r in rec["saved"].values()
             if isinstance(r, dict)]
    active = rec.get("active")
    summary = f"{len(items)} recordings" + (f"; {active['name']} is running" if active else "")
    return ctx.ok(summary, {"recordings": items, "active": active})


def observe_recording_actions(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    name, rec = recording_named(ctx, args, "recording_actions")
    limit = ctx.int_arg(args, "limit", MAX_LIMIT, 1, MAX_LIMIT)
    actions = rec.get("actions", [])[:limit]
    return ctx.ok(f"recording {name}: {len(actions)} actions",
                  {"name": name, "count": len(actions), "actions": actions,
                   "start_url": rec.get("start_url")})

"""
``interact`` modes: drive the browser through the extension's commands.

Each mode becomes one (or, for the composite modes, a few) extension command(s) sent through the
query router as the caller; docs/tools.md lists the params each command type receives. Modes that
act on the page (``browser_action``, ``execute`` and the mutating ``dom_action``s, as the
extension itself gates them) are refused with ``pilot_disabled`` when the extension reports
``pilot_enabled: false``. Every AI action that changes the page is recorded into the shared
``actions`` buffer with ``source: "ai"`` (and the caller's ``client_id``), after the extension
confirms it (at submission for ``background: true``).

``upload`` reads files from the caller's working directory or the state dir (L{media}) in the
reactor's thread pool; ``draw_mode_start`` shows the annotation overlay (read back with analyze
``annotations``); ``record_start`` / ``record_stop`` record the tab as screenshot frames plus the
buffers' timeline (docs/analyze-generate-interact.md, docs/extension.md).
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gasoline.analysis import media
from gasoline.analysis._util import entry_time, iso
from gasoline.core.errors import GasolineError, InvalidParam, MissingParam
from gasoline.core.persist import thread_runner
from gasoline.core.store import ACTIONS, CONSOLE, NETWORK_BODIES
from gasoline.tools._commands import (
    newer_command,
    require_pilot,
)
from gasoline.tools._shared import (
    as_dict,
    call,
    extension_mode,
    heads,
    lst,
    nulls_absent,
    page_url,
    require_str,
    since,
    timeout_of,
)
from gasoline.tools.context import reserved_dict, store_reserved_dict

log = Logger()

#: Seconds the daemon waits for a browser_action (the extension waits up to 15 s for the load).
BROWSER_ACTION_TIMEOUT = 30.0
#: The longest in-page wait (the extension caps ``wait_for`` at 15 s).
MAX_WAIT_MS = 15_000
MAX_FORM_FIELDS = 100
MAX_STATES = 20
MAX_STATE_BYTES = 256 * 1024
#: Where saved states live in the caller's key-value store.
STATES_KEY = "interact:states"
#: Element ids remembered per client from its last list_interactive (bounded).
MAX_ELEMENT_CLIENTS = 100
RECORDED_VALUE_LIMIT = 500

BROWSER_ACTIONS = ("navigate", "refresh", "back", "forward", "new_tab", "switch_tab", "close_tab")
DOM_ACTIONS = ("click", "type", "select", "check", "focus", "scroll_to", "wait_for", "key_press",
               "paste", "get_text", "get_value", "get_attribute", "set_attribute",
               "list_interactive")
#: dom_actions the extension runs even with the pilot off (they only read the page).
READ_ONLY_DOM_ACTIONS = frozenset({"get_text", "get_value", "get_attribute", "list_interactive",
                                   "wait_for"})
#: Recorded action ``type`` per mode (the shapes the reproduction generators replay).
ACTION_TYPES = {"type": "input", "key_press": "keypress", "scroll_to": "scroll"}


# -- selectors -----------------------------------------------------------------------------------

_ROLE = re.compile(r"^\s*([a-zA-Z-]+)\s*(?:\[\s*name\s*=\s*(.+?)\s*\]|\s+name\s*=\s*(.+))?\s*$")


def _unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        return s[1:-1]
    return s


def selectors_for(selector: str) -> dict[str, Any]:
    """The recorded ``selectors`` object for a CSS or semantic selector (best_locator's keys)."""
    s = selector.strip()
    if s.startswith("text="):
        return {"text": _unquote(s[5:])}
    if s.startswith("role="):
        m = _ROLE.match(s[5:])
        if m:
            role: dict[str, Any] = {"role": m.group(1).lower()}
            name = m.group(2) or m.group(3)
            if name:
                role["name"] = _unquote(name)
            return {"role": role}
    if s.startswith("aria-label="):
        return {"ariaLabel": _unquote(s[11:])}
    if s.startswith("label="):
        return {"label": _unquote(s[6:])}
    if s.startswith("placeholder="):
        value = _unquote(s[12:])
        return {"placeholder": value, "css": f"[placeholder={json.dumps(value)}]"}
    return {"css": s}


def _elements(ctx: Any) -> dict[str, dict[str, str]]:
    return ctx.runtime.interact_elements


def _remember_elements(ctx: Any, result: dict[str, Any]) -> None:
    table = _elements(ctx)
    table.pop(ctx.client_id, None)
    while len(table) >= MAX_ELEMENT_CLIENTS:
        table.pop(next(iter(table)))
    table[ctx.client_id] = {
        e["element_id"]: e["selector"] for e in lst(result.get("elements"))
        if isinstance(e, dict) and isinstance(e.get("element_id"), str)
        and isinstance(e.get("selector"), str)
    }


def target(ctx: Any, args: dict[str, Any], required: bool = True) -> str | None:
    """``selector``, or the selector behind an ``element_id`` from the caller's last
    list_interactive."""
    selector = ctx.str_arg(args, "selector")
    if selector is not None and selector.strip():
        return selector
    element_id = ctx.str_arg(args, "element_id")
    if element_id:
        known = _elements(ctx).get(ctx.client_id, {})
        if element_id not in known:
            raise InvalidParam(f"unknown element_id {element_id!r}", param="element_id",
                               retry="Call interact {what:\"list_interactive\"} first and use "
                               "one of its element ids (they belong to your latest list).")
        return known[element_id]
    if required:
        raise MissingParam(f"interact {ctx.mode} needs 'selector' (CSS or text=, role=, "
                           "placeholder=, label=, aria-label=) or 'element_id'", param="selector")
    return None


# -- recording ------------------------------------------------------------------------------------


def record(ctx: Any, kind: str, result: Any = None, **fields: Any) -> dict[str, Any]:
    """Append one AI action (``source: "ai"``) to the shared actions buffer."""
    r = as_dict(result) if result is not None else {}
    entry: dict[str, Any] = {
        "type": kind,
        "source": "ai",
        "timestamp": int(ctx.now() * 1000),
        "client_id": ctx.client_id,
    }
    url = r.get("url") if isinstance(r.get("url"), str) else page_url(ctx)
    if url:
        entry["url"] = url
    element = r.get("element") if isinstance(r.get("element"), dict) else None
    selector = fields.pop("selector", None)
    if element and isinstance(element.get("selectors"), dict):
        entry["selectors"] = element["selectors"]
    elif isinstance(selector, str):
        entry["selectors"] = selectors_for(selector)
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, str) and len(value) > RECORDED_VALUE_LIMIT:
            value = value[:RECORDED_VALUE_LIMIT]
        entry[key] = value
    try:
        ctx.app.store.add(ACTIONS, [entry])
    except (TypeError, ValueError):  # orjson cannot encode what the extension sent (huge ints,
        # nesting past its limit): keep the action without the extension's selectors
        entry["selectors"] = selectors_for(selector) if isinstance(selector, str) else {}
        ctx.app.store.add(ACTIONS, [entry])
    return entry


def _looks_secret(selector: str | None, args: dict[str, Any]) -> bool:
    hay = f"{selector or ''} {args.get('name') or ''}".lower()
    return any(word in hay for word in ("password", "passwd", "secret", "token", "otp", "cvc",
                                        "cvv", "card"))


def _recorded_value(selector: str | None, args: dict[str, Any], value: Any) -> Any:
    if value is None:
        return None
    if _looks_secret(selector, args):
        return "[redacted]"
    return value if isinstance(value, (str, int, float, bool)) else json.dumps(value)[:200]


# -- browser_action ---------------------------------------------------------------------------------


def browser_action(ctx: Any, args: dict[str, Any]) -> Any:
    require_pilot(ctx)
    action = ctx.mode
    params: dict[str, Any] = {"action": action}
    url = ctx.str_arg(args, "url")
    if action == "navigate":
        url = require_str(ctx, args, "url")
    if url is not None and action in ("navigate", "new_tab"):
        if not re.match(r"^(?:https?:|file:|about:blank$)", url, re.I):
            raise InvalidParam("url must be an http(s), file or about:blank URL", param="url")
        params["url"] = url
    tab_id = ctx.int_arg(args, "tab_id", None, 0, 2**53)
    if action == "switch_tab":
        if tab_id is None:
            raise MissingParam("interact switch_tab needs 'tab_id' (see observe tabs)",
                               param="tab_id")
        params["tab_id"] = tab_id
    for name in ("bypass_cache", "active", "track"):
        if args.get(name) is not None:
            params[name] = ctx.bool_arg(args, name)
    fields = {"to_url": params.get("url"), "from_url": page_url(ctx), "command": action}
    kind = action

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        record(ctx, kind, r, **fields)
        where = r.get("url") or params.get("url") or ""
        return f"{action} done" + (f": {where}" if where else ""), {"result": r}

    return extension_mode(ctx, args, "browser_action", params, describe,
                          on_submit=lambda cid: record(ctx, kind, None, status="submitted",
                                                       correlation_id=cid, **fields),
                          timeout=timeout_of(ctx, args) or BROWSER_ACTION_TIMEOUT)


# -- dom_action --------------------------------------------------------------------------------------


def dom_action_params(ctx: Any, args: dict[str, Any], action: str) -> dict[str, Any]:
    params: dict[str, Any] = {"action": action}
    if action == "list_interactive":
        limit = ctx.int_arg(args, "limit", None, 1, 500)
        if limit is not None:
            params["limit"] = limit
        return params
    if action == "wait_for":
        selector = ctx.str_arg(args, "selector") or ctx.str_arg(args, "wait_for")
        if not selector:
            selector = target(ctx, args)
        params["selector"] = selector
        params["timeout_ms"] = ctx.int_arg(args, "timeout_ms", 5000, 1, MAX_WAIT_MS)
        return params
    params["selector"] = target(ctx, args)
    if action in ("type", "paste"):
        text = args.get("text", args.get("value"))
        if text is None:
            raise MissingParam(f"interact {action} needs 'text'", param="text")
        if not isinstance(text, (str, int, float)) or isinstance(text, bool):
            raise InvalidParam("text must be a string", param="text")
        params["text"] = str(text)
        if action == "type" and args.get("clear") is not None:
            params["clear"] = ctx.bool_arg(args, "clear")
    elif action == "select":
        value = args.get("value", args.get("text"))
        if value is None:
            raise MissingParam("interact select needs 'value' (an option value or text)",
                               param="value")
        params["value"] = str(value)
    elif action == "check":
        if args.get("checked") is not None:
            params["checked"] = ctx.bool_arg(args, "checked")
        elif isinstance(args.get("value"), bool):
            params["checked"] = args["value"]
    elif action == "key_press":
        params["key"] = ctx.str_arg(args, "key") or ctx.str_arg(args, "text") or "Enter"
    elif action in ("get_attribute", "set_attribute"):
        name = ctx.str_arg(args, "attribute") or ctx.str_arg(args, "name")
        if not name:
            raise MissingParam(f"interact {action} needs 'attribute' (the attribute name)",
                               param="attribute")
        params["name"] = name
        if action == "set_attribute":
            value = args.get("value", "")
            params["value"] = value if isinstance(value, str) else json.dumps(value)
    return params


def dom_action(ctx: Any, args: dict[str, Any]) -> Any:
    action = ctx.mode
    read_only = action in READ_ONLY_DOM_ACTIONS
    if not read_only:
        require_pilot(ctx)
    params = dom_action_params(ctx, args, action)
    timeout = timeout_of(ctx, args)
    if action == "wait_for":
        timeout = params["timeout_ms"] / 1000.0 + 10.0
    kind = ACTION_TYPES.get(action, action)
    if action == "check" and params.get("checked") is False:
        kind = "uncheck"
    selector = params.get("selector")
    value = params.get("text", params.get("value"))
    fields = {"selector": selector, "command": action,
              "value": _recorded_value(selector, args, value) if action in
              ("type", "select", "paste", "set_attribute") else None,
              "key": params.get("key"),
              "input_type": "password" if action == "type" and _looks_secret(selector, args) else None,
              "name": params.get("name") if action == "set_attribute" else None}

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        if action == "list_interactive":
            _remember_elements(ctx, r)
            count = r.get("count")
            if not isinstance(count, int):
                count = len(lst(r.get("elements")))
            return (f"{count} interactive element(s)",
                    {"result": r})
        if not read_only:
            extra = {}
            if action == "scroll_to" and isinstance(r.get("scroll_y"), (int, float)):
                extra["scroll_y"] = r["scroll_y"]
            record(ctx, kind, r, **fields, **extra)
        if action == "get_text":
            return f"text of {selector!r}", {"result": r}
        if action in ("get_value", "get_attribute"):
            return f"{action} of {selector!r}", {"result": r}
        return f"{action} {selector!r} done" if selector else f"{action} done", {"result": r}

    on_submit = None
    if not read_only:
        def on_submit(cid: str) -> None:
            record(ctx, kind, None, status="submitted", correlation_id=cid, **fields)

    return extension_mode(ctx, args, "dom_action", params, describe, on_submit=on_submit,
                          timeout=timeout)


# -- highlight, subtitle, execute_js, screenshot -------------------------------------------------------


def highlight(ctx: Any, args: dict[str, Any]) -> Any:
    params: dict[str, Any] = {"selector": target(ctx, args)}
    duration = ctx.int_arg(args, "duration_ms", None, 100, 60_000)
    if duration is not None:
        params["duration_ms"] = duration
    return extension_mode(ctx, args, "highlight", params,
                          lambda r: (f"highlighted {params['selector']!r}", {"result": as_dict(r)}))


def subtitle(ctx: Any, args: dict[str, Any]) -> Any:
    text = args.get("text", "")
    if not isinstance(text, str):
        raise InvalidParam("text must be a string (empty clears the subtitle)", param="text")
    params: dict[str, Any] = {"text": text}
    duration = ctx.int_arg(args, "duration_ms", None, 100, 600_000)
    if duration is not None:
        params["duration_ms"] = duration
    return extension_mode(ctx, args, "subtitle", params,
                          lambda r: ("subtitle cleared" if not text else "subtitle shown",
                                     {"result": as_dict(r)}))


def execute_params(ctx: Any, args: dict[str, Any], script: str) -> dict[str, Any]:
    params: dict[str, Any] = {"script": script,
                              "world": ctx.str_arg(args, "world", "main", ("main", "isolated"))}
    ms = ctx.int_arg(args, "timeout_ms", None, 100, 25_000)
    if ms is not None:
        params["timeout_ms"] = ms
    return params


def execute_js(ctx: Any, args: dict[str, Any]) -> Any:
    require_pilot(ctx)
    script = require_str(ctx, args, "script", "code", "expression")
    params = execute_params(ctx, args, script)
    fields = {"command": "execute_js", "world": params["world"], "script": script}

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        record(ctx, "execute_js", r, **fields)
        return f"script ran in the {params['world']} world", {"result": r}

    return extension_mode(ctx, args, "execute", params, describe,
                          on_submit=lambda cid: record(ctx, "execute_js", None, status="submitted",
                                                       correlation_id=cid, **fields))


def screenshot(ctx: Any, args: dict[str, Any]) -> Any:
    params: dict[str, Any] = {}
    fmt = ctx.str_arg(args, "format", None, ("png", "jpeg"))
    if fmt:
        params["format"] = fmt
    quality = ctx.int_arg(args, "quality", None, 10, 100)
    if quality is not None:
        params["quality"] = quality

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        path = r.get("path")
        return (f"screenshot saved to {path}" if path else "screenshot taken",
                {"path": path, "filename": r.get("filename"), "url": r.get("url"), "result": r})

    return extension_mode(ctx, args, "screenshot", params, describe)


# -- composite modes ----------------------------------------------------------------------------------


def _form_fields(ctx: Any, args: dict[str, Any]) -> list[dict[str, Any]]:
    fields = args.get("fields")
    if fields is None:
        raise MissingParam("interact fill_form needs 'fields': {selector: value} or "
                           "[{selector, value, action?}]", param="fields")
    items: list[dict[str, Any]] = []
    if isinstance(fields, dict):
        items = [{"selector": k, "value": v} for k, v in fields.items()]
    elif isinstance(fields, list):
        for item in fields:
            if not isinstance(item, dict) or not isinstance(item.get("selector"), str):
                raise InvalidParam("each field must be an object with a 'selector'", param="fields")
            items.append(item)
    else:
        raise InvalidParam("fields must be an object or an array", param="fields")
    if not items:
        raise InvalidParam("fields is empty", param="fields")
    if len(items) > MAX_FORM_FIELDS:
        raise InvalidParam(f"at most {MAX_FORM_FIELDS} fields", param="fields")
    out = []
    for item in items:
        selector = item["selector"]
        if not selector.strip():
            raise InvalidParam("a field selector is empty", param="fields")
        value = item.get("value")
        action = item.get("action")
        if action is None:
            action = "check" if isinstance(value, bool) else "type"
        if action not in ("type", "select", "check", "click"):
            raise InvalidParam("a field's action must be type, select, check or click",
                               param="fields")
        params: dict[str, Any] = {"action": action, "selector": selector}
        if action == "type":
            if value is None or isinstance(value, (dict, list)):
                raise InvalidParam(f"field {selector!r} needs a text value", param="fields")
            params["text"] = str(value)
        elif action == "select":
            params["value"] = str(value)
        elif action == "check":
            params["checked"] = value is not False
        out.append(params)
    return out


async def _fill(ctx: Any, args: dict[str, Any], fields: list[dict[str, Any]]) -> list[Any]:
    done: list[Any] = []
    for i, params in enumerate(fields):
        try:
            result = await call(ctx, args, "dom_action", params)
        except GasolineError as e:
            raise GasolineError(
                f"{ctx.mode} stopped at field {i + 1} of {len(fields)} ({params['selector']!r}): "
                f"{e.message}", code=e.code, retry=e.retry or None,
                filled=[f["selector"] for f in fields[:i]], failed_field=params["selector"],
            ) from None
        kind = {"type": "input"}.get(params["action"], params["action"])
        if params["action"] == "check" and params.get("checked") is False:
            kind = "uncheck"
        value = params.get("text", params.get("value"))
        record(ctx, kind, result, selector=params["selector"], command=ctx.mode,
               value=_recorded_value(params["selector"], {}, value)
               if kind in ("input", "select") else None,
               input_type="password" if kind == "input" and _looks_secret(params["selector"], {})
               else None)
        done.append({"selector": params["selector"], "action": params["action"],
                     "result": as_dict(result)})
    return done


async def fill_form(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    require_pilot(ctx)
    fields = _form_fields(ctx, args)
    submit = ctx.mode == "fill_form_and_submit"
    submit_selector = (ctx.str_arg(args, "submit_selector")
                       or "button[type=submit], input[type=submit]") if submit else None

    done = await _fill(ctx, args, fields)
    data: dict[str, Any] = {"fields": done}
    summary = f"filled {len(done)} field(s)"
    if submit:
        try:
            result = await call(ctx, args, "dom_action",
                                {"action": "click", "selector": submit_selector})
        except GasolineError as e:
            raise GasolineError(f"filled {len(done)} field(s) but submitting failed: "
                                f"{e.message}", code=e.code, retry=e.retry or None,
                                filled=[f["selector"] for f in fields],
                                submit_selector=submit_selector) from None
        record(ctx, "click", result, selector=submit_selector, command=ctx.mode)
        data["submit"] = as_dict(result)
        summary += " and submitted the form"
    return ctx.ok(summary, data)


async def navigate_and_wait_for(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    require_pilot(ctx)
    url = require_str(ctx, args, "url")
    if not re.match(r"^(?:https?:|file:|about:blank$)", url, re.I):
        raise InvalidParam("url must be an http(s), file or about:blank URL", param="url")
    selector = ctx.str_arg(args, "wait_for") or ctx.str_arg(args, "selector")
    if not selector:
        raise MissingParam("interact navigate_and_wait_for needs 'wait_for' (a selector)",
                           param="wait_for")
    wait_ms = ctx.int_arg(args, "timeout_ms", 10_000, 1, MAX_WAIT_MS)
    from_url = page_url(ctx)

    nav = await call(ctx, args, "browser_action", {"action": "navigate", "url": url},
                     timeout=BROWSER_ACTION_TIMEOUT)
    record(ctx, "navigate", nav, to_url=url, from_url=from_url, command=ctx.mode)
    found = await call(ctx, args, "dom_action",
                       {"action": "wait_for", "selector": selector, "timeout_ms": wait_ms},
                       timeout=wait_ms / 1000.0 + 10.0)
    return ctx.ok(f"navigated to {url} and found {selector!r}",
                  {"navigate": as_dict(nav), "wait_for": as_dict(found)})


#: Page text extraction (runs in the page through ``execute``): an expression.
READABLE_SCRIPT = r"""(() => {
  const root = document.querySelector('article, main, [role=main]') || document.body;
  const skip = 'SCRIPT,STYLE,NOSCRIPT,TEMPLATE,SVG,NAV,FOOTER,ASIDE,IFRAME,FORM';
  const clone = root.cloneNode(true);
  clone.querySelectorAll(skip.toLowerCase()).forEach((n) => n.remove());
  const text = (clone.innerText || clone.textContent || '').replace(/\n{3,}/g, '\n\n').trim();
  return { url: location.href, title: document.title, text: text.slice(0, 200000),
           length: text.length, truncated: text.length > 200000 };
})()"""

#: Markdown conversion of the main content (runs in the page through ``execute``).
MARKDOWN_SCRIPT = r"""(() => {
  const root = document.querySelector('article, main, [role=main]') || document.body;
  const SKIP = new Set(['SCRIPT','STYLE','NOSCRIPT','TEMPLATE','SVG','NAV','FOOTER','ASIDE','IFRAME','BUTTON','INPUT','SELECT','TEXTAREA']);
  const inline = (node) => {
    let out = '';
    for (const c of node.childNodes) {
      if (c.nodeType === 3) { out += c.textContent.replace(/\s+/g, ' '); continue; }
      if (c.nodeType !== 1 || SKIP.has(c.tagName)) continue;
      const t = inline(c);
      if (c.tagName === 'A' && c.getAttribute('href')) out += '[' + t.trim() + '](' + c.href + ')';
      else if (c.tagName === 'STRONG' || c.tagName === 'B') out += '**' + t.trim() + '**';
      else if (c.tagName === 'EM' || c.tagName === 'I') out += '*' + t.trim() + '*';
      else if (c.tagName === 'CODE') out += '`' + t.trim() + '`';
      else if (c.tagName === 'IMG') out += '![' + (c.getAttribute('alt') || '') + '](' + c.src + ')';
      else if (c.tagName === 'BR') out += '\n';
      else out += t;
    }
    return out;
  };
  const blocks = [];
  const walk = (node, depth) => {
    for (const c of node.children) {
      if (SKIP.has(c.tagName) || c.hidden) continue;
      const tag = c.tagName;
      if (/^H[1-6]$/.test(tag)) blocks.push('#'.repeat(Number(tag[1])) + ' ' + inline(c).trim());
      else if (tag === 'P') { const t = inline(c).trim(); if (t) blocks.push(t); }
      else if (tag === 'PRE') blocks.push('```\n' + c.textContent.replace(/\n+$/, '') + '\n```');
      else if (tag === 'BLOCKQUOTE') blocks.push(inline(c).trim().split('\n').map((l) => '> ' + l).join('\n'));
      else if (tag === 'UL' || tag === 'OL') {
        let i = 1;
        const items = [];
        for (const li of c.children) if (li.tagName === 'LI') items.push('  '.repeat(depth) + (tag === 'OL' ? (i++) + '. ' : '- ') + inline(li).trim());
        blocks.push(items.join('\n'));
      } else if (tag === 'TABLE') {
        const rows = Array.from(c.rows).slice(0, 200).map((r) => '| ' + Array.from(r.cells).map((x) => inline(x).trim().replace(/\|/g, '\\|')).join(' | ') + ' |');
        if (rows.length) { const n = c.rows[0].cells.length; rows.splice(1, 0, '|' + ' --- |'.repeat(n)); }
        blocks.push(rows.join('\n'));
      } else if (tag === 'HR') blocks.push('---');
      else if (tag === 'IMG') blocks.push(inline({ childNodes: [c] }));
      else walk(c, depth);
    }
  };
  walk(root, 0);
  const md = blocks.filter(Boolean).join('\n\n');
  return { url: location.href, title: document.title, markdown: md.slice(0, 200000),
           length: md.length, truncated: md.length > 200000 };
})()"""


def _page_script(ctx: Any, args: dict[str, Any], script: str, key: str) -> Any:
    require_pilot(ctx)  # the extension runs ``execute`` only with the pilot on
    params = execute_params(ctx, args, script)

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        inner = r.get("result") if isinstance(r.get("result"), dict) else r
        return (f"{ctx.mode}: {inner.get('length', 0)} characters of {inner.get('url') or 'the page'}",
                {"url": inner.get("url"), "title": inner.get("title"), key: inner.get(key),
                 "truncated": inner.get("truncated", False)})

    return extension_mode(ctx, args, "execute", params, describe)


def get_readable(ctx: Any, args: dict[str, Any]) -> Any:
    return _page_script(ctx, args, READABLE_SCRIPT, "text")


def get_markdown(ctx: Any, args: dict[str, Any]) -> Any:
    return _page_script(ctx, args, MARKDOWN_SCRIPT, "markdown")


# -- storage and cookies (through ``execute``) --------------------------------------------------------


def _storage_kind(ctx: Any, args: dict[str, Any]) -> str:
    return ctx.str_arg(args, "storage_type", None, ("local", "session")) or \
        ctx.str_arg(args, "storage", "local", ("local", "session"))


def _run_script(ctx: Any, args: dict[str, Any], kind: str, body: str, payload: dict[str, Any],
                summary: str, fields: dict[str, Any]) -> Any:
    require_pilot(ctx)
    script = f"(() => {{ const p = {json.dumps(payload)}; {body} }})()"
    params = execute_params(ctx, {**args, "world": "main"}, script)

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        record(ctx, kind, r, command=kind, **fields)
        return summary, {"result": r.get("result", r)}

    return extension_mode(ctx, args, "execute", params, describe,
                          on_submit=lambda cid: record(ctx, kind, None, status="submitted",
                                                       correlation_id=cid, command=kind, **fields))


def set_storage(ctx: Any, args: dict[str, Any]) -> Any:
    key = require_str(ctx, args, "key")
    if "value" not in args:
        raise MissingParam("interact set_storage needs 'value'", param="value")
    value = args["value"]
    text = value if isinstance(value, str) else json.dumps(value)
    kind = _storage_kind(ctx, args)
    return _run_script(
        ctx, args, "set_storage",
        f"{kind}Storage.setItem(p.key, p.value); return {{ key: p.key, stored: true }};",
        {"key": key, "value": text}, f"{kind}Storage[{key!r}] set",
        {"key": key, "storage": kind})


def delete_storage(ctx: Any, args: dict[str, Any]) -> Any:
    key = require_str(ctx, args, "key")
    kind = _storage_kind(ctx, args)
    return _run_script(
        ctx, args, "delete_storage",
        f"const had = {kind}Storage.getItem(p.key) !== null; {kind}Storage.removeItem(p.key); "
        "return { key: p.key, removed: had };",
        {"key": key}, f"{kind}Storage[{key!r}] deleted", {"key": key, "storage": kind})


def clear_storage(ctx: Any, args: dict[str, Any]) -> Any:
    which = ctx.str_arg(args, "storage_type", None, ("local", "session", "both")) or \
        ctx.str_arg(args, "storage", "both", ("local", "session", "both"))
    kinds = ["local", "session"] if which == "both" else [which]
    body = "const out = {}; " + " ".join(
        f"out.{k} = {k}Storage.length; {k}Storage.clear();" for k in kinds) + " return { cleared: out };"
    return _run_script(ctx, args, "clear_storage", body, {}, f"cleared {which} storage",
                       {"storage": which})


_COOKIE_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}$")


def _cookie_attrs(ctx: Any, args: dict[str, Any]) -> str:
    attrs = ["path=" + (ctx.str_arg(args, "path") or "/")]
    domain = ctx.str_arg(args, "domain")
    if domain:
        if not re.match(r"^\.?[A-Za-z0-9.-]{1,253}$", domain):
            raise InvalidParam("domain is not a host name", param="domain")
        attrs.append("domain=" + domain)
    return "; ".join(attrs)


def set_cookie(ctx: Any, args: dict[str, Any]) -> Any:
    name = require_str(ctx, args, "name")
    if not _COOKIE_NAME.match(name):
        raise InvalidParam("name is not a valid cookie name", param="name")
    value = args.get("value", "")
    value = value if isinstance(value, str) else json.dumps(value)
    if path := ctx.str_arg(args, "path"):
        if not re.match(r"^/[^;\s]*$", path):
            raise InvalidParam("path must start with / and hold no ';' or spaces", param="path")
    parts = [_cookie_attrs(ctx, args)]
    max_age = ctx.int_arg(args, "max_age", None, 0, 10 * 365 * 86400)
    if max_age is not None:
        parts.append(f"max-age={max_age}")
    same_site = ctx.str_arg(args, "same_site", None, ("Strict", "Lax", "None"))
    if same_site:
        parts.append(f"samesite={same_site}")
    if args.get("secure") is not None and ctx.bool_arg(args, "secure"):
        parts.append("secure")
    return _run_script(
        ctx, args, "set_cookie",
        "document.cookie = p.name + '=' + encodeURIComponent(p.value) + '; ' + p.attrs; "
        "return { name: p.name, visible: document.cookie.split('; ').some((c) => "
        "c.startsWith(p.name + '=')) };",
        {"name": name, "value": value, "attrs": "; ".join(parts)}, f"cookie {name!r} set",
        {"name": name})


def delete_cookie(ctx: Any, args: dict[str, Any]) -> Any:
    name = require_str(ctx, args, "name")
    if not _COOKIE_NAME.match(name):
        raise InvalidParam("name is not a valid cookie name", param="name")
    return _run_script(
        ctx, args, "delete_cookie",
        "document.cookie = p.name + '=; max-age=0; ' + p.attrs; "
        "return { name: p.name, gone: !document.cookie.split('; ').some((c) => "
        "c.startsWith(p.name + '=')) };",
        {"name": name, "attrs": _cookie_attrs(ctx, args)}, f"cookie {name!r} deleted",
        {"name": name})


# -- saved states (per client, in its key-value store) ------------------------------------------------


def _states(ctx: Any) -> dict[str, Any]:
    return reserved_dict(ctx, STATES_KEY)


def _store_states(ctx: Any, states: dict[str, Any]) -> None:
    store_reserved_dict(ctx, STATES_KEY, states)


def _state_name(ctx: Any, args: dict[str, Any]) -> str:
    name = require_str(ctx, args, "name")
    if len(name) > 100:
        raise InvalidParam("name may be at most 100 characters", param="name")
    return name


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (dict, list)) else 0


def save_state(ctx: Any, args: dict[str, Any]) -> Deferred:
    name = _state_name(ctx, args)
    d = call(ctx, args, "state_capture", {})

    def saved(result: Any) -> dict[str, Any]:
        r = as_dict(result)
        state = {k: r.get(k) for k in ("url", "title", "local_storage", "session_storage",
                                       "cookie_names", "scroll", "form_values", "captured_at")}
        state["saved_at"] = ctx.now()
        import orjson  # noqa: PLC0415

        size = len(orjson.dumps(state))
        if size > MAX_STATE_BYTES:
            raise InvalidParam(f"the captured state is {size} bytes (limit {MAX_STATE_BYTES})",
                               param="name")
        states = _states(ctx)
        states.pop(name, None)
        if len(states) >= MAX_STATES:
            raise InvalidParam(f"you already have {MAX_STATES} saved states; delete one first",
                               param="name", valid=sorted(states))
        states[name] = state
        _store_states(ctx, states)
        return ctx.ok(f"state {name!r} saved ({state.get('url')})",
                      {"name": name, "url": state.get("url"),
                       "local_storage_keys": _size(state.get("local_storage")),
                       "session_storage_keys": _size(state.get("session_storage")),
                       "form_values": _size(state.get("form_values")), "bytes": size})

    return d.addCallback(saved)


RESTORE_SCRIPT = r"""(() => {
  const p = __STATE__;
  const out = { local: 0, session: 0, fields: 0, missing_fields: [] };
  if (p.local_storage) for (const [k, v] of Object.entries(p.local_storage)) { localStorage.setItem(k, v); out.local++; }
  if (p.session_storage) for (const [k, v] of Object.entries(p.session_storage)) { sessionStorage.setItem(k, v); out.session++; }
  for (const f of p.form_values || []) {
    let el = null;
    try { el = document.querySelector(f.selector); } catch (_) { el = null; }
    if (!el) { out.missing_fields.push(f.selector); continue; }
    if (el.type === 'checkbox' || el.type === 'radio') el.checked = f.value === 'true';
    else el.value = f.value;
    el.dispatchEvent(new Event('input', { bubbles: true }));
    el.dispatchEvent(new Event('change', { bubbles: true }));
    out.fields++;
  }
  if (p.scroll) window.scrollTo(p.scroll.x || 0, p.scroll.y || 0);
  out.url = location.href;
  return out;
})()"""


async def load_state(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    require_pilot(ctx)
    name = _state_name(ctx, args)
    state = _states(ctx).get(name)
    if not isinstance(state, dict):
        raise GasolineError(f"no saved state named {name!r}", code="no_data", param="name",
                            valid=sorted(_states(ctx)),
                            retry="List yours with interact {what:\"list_states\"}.")
    navigate = ctx.bool_arg(args, "navigate", True)
    payload = {k: state.get(k) for k in ("local_storage", "session_storage", "form_values", "scroll")}
    script = RESTORE_SCRIPT.replace("__STATE__", json.dumps(payload))

    data: dict[str, Any] = {"name": name, "url": state.get("url")}
    current = page_url(ctx)
    url = state.get("url")
    if navigate and isinstance(url, str) and url and url != current:
        nav = await call(ctx, args, "browser_action", {"action": "navigate", "url": url},
                         timeout=BROWSER_ACTION_TIMEOUT)
        record(ctx, "navigate", nav, to_url=url, from_url=current, command="load_state")
        data["navigated"] = True
    result = as_dict(await call(ctx, args, "execute", {"script": script, "world": "main"}))
    record(ctx, "load_state", result, command="load_state", name=name)
    data["restored"] = result.get("result", result)
    return ctx.ok(f"state {name!r} restored", data)


def list_states(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    states = _states(ctx)
    items = [{"name": n, "url": s.get("url"), "title": s.get("title"), "saved_at": s.get("saved_at")}
             for n, s in states.items() if isinstance(s, dict)]
    return ctx.ok(f"{len(items)} saved state(s)", {"states": items})


def delete_state(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    name = _state_name(ctx, args)
    states = _states(ctx)
    if name not in states:
        raise GasolineError(f"no saved state named {name!r}", code="no_data", param="name",
                            valid=sorted(states))
    del states[name]
    _store_states(ctx, states)
    return ctx.ok(f"state {name!r} deleted", {"name": name, "remaining": len(states)})


def run_a11y_and_export_sarif(ctx: Any, args: dict[str, Any]) -> Any:
    from gasoline.tools._a11y import sarif_mode  # noqa: PLC0415

    return sarif_mode(ctx, {k: v for k, v in args.items() if k not in ("a11y_result", "result")})


# -- upload ------------------------------------------------------------------------------------------


def _upload_names(ctx: Any, args: dict[str, Any]) -> list[str]:
    files = args.get("files")
    if files is not None:
        if isinstance(files, str):
            files = [files]
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            raise InvalidParam("files must be a non-empty array of file paths", param="files")
        if len(files) > media.MAX_UPLOAD_FILES:
            raise InvalidParam(f"at most {media.MAX_UPLOAD_FILES} files per upload", param="files")
        return files
    path = ctx.str_arg(args, "file_path")
    if not path:
        raise MissingParam("interact upload needs 'file_path' (or 'files': [paths]) inside your "
                           "working directory or the daemon's state dir", param="file_path")
    return [path]


async def upload(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Put files from the agent's working directory (or the state dir) into an
    ``<input type=file>``: the daemon reads them in the reactor's thread pool and sends them
    base64-encoded in a ``dom_action`` ``upload``."""
    require_pilot(ctx)
    selector = target(ctx, args)
    names = _upload_names(ctx, args)
    roots = media.upload_roots(ctx.cwd, getattr(getattr(ctx.app, "config", None), "state_dir", None))
    param = "files" if args.get("files") is not None else "file_path"
    state_dir = getattr(getattr(ctx.app, "config", None), "state_dir", None)
    paths = [media.resolve_readable(n, roots, param) for n in names]
    for p in paths:
        media.refuse_private_state(p, state_dir, ctx.client_id, param)
    sizes = sum(p.stat().st_size for p in paths)
    if sizes > media.MAX_UPLOAD_BYTES:
        raise InvalidParam(f"the file(s) hold {sizes} bytes, over the "
                           f"{media.MAX_UPLOAD_BYTES} byte upload limit", param=param)
    timeout = timeout_of(ctx, args) or BROWSER_ACTION_TIMEOUT

    read = await thread_runner(ctx.app.clock)(media.read_files, paths)
    payload = [media.file_payload(p, data) for p, data in read]
    params = {"action": "upload", "selector": selector, "files": payload}
    listed = [{"name": f["name"], "type": f["type"], "size": f["size"]} for f in payload]
    fields = {"selector": selector, "command": "upload",
              "value": ", ".join(f["name"] for f in payload)}

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        record(ctx, "upload", r, **fields)
        return (f"uploaded {len(payload)} file(s) into {selector!r}",
                {"files": listed, "result": r})

    out = extension_mode(ctx, args, "dom_action", params, describe, timeout=timeout,
                         on_submit=lambda cid: record(ctx, "upload", None, status="submitted",
                                                      correlation_id=cid, **fields))
    if isinstance(out, Deferred):
        out = await out
    return out


# -- newer extension commands --------------------------------------------------------------------------


# -- draw mode ----------------------------------------------------------------------------------------


def draw_mode_start(ctx: Any, args: dict[str, Any]) -> Any:
    """Show the annotation overlay in the tracked tab: the user drags rectangles and types a
    note for each (Enter saves, Esc ends). Read them with analyze annotations."""
    require_pilot(ctx)

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        return ("draw mode started: the user drags a rectangle, types a note and presses Enter; "
                "Esc ends. Read the notes with analyze {what:\"annotations\"}", {"result": r})

    return newer_command(ctx, args, "draw_mode", {"action": "start"}, describe,
                         "interact draw_mode_start")


# -- screen recording (frames + timeline) -------------------------------------------------------------

SCREEN_RECORDINGS_KEY = "interact:screen_recordings"
MAX_SCREEN_RECORDINGS = 20
MAX_ACTIVE_RECORDINGS = 4
DEFAULT_FPS = 1.0
MAX_FPS = 2.0
DEFAULT_RECORD_SECONDS = 120
MAX_RECORD_SECONDS = 600
MAX_FRAMES = 600
FRAME_TIMEOUT = 15.0
MAX_FRAME_FAILURES = 5
TIMELINE_LIMIT = 500


@attrs.define(eq=False)
class ScreenRecording:
    """One client's running frame recording of the tracked tab."""

    id: str
    client_id: str
    name: str | None
    directory: Path
    started_at: float
    interval: float
    deadline: float
    quality: int
    tab_id: int | None
    url: str | None
    heads: dict[str, int]
    frames: list[dict[str, Any]] = attrs.field(factory=list)
    skipped: int = 0
    failures: int = 0
    errors: list[str] = attrs.field(factory=list)
    timer: Any = None
    done: bool = False
    finished: Any = None


def _active(ctx: Any) -> dict[str, ScreenRecording]:
    return ctx.runtime.screen_recordings


def _recording_index(ctx: Any) -> dict[str, Any]:
    return reserved_dict(ctx, SCREEN_RECORDINGS_KEY)


def _state_dir(ctx: Any) -> Path:
    return Path(ctx.app.config.state_dir)


def _frame(ctx: Any, rec: ScreenRecording) -> Deferred:
    """Ask for one screenshot of the recorded tab and move it into the recording's folder."""
    params = {"format": "jpeg", "quality": rec.quality, "if_active": True}
    d = ctx.router_call("screenshot", params, timeout=FRAME_TIMEOUT, tab_id=rec.tab_id)

    def got(result: Any) -> bool:
        r = as_dict(result)
        path = media.screenshot_file(_state_dir(ctx), r.get("path"))
        if rec.done:
            return False
        n = len(rec.frames) + 1
        moved = media.move_into(path, rec.directory / f"frame-{n:05d}{path.suffix}")
        frame: dict[str, Any] = {"index": n, "file": moved.name,
                                 "t": round(ctx.now() - rec.started_at, 3)}
        if isinstance(r.get("url"), str):
            frame["url"] = r["url"][:2000]
        rec.frames.append(frame)
        rec.failures = 0
        return True

    return d.addCallback(got)


def _schedule(ctx: Any, rec: ScreenRecording) -> None:
    if rec.done:
        return
    if ctx.now() + rec.interval > rec.deadline or len(rec.frames) >= MAX_FRAMES:
        why = "frame limit" if len(rec.frames) >= MAX_FRAMES else "max_seconds"
        _finish(ctx, rec, f"stopped automatically ({why} reached)").addErrback(
            lambda f: log.failure("finishing screen recording {id}", f, id=rec.id))
        return
    rec.timer = ctx.clock.callLater(rec.interval, _tick, ctx, rec)


def _tick(ctx: Any, rec: ScreenRecording) -> None:
    rec.timer = None
    if rec.done:
        return

    def failed(failure: Any) -> None:
        err = failure.value
        text = getattr(err, "message", None) or str(err) or type(err).__name__
        if "tab_not_visible" in text:
            rec.skipped += 1
            return
        if not isinstance(err, (GasolineError, OSError)):
            log.failure("screen recording {id} frame", failure, id=rec.id)
        rec.failures += 1
        if len(rec.errors) < 20:
            rec.errors.append(text[:300])
        if rec.failures >= MAX_FRAME_FAILURES and not rec.done:
            _finish(ctx, rec, f"stopped after {rec.failures} failed captures in a row").addErrback(
                lambda f: log.failure("finishing screen recording {id}", f, id=rec.id))

    d = _frame(ctx, rec)
    d.addErrback(failed)
    d.addCallback(lambda _: _schedule(ctx, rec))


def _entry_summary(kind: str, e: dict[str, Any]) -> dict[str, Any]:
    if kind == "action":
        keep = ("type", "source", "url", "to_url", "value", "key", "client_id")
    elif kind == "console":
        keep = ("level", "type", "message", "url")
    else:
        keep = ("method", "url", "status", "duration")
    out: dict[str, Any] = {"kind": kind}
    for key in keep:
        value = e.get(key)
        if isinstance(value, str):
            out[key] = value[:300]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value
    if kind == "action" and isinstance(e.get("selectors"), dict):
        out["selectors"] = {k: v for k, v in e["selectors"].items()
                            if k in ("css", "testId", "text", "role", "ariaLabel")}
    return out


def _timeline(ctx: Any, rec: ScreenRecording) -> tuple[list[dict[str, Any]], dict[str, int]]:
    items: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for buffer, kind in ((ACTIONS, "action"), (CONSOLE, "console"), (NETWORK_BODIES, "network")):
        entries, _missed, _head = since(ctx, buffer, rec.heads.get(buffer, 0), TIMELINE_LIMIT)
        counts[kind] = len(entries)
        for e in entries:
            item = _entry_summary(kind, e)
            at = entry_time(e)
            item["at"] = iso(at)
            item["t"] = round(at - rec.started_at, 3) if at is not None else None
            items.append(item)
    items.sort(key=lambda i: (i["t"] is None, i["t"] if i["t"] is not None else 0))
    return items, counts


def _write_manifest(directory: Path, manifest: dict[str, Any]) -> Path:
    import orjson  # noqa: PLC0415

    return media.write_new(directory / "manifest.json",
                           orjson.dumps(manifest, option=orjson.OPT_INDENT_2, default=str))


def _remove_tree(directory: Path) -> None:
    import shutil  # noqa: PLC0415

    shutil.rmtree(directory, ignore_errors=True)


def _finish(ctx: Any, rec: ScreenRecording, reason: str) -> Deferred:
    """Stop C{rec}, write its manifest (frames + timeline) and index it in the client's state."""
    if rec.finished is not None:
        return rec.finished
    rec.done = True
    if rec.timer is not None and rec.timer.active():
        rec.timer.cancel()
    rec.timer = None
    active = _active(ctx)
    if active.get(rec.client_id) is rec:
        del active[rec.client_id]
    stopped = ctx.now()
    timeline, counts = _timeline(ctx, rec)
    manifest = {
        "recording_id": rec.id, "name": rec.name, "url": rec.url, "tab_id": rec.tab_id,
        "started_at": iso(rec.started_at), "stopped_at": iso(stopped),
        "duration_seconds": round(stopped - rec.started_at, 3),
        "fps": round(1.0 / rec.interval, 3), "stop_reason": reason,
        "directory": str(rec.directory), "frame_count": len(rec.frames),
        "skipped_frames": rec.skipped, "errors": rec.errors, "frames": rec.frames,
        "timeline_counts": counts, "timeline": timeline,
    }
    index = _recording_index(ctx)
    index[rec.id] = {"recording_id": rec.id, "name": rec.name, "url": rec.url,
                     "started_at": manifest["started_at"], "stopped_at": manifest["stopped_at"],
                     "frame_count": len(rec.frames), "stop_reason": reason,
                     "manifest": str(rec.directory / "manifest.json")}
    evicted = []
    while len(index) > MAX_SCREEN_RECORDINGS:
        oldest = next(iter(index))
        evicted.append(Path(str(index.pop(oldest).get("manifest", ""))).parent)
    store_reserved_dict(ctx, SCREEN_RECORDINGS_KEY, index)
    run = thread_runner(ctx.app.clock)

    async def write() -> dict[str, Any]:
        await run(_write_manifest, rec.directory, manifest)
        root = media.real(_state_dir(ctx) / media.SCREEN_RECORDINGS_DIR)
        for directory in evicted:
            if media.inside(media.real(directory), root) and media.real(directory) != root:
                await run(_remove_tree, directory)
        return manifest

    rec.finished = Deferred.fromCoroutine(write())
    return rec.finished


def _recording_result(ctx: Any, manifest: dict[str, Any], summary: str) -> dict[str, Any]:
    shown = dict(manifest)
    timeline = shown.get("timeline") if isinstance(shown.get("timeline"), list) else []
    shown["timeline"] = timeline[:100]
    shown["timeline_truncated"] = len(timeline) > 100
    frames = shown.get("frames") if isinstance(shown.get("frames"), list) else []
    shown["frames"] = frames[:100]
    shown["frames_truncated"] = len(frames) > 100
    shown["manifest"] = str(Path(str(manifest.get("directory", ""))) / "manifest.json")
    return ctx.ok(summary, shown)


def record_start(ctx: Any, args: dict[str, Any]) -> Deferred:
    """Record the tracked tab as JPEG frames (``captureVisibleTab`` through the ``screenshot``
    command, at most C{fps} a second) plus the actions/console/network timeline of the window."""
    active = _active(ctx)
    running = active.get(ctx.client_id)
    if running is not None:
        raise GasolineError(f"you are already recording ({running.id}); call interact "
                            "{what:\"record_stop\"} first", code="already_recording",
                            recording_id=running.id)
    if len(active) >= MAX_ACTIVE_RECORDINGS:
        raise GasolineError(f"{len(active)} screen recordings are running (the limit); try again "
                            "when one stops", code="too_many_recordings")
    name = ctx.str_arg(args, "name")
    if name is not None:
        media.valid_name(name)
    fps = ctx.num_arg(args, "fps", DEFAULT_FPS, 0.1, MAX_FPS)
    seconds = ctx.int_arg(args, "max_seconds", DEFAULT_RECORD_SECONDS, 1, MAX_RECORD_SECONDS)
    quality = ctx.int_arg(args, "quality", 60, 10, 100)
    tab_id = ctx.int_arg(args, "tab_id", None, 0, 2**53)
    now = ctx.now()
    rec_id = "rec_" + secrets.token_hex(6)
    rec = ScreenRecording(
        id=rec_id, client_id=ctx.client_id, name=name,
        directory=media.client_dir(_state_dir(ctx), media.SCREEN_RECORDINGS_DIR, ctx.client_id)
        / rec_id,
        started_at=now, interval=1.0 / fps, deadline=now + seconds, quality=quality,
        tab_id=tab_id, url=page_url(ctx), heads=heads(ctx))
    active[ctx.client_id] = rec

    def started(_: Any) -> dict[str, Any]:
        _schedule(ctx, rec)
        return ctx.ok(f"recording {rec.id} started ({fps:g} frame(s)/s at most, up to {seconds} s); "
                      "stop it with interact {what:\"record_stop\"}",
                      {"recording_id": rec.id, "name": name, "directory": str(rec.directory),
                       "fps": fps, "max_seconds": seconds, "first_frame": rec.frames[0]
                       if rec.frames else None, "url": rec.url})

    def refused(failure: Any) -> Any:
        rec.done = True
        if active.get(ctx.client_id) is rec:
            del active[ctx.client_id]
        return failure

    return _frame(ctx, rec).addCallbacks(started, refused)


def record_stop(ctx: Any, args: dict[str, Any]) -> Deferred:
    rec = _active(ctx).get(ctx.client_id)
    wanted = ctx.str_arg(args, "recording_id")
    if rec is not None and (wanted is None or wanted == rec.id):
        d = _finish(ctx, rec, "stopped by record_stop")
        return d.addCallback(lambda m: _recording_result(
            ctx, m, f"recording {rec.id} stopped: {m['frame_count']} frame(s), "
            f"{len(m['timeline'])} timeline event(s); frames and manifest.json in {rec.directory}"))
    index = _recording_index(ctx)
    if wanted is None:
        if not index:
            raise GasolineError("you have no screen recording running or saved", code="no_data",
                                retry="Start one with interact {what:\"record_start\"}.")
        wanted = next(reversed(index))
    entry = index.get(wanted)
    if not isinstance(entry, dict) or not isinstance(entry.get("manifest"), str):
        raise GasolineError(f"no screen recording {wanted!r} of yours", code="no_data",
                            param="recording_id", valid=list(index)[-20:])
    path = Path(entry["manifest"])
    root = media.real(_state_dir(ctx) / media.SCREEN_RECORDINGS_DIR)
    if not media.inside(media.real(path), root):
        raise GasolineError(f"screen recording {wanted!r} is not readable", code="no_data")

    def read() -> dict[str, Any]:
        import orjson  # noqa: PLC0415

        try:
            value = orjson.loads(media.read_bounded(path, 64 * 1024 * 1024, "recording_id"))
        except (OSError, orjson.JSONDecodeError, GasolineError):
            raise GasolineError(f"the manifest of screen recording {wanted!r} is gone or "
                                "unreadable", code="no_data", param="recording_id") from None
        if not isinstance(value, dict):
            raise GasolineError(f"the manifest of {wanted!r} is not an object", code="no_data")
        return value

    d = thread_runner(ctx.app.clock)(read)
    return d.addCallback(lambda m: _recording_result(
        ctx, m, f"screen recording {wanted} ({m.get('stop_reason')}): "
        f"{m.get('frame_count', 0)} frame(s)"))


#: Arguments these modes read beyond the tool schema's common ones (JSON Schema fragments for
#: the tools-infrastructure to merge into ``interact``'s inputSchema).
PROPERTIES: dict[str, Any] = {
    "checked": {"type": "boolean", "description": "check: false unchecks."},
    "clear": {"type": "boolean", "description": "type: false appends instead of replacing."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 500,
              "description": "list_interactive: elements returned."},
    "duration_ms": {"type": "integer", "minimum": 100, "maximum": 600000,
                    "description": "highlight/subtitle: how long it stays."},
    "format": {"type": "string", "enum": ["png", "jpeg"], "description": "screenshot format."},
    "quality": {"type": "integer", "minimum": 10, "maximum": 100,
                "description": "screenshot: JPEG quality."},
    "submit_selector": {"type": "string", "description": "fill_form_and_submit: the control to "
                        "click (default: the form's submit button)."},
    "storage_type": {"type": "string", "enum": ["local", "session", "both"],
                     "description": "storage modes: which Web Storage (default local; "
                     "clear_storage: both)."},
    "path": {"type": "string", "description": "set_cookie/delete_cookie: cookie path (/)."},
    "domain": {"type": "string", "description": "set_cookie/delete_cookie: cookie domain."},
    "max_age": {"type": "integer", "minimum": 0, "description": "set_cookie: seconds."},
    "same_site": {"type": "string", "enum": ["Strict", "Lax", "None"]},
    "secure": {"type": "boolean", "description": "set_cookie: the Secure attribute."},
    "navigate": {"type": "boolean", "description": "load_state: go to the saved URL first "
                 "(default true)."},
    "bypass_cache": {"type": "boolean", "description": "refresh: reload without the cache."},
    "active": {"type": "boolean", "description": "new_tab: focus it (default true)."},
    "track": {"type": "boolean", "description": "new_tab/switch_tab: track the tab."},
    "file_path": {"type": "string", "description": "upload: a file inside your working "
                  "directory or the daemon's state dir (relative: from your working directory)."},
    "files": {"type": "array", "items": {"type": "string"}, "maxItems": 20,
              "description": "upload: several files (10 MB in all)."},
    "fps": {"type": "number", "minimum": 0.1, "maximum": 2,
            "description": "record_start: frames per second at most (default 1)."},
    "max_seconds": {"type": "integer", "minimum": 1, "maximum": 600,
                    "description": "record_start: stop by itself after this long (default 120)."},
    "recording_id": {"type": "string", "description": "record_stop: read back a finished "
                     "recording (default: stop the running one, else your latest)."},
}

MODES: dict[str, Any] = nulls_absent({
    **{name: browser_action for name in BROWSER_ACTIONS},
    **{name: dom_action for name in DOM_ACTIONS},
    "highlight": highlight,
    "subtitle": subtitle,
    "execute_js": execute_js,
    "screenshot": screenshot,
    "fill_form": fill_form,
    "fill_form_and_submit": fill_form,
    "navigate_and_wait_for": navigate_and_wait_for,
    "get_readable": get_readable,
    "get_markdown": get_markdown,
    "save_state": save_state,
    "load_state": load_state,
    "list_states": list_states,
    "delete_state": delete_state,
    "set_storage": set_storage,
    "delete_storage": delete_storage,
    "clear_storage": clear_storage,
    "set_cookie": set_cookie,
    "delete_cookie": delete_cookie,
    "run_a11y_and_export_sarif": run_a11y_and_export_sarif,
    "upload": upload,
    "draw_mode_start": draw_mode_start,
    "record_start": record_start,
    "record_stop": record_stop,
})

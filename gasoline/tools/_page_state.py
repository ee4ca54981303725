"""
C{interact}'s page-state modes: Web Storage and cookies (through the extension's C{execute}), and
saved states (a page's URL, storage and form values kept per client in its key-value store, and
restored with C{load_state}).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
from twisted.internet.defer import Deferred

from gasoline.core.errors import GasolineError, InvalidParam, MissingParam
from gasoline.tools._actions import (
    BROWSER_ACTION_TIMEOUT,
    execute_params,
    record,
)
from gasoline.tools._commands import (
    require_pilot,
)
from gasoline.tools._shared import (
    as_dict,
    call,
    extension_mode,
    page_url,
    require_str,
)
from gasoline.tools.context import reserved_dict, store_reserved_dict


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


MAX_STATES = 20


MAX_STATE_BYTES = 256 * 1024


#: Where saved states live in the caller's key-value store.
STATES_KEY = "interact:states"

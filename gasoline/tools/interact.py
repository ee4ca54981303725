"""
C{interact} modes: drive the browser through the extension's commands.

Each mode becomes one (or, for the composite modes, a few) extension command(s) sent through the
query router as the caller; docs/tools.md lists the params each command type receives. Modes that
act on the page (C{browser_action}, C{execute} and the mutating C{dom_action}s, as the
extension itself gates them) are refused with C{pilot_disabled} when the extension reports
C{pilot_enabled: false}. Every AI action that changes the page is recorded into the shared
C{actions} buffer with C{source: "ai"} (and the caller's C{client_id}), after the extension
confirms it (at submission for C{background: true}).

C{upload} reads files from the caller's working directory or the state dir (L{media}) in the
reactor's thread pool; C{draw_mode_start} shows the annotation overlay (read back with analyze
C{annotations}); C{record_start} / C{record_stop} record the tab as screenshot frames plus the
buffers' timeline (docs/analyze-generate-interact.md, docs/extension.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gasoline.analysis import media
from gasoline.core.errors import InvalidParam, MissingParam
from gasoline.core.storage.files import thread_runner
from gasoline.core.storage.screenshots import MAX_INLINE_IMAGE_CHARS, image_content
from gasoline.tools import _interactive_list as interactive_list
from gasoline.tools._a11y import sarif_mode
from gasoline.tools._actions import (
    BROWSER_ACTION_TIMEOUT,
    _looks_secret,
    _recorded_value,
    execute_params,
    record,
)
from gasoline.tools._commands import (
    newer_command,
    require_pilot,
)
from gasoline.tools._forms import fill_form
from gasoline.tools._input import modes as input_modes
from gasoline.tools._launch_browser import launch_browser
from gasoline.tools._page_state import (
    clear_storage,
    delete_cookie,
    delete_state,
    delete_storage,
    list_states,
    load_state,
    save_state,
    set_cookie,
    set_storage,
)
from gasoline.tools._page_text import get_markdown, get_readable
from gasoline.tools._screen_recording import (
    record_start,
    record_stop,
)
from gasoline.tools._shared import (
    action_data,
    as_dict,
    call,
    extension_mode,
    lst,
    nulls_absent,
    page_url,
    require_str,
    timeout_of,
)
from gasoline.tools._snapshot import ref_selector
from gasoline.tools.schemas import MODE_PROPERTIES

log = Logger()

#: The longest in-page wait (the extension caps C{wait_for} at 15 s).
MAX_WAIT_MS = 15_000
#: Element ids remembered per client from its last list_interactive (bounded).
MAX_ELEMENT_CLIENTS = 100

BROWSER_ACTIONS = ("navigate", "refresh", "back", "forward", "new_tab", "switch_tab", "close_tab")
DOM_ACTIONS = ("click", "type", "select", "check", "focus", "scroll_to", "wait_for", "key_press",
               "paste", "get_text", "get_value", "get_attribute", "set_attribute",
               "list_interactive")
#: dom_actions the extension runs even with the pilot off (they only read the page).
READ_ONLY_DOM_ACTIONS = frozenset({"get_text", "get_value", "get_attribute", "list_interactive",
                                   "wait_for"})
#: Recorded action C{type} per mode (the shapes the reproduction generators replay).
ACTION_TYPES = {"type": "input", "key_press": "keypress", "scroll_to": "scroll"}


# -- selectors -----------------------------------------------------------------------------------


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
    """C{selector}; or a snapshot C{ref} (as the C{ref=e12@<document>} selector the extension
    resolves, L{gasoline.tools._snapshot.ref_selector}); or the selector behind an C{element_id}
    from the caller's last list_interactive."""
    selector = ctx.str_arg(args, "selector")
    if selector is not None and selector.strip():
        return selector
    ref = ctx.str_arg(args, "ref")
    if ref is not None and ref.strip():
        return ref_selector(ctx, args, ref)
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
                           "placeholder=, label=, aria-label=), 'ref' (from observe "
                           "{what:\"snapshot\"}) or 'element_id'", param="selector")
    return None


# -- recording ------------------------------------------------------------------------------------


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

    def describe(result: Any) -> tuple[str, dict[str, Any] | None]:
        r = as_dict(result)
        record(ctx, kind, r, **fields)
        where = r.get("url") or params.get("url") or ""
        return f"{action} done" + (f": {where}" if where else ""), action_data(ctx, args, r)

    return extension_mode(ctx, args, "browser_action", params, describe,
                          on_submit=lambda cid: record(ctx, kind, None, status="submitted",
                                                       correlation_id=cid, **fields),
                          timeout=timeout_of(ctx, args) or BROWSER_ACTION_TIMEOUT)


# -- dom_action --------------------------------------------------------------------------------------


def dom_action_params(ctx: Any, args: dict[str, Any], action: str) -> dict[str, Any]:
    params: dict[str, Any] = {"action": action}
    if action == "list_interactive":
        return interactive_list.params(ctx, args)
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


#: What a DOM action's answer echoes of the call (the mode, the selector: the summary names it).
_ECHOED = ("action", "selector")


def _lean(result: dict[str, Any]) -> dict[str, Any]:
    """A DOM read's answer without what the agent sent (C{action}, C{selector}) and the element's
    description: the value read is the answer (C{json: true} keeps them; an action's answer is
    L{action_data}'s)."""
    if result.get("success") is not True:
        return result
    return {k: v for k, v in result.items() if k not in _ECHOED + ("element",)}


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

    def describe(result: Any) -> tuple[str, dict[str, Any] | None]:
        r = as_dict(result)
        if action == "list_interactive":
            r = interactive_list.shape(ctx, args, r, ctx.runtime.interactive_lists)
            _remember_elements(ctx, {"elements": [
                {"element_id": eid, "selector": sel} for eid, sel in
                interactive_list.selectors(ctx.runtime.interactive_lists, ctx.client_id).items()]})
            summary = f"{r['count']} interactive element(s)"
            if r.get("diff"):
                summary += (f": {len(r['elements'])} new, {r['unchanged']} unchanged, "
                            f"{len(r.get('gone', []))} gone")
            elif r.get("next_offset") is not None:
                summary += f" (these from {r.get('offset', 0)}; next_offset {r['next_offset']})"
            return summary, {"result": r}
        if not read_only:
            extra = {}
            if action == "scroll_to" and isinstance(r.get("scroll_y"), (int, float)):
                extra["scroll_y"] = r["scroll_y"]
            record(ctx, kind, r, **fields, **extra)
        summary = f"{action} {selector!r} done" if selector else f"{action} done"
        if not read_only:
            return summary, action_data(ctx, args, r)
        if not ctx.wants_json(args):
            r = _lean(r)
        if action == "get_text":
            return f"text of {selector!r}", {"result": r}
        if action in ("get_value", "get_attribute"):
            return f"{action} of {selector!r}", {"result": r}
        return summary, {"result": r}

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

    seen: list[Any] = []

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        path = r.get("path")
        seen.append(path)
        return (f"screenshot saved to {path}" if path else "screenshot taken",
                {"path": path, "filename": r.get("filename"), "url": r.get("url"), "result": r})

    out = extension_mode(ctx, args, "screenshot", params, describe)
    if isinstance(out, Deferred):  # answered now: the image itself, inline (MCP image content)
        out.addCallback(lambda answer: with_image(ctx, answer, seen[0] if seen else None))
    return out


def with_image(ctx: Any, answer: dict[str, Any], path: Any) -> dict[str, Any]:
    """Add the screenshot saved at C{path} as MCP C{image} content, size-bounded (the
    extension's scaled preview when the image is large: L{MAX_INLINE_IMAGE_CHARS}); the text
    block keeps the path. Without an image small enough, the summary says so."""
    kept = ctx.app.screenshots.preview(path)
    block = image_content(*kept) if kept is not None else None
    content = answer.get("content")
    if not isinstance(content, list) or not content:
        return answer
    if block is not None:
        content.append(block)
    else:
        summary, sep, rest = content[0]["text"].partition("\n")
        content[0]["text"] = (summary + " (no inline image: the screenshot is larger than "
                              f"{MAX_INLINE_IMAGE_CHARS} base64 characters and the extension "
                              "sent no preview; read the file)" + sep + rest)
    return answer


# -- composite modes ----------------------------------------------------------------------------------


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


# -- storage and cookies (through ``execute``) --------------------------------------------------------


# -- saved states (per client, in its key-value store) ------------------------------------------------


def run_a11y_and_export_sarif(ctx: Any, args: dict[str, Any]) -> Any:
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
    C{<input type=file>}: the daemon reads them in the reactor's thread pool and sends them
    base64-encoded in a C{dom_action} C{upload}."""
    require_pilot(ctx)
    selector = target(ctx, args)
    names = _upload_names(ctx, args)
    state_dir = ctx.app.config.state_dir
    roots = media.upload_roots(ctx.cwd, state_dir)
    param = "files" if args.get("files") is not None else "file_path"
    paths = [media.resolve_readable(n, roots, param, relative_from=ctx.cwd or None)
             for n in names]
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


#: Arguments these modes read beyond the tool schema's common ones (they live in
#: L{gasoline.tools.schemas}: tools/list is answered without importing this module).
PROPERTIES: dict[str, Any] = MODE_PROPERTIES["interact"]

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
    "launch_browser": launch_browser,
    "record_start": record_start,
    "record_stop": record_stop,
    **input_modes(target),  # hover, drag, key_press (modifiers, chords), dialog, emulate, resize
})

"""
C{interact} C{fill_form} and C{fill_form_and_submit}: each field becomes one C{dom_action}
(C{type}, C{select}, C{check} or C{click}, by C{selector} or snapshot C{ref}), recorded into the
C{actions} buffer as the single actions would be; a field that fails stops the fill and names the
fields already filled. C{fill_form_and_submit} then clicks the submit control. The other
C{interact} modes are in L{gasoline.tools.interact}.
"""

from __future__ import annotations

from typing import Any

from gasoline.core.errors import GasolineError, InvalidParam, MissingParam
from gasoline.tools._actions import _looks_secret, _recorded_value, record
from gasoline.tools._commands import require_pilot
from gasoline.tools._shared import as_dict, call
from gasoline.tools._snapshot import ref_selector

MAX_FORM_FIELDS = 100


def _form_fields(ctx: Any, args: dict[str, Any]) -> list[dict[str, Any]]:
    fields = args.get("fields")
    if fields is None:
        raise MissingParam("interact fill_form needs 'fields': {selector: value} or "
                           "[{selector or ref, value, action?}]", param="fields")
    items: list[dict[str, Any]] = []
    if isinstance(fields, dict):
        items = [{"selector": k, "value": v} for k, v in fields.items()]
    elif isinstance(fields, list):
        for item in fields:
            if isinstance(item, dict) and not isinstance(item.get("selector"), str) \
                    and isinstance(item.get("ref"), str):
                item = {**item, "selector": ref_selector(ctx, args, item["ref"])}
            if not isinstance(item, dict) or not isinstance(item.get("selector"), str):
                raise InvalidParam("each field must be an object with a 'selector' or a 'ref'",
                                   param="fields")
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
                retryable=e.is_retryable, retry_after_ms=e.retry_after_ms,
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
                                retryable=e.is_retryable, retry_after_ms=e.retry_after_ms,
                                filled=[f["selector"] for f in fields],
                                submit_selector=submit_selector) from None
        record(ctx, "click", result, selector=submit_selector, command=ctx.mode)
        data["submit"] = as_dict(result)
        summary += " and submitted the form"
    return ctx.ok(summary, data)

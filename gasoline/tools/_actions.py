"""
What the AI does to the page, as the other agents and the generators see it: selectors in every
form the extension understands (L{selectors_for}), and L{record}, which appends one AI action
(C{source: "ai"}) to the shared actions buffer. Shared by C{interact}'s modes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gasoline.common import unquote
from gasoline.core.redaction.redactor import clip
from gasoline.core.redaction.fields import FIELD_NATURE, redact_typed_values
from gasoline.core.redaction.keys import marker
from gasoline.core.storage.store import ACTIONS
from gasoline.tools._shared import (
    as_dict,
    page_url,
)

#: Seconds the daemon waits for a browser_action (the extension waits up to 15 s for the load).
BROWSER_ACTION_TIMEOUT = 30.0


RECORDED_VALUE_LIMIT = 500


_ROLE = re.compile(r"^\s*([a-zA-Z-]+)\s*(?:\[\s*name\s*=\s*(.+?)\s*\]|\s+name\s*=\s*(.+))?\s*$")


def _unquote(s: str) -> str:
    return unquote(s, quotes="\"'")


def selectors_for(selector: str) -> dict[str, Any]:
    """The recorded C{selectors} object for a CSS or semantic selector (best_locator's keys)."""
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


def record(ctx: Any, kind: str, result: Any = None, **fields: Any) -> dict[str, Any]:
    """Append one AI action (C{source: "ai"}) to the shared actions buffer."""
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
    # The field's nature, as the extension reports it for the element acted on (type, name, id,
    # autocomplete), like a user's action carries it; the element's recorded name and id when
    # an older extension does not say. Then the one rule decides whether the value is kept.
    if element is not None:
        for key in FIELD_NATURE:
            value = element.get(key)
            if isinstance(value, str):
                entry[key] = value[:200]
        sel = entry.get("selectors")
        if isinstance(sel, dict):
            for key, src in (("input_name", "name"), ("input_id", "id")):
                if key not in entry and isinstance(sel.get(src), str):
                    entry[key] = sel[src][:200]
    redact_typed_values([entry])
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
    """The typed value as recorded before the field's nature is known (the selector or name says
    it is secret: redacted at once); L{record} then applies the one rule with the field's nature."""
    if value is None:
        return None
    if _looks_secret(selector, args):
        return marker("input")
    return value if isinstance(value, (str, int, float, bool)) else clip(json.dumps(value), 200)


def execute_params(ctx: Any, args: dict[str, Any], script: str) -> dict[str, Any]:
    params: dict[str, Any] = {"script": script,
                              "world": ctx.str_arg(args, "world", "main", ("main", "isolated"))}
    ms = ctx.int_arg(args, "timeout_ms", None, 100, 25_000)
    if ms is not None:
        params["timeout_ms"] = ms
    return params

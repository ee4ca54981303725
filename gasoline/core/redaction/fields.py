"""
Which input fields hold secrets, and the typed values that are never stored.

One rule for "this input holds a secret", the same as the extension's (C{lib/redact.js}
C{isSensitiveField}; C{tests/test_redact_fields.py} runs both on one table):
L{is_sensitive_field} (its type is password, its autocomplete names a password, a one-time code or
card data, or its name or id says so), widened by L{describes_secret_field} for records that
describe their field another way (a selector, a label, a placeholder).

L{redact_typed_values} applies it where actions are stored (the user's, at ingest, and the
agent's own), so such a value never reaches a reader, a journal or a generator;
L{gasoline.core.redaction.redactor.Redactor} applies the same tables (L{FIELD_DESCRIBERS},
L{TYPED_VALUES}) to any value it walks.
"""

from __future__ import annotations

import re
from typing import Any

from gasoline.core.redaction.keys import is_marker, marker

#: An input's type, name, id, autocomplete, label or selector saying its value is secret.
_SECRET_FIELD = re.compile(
    r"(?i)pass(?:word|wd|code|phrase)?|pwd|secret|token|otp|one[-_ ]?time|totp|mfa|2fa"
    r"|(?<![a-z])pin(?![a-z])|pin[-_]?code|cvv|cvc|csc|card[-_]?number|cc[-_]?num|ssn|api[-_]?key"
)
#: Fields of an action or input record that describe the field (not its value).
FIELD_DESCRIBERS = ("input_type", "inputType", "input_name", "input_id", "type", "name", "id",
                    "autocomplete", "label",
                    "placeholder", "selector", "field", "fieldName", "field_name", "aria_label",
                    "ariaLabel", "element", "target")
#: Keys under which a value is the text typed into a field.
TYPED_VALUES = ("value", "text", "typed", "input_value", "inputValue", "new_value", "newValue")


def describes_secret_field(value: object) -> bool:
    """Does C{value} (an input's type, name, selector...) say the field holds a secret?"""
    return isinstance(value, str) and len(value) <= 1000 and _SECRET_FIELD.search(value) is not None


# The extension's isSensitiveField (lib/redact.js), pattern for pattern: its autocomplete names a
# password, a one-time code or card data (cc-*), or its name / id says so.
_SECRET_AUTOCOMPLETE = re.compile(
    r"(?:^|\s)(?:current-password|new-password|one-time-code|cc-[a-z-]+|transaction-amount)"
    r"(?:\s|$)", re.I)
_SECRET_FIELD_NAME = re.compile(
    r"pass(?:word|wd|code|phrase)?|pwd|secret|token|otp|one.?time|pin\b|cvv|cvc|csc"
    r"|card.?(?:number|num|no)|cc.?(?:num|number|exp|csc)|ssn|security.?code", re.I)
#: What an action record says about its field: C{input_type}, C{input_name}, C{input_id},
#: C{autocomplete} (user actions from the extension and the agent's own, alike).
FIELD_NATURE = ("input_type", "input_name", "input_id", "autocomplete")


def is_sensitive_field(type: Any = "", name: Any = "", id: Any = "",
                       autocomplete: Any = "") -> bool:
    """The extension's C{isSensitiveField}, in Python: does this input hold a secret?"""
    if str(type or "").lower() == "password":
        return True
    if _SECRET_AUTOCOMPLETE.search(str(autocomplete or "")[:1000]):
        return True
    return bool(_SECRET_FIELD_NAME.search(str(name or "")[:1000])
                or _SECRET_FIELD_NAME.search(str(id or "")[:1000]))


def action_is_secret(item: dict[str, Any]) -> bool:
    """Whether an action record's typed value must not be kept: its field's nature says so
    (L{is_sensitive_field} over C{input_type}, C{input_name}, C{input_id}, C{autocomplete}), or,
    for records without it, any describing field (type, name, selector, label...) does."""
    if any(describes_secret_field(item.get(k)) for k in FIELD_DESCRIBERS):
        return True
    return ("input_type" in item or "autocomplete" in item or "input_name" in item
            or "input_id" in item) and \
        is_sensitive_field(item.get("input_type"), item.get("input_name"), item.get("input_id"),
                           item.get("autocomplete"))


def redact_typed_values(items: list[Any]) -> None:
    """Replace, in place, the typed value of every action whose field holds a secret
    (L{action_is_secret}: a password, OTP, PIN, card or token input) with C{[REDACTED:input]},
    and a key typed into it: such values are never stored, so no reader, journal or generator
    can leak them. The same rule decides for the user's actions (at ingest) and the agent's own
    (L{gasoline.tools._actions.record}). Cheap: only dicts with a typed value are looked at."""
    for item in items:
        if not isinstance(item, dict) or not (any(k in item for k in TYPED_VALUES)
                                              or "key" in item):
            continue
        if not action_is_secret(item):
            continue
        for k in TYPED_VALUES:
            v = item.get(k)
            if isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != "" \
                    and not (isinstance(v, str) and is_marker(v)):
                item[k] = marker("input")
        key = item.get("key")
        if item.get("type") == "keypress" and isinstance(key, str) and len(key) == 1:
            item["key"] = marker("input")

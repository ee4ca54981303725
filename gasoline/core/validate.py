"""
Validation of extension ingest payloads (extension-protocol.md §4).

Payloads are free-form JSON objects and unknown fields are kept. The only hard rules:

 - a batch is a JSON object whose array field (C{entries}, C{bodies}, C{events}, ...) is a list;
   anything else is a L{PayloadError} (HTTP 400);
 - a console entry must be an object with C{level} in {error, warn, info, debug, log} and
   encode to at most 1 MB; other items must be objects. Invalid items are counted as rejected,
   never a 400.

The console path is the hot path (tens of thousands of entries per second): one pass, one type
check and one set lookup per entry; the 1 MB per-entry check only runs when the whole body is
larger than 1 MB (otherwise no entry can exceed it).
"""

from __future__ import annotations

from typing import Any

import orjson

#: A tuple, not a set: C{in} compares with C{==}, so an unhashable C{level} (a list, an object)
#: is simply not found instead of raising TypeError. Most frequent first.
LOG_LEVELS = ("log", "error", "warn", "info", "debug")
MAX_ENTRY_BYTES = 1024 * 1024


#: Items one ingest request may carry in its batch (the extension sends at most 100).
MAX_BATCH_ITEMS = 1000
#: JSON containers and separators (C{E{lb}}, C{[} and C{,}, counted on the raw body, strings
#: included) one request may carry: refused before parsing, so no request costs the reactor more
#: than a few tens of milliseconds of decoding (1.6 M tiny items would take seconds).
MAX_JSON_TOKENS = 100_000


class PayloadError(ValueError):
    """The request body is not the documented shape (maps to HTTP 400)."""


class PayloadTooLarge(PayloadError):
    """Too many items or JSON values in one request (maps to HTTP 413 with the limit)."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


def json_tokens(body: bytes) -> int:
    """An upper bound on the JSON values in C{body}, without parsing it (C speed)."""
    return body.count(b",") + body.count(b"{") + body.count(b"[")


def parse_object(body: bytes) -> dict[str, Any]:
    """Decode a JSON object body. @raise PayloadError: bad JSON or not an object."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise PayloadError(f"invalid JSON: {e}") from None
    if not isinstance(value, dict):
        raise PayloadError(f"expected a JSON object, got {_kind(value)}")
    return value


def batch(payload: dict[str, Any], field: str, required: bool = True) -> list[Any]:
    """The list in C{payload[field]}. @raise PayloadError: missing (if required) or not a list."""
    items = payload.get(field)
    if items is None:
        if required:
            raise PayloadError(f"missing array field {field!r}")
        return []
    if not isinstance(items, list):
        raise PayloadError(f"field {field!r} must be an array, got {_kind(items)}")
    if len(items) > MAX_BATCH_ITEMS:
        raise PayloadTooLarge(
            f"field {field!r} has {len(items)} items; at most {MAX_BATCH_ITEMS} per request",
            MAX_BATCH_ITEMS)
    return items


def log_entries(items: list[Any], body_size: int) -> tuple[list[dict[str, Any]], int]:
    """Split console entries into (valid, rejected count)."""
    levels = LOG_LEVELS
    valid = [e for e in items if type(e) is dict and e.get("level") in levels]
    if body_size > MAX_ENTRY_BYTES:
        valid = [e for e in valid if _size(e) <= MAX_ENTRY_BYTES]
    return valid, len(items) - len(valid)


def encodable(items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Keep the items orjson can encode (parsed JSON nested deeper than orjson's encoder allows
    cannot be stored). Only called after a batch failed to encode, so it costs nothing normally."""
    valid = []
    for e in items:
        try:
            orjson.dumps(e)
        except TypeError:
            continue
        valid.append(e)
    return valid, len(items) - len(valid)


def objects(items: list[Any], max_bytes: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Keep the items that are JSON objects (at most C{max_bytes} encoded, if given)."""
    valid = [e for e in items if type(e) is dict]
    if max_bytes:
        valid = [e for e in valid if _size(e) <= max_bytes]
    return valid, len(items) - len(valid)


def _size(value: Any) -> int:
    """Encoded size, or a huge number if orjson cannot encode it (too deeply nested)."""
    try:
        return len(orjson.dumps(value))
    except TypeError:
        return 1 << 62


def json_type(value: Any) -> str:
    """The JSON type of a decoded value: C{null}, C{boolean}, C{number}, C{string}, C{array} or
    C{object}."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _kind(value: Any) -> str:
    """L{json_type} for a message: C{"an array"}, C{"a string"}, C{"null"}."""
    name = json_type(value)
    if name == "null":
        return name
    return ("an " if name[0] in "aeiou" else "a ") + name

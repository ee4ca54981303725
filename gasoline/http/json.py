"""JSON responses for twisted.web / Klein handlers (orjson, compact, UTF-8)."""

from __future__ import annotations

from typing import Any

import orjson


def json_body(request, value: Any, status: int = 200) -> bytes:
    """Set status and content type; return the encoded body for a handler to return."""
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    return orjson.dumps(value)


def json_error(request, status: int, message: str, **extra: Any) -> bytes:
    """``{"error": message, ...}`` with C{status}."""
    return json_body(request, {"error": message, **extra}, status)

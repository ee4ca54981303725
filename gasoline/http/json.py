"""JSON request bodies and responses for the HTTP handlers (orjson, compact, UTF-8), and the one
404 and 405 of the HTTP surface (the root answers them: L{gasoline.http.site.GasolineRoot})."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import orjson

from gasoline.core.errors import InvalidParam

if TYPE_CHECKING:
    from twisted.web.server import Request


def read_json_object(request: Request, limit: int) -> dict[str, Any]:
    """The request's body as a JSON object (C{{}} for an empty body), read up to C{limit} bytes.

    @raise InvalidParam: C{body_too_large} past C{limit}; C{bad_json} when the body is not JSON
        or not an object.
    """
    raw = request.content.read(limit + 1) if request.content is not None else b""
    if len(raw) > limit:
        raise InvalidParam(f"request body larger than {limit} bytes", code="body_too_large")
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InvalidParam(f"request body is not valid JSON: {e}", code="bad_json") from None
    if not isinstance(body, dict):
        raise InvalidParam("request body must be a JSON object", code="bad_json")
    return body


def json_body(request: Request, value: Any, status: int = 200) -> bytes:
    """Set status and content type; return the encoded body for a handler to return."""
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    return orjson.dumps(value)


def json_error(request: Request, status: int, message: str, **extra: Any) -> bytes:
    """C{{"error": message, ...}} with C{status}."""
    return json_body(request, {"error": message, **extra}, status)


def not_found(request: Request, path: bytes | None = None) -> bytes:
    """The 404 every route of the daemon's JSON API answers for a path it does not serve:
    C{{"error": "not found", "path": ...}}."""
    path = request.path if path is None else path
    return json_error(request, 404, "not found", path=path.decode("utf-8", "replace"))


def method_not_allowed(request: Request, allowed: Iterable[str]) -> bytes:
    """The 405 every route of the daemon's JSON API answers for a method it does not take: the
    C{allow} header and C{{"error": ..., "allowed": [...]}} list the methods it does take."""
    methods = list(allowed)
    if methods:
        request.setHeader(b"allow", ", ".join(methods).encode())
    return json_error(request, 405, f"method {request.method.decode('ascii', 'replace')} not "
                      "allowed here", allowed=methods)

"""
JSON-RPC 2.0 messages as MCP uses them: parsing, validation and the standard error codes.

MCP narrows JSON-RPC: ids are strings or integers (never C{null}), C{params} is an object.
L{classify} turns one decoded JSON value into a L{Request}, L{Notification} or L{Response}, or
raises L{JsonRpcError} with the code a reply must carry. Encoding is orjson (compact UTF-8).
"""

from __future__ import annotations

from typing import Any, Union

import attrs
import orjson

from gasoline.common import (  # noqa: F401  (the protocol's codes, re-exported)
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
)

#: Implementation-defined server errors (-32000..-32099).
SESSION_NOT_FOUND = -32001
RESOURCE_NOT_FOUND = -32002
REQUEST_CANCELLED = -32800

encode = orjson.dumps


class JsonRpcError(Exception):
    """A protocol fault; becomes a JSON-RPC error response."""

    def __init__(self, code: int, message: str, data: Any = None, *, id: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        #: The id of the offending request, when one could be read.
        self.id = id

    def response(self, id: Any = None) -> dict[str, Any]:
        return error(self.id if id is None else id, self.code, self.message, self.data)


@attrs.frozen
class Request:
    id: str | int
    method: str
    params: dict[str, Any]


@attrs.frozen
class Notification:
    method: str
    params: dict[str, Any]


@attrs.frozen
class Response:
    """A client's answer to a request the server sent (sampling, elicitation, ping)."""

    id: str | int
    result: Any = None
    error: Any = None


Message = Union[Request, Notification, Response]


def decode(body: bytes | str) -> Any:
    """Decode a JSON body or raise L{JsonRpcError} C{PARSE_ERROR}."""
    try:
        return orjson.loads(body)
    except (orjson.JSONDecodeError, TypeError, ValueError) as e:
        raise JsonRpcError(PARSE_ERROR, f"Parse error: {e}") from None


def _valid_id(value: Any) -> bool:
    return (isinstance(value, str) or isinstance(value, int)) and not isinstance(value, bool)


def classify(obj: Any) -> Message:
    """Validate one decoded message. @raise JsonRpcError: C{INVALID_REQUEST} (with the id if any)."""
    if not isinstance(obj, dict):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: a message must be a JSON object")
    raw_id = obj.get("id")
    good_id = raw_id if _valid_id(raw_id) else None
    if obj.get("jsonrpc") != "2.0":
        raise JsonRpcError(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', id=good_id)
    if "method" in obj:
        method = obj["method"]
        if not isinstance(method, str) or not method:
            raise JsonRpcError(
                INVALID_REQUEST, 'Invalid Request: "method" must be a non-empty string', id=good_id
            )
        params = obj.get("params", None)
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            raise JsonRpcError(
                INVALID_PARAMS if "id" in obj else INVALID_REQUEST,
                'Invalid params: "params" must be an object',
                id=good_id,
            )
        if "id" not in obj:
            return Notification(method, params)
        if good_id is None:
            raise JsonRpcError(
                INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer'
            )
        return Request(good_id, method, params)
    if "id" in obj and ("result" in obj or "error" in obj):
        if good_id is None:
            raise JsonRpcError(INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')
        if ("result" in obj) == ("error" in obj):
            raise JsonRpcError(
                INVALID_REQUEST, 'Invalid Request: exactly one of "result" and "error"', id=good_id
            )
        return Response(good_id, obj.get("result"), obj.get("error"))
    raise JsonRpcError(
        INVALID_REQUEST, 'Invalid Request: no "method", and not a response', id=good_id
    )


def result(id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": value}


def error(id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": err}


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def request(id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = notification(method, params)
    msg["id"] = id
    return msg


def is_request_obj(obj: Any) -> bool:
    """Cheap check on a decoded value: does it look like a request (has a method and an id)?"""
    return isinstance(obj, dict) and "method" in obj and "id" in obj


def track_pending(pending: dict[Any, Any], rid: Any, d: Any) -> None:
    """Keep the unfired Deferred C{d} as C{pending[rid]} (where a C{notifications/cancelled} for
    C{rid} finds it) until it fires; a later request that reused C{rid} keeps its own entry."""
    pending[rid] = d

    def forget(value: Any) -> Any:
        if pending.get(rid) is d:
            del pending[rid]
        return value

    d.addBoth(forget)


"""
The JSON-RPC messages the connector's L{gasoline.connect.bridge.Bridge} reads and queues: the
checks of a stdin message (L{_invalid_message}, L{_valid_id}, L{sniff_id} for a line too long to
parse), the errors it answers locally (L{error_message}, L{_describe_refusal} of an HTTP answer
that carried none), and the records of a queued line (L{Outgoing}) and of a request waiting for
its answer (L{Pending}).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs
import orjson
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall

from gasoline.common import INTERNAL_ERROR

if TYPE_CHECKING:
    from gasoline.connect.client import Reply

_ID_RE = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,256}")')


def _key(request_id: Any) -> bytes:
    return orjson.dumps(request_id)


def error_message(request_id: Any, code: int, message: str, **data: Any) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def sniff_id(head: bytes) -> Any:
    """Best effort: the top-level C{"id"} of a (truncated) JSON-RPC message, else C{None}."""
    params = head.find(b'"params"')
    scope = head if params < 0 else head[:params]
    m = _ID_RE.search(scope)
    if m is None:
        return None
    try:
        return orjson.loads(m.group(1))
    except orjson.JSONDecodeError:
        return None


@attrs.define(eq=False)
class Outgoing:
    """One stdin line on its way to the daemon."""

    seq: int
    body: bytes
    #: Request ids carried (one, several for a batch, none for notifications and responses).
    ids: list[Any]
    barrier: bool
    inflight: bool = False
    done: bool = False
    session_retries: int = 0
    d: Deferred | None = None

    def sending(self, d: Deferred) -> None:
        """It is on its way to the daemon: C{d} fires with the answer."""
        self.inflight, self.d = True, d

    def settled(self) -> None:
        """The daemon answered it, or sending it failed."""
        self.inflight, self.d = False, None

    def finish(self) -> None:
        """Nothing more is to be done with it (answered, or every request in it timed out)."""
        self.done = True

    def retry_for_session(self) -> None:
        """It is sent again once the daemon's MCP session is re-created."""
        self.session_retries += 1


@attrs.define(eq=False)
class Pending:
    id: Any
    item: Outgoing
    deadline: IDelayedCall | None = None
    expired: bool = False

    def deadline_passed(self) -> None:
        self.deadline = None

    def expire(self) -> None:
        """Its time is up while the daemon works on it: its answer, or a failure, decides."""
        self.expired = True


def _valid_id(value: Any) -> bool:
    """A JSON-RPC request id as MCP allows it: a string or an integer (not a boolean, not null)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _invalid_message(m: dict[str, Any]) -> str | None:
    """Why C{m} is not a JSON-RPC request, notification or response, or C{None} if it is one."""
    if "method" in m:
        if not isinstance(m["method"], str):
            return "method must be a string"
        if "id" in m and not _valid_id(m["id"]):
            return "id must be a string or an integer"
        return None
    if "result" in m or "error" in m:
        return None
    return "not a request, notification or response (no method, result or error)"


def _describe_refusal(reply: Reply) -> tuple[int, str, dict[str, Any]]:
    """JSON-RPC error fields for an HTTP answer that carried no answer to the request."""
    data: dict[str, Any] = {"error": "http_error", "status": reply.status}
    try:
        body = orjson.loads(reply.text) if reply.text else None
    except orjson.JSONDecodeError:
        body = None
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("code"), int) and isinstance(err.get("message"), str):
        if "data" in err:
            data["daemon"] = err["data"]
        return err["code"], err["message"], data
    snippet = reply.text[:300].decode("utf-8", "replace")
    return INTERNAL_ERROR, f"Gasoline daemon answered HTTP {reply.status}: {snippet}", data

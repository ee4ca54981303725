"""
C{GET /logs}: the console log read through the caller's own cursor, over plain HTTP, for scripts,
CI jobs and dashboards that do not speak MCP (docs/mcp.md, "Cursor reads over HTTP").

The read is C{observe {what:"logs"}} run for the caller, through the very path an MCP call takes
(L{gasoline.mcp.server.McpServer.open_stateless}, then C{tools/call}): the same client id proof
(L{gasoline.http.client_proof}; the route table applies C{--api-key}), the same cursor (the one
C{observe logs} moves, so an agent and its script share it), noise rules, tab filters, per-client
rate limit, secret redaction, result cap, audit record, C{untrusted_content} note and
C{_meta.data_counts}. The answer is the tool's JSON object, with its summary line under
C{summary} and the counts under C{data_counts}.

Query parameters are the tool's (C{limit}, C{level}, C{min_level}, C{source}, C{url}, C{tab_id},
C{scope}, C{after_cursor}, C{since_cursor}, C{last_n}, C{before_cursor}), each at most once.
C{POST /logs} and C{DELETE /logs} are served by L{gasoline.http.ingest} (the root's table holds
both APIs' routes of C{/logs}).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from klein import Klein
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger

from gasoline.core.errors import ClientProofRefused, GasolineError, InvalidParam, TooManyClients
from gasoline.http.client_proof import claimed_client
from gasoline.http.json import json_body, json_error
from gasoline.mcp import jsonrpc

if TYPE_CHECKING:
    from twisted.web.server import Request

log = Logger()

#: Query parameters C{GET /logs} passes to C{observe logs}.
PARAMS = frozenset({"limit", "level", "min_level", "source", "url", "tab_id", "scope",
                    "after_cursor", "since_cursor", "last_n", "before_cursor"})
#: Tool error codes and the HTTP status they answer with (anything else: 400).
_STATUS = {"rate_limited": 429, "too_many_clients": 429, "internal_error": 500}


class CursorReads:
    """C{GET /logs} (the root writes the answer, and cancels the read if the client goes away
    first)."""

    app = Klein()

    def __init__(self, mcp: Any) -> None:
        self.mcp = mcp

    @app.route("/logs", methods=["HEAD"])
    def head(self, request: Request) -> bytes:
        # A read moves the cursor: a HEAD must not, and has no body to carry the entries.
        request.setHeader(b"allow", b"GET, POST, DELETE")
        return json_error(request, 405, "HEAD /logs would move your cursor: use GET",
                          allowed=["GET", "POST", "DELETE"])

    @app.route("/logs", methods=["GET"])
    def read(self, request: Request) -> Any:
        try:
            client_id = claimed_client(request, self.mcp.registry.client_key)
            if client_id is None:
                return json_error(
                    request, 400, "GET /logs reads through your own cursor: name your client id "
                    "(X-Gasoline-Client with its X-Gasoline-Client-Proof)", error_code="no_client")
            arguments = _arguments(request)
            session = self.mcp.open_stateless(client_id)
        except GasolineError as e:
            status = 403 if isinstance(e, ClientProofRefused) else \
                429 if isinstance(e, TooManyClients) else 400
            return json_body(request, e.to_json(), status)
        d: Deferred = self.mcp.handle(session, jsonrpc.request(1, "tools/call", {
            "name": "observe", "arguments": arguments}))

        def closed(result: Any) -> Any:
            self.mcp.close_session(session)
            return result

        def failed(failure: Any) -> Any:
            if failure.check(CancelledError):
                return failure  # the client went away: nobody to answer
            log.failure("GET /logs failed", failure)
            return json_error(request, 500, "internal error (see the daemon log)")

        d.addBoth(closed)
        d.addCallbacks(lambda response: _body(request, response), failed)
        return d


def _arguments(request: Request) -> dict[str, Any]:
    """C{observe logs} arguments from the query (strings: the tool reads integers from them)."""
    args: dict[str, Any] = {"what": "logs"}
    for raw, values in (request.args or {}).items():
        name = raw.decode("utf-8", "replace")
        if name not in PARAMS:
            raise InvalidParam(f"unknown query parameter {name!r} (accepted: "
                               f"{', '.join(sorted(PARAMS))})", param=name)
        if len(values) != 1:
            raise InvalidParam(f"query parameter {name!r} given {len(values)} times", param=name)
        args[name] = values[0].decode("utf-8", "replace")
    return args


def _body(request: Request, response: Any) -> bytes:
    """The tool's answer as C{GET /logs} gives it: its JSON object, C{summary}, C{data_counts}."""
    result = response.get("result") if isinstance(response, dict) else None
    if not isinstance(result, dict):
        error = response.get("error", {}) if isinstance(response, dict) else {}
        return json_error(request, 400, str(error.get("message", "bad request")))
    text = ""
    content = result.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text") or ""
    summary, _, rest = text.partition("\n")
    try:
        data = orjson.loads(rest) if rest else {}
    except orjson.JSONDecodeError:
        data = {"text": rest}
    if not isinstance(data, dict):
        data = {"value": data}
    body = {"summary": summary, **data}
    meta = result.get("_meta")
    if isinstance(meta, dict) and "data_counts" in meta:
        body["data_counts"] = meta["data_counts"]
    if result.get("isError"):
        code = data.get("error") if isinstance(data.get("error"), str) else None
        return json_body(request, body, _STATUS.get(code or "", 400))
    return json_body(request, body)

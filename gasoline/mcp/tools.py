"""
MCP tools: a generic registry and the result convention (Gasoline's own tools: L{gasoline.tools}).

Result convention (C{docs/mcp.md}, tool-surface.md): a success is one text block, a summary line
then compact JSON with the metadata (C{cursor}, C{has_more}, C{total}, C{data_age_seconds},
...); a failure is a *result* with C{isError: true} whose JSON carries the
L{gasoline.core.errors.GasolineError} code, message and retry hint. Protocol faults (unknown tool,
C{arguments} not an object) are JSON-RPC errors, raised by the server before a tool runs.

Central result processing (L{ToolRegistry.call}), for every tool: the per-client rate limit
(L{gasoline.core.clients.ratelimit}), secret redaction of every text returned, the 100 kB cap with an
explicit truncation note, telemetry counters and a bounded per-client audit log. The rate limit
and the cap are Gasoline's own tools' (a proxied tool, C{Tool.proxied}, has its server's limits).
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

import attrs
import orjson
from twisted.internet.defer import CancelledError, Deferred, maybeDeferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline.core.errors import GasolineError
from gasoline.core.clients.ratelimit import SlidingWindowLimiter
from gasoline.core.redaction.redactor import Redactor, cap_text
from gasoline.core.redaction.once import RedactedText
from gasoline.mcp.jsonrpc import JsonRpcError
from gasoline.mcp.progress import start_for

if TYPE_CHECKING:
    from gasoline.mcp.context import RequestContext

log = Logger()

#: Results larger than this (bytes of JSON) are cut, with an explicit truncation note.
RESULT_CAP = 100_000


@attrs.frozen
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    #: C{handler(ctx, arguments) -> result dict | Deferred}
    handler: Callable[[Any, dict[str, Any]], Any]
    title: str | None = None
    annotations: dict[str, Any] | None = None
    #: A session's proxied tool (another MCP server's, L{gasoline.proxy}): Gasoline's own tool
    #: budget (the per-client rate limit) and result cap do not apply; the server's own limits
    #: in the servers file do (C{docs/proxy.md}).
    proxied: bool = False

    def definition(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.title:
            d["title"] = self.title
        if self.annotations:
            d["annotations"] = self.annotations
        return d


def error_result(error: GasolineError) -> dict[str, Any]:
    """Failure as a result: C{isError: true} with the error's code, message and retry hint."""
    body = error.to_json()
    try:
        encoded = orjson.dumps(body, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:  # details orjson cannot encode (e.g. huge ints)
        encoded = orjson.dumps({k: body[k] for k in ("error", "message", "retryable", "retry",
                                                    "retry_after_ms") if k in body},
                               default=str).decode()
    text = f"Error ({error.code}): {error.message}\n" + encoded
    return {"content": [{"type": "text", "text": text}], "isError": True}


#: Audit records kept per client, and clients kept (least recently active forgotten first).
AUDIT_PER_CLIENT = 200
AUDIT_CLIENTS = 1000
#: Audit params longer than this (JSON bytes) are cut.
AUDIT_PARAMS_CAP = 2000


@attrs.frozen
class AuditRecord:
    ts: float
    tool: str
    mode: str | None
    params: Any
    duration_ms: float
    outcome: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        d = {"ts": self.ts, "tool": self.tool, "mode": self.mode, "params": self.params,
             "duration_ms": self.duration_ms, "outcome": self.outcome}
        if self.error:
            d["error"] = self.error
        return d


class ToolCallObserver(Protocol):
    """Told of every tool call and of the other audited events (L{ToolRegistry.observers}; the
    C{--log-dir} client logs are one). Runs on the reactor thread and must not block."""

    def tool_call(self, client_id: str, tool: str, mode: str | None, params: Any) -> None:
        """Before the call runs: what the agent asked (its audited arguments)."""

    def tool_result(self, client_id: str, tool: str, mode: str | None, outcome: str, ms: float,
                    result: Any) -> None:
        """Once answered: C{ok}, an error code or C{cancelled}, and how long it took."""

    def audit_event(self, client_id: str, record: dict[str, Any]) -> None:
        """Something done for C{client_id} that is not one of its tool calls
        (L{ToolRegistry.audit_event})."""


class ToolRegistry:
    """Name -> L{Tool}. C{call} turns tool failures into C{isError} results and applies the
    central processing (rate limit, redaction, cap, telemetry, audit) to every call."""

    def __init__(self, clock: Any = None, rate_limit: int = 0, rate_window: float = 60.0,
                 result_cap: int = RESULT_CAP,
                 observers: Iterable[ToolCallObserver] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._definitions: list[dict[str, Any]] | None = None
        self.clock = clock
        #: Per-client tool-call limiter (disabled when C{rate_limit <= 0} or no clock).
        self.limiter = SlidingWindowLimiter(clock, rate_limit, rate_window) if clock is not None \
            else None
        self.result_cap = result_cap
        self.redactor = Redactor()
        #: Calls per tool and per C{tool.mode}; errors per code.
        self.calls: dict[str, int] = {}
        self.mode_calls: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        #: Errors per C{(tool, code)} (C{/metrics}).
        self.tool_errors: dict[tuple[str, str], int] = {}
        #: Observers of every call: C{tool_call(client_id, tool, mode, params)} before it runs,
        #: C{tool_result(client_id, tool, mode, outcome, ms, result)} once answered (per-client
        #: logs, L{gasoline.logs}). They run on the reactor thread and must not block.
        self.observers: list[ToolCallObserver] = list(observers)
        #: Add fields to every result's C{_meta}: C{provider(session) -> dict | None}, called
        #: after redaction (their values are the daemon's own counters, never page text) on
        #: every call, proxied or not (C{_meta.data_counts}, L{gasoline.tools}). They run on the
        #: reactor thread and must be cheap: counters, no scans.
        self.meta_providers: list[Callable[[Any], dict[str, Any] | None]] = []
        self._audit: OrderedDict[str, deque[AuditRecord]] = OrderedDict()

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool
        self._definitions = None

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def definitions(self) -> list[dict[str, Any]]:
        if self._definitions is None:
            self._definitions = [t.definition() for t in self._tools.values()]
        return self._definitions

    # -- audit -------------------------------------------------------------------------------

    def add_meta_provider(self, provider: Callable[[Any], dict[str, Any] | None]) -> None:
        """Add C{provider}'s fields to every result's C{_meta} from now on (L{meta_providers})."""
        self.meta_providers.append(provider)

    def count_error(self, code: str) -> None:
        """One more call answered with the error C{code} (L{errors}), counted where it was
        refused before it reached L{call} (a busy daemon)."""
        self.errors[code] = self.errors.get(code, 0) + 1

    def audit_log(self, client_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The caller's own recent calls, oldest first."""
        records = list(self._audit.get(client_id, ()))
        if limit is not None:
            records = records[-limit:]
        return [r.to_json() for r in records]

    def audit_event(self, client_id: str, tool: str, mode: str, details: dict[str, Any],
                    outcome: str = "ok", error: str | None = None) -> None:
        """Record something done for C{client_id} that is not one of its tool calls (a proxy
        session started, ended, a proxied server restarted) in its audit log, and tell the
        observers (L{ToolCallObserver.audit_event}: the log dir's client logs)."""
        now = self.clock.seconds() if self.clock is not None else 0.0
        record = AuditRecord(now, tool, mode, self._audit_params(details), 0.0, outcome, error)
        self._record(client_id, record)
        for observer in self.observers:
            _notify(observer.audit_event, client_id, record.to_json())

    def _record(self, client_id: str, record: AuditRecord) -> None:
        log_ = self._audit.get(client_id)
        if log_ is None:
            log_ = self._audit[client_id] = deque(maxlen=AUDIT_PER_CLIENT)
            while len(self._audit) > AUDIT_CLIENTS:
                self._audit.popitem(last=False)
        else:
            self._audit.move_to_end(client_id)
        log_.append(record)

    def _audit_params(self, arguments: dict[str, Any]) -> Any:
        redactor = self.redactor
        try:
            # Fast path: nothing to redact (L{Redactor.unchanged}); the record still gets its
            # own copy, decoded from the bytes the size check needs anyway.
            clean = redactor.unchanged(arguments)
            params = arguments if clean else redactor.redact_value(arguments)
            encoded = orjson.dumps(params, default=str)
        except (TypeError, orjson.JSONEncodeError):
            return {"_unserialisable": True}
        if len(encoded) > AUDIT_PARAMS_CAP:
            return {"_truncated": redactor.redact_text(
                encoded[:AUDIT_PARAMS_CAP].decode("utf-8", "ignore"))}
        return orjson.loads(encoded) if clean else params

    # -- results -----------------------------------------------------------------------------

    def finish(self, result: Any, capped: bool = True) -> Any:
        """Redact every field an agent reads in C{result} and cap its texts (an explicit note
        when cut; not when C{capped} is false: a proxied tool's result, whose limit is its
        server's): text blocks (on their decoded JSON), every other content block (an embedded
        resource's C{text} and C{uri}, a C{resource_link}'s C{uri}, name and description,
        image/audio metadata, annotations, C{_meta}: everything but the binary C{data} and
        C{blob}), the C{structuredContent} and the result's own C{_meta}."""
        if not isinstance(result, dict):
            return result
        content = result.get("content")
        if not isinstance(content, list):
            content = []
        if _composed(result, content):
            # Built by compose_text from redacted pieces only (entries redacted once, when first
            # read; the rest as this method would): only the cap is left to apply.
            if capped:
                for block in content:
                    if len(block["text"]) > self.result_cap // 4:
                        block["text"] = cap_text(block["text"], self.result_cap)
            return result
        if self._unchanged(result, content):
            if not capped:
                return result
            cap = self.result_cap
            for block in content:
                if isinstance(block, dict) and block.get("type") == "text":
                    text = block.get("text")
                    if isinstance(text, str) and len(text) > cap // 4:
                        block["text"] = cap_text(text, cap)
            return result
        for i, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                rest = {k: v for k, v in block.items() if k != "text"}
                if len(rest) > 1:
                    block.update(self.redactor.redact_value(rest))
                block["text"] = self._finish_text(block["text"], capped)
            else:
                content[i] = _redact_block(self.redactor, block)
        for key in _RESULT_FIELDS:
            value = result.get(key)
            if value is not None:
                result[key] = self.redactor.redact_value(value)
        return result

    def _unchanged(self, result: dict[str, Any], content: list[Any]) -> bool:
        """Whether redaction would leave every block, the C{structuredContent} and the
        C{_meta} of C{result} as they are, proven by one L{Redactor.unchanged} (one walk, one
        scan) instead of redacting each piece; C{False} sends L{finish} the full way. The
        pieces are the ones L{finish} redacts, all as values: a text's summary line and the JSON
        after it decoded, or the whole text; other blocks without their binary data."""
        values: list[Any] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            text = block.get("text")
            if block.get("type") != "text" or not isinstance(text, str):
                values.append(_without_binary(block))
                continue
            if len(block) > 2:
                values.append({k: v for k, v in block.items() if k != "text"})
            summary, sep, rest = text.partition("\n")
            if sep and rest[:1] in ("{", "["):
                try:
                    values.append(orjson.loads(rest))
                except orjson.JSONDecodeError:
                    values.append(text)
                else:
                    values.append(summary)
            else:
                values.append(text)
        for key in _RESULT_FIELDS:
            value = result.get(key)
            if value is not None:
                values.append(value)
        return self.redactor.unchanged(values)

    def _finish_text(self, text: str, capped: bool = True) -> str:
        text = self._redact_decoded(text)
        if capped and len(text) > self.result_cap // 4:
            text = cap_text(text, self.result_cap)
        return text

    def _redact_decoded(self, text: str) -> str:
        """Redact a result text on its decoded values.

        A result is a summary line, then JSON: scanning the JSON text itself would miss a secret
        right after an escaped newline or tab (C{\\nAKIA...}) or inside JSON nested in a
        string. The JSON is parsed and walked (L{Redactor.redact_value}: every string decoded,
        nested JSON, query strings and form bodies decoded in turn), then encoded again.
        """
        summary, sep, rest = text.partition("\n")
        if sep and rest[:1] in ("{", "["):
            try:
                data = orjson.loads(rest)
            except orjson.JSONDecodeError:
                data = None
            if data is not None:
                redacted = self.redactor.redact_value(data)
                if redacted != data:
                    try:
                        rest = orjson.dumps(redacted, option=orjson.OPT_NON_STR_KEYS,
                                            default=str).decode()
                    except orjson.JSONEncodeError:
                        return self.redactor.redact_text(text)
                # The summary too on its decoded values (a URL's query in "navigated to ...").
                return self.redactor.redact_value(summary) + sep + rest
        return self.redactor.redact_value(text)

    # -- calling -----------------------------------------------------------------------------

    def call(self, ctx: RequestContext, tool: Tool, arguments: dict[str, Any]) -> Deferred:
        session = ctx.session
        client_id = session.client_id
        clock = ctx.clock
        started = clock.seconds()
        mode = arguments.get("what")
        if mode is None:
            mode = arguments.get("action", arguments.get("format"))
        mode = mode if isinstance(mode, str) and len(mode) <= 64 else None
        self.calls[tool.name] = self.calls.get(tool.name, 0) + 1
        if mode is not None:
            key = f"{tool.name}.{mode}"
            if len(self.mode_calls) < 4096 or key in self.mode_calls:
                self.mode_calls[key] = self.mode_calls.get(key, 0) + 1
        # Recorded before the call runs: what the agent asked, whatever the handler does with
        # its arguments, and work kept off the path from the extension's result to the answer.
        audit_params = self._audit_params(arguments)
        for observer in self.observers:
            _notify(observer.tool_call, client_id, tool.name, mode, audit_params)
        # Gasoline's own budget is for Gasoline's own tools (a proxied server has its own).
        limiter = self.limiter if not tool.proxied else None
        try:
            if limiter is not None:
                # Per client and per transport connection: a caller that switches client ids
                # (new sessions, other X-Gasoline-Client values) on one connection shares one
                # budget.
                connection = session.transport_key
                if connection:
                    limiter.acquire(connection)
                limiter.acquire(client_id)
        except GasolineError as e:
            assert limiter is not None  # only the limiter raises here
            refused = limiter.refused.get(client_id, 0)
            if refused == 1 or refused % 100 == 0:
                log.info("client {cid} hit the tool rate limit ({limit} calls per {window:g} s; "
                         "{n} refused so far)", cid=client_id or "-", limit=limiter.limit,
                         window=limiter.window, n=refused)
            d = succeed(error_result(e))
        else:
            reporter = start_for(ctx, f"{tool.name} {mode}" if mode else tool.name)
            d = maybeDeferred(tool.handler, ctx, arguments)
            d.addErrback(_tool_failed, tool.name)
            if reporter is not None:
                d.addBoth(_stop_reporter, reporter)

        def done(result: Any) -> Any:
            result = self.finish(result, capped=not tool.proxied)
            if self.meta_providers and isinstance(result, dict):
                _add_meta(result, self.meta_providers, session)
            failed = isinstance(result, dict) and result.get("isError") is True
            code = None
            if failed:
                code = _error_code(result)
                self.errors[code or "error"] = self.errors.get(code or "error", 0) + 1
                key = (tool.name, code or "error")
                if len(self.tool_errors) < 4096 or key in self.tool_errors:
                    self.tool_errors[key] = self.tool_errors.get(key, 0) + 1
                if code != "rate_limited":
                    log.info("tool call {tool} {what} by {client} failed ({code})",
                             tool=tool.name, what=mode or "", client=client_id or "-",
                             code=code or "error")
            ms = round((clock.seconds() - started) * 1000, 3)
            self._record(client_id, AuditRecord(
                started, tool.name, mode, audit_params, ms,
                "error" if failed else "ok", code))
            for observer in self.observers:
                _notify(observer.tool_result, client_id, tool.name, mode,
                        code if failed else "ok", ms, result)
            if session is not None and session.log_level is not None:
                ctx.log(
                    "warning" if failed else "debug",
                    {
                        "message": f"tool {tool.name} {'failed' if failed else 'answered'}",
                        "tool": tool.name, "what": mode, "isError": failed, "ms": ms,
                    },
                    logger="gasoline.tools",
                )
            return result

        def cancelled(failure: Failure) -> Failure:
            if failure.check(CancelledError):
                ms = round((clock.seconds() - started) * 1000, 3)
                self._record(client_id, AuditRecord(
                    started, tool.name, mode, audit_params, ms, "cancelled"))
                for observer in self.observers:
                    _notify(observer.tool_result, client_id, tool.name, mode, "cancelled", ms,
                            None)
            return failure

        d.addCallbacks(done, cancelled)
        return d


#: Result fields beside C{content} that carry data an agent reads.
_RESULT_FIELDS = ("structuredContent", "_meta")
#: Binary fields of content blocks (base64): kept as they are.
_BINARY = ("data", "blob")


def _composed(result: dict[str, Any], content: list[Any]) -> bool:
    """Whether C{result} is only text blocks whose text is a L{RedactedText} (and nothing
    else an agent reads: no other block field, no C{structuredContent}, no C{_meta})."""
    if not content or any(result.get(key) is not None for key in _RESULT_FIELDS):
        return False
    for block in content:
        if type(block) is not dict or len(block) != 2 or block.get("type") != "text" \
                or type(block.get("text")) is not RedactedText:
            return False
    return True


def _without_binary(block: dict[str, Any]) -> dict[str, Any]:
    """A content block without its base64 payload (image/audio C{data}, a resource's C{blob})."""
    out = {k: v for k, v in block.items() if k not in _BINARY}
    resource = block.get("resource")
    if isinstance(resource, dict) and any(k in resource for k in _BINARY):
        out["resource"] = {k: v for k, v in resource.items() if k not in _BINARY}
    return out


def _redact_block(redactor: Redactor, block: dict[str, Any]) -> dict[str, Any]:
    """A non-text content block redacted in every field but its binary payload."""
    out = redactor.redact_value(_without_binary(block))
    for key in _BINARY:
        if key in block:
            out[key] = block[key]
    resource = block.get("resource")
    if isinstance(resource, dict) and isinstance(out.get("resource"), dict):
        for key in _BINARY:
            if key in resource:
                out["resource"][key] = resource[key]
    return out


def _add_meta(result: dict[str, Any], providers: list[Callable[[Any], dict[str, Any] | None]],
               session: Any) -> None:
    """Merge every provider's fields into C{result["_meta"]} (made a dict if it is not one: a
    proxied server's non-object C{_meta} is kept under C{_meta.server})."""
    meta = result.get("_meta")
    if not isinstance(meta, dict):
        meta = {} if meta is None else {"server": meta}
    for provider in providers:
        try:
            extra = provider(session)
        except Exception:
            log.failure("result meta provider {p!r} failed", p=provider)
            continue
        if extra:
            meta.update(extra)
    if meta:
        result["_meta"] = meta


def _stop_reporter(result: Any, reporter: Any) -> Any:
    reporter.stop()
    return result


def _notify(hook: Callable[..., None], *args: Any) -> None:
    try:
        hook(*args)
    except Exception:
        log.failure("tool call observer {hook!r} failed", hook=hook)


def _error_code(result: dict[str, Any]) -> str | None:
    try:
        text = result["content"][0]["text"]
    except (KeyError, IndexError, TypeError):
        return None
    m = re.match(r"Error \(([a-z_]+)\)", text) if isinstance(text, str) else None
    return m.group(1) if m else None


def _tool_failed(failure: Failure, name: str) -> Any:
    if failure.check(CancelledError, JsonRpcError):
        return failure
    if isinstance(failure.value, GasolineError):
        return error_result(failure.value)
    log.failure("tool {name} raised", failure, name=name)
    return error_result(
        GasolineError(f"tool {name} failed: {failure.getErrorMessage()}", code="internal_error",
                      retry="This is a Gasoline bug; the daemon log has the traceback.")
    )

"""
MCP tools: the registry, the result convention, and Gasoline's five tools.

Result convention (``docs/mcp.md``, tool-surface.md): a success is one text block, a summary line
then compact JSON with the metadata (``cursor``, ``has_more``, ``total``, ``extension_connected``,
...); a failure is a *result* with ``isError: true`` whose JSON carries the
L{gasoline.core.errors.GasolineError} code, message and retry hint. Protocol faults (unknown tool,
``arguments`` not an object) are JSON-RPC errors, raised by the server before a tool runs.

Dispatch: each tool looks its mode up in a per-tool table (``gasoline.mcp.modes.<tool>.MODES``);
a mode in the ``what`` enum but missing from its table fails with ``not_implemented``. Handlers get
a L{gasoline.mcp.modes.context.ToolContext}.

Central result processing (L{ToolRegistry.call}), for every tool: the per-client rate limit
(L{gasoline.core.ratelimit}), secret redaction of every text returned, the 100 kB cap with an
explicit truncation note, telemetry counters and a bounded per-client audit log.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from typing import Any, Callable

import attrs
import orjson
from twisted.internet.defer import CancelledError, Deferred, maybeDeferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline.core.errors import GasolineError, InvalidParam, MissingParam, NotImplementedMode
from gasoline.core.ratelimit import SlidingWindowLimiter
from gasoline.core.redact import Redactor, cap_text
from gasoline.mcp.jsonrpc import JsonRpcError
from gasoline.mcp.modes import extra_properties, load_tables
from gasoline.mcp.modes.context import ToolContext, encode_json, text_result  # noqa: F401 (re-exported)

log = Logger()

#: Results larger than this (bytes of JSON) are cut, with an explicit truncation note.
RESULT_CAP = 100_000
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000

#: Console levels, least severe first (the extension's ``level`` values).
CONSOLE_LEVELS = ("debug", "log", "info", "warn", "error")


@attrs.frozen
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    #: ``handler(ctx, arguments) -> result dict | Deferred``
    handler: Callable[[Any, dict[str, Any]], Any]
    title: str | None = None
    annotations: dict[str, Any] | None = None

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
    """Failure as a result: ``isError: true`` with the error's code, message and retry hint."""
    body = error.to_json()
    try:
        encoded = orjson.dumps(body, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:  # details orjson cannot encode (e.g. huge ints)
        encoded = orjson.dumps({k: body[k] for k in ("error", "message", "retry") if k in body},
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


class ToolRegistry:
    """Name -> L{Tool}. C{call} turns tool failures into ``isError`` results and applies the
    central processing (rate limit, redaction, cap, telemetry, audit) to every call."""

    def __init__(self, clock: Any = None, rate_limit: int = 0, rate_window: float = 60.0,
                 result_cap: int = RESULT_CAP) -> None:
        self._tools: dict[str, Tool] = {}
        self._definitions: list[dict[str, Any]] | None = None
        self.clock = clock
        #: Per-client tool-call limiter (disabled when C{rate_limit <= 0} or no clock).
        self.limiter = SlidingWindowLimiter(clock, rate_limit, rate_window) if clock is not None \
            else None
        self.result_cap = result_cap
        self.redactor = Redactor()
        #: Calls per tool and per ``tool.mode``; errors per code.
        self.calls: dict[str, int] = {}
        self.mode_calls: dict[str, int] = {}
        self.errors: dict[str, int] = {}
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

    def audit_log(self, client_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The caller's own recent calls, oldest first."""
        records = list(self._audit.get(client_id, ()))
        if limit is not None:
            records = records[-limit:]
        return [r.to_json() for r in records]

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
        try:
            params = self.redactor.redact_value(arguments)
            encoded = orjson.dumps(params, default=str)
        except (TypeError, orjson.JSONEncodeError):
            return {"_unserialisable": True}
        if len(encoded) > AUDIT_PARAMS_CAP:
            return {"_truncated": self.redactor.redact_text(
                encoded[:AUDIT_PARAMS_CAP].decode("utf-8", "ignore"))}
        return params

    # -- results -----------------------------------------------------------------------------

    def finish(self, result: Any) -> Any:
        """Redact every text block of C{result} and cap it (an explicit note when cut)."""
        if not isinstance(result, dict):
            return result
        content = result.get("content")
        if not isinstance(content, list):
            return result
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" \
                    and isinstance(block.get("text"), str):
                block["text"] = self._finish_text(block["text"])
        sc = result.get("structuredContent")
        if sc is not None:
            result["structuredContent"] = self.redactor.redact_value(sc)
        return result

    def _finish_text(self, text: str) -> str:
        text = self.redactor.redact_text(text)
        if len(text) > self.result_cap // 4:
            text = cap_text(text, self.result_cap)
        return text

    # -- calling -----------------------------------------------------------------------------

    def call(self, ctx: Any, tool: Tool, arguments: dict[str, Any]) -> Deferred:
        session = ctx.session
        client_id = getattr(session, "client_id", "") or ""
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
        limiter = self.limiter
        try:
            if limiter is not None:
                limiter.acquire(client_id)
        except GasolineError as e:
            d = succeed(error_result(e))
        else:
            d = maybeDeferred(tool.handler, ctx, arguments)
            d.addErrback(_tool_failed, tool.name)

        def done(result: Any) -> Any:
            result = self.finish(result)
            failed = isinstance(result, dict) and result.get("isError") is True
            code = None
            if failed:
                code = _error_code(result)
                self.errors[code or "error"] = self.errors.get(code or "error", 0) + 1
            ms = round((clock.seconds() - started) * 1000, 3)
            self._record(client_id, AuditRecord(
                started, tool.name, mode, audit_params, ms,
                "error" if failed else "ok", code))
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
                self._record(client_id, AuditRecord(
                    started, tool.name, mode, audit_params,
                    round((clock.seconds() - started) * 1000, 3), "cancelled"))
            return failure

        d.addCallbacks(done, cancelled)
        return d


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
    if failure.check(GasolineError):
        return error_result(failure.value)
    log.failure("tool {name} raised", failure, name=name)
    return error_result(
        GasolineError(f"tool {name} failed: {failure.getErrorMessage()}", code="internal_error",
                      retry="This is a Gasoline bug; the daemon log has the traceback.")
    )


# -- the five tools' schemas ---------------------------------------------------------------------

OBSERVE_MODES = (
    "errors", "logs", "extension_logs", "network_waterfall", "network_bodies", "websocket_events",
    "websocket_status", "actions", "vitals", "page", "tabs", "history", "pilot", "timeline",
    "error_bundles", "screenshot", "storage", "indexeddb", "command_result", "pending_commands",
    "failed_commands", "summarized_logs", "recordings", "recording_actions", "playback_results",
)
ANALYZE_MODES = (
    "dom", "accessibility", "performance", "error_clusters", "history", "security_audit",
    "third_party_audit", "link_health", "link_validation", "page_summary", "computed_styles",
    "forms", "form_validation", "api_validation", "visual_baseline", "visual_diff", "annotations",
    "annotation_detail", "changes",
)
GENERATE_MODES = (
    "reproduction", "test", "pr_summary", "har", "csp", "sri", "sarif", "visual_test",
    "test_from_context", "test_heal", "test_classify",
)
CONFIGURE_MODES = (
    "store", "load", "noise_rule", "clear", "health", "streaming", "test_boundary_start",
    "test_boundary_end", "telemetry", "describe_capabilities", "doctor", "audit_log",
    "recording_start", "recording_stop", "playback", "save_sequence", "replay_sequence",
    "diff_sessions", "restart", "checkpoint", "select_tab",
)
INTERACT_MODES = (
    "navigate", "refresh", "back", "forward", "new_tab", "switch_tab", "close_tab", "click",
    "type", "select", "check", "focus", "scroll_to", "wait_for", "key_press", "paste", "get_text",
    "get_value", "get_attribute", "set_attribute", "list_interactive", "highlight", "subtitle",
    "execute_js", "screenshot", "fill_form", "fill_form_and_submit", "navigate_and_wait_for",
    "get_readable", "get_markdown", "save_state", "load_state", "list_states", "delete_state",
    "set_storage", "delete_storage", "clear_storage", "set_cookie", "delete_cookie",
    "run_a11y_and_export_sarif", "record_start", "record_stop", "upload", "draw_mode_start",
)

_STR = {"type": "string"}
_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}
_CURSOR = {"type": ["integer", "string"], "description": "A cursor from a previous result's metadata."}
_TAB = {"type": "integer", "description": "Browser tab id (default: the tracked tab)."}
_ASYNC = {
    "background": {"type": "boolean", "description": "Return a correlation_id at once; fetch the "
                   "outcome with observe {what:\"command_result\"}."},
    "sync": {"type": "boolean", "description": "Alias: sync:false = background:true."},
    "wait": {"type": "boolean", "description": "Alias: wait:false = background:true."},
    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 120000},
}


def _what(modes: tuple[str, ...], description: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(modes), "description": description}


def _schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


OBSERVE_SCHEMA = _schema(
    {
        "what": _what(OBSERVE_MODES, "What to read. errors/logs read the console buffer through "
                      "your own cursor: each call returns what is new since your last one."),
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT,
                  "description": "Maximum entries to return."},
        "last_n": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                   "description": "The newest n matching entries (does not move your cursor)."},
        "min_level": {"type": "string", "enum": list(CONSOLE_LEVELS)},
        "level": {"type": "string", "enum": list(CONSOLE_LEVELS)},
        "source": {"type": "string", "description": "Substring of the entry's source; "
                   "actions: user|ai; timeline: console|network|websocket|actions."},
        "url": {"type": "string", "description": "Substring of the page or request URL."},
        "method": {"type": "string", "description": "HTTP method (network modes)."},
        "status_min": {"type": "integer", "minimum": 100, "maximum": 599},
        "status_max": {"type": "integer", "minimum": 100, "maximum": 599},
        "scope": {"type": "string", "enum": ["current_page", "all"]},
        "after_cursor": _CURSOR,
        "before_cursor": _CURSOR,
        "since_cursor": _CURSOR,
        "connection_id": {"type": "string", "description": "WebSocket connection id."},
        "direction": {"type": "string", "enum": ["incoming", "outgoing"]},
        "correlation_id": {"type": "string", "description": "For command_result."},
        "body_path": {"type": "string", "description": "Extract a path from JSON bodies."},
        "body_key": {"type": "string", "description": "Extract a key from JSON bodies."},
        "window_seconds": {"type": "number", "minimum": 0, "description": "error_bundles window."},
        "name": {"type": "string", "description": "recording_actions: the recording."},
        "playback_id": {"type": "string", "description": "playback_results: one playback "
                        "(default: list yours)."},
        "tab_id": _TAB,
    },
    ["what"],
)
ANALYZE_SCHEMA = _schema(
    {
        "what": _what(ANALYZE_MODES, "What to compute."),
        "selector": {"type": "string", "description": "CSS or semantic selector (text=, role=, ...)."},
        "url": _STR,
        "tab_id": _TAB,
        "checkpoint": {"type": "string", "description": "changes: the checkpoint to diff against "
                       "(yours; 'other-client:name' addresses another client's)."},
        "scope": {"type": "string", "enum": ["current_page", "all"]},
        "tags": {"type": "array", "items": _STR, "description": "accessibility: rule tags."},
        "properties": {"type": "array", "items": _STR, "description": "computed_styles."},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
        "correlation_id": _STR,
        **_ASYNC,
    },
    ["what"],
)
GENERATE_SCHEMA = _schema(
    {
        "what": _what(GENERATE_MODES, "Which artifact to produce."),
        "format": _what(GENERATE_MODES, "Alias of what."),
        "save_to": {"type": "string", "description": "Write the artifact to this file."},
        "test_name": _STR,
        "url": _STR,
        "last_n": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
        "include": {"type": "array", "items": _STR},
    }
)
CONFIGURE_SCHEMA = _schema(
    {
        "what": _what(CONFIGURE_MODES, "Which setting or per-client state to touch."),
        "action": _what(CONFIGURE_MODES, "Alias of what."),
        "key": _STR,
        "value": {"description": "store: any JSON value."},
        "namespace": _STR,
        "name": {"type": "string", "description": "checkpoint / sequence / recording name."},
        "noise_action": {"type": "string", "enum": ["add", "remove", "list", "reset", "auto_detect"]},
        "pattern": {"type": "string", "description": "noise_rule: a regular expression."},
        "rule_id": _STR,
        "scope": {"type": "string", "enum": ["client", "global", "all"],
                  "description": "noise_rule: client (default) | global; clear: client "
                  "(default: only your cursors) | all (empties the shared buffers)."},
        "buffer": {"type": "string", "enum": ["network", "websocket", "actions", "logs", "all"]},
        "streaming_action": {"type": "string", "enum": ["enable", "disable", "status"]},
        "events": {"type": "array", "items": _STR},
        "throttle_seconds": {"type": "number", "minimum": 0},
        "severity_min": {"type": "string", "enum": list(CONSOLE_LEVELS)},
        "url": _STR,
        "patterns": {"type": "array", "items": _STR, "description": "select_tab: URL patterns "
                     "(substrings, or globs with * and ?)."},
        "tab_action": {"type": "string", "enum": ["set", "add", "list", "clear"],
                       "description": "select_tab (default: set when patterns are given, else "
                       "list)."},
        "checkpoint_action": {"type": "string", "enum": ["create", "list", "delete"],
                              "description": "checkpoint (default create)."},
        "field": {"type": "string", "enum": ["message", "url", "source", "any"],
                  "description": "noise_rule add: the field the pattern is matched against."},
        "kind": {"type": "string", "enum": ["regex", "substring"],
                 "description": "noise_rule add: pattern kind (default regex)."},
        "level": {"type": "string", "enum": ["error", "warn", "info", "debug", "log"],
                  "description": "noise_rule add: only entries of this level."},
        "reason": {"type": "string", "description": "noise_rule add: why (shown in lists)."},
        "threshold": {"type": "integer", "minimum": 2,
                      "description": "noise_rule auto_detect: repeats needed (default 10)."},
        "apply": {"type": "boolean", "description": "noise_rule auto_detect: add the proposals."},
        "stop_on_error": {"type": "boolean", "description": "playback: stop at the first failed "
                          "step (default true)."},
        "from_start": {"type": "boolean", "description": "playback: first navigate to the URL the "
                       "recording started on (default true)."},
        "test_id": {"type": "string", "description": "test_boundary_start / _end."},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                  "description": "audit_log: how many records."},
    }
)
INTERACT_SCHEMA = _schema(
    {
        "what": _what(INTERACT_MODES, "Which browser action to perform."),
        "action": _what(INTERACT_MODES, "Alias of what."),
        "selector": {"type": "string", "description": "CSS or semantic (text=, role=, "
                     "placeholder=, label=, aria-label=)."},
        "element_id": {"type": "string", "description": "A stable id from list_interactive."},
        "text": _STR,
        "value": {"description": "Value to type, select or set."},
        "url": _STR,
        "tab_id": _TAB,
        "key": _STR,
        "script": {"type": "string", "description": "execute_js: the code to run."},
        "world": {"type": "string", "enum": ["main", "isolated"]},
        "fields": {"type": "object", "description": "fill_form: selector -> value."},
        "name": _STR,
        "attribute": _STR,
        "wait_for": _STR,
        **_ASYNC,
    }
)




#: tool -> (its modes, the alias accepted for ``what``)
TOOL_MODES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "observe": (OBSERVE_MODES, None),
    "analyze": (ANALYZE_MODES, None),
    "generate": (GENERATE_MODES, "format"),
    "configure": (CONFIGURE_MODES, "action"),
    "interact": (INTERACT_MODES, "action"),
}


def mode_of(tool: str, args: dict[str, Any]) -> str:
    """The mode a call asks for (``what``, else the tool's alias); raise on missing/unknown."""
    modes, alias = TOOL_MODES[tool]
    what = args.get("what")
    if what is None and alias is not None:
        what = args.get(alias)
    if what is None:
        hint = f" (or '{alias}')" if alias else ""
        raise MissingParam(f"{tool} needs 'what'{hint}, one of: {', '.join(modes)}", param="what",
                           retry=f"Call {tool} with what set to one of the listed modes.")
    if not isinstance(what, str) or what not in modes:
        raise InvalidParam(f"unknown {tool} mode {str(what)[:80]!r}", code="unknown_mode",
                           param="what", valid=list(modes), retry="Use one of the modes in 'valid'.")
    return what


class GasolineTools:
    """The five tools. Each dispatches C{what} to its mode table (L{gasoline.mcp.modes})."""

    def __init__(self, app: Any, tables: dict[str, dict[str, Callable[..., Any]]] | None = None
                 ) -> None:
        self.app = app
        self.tables = tables if tables is not None else load_tables()

    def built(self, tool: str) -> list[str]:
        """The modes of C{tool} that have a handler."""
        table = self.tables.get(tool, {})
        return [m for m in TOOL_MODES[tool][0] if m in table]

    def register(self, registry: ToolRegistry) -> None:
        ro = {"readOnlyHint": True, "openWorldHint": False}
        specs = (
            ("observe", "Read what the browser did: console errors and logs, network, WebSocket "
             "traffic, user actions, vitals, page and tab state. Reads go through your own "
             "cursor.", OBSERVE_SCHEMA, "Observe the browser", ro),
            ("analyze", "Compute answers about the page: DOM queries, accessibility audit, "
             "performance, error clusters, security and third-party audits, link health, "
             "changes since a checkpoint.", ANALYZE_SCHEMA, "Analyze the page", ro),
            ("generate", "Produce artifacts from what was captured: reproduction scripts, "
             "Playwright tests, HAR, CSP, SRI, SARIF, PR summaries.", GENERATE_SCHEMA,
             "Generate artifacts", None),
            ("configure", "Your own settings and state: key-value store, noise rules, "
             "checkpoints, tab selection, buffer clearing, audit log, health and diagnostics.",
             CONFIGURE_SCHEMA, "Configure Gasoline", None),
            ("interact", "Drive the browser: navigate, click, type, fill forms, run JavaScript, "
             "take screenshots, manage tabs, storage and cookies.", INTERACT_SCHEMA,
             "Interact with the browser", None),
        )
        for name, description, schema, title, hints in specs:
            # The mode modules' own argument definitions are the authoritative ones.
            properties = {**schema["properties"], **extra_properties(name)}
            registry.add(Tool(name, description, {**schema, "properties": properties},
                              self._dispatcher(name), title=title, annotations=hints))

    def _dispatcher(self, tool: str) -> Callable[[Any, dict[str, Any]], Any]:
        def dispatch(request: Any, args: dict[str, Any]) -> Any:
            what = mode_of(tool, args)
            handler = self.tables.get(tool, {}).get(what)
            if handler is None:
                raise NotImplementedMode(f"{tool} {{what:\"{what}\"}} is not implemented yet",
                                         tool=tool, mode=what)
            ctx = ToolContext.for_request(self.app, request)
            ctx.tool = tool
            ctx.mode = what
            return handler(ctx, args)

        dispatch.__name__ = tool
        return dispatch

"""
MCP tools: the registry, the result convention, and Gasoline's five tools.

Result convention (``docs/mcp.md``, tool-surface.md): a success is one text block, a summary line
then compact JSON with the metadata (``cursor``, ``has_more``, ``total``, ``extension_connected``,
...); a failure is a *result* with ``isError: true`` whose JSON carries the
L{gasoline.core.errors.GasolineError} code, message and retry hint. Protocol faults (unknown tool,
``arguments`` not an object) are JSON-RPC errors, raised by the server before a tool runs.

Every mode of every tool is in its ``what`` enum. Modes not built yet fail with ``not_implemented``;
nothing returns a made-up result.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
import orjson
from twisted.internet.defer import CancelledError, Deferred, maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline import __version__
from gasoline.core.errors import GasolineError, InvalidParam, MissingParam, NotImplementedMode
from gasoline.mcp.jsonrpc import JsonRpcError

log = Logger()

#: Results larger than this (bytes of JSON) are cut, with an explicit truncation note.
RESULT_CAP = 100_000
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
CONSOLE = "console"

#: Console levels, least severe first (the extension's ``level`` values).
CONSOLE_LEVELS = ("debug", "log", "info", "warn", "error")
_CONSOLE_RANK = {name: i for i, name in enumerate(CONSOLE_LEVELS)}


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


def text_result(summary: str, data: Any = None) -> dict[str, Any]:
    """Success: the summary line, then compact JSON."""
    text = summary if data is None else summary + "\n" + orjson.dumps(data).decode()
    return {"content": [{"type": "text", "text": text}], "isError": False}


def error_result(error: GasolineError) -> dict[str, Any]:
    """Failure as a result: ``isError: true`` with the error's code, message and retry hint."""
    body = error.to_json()
    text = f"Error ({error.code}): {error.message}\n" + orjson.dumps(body).decode()
    return {"content": [{"type": "text", "text": text}], "isError": True}


class ToolRegistry:
    """Name -> L{Tool}. C{call} turns tool failures into ``isError`` results."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._definitions: list[dict[str, Any]] | None = None

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

    def call(self, ctx: Any, tool: Tool, arguments: dict[str, Any]) -> Deferred:
        d = maybeDeferred(tool.handler, ctx, arguments)
        d.addErrback(_tool_failed, tool.name)
        if ctx.session.log_level is not None:
            started = ctx.clock.seconds()

            def report(result: Any) -> Any:
                failed = isinstance(result, dict) and result.get("isError") is True
                ctx.log(
                    "warning" if failed else "debug",
                    {
                        "message": f"tool {tool.name} {'failed' if failed else 'answered'}",
                        "tool": tool.name,
                        "what": arguments.get("what"),
                        "isError": failed,
                        "ms": round((ctx.clock.seconds() - started) * 1000, 3),
                    },
                    logger="gasoline.tools",
                )
                return result

            d.addCallback(report)
        return d


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
        "source": {"type": "string", "description": "Substring of the entry's source."},
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
                  "description": "noise_rule: client|global; clear: all empties shared buffers."},
        "buffer": {"type": "string", "enum": ["network", "websocket", "actions", "logs", "all"]},
        "streaming_action": {"type": "string", "enum": ["enable", "disable", "status"]},
        "events": {"type": "array", "items": _STR},
        "throttle_seconds": {"type": "number", "minimum": 0},
        "severity_min": {"type": "string", "enum": list(CONSOLE_LEVELS)},
        "url": _STR,
        "patterns": {"type": "array", "items": _STR, "description": "select_tab: URL patterns."},
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


class GasolineTools:
    """The five tools, answering from the daemon's components (C{app} is L{gasoline.app.Gasoline})."""

    def __init__(self, app: Any) -> None:
        from gasoline.core.redact import Redactor  # noqa: PLC0415

        self.app = app
        #: Every entry returned passes through secret redaction (tool-surface.md).
        self._redact = Redactor().redact_value

    def register(self, registry: ToolRegistry) -> None:
        ro = {"readOnlyHint": True, "openWorldHint": False}
        registry.add(Tool("observe", "Read what the browser did: console errors and logs, network, "
                          "WebSocket traffic, user actions, vitals, page and tab state. Reads go "
                          "through your own cursor.", OBSERVE_SCHEMA, self.observe,
                          title="Observe the browser", annotations=ro))
        registry.add(Tool("analyze", "Compute answers about the page: DOM queries, accessibility "
                          "audit, performance, error clusters, security and third-party audits, "
                          "link health, changes since a checkpoint.", ANALYZE_SCHEMA, self.analyze,
                          title="Analyze the page", annotations=ro))
        registry.add(Tool("generate", "Produce artifacts from what was captured: reproduction "
                          "scripts, Playwright tests, HAR, CSP, SRI, SARIF, PR summaries.",
                          GENERATE_SCHEMA, self.generate, title="Generate artifacts"))
        registry.add(Tool("configure", "Your own settings and state: key-value store, noise "
                          "rules, checkpoints, tab selection, buffer clearing, streaming, health.",
                          CONFIGURE_SCHEMA, self.configure, title="Configure Gasoline"))
        registry.add(Tool("interact", "Drive the browser: navigate, click, type, fill forms, run "
                          "JavaScript, take screenshots, manage tabs, storage and cookies.",
                          INTERACT_SCHEMA, self.interact, title="Interact with the browser"))

    # -- dispatch ------------------------------------------------------------------------------

    @staticmethod
    def _mode(tool: str, args: dict[str, Any], modes: tuple[str, ...], alias: str | None) -> str:
        what = args.get("what")
        if what is None and alias is not None:
            what = args.get(alias)
        if what is None:
            raise MissingParam(f"{tool} needs 'what' (one of: {', '.join(modes)})", param="what",
                               retry=f"Call {tool} with what set to one of the listed modes.")
        if not isinstance(what, str) or what not in modes:
            raise InvalidParam(f"unknown {tool} mode {what!r}", code="unknown_mode", param="what",
                               valid=list(modes), retry="Use one of the modes in 'valid'.")
        return what

    @staticmethod
    def _not_built(tool: str, what: str) -> GasolineError:
        return NotImplementedMode(f"{tool} {{what:\"{what}\"}} is not implemented yet",
                                  tool=tool, mode=what)

    def observe(self, ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
        what = self._mode("observe", args, OBSERVE_MODES, None)
        if what == "errors":
            return self._console(ctx, args, errors_only=True)
        if what == "logs":
            return self._console(ctx, args, errors_only=False)
        raise self._not_built("observe", what)

    def analyze(self, ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
        raise self._not_built("analyze", self._mode("analyze", args, ANALYZE_MODES, None))

    def generate(self, ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
        raise self._not_built("generate", self._mode("generate", args, GENERATE_MODES, "format"))

    def configure(self, ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
        what = self._mode("configure", args, CONFIGURE_MODES, "action")
        if what == "health":
            return self._health(ctx)
        raise self._not_built("configure", what)

    def interact(self, ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
        raise self._not_built("interact", self._mode("interact", args, INTERACT_MODES, "action"))

    # -- helpers -------------------------------------------------------------------------------

    def _extension_connected(self) -> bool:
        return bool(getattr(getattr(self.app, "extension", None), "connected", False))

    @staticmethod
    def _int(args: dict[str, Any], name: str, default: int | None, lo: int, hi: int) -> int | None:
        value = args.get(name, default)
        if value is None:
            return None
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidParam(f"{name} must be an integer", param=name)
        if not lo <= value <= hi:
            raise InvalidParam(f"{name} must be between {lo} and {hi}", param=name, value=value)
        return value

    # -- observe errors / logs -----------------------------------------------------------------

    def _console(self, ctx: Any, args: dict[str, Any], errors_only: bool) -> dict[str, Any]:
        limit = self._int(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        last_n = self._int(args, "last_n", None, 1, MAX_LIMIT)
        explicit = None
        for name in ("after_cursor", "since_cursor"):
            if args.get(name) is not None:
                explicit = self._int(args, name, None, 0, 2**62)
                break
        level = args.get("level")
        min_level = args.get("min_level")
        for name, value in (("level", level), ("min_level", min_level)):
            if value is not None and value not in _CONSOLE_RANK:
                raise InvalidParam(f"{name} must be one of {', '.join(CONSOLE_LEVELS)}",
                                   param=name)
        source = args.get("source")
        url = args.get("url")
        for name, value in (("source", source), ("url", url)):
            if value is not None and not isinstance(value, str):
                raise InvalidParam(f"{name} must be a string", param=name)
        min_rank = _CONSOLE_RANK[min_level] if min_level is not None else None
        tab_id = self._int(args, "tab_id", None, -(2**62), 2**62)

        def match(e: dict[str, Any]) -> bool:
            lvl = e.get("level")
            if errors_only and lvl != "error" and e.get("type") != "exception":
                return False
            if level is not None and lvl != level:
                return False
            if min_rank is not None and _CONSOLE_RANK.get(lvl, 0) < min_rank:
                return False
            if source is not None and source not in str(e.get("source", "")):
                return False
            if url is not None and url not in str(e.get("url", "")):
                return False
            if tab_id is not None and e.get("tabId", e.get("tab_id")) != tab_id:
                return False
            return True

        store = self.app.store
        ring = store.buffers[CONSOLE]
        state = ctx.state
        kind = "error" if errors_only else "log entry"
        entries: list[dict[str, Any]] = []
        size = 0
        truncated = False
        before = None
        if args.get("before_cursor") is not None:
            before = self._int(args, "before_cursor", None, 0, 2**62)
        oldest_seq = None
        if last_n is not None or before is not None:
            # Newest first, backwards from before_cursor (or the head); the cursor does not move.
            want = last_n if last_n is not None else limit
            raw = ring.read(0)
            stop = len(raw.items) if before is None else max(0, min(len(raw.items), before - raw.first_seq))
            has_more = False
            for i in range(stop - 1, -1, -1):
                b = raw.items[i]
                if errors_only and b"error" not in b and b"exception" not in b:
                    continue
                e = orjson.loads(b)
                if not match(e):
                    continue
                if len(entries) == want or size + len(b) > RESULT_CAP:
                    truncated = len(entries) < want
                    has_more = True
                    break
                entries.append(e)
                size += len(b)
                oldest_seq = raw.first_seq + i
            entries.reverse()
            cursor = state.cursors.get(CONSOLE, 0)
            next_cursor, missed = cursor, 0
        else:
            cursor = explicit if explicit is not None else state.cursors.get(CONSOLE, 0)
            raw = ring.read(cursor)
            next_cursor, has_more, missed = raw.next_cursor, False, raw.missed
            for i, b in enumerate(raw.items):
                if errors_only and b"error" not in b and b"exception" not in b:
                    continue
                e = orjson.loads(b)
                if not match(e):
                    continue
                if len(entries) == limit or size + len(b) > RESULT_CAP:
                    truncated = len(entries) < limit
                    next_cursor, has_more = raw.first_seq + i, True
                    break
                entries.append(e)
                size += len(b)
            state.cursors[CONSOLE] = next_cursor
        connected = self._extension_connected()
        last_write = store.last_write.get(CONSOLE)
        now = ctx.clock.seconds()
        meta: dict[str, Any] = {
            "count": len(entries),
            "cursor": next_cursor,
            "has_more": has_more,
            "total": len(ring),
            "missed": missed,
            "oldest_timestamp": entries[0].get("ts") if entries else None,
            "newest_timestamp": entries[-1].get("ts") if entries else None,
            "data_age_seconds": round(now - last_write, 3) if last_write is not None else None,
            "extension_connected": connected,
        }
        if before is not None or last_n is not None:
            # Pass this as before_cursor to page further back.
            meta["before_cursor"] = oldest_seq
        if truncated:
            meta["truncated"] = f"result capped at {RESULT_CAP} bytes; call again for the rest"
        plural = kind + ("s" if len(entries) != 1 and kind == "error" else "")
        if kind == "log entry" and len(entries) != 1:
            plural = "log entries"
        backwards = last_n is not None or before is not None
        summary = f"{len(entries)} {'' if backwards else 'new '}{plural}"
        if backwards:
            summary += " (the newest" + (f" before cursor {before}" if before is not None else "")
            summary += "; older ones waiting)" if has_more else ")"
        else:
            summary += f" (cursor {cursor} -> {next_cursor}"
            summary += ", more waiting)" if has_more else ")"
        if missed:
            summary += f"; {missed} older entries were evicted before you read them"
        if not connected:
            summary += "; extension not connected"
        meta["entries"] = [self._redact(e) for e in entries]
        return text_result(summary, meta)

    # -- configure health ----------------------------------------------------------------------

    def _health(self, ctx: Any) -> dict[str, Any]:
        app = self.app
        now = ctx.clock.seconds()
        ext = getattr(app, "extension", None)
        registry = getattr(app, "registry", None)
        server = getattr(app, "mcp", None)
        body = {
            "status": "ok",
            "version": __version__,
            "uptime_seconds": round(now - app.started_at, 3),
            "extension": {
                "connected": self._extension_connected(),
                "last_sync": getattr(ext, "last_sync", None),
            },
            "buffers": app.store.stats(),
            "clients": registry.summary() if registry is not None else None,
            "mcp_sessions": len(server.sessions) if server is not None else None,
            "you": {
                "client_id": ctx.session.client_id,
                "session_id": ctx.session.session_id,
                "transport": ctx.session.transport,
                "protocol_version": ctx.session.protocol_version,
                "cursors": dict(ctx.state.cursors),
            },
        }
        ext_word = "connected" if body["extension"]["connected"] else "not connected"
        return text_result(f"Gasoline {__version__} ok; extension {ext_word}", body)

"""
The five tools' schemas: every mode each tool accepts and the arguments they share.

The arguments only some modes read are here too (L{MODE_PROPERTIES}; each mode module's
C{PROPERTIES} is its entry): tools/list is answered from this module alone, and the modes'
implementations (L{gasoline.tools.observe} and siblings) load at their tool's first call.
"""

from __future__ import annotations

from typing import Any

from gasoline.core.errors import InvalidParam, MissingParam
from gasoline.streaming.hub import MAX_WAIT_MS

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000

#: Console levels, least severe first (the extension's C{level} values).
CONSOLE_LEVELS = ("debug", "log", "info", "warn", "error")

# -- the five tools' schemas ---------------------------------------------------------------------

OBSERVE_MODES = (
    "errors", "logs", "extension_logs", "network_waterfall", "network_bodies", "websocket_events",
    "websocket_status", "actions", "vitals", "page", "tabs", "history", "pilot", "timeline",
    "error_bundles", "screenshot", "storage", "indexeddb", "command_result", "pending_commands",
    "failed_commands", "summarized_logs", "recordings", "recording_actions", "playback_results",
    "events", "snapshot",
)
ANALYZE_MODES = (
    "dom", "accessibility", "performance", "error_clusters", "history", "security_audit",
    "third_party_audit", "link_health", "link_validation", "page_summary", "computed_styles",
    "forms", "form_validation", "api_validation", "visual_baseline", "visual_diff", "annotations",
    "annotation_detail", "changes", "snapshot",
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
    "launch_browser",
    "hover", "drag", "dialog", "emulate", "resize", "performance_trace",
)

_STR = {"type": "string"}
_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}
_CURSOR = {"type": "integer", "minimum": 0,
           "description": "A cursor from a previous result's metadata."}
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


def _schema(properties: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema: C{what} (the mode) is required. One name per thing: the aliases
    the dispatcher also accepts (C{action}, C{format}: L{TOOL_MODES}) are not advertised."""
    return {"type": "object", "properties": properties, "required": ["what"]}


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
        "scope": {"type": "string", "enum": ["current_page", "all"],
                  "description": "current_page: the tracked tab (network_bodies and vitals: its "
                  "current page, their default); all: everything since you connected."},
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
        "json": {"type": "boolean", "description": "dom: also the selector the call sent, in "
                 "the JSON (the summary line names it)."},
        **_ASYNC,
    },
)
GENERATE_SCHEMA = _schema(
    {
        "what": _what(GENERATE_MODES, "Which artifact to produce."),
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
        "key": _STR,
        "value": {"type": "string", "description": "store: the value to keep (clients that "
                  "may send any JSON value can; it is kept as sent)."},
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
        "wait": {"type": "boolean", "description": "playback: answer when the last step is done, "
                 "with every step's outcome (progress: step n of m), instead of at once."},
        "test_id": {"type": "string", "description": "test_boundary_start / _end."},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                  "description": "audit_log: how many records."},
    }
)
INTERACT_SCHEMA = _schema(
    {
        "what": _what(INTERACT_MODES, "Which browser action to perform."),
        "selector": {"type": "string", "description": "CSS or semantic (text=, role=, "
                     "placeholder=, label=, aria-label=)."},
        "element_id": {"type": "string", "description": "A stable id from list_interactive."},
        "ref": {"type": "string", "description": "An element's ref (e12) from observe "
                "{what:\"snapshot\"}, instead of selector (valid until the tab navigates)."},
        "text": _STR,
        "value": {"type": "string", "description": "Value to type, select or set."},
        "url": _STR,
        "tab_id": _TAB,
        "key": _STR,
        "script": {"type": "string", "description": "execute_js: the code to run."},
        "world": {"type": "string", "enum": ["main", "isolated"]},
        "fields": {"type": "object", "description": "fill_form: selector -> value."},
        "name": _STR,
        "attribute": _STR,
        "wait_for": _STR,
        "json": {"type": "boolean", "description": "Answer with the result's whole JSON: a "
                 "successful action (click, type, navigate, hover, ...) answers its summary line "
                 "alone unless its result says more."},
        **_ASYNC,
    }
)

# -- arguments only some modes read ----------------------------------------------------------------
#
# JSON Schema properties the modes read beyond their tool's schema above, merged into it for
# tools/list (each tool module's C{PROPERTIES} is its entry of L{MODE_PROPERTIES}). They live here,
# apart from the modes' implementations, so that tools/list needs none of them: a tool's module is
# imported at its first call (L{gasoline.tools.ModeTables}).

#: test_from_context: the most seconds of actions before the error it replays.
MAX_CONTEXT_WINDOW = 3600.0

#: C{configure {what:"streaming"}} (gasoline.tools._events).
STREAMING_PROPERTIES: dict[str, Any] = {
    "enabled": {"type": "boolean", "description": "streaming: subscribe (true, the default) or "
                "unsubscribe (false)."},
    "subscribe": {"type": "array", "items": {"type": "string", "enum": [
        "error", "network_failure", "network_slow", "websocket_close", "performance_degradation",
        "security_violation", "accessibility_violation", "websocket_message", "dom_change",
        "all"]}, "maxItems": 10,
        "description": "streaming: the event types to receive (all: every type but "
                       "websocket_message and dom_change, which are named)."},
    "watch": {"type": "array", "maxItems": 10, "description": "streaming dom_change: what to "
              "watch in the tracked tab: selector (CSS or text=, role=, label=, ...), condition "
              "(appears | disappears | text_matches, with text: a substring).",
              "items": {"type": "object", "properties": {
                  "selector": {"type": "string", "maxLength": 300},
                  "condition": {"type": "string",
                                "enum": ["appears", "disappears", "text_matches"]},
                  "text": {"type": "string", "maxLength": 200}},
                  "required": ["selector"]}},
    "filters": {"type": "object", "description": "streaming: severity (low|medium|high|critical, "
                "the minimum), url_pattern / exclude_pattern (RE2, at most 100 characters), "
                "rate_limit (1-100 events per second), slow_ms (network_slow budget), "
                "over_limit (drop | queue: events over the rate limit are dropped and counted, "
                "or queued, at most 100, and sent after the window).",
                "properties": {
                    "severity": {"type": "string", "enum": ["low", "medium", "high", "critical"]},
                    "url_pattern": {"type": "string", "maxLength": 100},
                    "exclude_pattern": {"type": "string", "maxLength": 100},
                    "rate_limit": {"type": "integer", "minimum": 1, "maximum": 100},
                    "slow_ms": {"type": "integer", "minimum": 1},
                    "over_limit": {"type": "string", "enum": ["drop", "queue"]}}},
}
#: C{observe {what:"snapshot"}} (gasoline.tools._snapshot), also analyze's.
SNAPSHOT_PROPERTIES: dict[str, Any] = {
    "diff": {"type": "boolean", "description": "snapshot: only what changed since your own last "
             "snapshot of the tab."},
    "max_nodes": {"type": "integer", "minimum": 1, "maximum": 20000,
                  "description": "snapshot: most lines in the answer (default 800)."},
    "max_bytes": {"type": "integer", "minimum": 200, "maximum": 90000,
                  "description": "snapshot: most bytes of tree text (default 24000)."},
    "offset": {"type": "integer", "minimum": 0, "description": "snapshot: start at this line "
               "(the next_offset of a cut answer)."},
    "ref": {"type": "string", "description": "snapshot: only the part under this ref."},
    "selector": {"type": "string", "description": "snapshot: only the part under this element."},
}
#: C{observe {what:"events"}} (gasoline.tools._events).
EVENTS_PROPERTIES: dict[str, Any] = {
    "since": {"type": "integer", "minimum": 0, "description": "events: the last seq you have "
              "seen (default: the last one you acknowledged)."},
    "wait_ms": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS,
                "description": "events: wait up to this long for an event when none is pending."},
}
ANALYZE_PROPERTIES: dict[str, Any] = {
    "last_n": {"type": "integer", "minimum": 1, "maximum": 10000,
               "description": "S modes: how many of the newest buffered entries to analyze "
               "(default 1000)."},
    "include_html": {"type": "boolean", "description": "dom: include each match's outerHTML."},
    "rules": {"type": "array", "items": {"type": "string"},
              "description": "accessibility: run only these axe rule ids."},
    "node_limit": {"type": "integer", "minimum": 1, "maximum": 200,
                   "description": "accessibility: nodes reported per violation."},
    "urls": {"type": "array", "items": {"type": "string"}, "maxItems": 200,
             "description": "link_validation: the URLs to check (default: the page's links)."},
    "allow_private": {"type": "boolean", "description": "link_validation: also fetch "
                      "loopback/private addresses (refused by default: SSRF guard)."},
    "name": {"type": "string", "description": "visual_baseline/visual_diff: the baseline name "
             "(letters, digits, . _ -; default 'default')."},
    "pixel_threshold": {"type": "integer", "minimum": 0, "maximum": 255,
                        "description": "visual_diff: a pixel counts as changed when a colour "
                        "channel moved by more than this (default 24)."},
    "max_diff_ratio": {"type": "number", "minimum": 0, "maximum": 1,
                       "description": "visual_diff: passed when at most this share of pixels "
                       "changed (default 0.001)."},
    "annotation_id": {"type": "string", "description": "annotation_detail: an id from "
                      "analyze annotations."},
}
GENERATE_PROPERTIES: dict[str, Any] = {
    "base_url": {"type": "string", "description": "reproduction/test: make recorded URLs "
                 "relative to this origin."},
    "a11y_result": {"type": "object", "description": "sarif: an accessibility result "
                    "({violations: [...]}); without it the extension's audit runs."},
    "selector": {"type": "string", "description": "sarif: audit only this part of the page; "
                 "test_heal: the broken selector; visual_test: screenshot only this element."},
    "tags": {"type": "array", "items": {"type": "string"}, "description": "sarif: axe rule tags."},
    "checkpoint": {"type": "string", "description": "pr_summary: include the changes since "
                   "this checkpoint."},
    "title": {"type": "string", "description": "pr_summary: the heading."},
    "algorithm": {"type": "string", "enum": ["sha256", "sha384", "sha512"],
                  "description": "sri: hash algorithm (default sha384)."},
    "report_uri": {"type": "string", "description": "csp: add a report-uri directive."},
    "error_id": {"type": "string", "description": "test_from_context: the error (its _errorId, "
                 "id or error_clusters fingerprint); default the newest error you see."},
    "message": {"type": "string", "description": "test_from_context: substring of the error "
                "message to pick."},
    "window_seconds": {"type": "number", "minimum": 0, "maximum": MAX_CONTEXT_WINDOW,
                       "description": "test_from_context: seconds of actions before the error "
                       "to replay (default 30)."},
    "test_code": {"type": "string", "description": "test_heal: the test's code; answered with "
                  "the broken selector replaced."},
    "test_file": {"type": "string", "description": "test_heal: a test file inside your working "
                  "directory (instead of test_code; at most 512 KiB)."},
    "live": {"type": "boolean", "description": "test_heal: check candidates on the live page "
             "through the extension (default true when it is connected)."},
    "failure": {"type": "string", "description": "test_classify: the failure text (error "
                "message, stack, Playwright output)."},
    "use_captured": {"type": "boolean", "description": "test_classify: weigh the captured errors, "
                     "failed requests and timings too (default true)."},
    "name": {"type": "string", "description": "visual_test: the screenshot name (.png added)."},
    "full_page": {"type": "boolean", "description": "visual_test: screenshot the full page."},
    "threshold": {"type": "number", "minimum": 0, "maximum": 1,
                  "description": "visual_test: per-pixel colour threshold (Playwright's, 0..1)."},
    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 120000,
                   "description": "test_heal/sarif: how long to wait for each extension command."},
    "tab_id": {"type": "integer", "description": "test_heal/sarif: the browser tab (default: "
               "the tracked one)."},
}
CONFIGURE_PROPERTIES: dict[str, Any] = {
    "steps": {"type": "array", "items": {"type": "object"},
              "description": "save_sequence: interact argument objects, e.g. [{what:'click', "
              "selector:'#go'}] (at most 100)."},
    "from_actions": {"type": "boolean", "description": "save_sequence: build the steps from "
                     "your recorded actions (last_n, or a recording)."},
    "recording": {"type": "string", "description": "save_sequence from_actions: take the "
                  "actions of this recording."},
    "last_n": {"type": "integer", "minimum": 1, "maximum": 500,
               "description": "save_sequence from_actions: how many recent actions (50)."},
    "description": {"type": "string", "description": "save_sequence: what the sequence does."},
    "sequence_action": {"type": "string", "enum": ["save", "list", "delete", "get"],
                        "description": "save_sequence (default save)."},
    "continue_on_error": {"type": "boolean", "description": "replay_sequence: run the "
                          "remaining steps after a failed one (default false)."},
    "from_checkpoint": {"type": "string", "description": "diff_sessions: the earlier checkpoint "
                        "(yours, or 'client:name')."},
    "to_checkpoint": {"type": "string", "description": "diff_sessions: the later checkpoint "
                      "(default 'now')."},
    "checkpoint": {"type": "string", "description": "diff_sessions: alias of from_checkpoint."},
    "confirm": {"type": "boolean", "description": "restart: really restart (only when you are "
                "the only connected client); without it restart only reports."},
    **STREAMING_PROPERTIES,
}
INTERACT_PROPERTIES: dict[str, Any] = {
    "headless": {"type": "boolean", "description": "launch_browser: no window (default: headless "
                 "unless the daemon has a display)."},
    "pilot": {"type": "boolean", "description": "launch_browser: let agents act in it (default "
              "true)."},
    "track_all": {"type": "boolean", "description": "launch_browser: capture every tab."},
    "checked": {"type": "boolean", "description": "check: false unchecks."},
    "clear": {"type": "boolean", "description": "type: false appends instead of replacing."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 500,
              "description": "list_interactive: elements returned."},
    "offset": {"type": "integer", "minimum": 0, "maximum": 100000,
               "description": "list_interactive: skip this many elements (the next page: a "
               "result's next_offset)."},
    "diff": {"type": "boolean", "description": "list_interactive: only the elements that are new "
             "since your last list of this page, with the ids of those gone (ids stay stable)."},
    "duration_ms": {"type": "integer", "minimum": 100, "maximum": 600000,
                    "description": "highlight/subtitle: how long it stays."},
    "format": {"type": "string", "enum": ["png", "jpeg"], "description": "screenshot format."},
    "quality": {"type": "integer", "minimum": 10, "maximum": 100,
                "description": "screenshot: JPEG quality."},
    "submit_selector": {"type": "string", "description": "fill_form_and_submit: the control to "
                        "click (default: the form's submit button)."},
    "storage_type": {"type": "string", "enum": ["local", "session", "both"],
                     "description": "storage modes: which Web Storage (default local; "
                     "clear_storage: both)."},
    "path": {"type": "string", "description": "set_cookie/delete_cookie: cookie path (/)."},
    "domain": {"type": "string", "description": "set_cookie/delete_cookie: cookie domain."},
    "max_age": {"type": "integer", "minimum": 0, "description": "set_cookie: seconds."},
    "same_site": {"type": "string", "enum": ["Strict", "Lax", "None"]},
    "secure": {"type": "boolean", "description": "set_cookie: the Secure attribute."},
    "navigate": {"type": "boolean", "description": "load_state: go to the saved URL first "
                 "(default true)."},
    "bypass_cache": {"type": "boolean", "description": "refresh: reload without the cache."},
    "active": {"type": "boolean", "description": "new_tab: focus it (default true)."},
    "track": {"type": "boolean", "description": "new_tab/switch_tab: track the tab."},
    "file_path": {"type": "string", "description": "upload: a file inside your working "
                  "directory or the daemon's state dir (relative: from your working directory)."},
    "files": {"type": "array", "items": {"type": "string"}, "maxItems": 20,
              "description": "upload: several files (10 MB in all)."},
    "fps": {"type": "number", "minimum": 0.1, "maximum": 2,
            "description": "record_start: frames per second at most (default 1)."},
    "max_seconds": {"type": "integer", "minimum": 1, "maximum": 600,
                    "description": "record_start: stop by itself after this long (default 120)."},
    "recording_id": {"type": "string", "description": "record_stop: read back a finished "
                     "recording (default: stop the running one, else your latest)."},
    "target": {"type": "string", "description": "drag: the element to drop on (a selector)."},
    "target_ref": {"type": "string", "description": "drag: the element to drop on, by its "
                   "snapshot ref (e12)."},
    "key": {"type": "string", "description": "key_press: a key or combination (Enter, "
            "Control+K, Shift+Tab, Meta+A), several separated by spaces (default Enter)."},
    "accept": {"type": "boolean", "description": "dialog: true accepts, false dismisses "
               "(absent: report the open dialog)."},
    "prompt_text": {"type": "string", "description": "dialog: the answer to a prompt()."},
    "device": {"type": "string", "enum": ["iphone-13", "pixel-7", "ipad-air", "laptop",
                                          "desktop-1080p"],
               "description": "emulate: a named device (viewport, scale, touch, user agent)."},
    "viewport": {"type": "object", "description": "emulate: {width, height, "
                 "device_scale_factor?, mobile?}."},
    "width": {"type": "integer", "minimum": 100, "maximum": 10000,
              "description": "resize/emulate: viewport width (CSS px)."},
    "height": {"type": "integer", "minimum": 100, "maximum": 10000,
               "description": "resize/emulate: viewport height (CSS px)."},
    "cpu_throttling": {"type": "number", "minimum": 1, "maximum": 20,
                       "description": "emulate: CPU slowdown factor (1: none)."},
    "network": {"type": "string", "enum": ["offline", "slow-3g", "fast-3g", "4g", "none"],
                "description": "emulate: a network profile (none: no throttling)."},
    "network_conditions": {"type": "object", "description": "emulate: custom {latency_ms, "
                           "download_kbps, upload_kbps} (0: no limit)."},
    "offline": {"type": "boolean", "description": "emulate: cut the tab's network."},
    "color_scheme": {"type": "string", "enum": ["dark", "light", "no-preference"],
                     "description": "emulate: prefers-color-scheme."},
    "geolocation": {"type": "object", "description": "emulate: {latitude, longitude, "
                    "accuracy?}; {} clears it."},
    "reset": {"type": "boolean", "description": "emulate/resize: end every emulation."},
    "reload": {"type": "boolean", "description": "performance_trace: reload the page to trace "
               "its load (default true; false: what the page buffered)."},
    "settle_ms": {"type": "integer", "minimum": 0, "maximum": 10000,
                  "description": "performance_trace: wait after the load (default 1500)."},
    "ignore_cache": {"type": "boolean", "description": "performance_trace: reload without "
                     "the cache."},
}
#: tool -> the arguments its modes read beyond its schema.
MODE_PROPERTIES: dict[str, dict[str, Any]] = {
    "observe": {**EVENTS_PROPERTIES, **SNAPSHOT_PROPERTIES},
    "analyze": {**ANALYZE_PROPERTIES, **{k: v for k, v in SNAPSHOT_PROPERTIES.items()
                                         if k != "selector"}},
    "generate": GENERATE_PROPERTIES,
    "configure": CONFIGURE_PROPERTIES,
    "interact": INTERACT_PROPERTIES,
}


#: tool -> (its modes, the alias accepted for C{what})
TOOL_MODES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "observe": (OBSERVE_MODES, None),
    "analyze": (ANALYZE_MODES, None),
    "generate": (GENERATE_MODES, "format"),
    "configure": (CONFIGURE_MODES, "action"),
    "interact": (INTERACT_MODES, "action"),
}


def mode_of(tool: str, args: dict[str, Any]) -> str:
    """The mode a call asks for (C{what}, else the tool's alias); raise on missing/unknown."""
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

"""
Gasoline's five tools: C{observe}, C{analyze}, C{generate}, C{configure}, C{interact}.

Each tool's modes live in one module here exporting
C{MODES: dict[str, Callable[[ToolContext, dict], dict | Deferred]]} and C{PROPERTIES} (JSON
Schema properties its modes read beyond the common ones: its entry of
L{gasoline.tools.schemas.MODE_PROPERTIES}). A mode named in a tool's C{what} enum but missing from
its table answers C{not_implemented}.

The daemon registers the five tools, and answers tools/list, from L{gasoline.tools.schemas}
alone: a tool's module (and what it imports: the analyses, the generators, playback, ...) is
imported at the tool's first call (L{ModeTables}), so an idle daemon never holds them. A handler returns a
result dict (usually C{ctx.ok(summary, data)}) or a Deferred firing with one, or raises a
L{gasoline.core.errors.GasolineError}; redaction and the 100 kB cap are applied centrally by
L{gasoline.mcp.tools.ToolRegistry.call}. No tool module imports a sibling tool module: what they
share lives in the underscore modules and L{gasoline.tools.context}.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from inspect import iscoroutine
from typing import TYPE_CHECKING, Any, Callable

from twisted.internet.defer import Deferred

from gasoline.core.daemon import Daemon
from gasoline.core.errors import NotImplementedMode
from gasoline.mcp.tools import Tool, ToolRegistry
from gasoline.streaming.hub import Streaming
from gasoline.tools._counts import meta_provider
from gasoline.tools._events import append_unread_note
from gasoline.tools.aliases import translate, with_alias_notice
from gasoline.tools.context import ToolContext
from gasoline.tools.runtime import ToolRuntime
from gasoline.tools.schemas import (
    ANALYZE_SCHEMA,
    CONFIGURE_SCHEMA,
    GENERATE_SCHEMA,
    INTERACT_SCHEMA,
    MODE_PROPERTIES,
    OBSERVE_SCHEMA,
    TOOL_MODES,
    mode_of,
)

if TYPE_CHECKING:
    from gasoline.tools._launch import BrowserLauncher


TOOL_MODULES = ("observe", "analyze", "generate", "configure", "interact")

Handler = Callable[[Any, dict[str, Any]], Any]


def _module(tool: str) -> Any:
    return importlib.import_module(f"gasoline.tools.{tool}")


def load_tables() -> dict[str, dict[str, Handler]]:
    """C{tool -> MODES}, every tool module imported now (a broken one raises here)."""
    return {tool: dict(_module(tool).MODES) for tool in TOOL_MODULES}


class ModeTables(Mapping[str, dict[str, Handler]]):
    """C{tool -> MODES}, each tool's module imported the first time its table is looked up (its
    first call, or C{describe_capabilities}), then kept. Membership and iteration need no import.

    A module that fails to import fails that tool's calls, each with the import's error, and
    every other tool still works; C{tests/test_tools_infra.py} imports every module, so a broken
    one fails the suite, not a user's first call.
    """

    def __init__(self, tools: tuple[str, ...] = TOOL_MODULES) -> None:
        self._tools = tools
        self._tables: dict[str, dict[str, Handler]] = {}

    def __getitem__(self, tool: str) -> dict[str, Handler]:
        table = self._tables.get(tool)
        if table is None:
            if tool not in self._tools:
                raise KeyError(tool)
            table = self._tables[tool] = dict(_module(tool).MODES)
        return table

    def __contains__(self, tool: object) -> bool:
        return tool in self._tools

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def loaded(self) -> list[str]:
        """The tools whose module is imported so far."""
        return [t for t in self._tools if t in self._tables]


def extra_properties(tool: str) -> dict[str, Any]:
    """JSON Schema properties a tool's modes read beyond the tool schema's common arguments
    (L{gasoline.tools.schemas.MODE_PROPERTIES}; no tool module is imported)."""
    return dict(MODE_PROPERTIES.get(tool, {}))


class GasolineTools:
    """The five tools. Each dispatches C{what} to its mode table (the tool modules' C{MODES})."""

    def __init__(self, daemon: Daemon, tables: Mapping[str, dict[str, Handler]] | None = None,
                 streaming: Streaming | None = None,
                 launcher: BrowserLauncher | None = None) -> None:
        #: The domain collaborators every mode reads (C{ctx.app}).
        self.daemon = daemon
        #: Context streaming (C{configure streaming}, C{observe events}, the unread note); None
        #: when the daemon was built without it.
        self.streaming = streaming
        #: C{tool -> MODES}: L{ModeTables} (imported at each tool's first call) unless given.
        self.tables = tables if tables is not None else ModeTables()
        #: What the tools keep in memory between calls.
        self.runtime = ToolRuntime()
        #: Starts a browser for C{interact launch_browser} (L{gasoline.tools._launch}); None when
        #: the daemon does not allow it (C{--allow-launch-browser}).
        self.launcher = launcher

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
            # The modes' own arguments (schemas.MODE_PROPERTIES) win over the common ones.
            properties = {**schema["properties"], **extra_properties(name)}
            registry.add(Tool(name, description, {**schema, "properties": properties},
                              self._dispatcher(name), title=title, annotations=hints))
        # Every result (proxied tools' too) says what is left to read beyond the caller's cursors.
        registry.add_meta_provider(meta_provider(self.daemon))

    def _dispatcher(self, tool: str) -> Callable[[Any, dict[str, Any]], Any]:
        def run_one(request: Any, target: str, args: dict[str, Any]) -> Any:
            what = mode_of(target, args)
            handler = self.tables.get(target, {}).get(what)
            if handler is None:
                raise NotImplementedMode(f"{target} {{what:\"{what}\"}} is not implemented yet",
                                         tool=target, mode=what)
            ctx = ToolContext.for_request(self.daemon, request, self, tool=target, mode=what)
            result = handler(ctx, args)
            # Unread browser events (context streaming) are mentioned in every other tool's result.
            if iscoroutine(result):
                result = Deferred.fromCoroutine(result)
            if isinstance(result, Deferred):
                return result.addCallback(lambda r: append_unread_note(ctx, r))
            return append_unread_note(ctx, result)

        def dispatch(request: Any, args: dict[str, Any]) -> Any:
            # The published Gasoline's names (gasoline.tools.aliases): translated, and said so.
            translation = translate(tool, args)
            if not translation.used:
                return run_one(request, tool, args)
            return with_alias_notice(
                lambda call: run_one(request, translation.tool, call), translation)

        return dispatch

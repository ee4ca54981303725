"""
Per-tool mode tables.

Each tool's modes live in one module here exporting
``MODES: dict[str, Callable[[ToolContext, dict], dict | Deferred]]``:
``observe`` and ``configure`` (the tools-infrastructure area), ``analyze``, ``generate`` and
``interact`` (the modes area). A mode named in a tool's ``what`` enum but missing from its table
answers ``not_implemented``. A handler returns a result dict (usually ``ctx.ok(summary, data)``)
or a Deferred firing with one, or raises a L{gasoline.core.errors.GasolineError}; redaction and
the 100 kB cap are applied centrally by L{gasoline.mcp.tools.ToolRegistry.call}.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

TOOL_MODULES = ("observe", "analyze", "generate", "configure", "interact")

Handler = Callable[[Any, dict[str, Any]], Any]


def _module(tool: str) -> Any:
    return importlib.import_module(f"gasoline.mcp.modes.{tool}")


def load_tables() -> dict[str, dict[str, Handler]]:
    """``tool -> MODES``. Every tool module must import: a broken one is a bug to see at start-up,
    not a set of modes that quietly answer ``not_implemented``."""
    return {tool: dict(_module(tool).MODES) for tool in TOOL_MODULES}


def extra_properties(tool: str) -> dict[str, Any]:
    """JSON Schema properties a tool's modes read beyond the tool schema's common arguments
    (the module's ``PROPERTIES``, if any)."""
    return dict(getattr(_module(tool), "PROPERTIES", {}))

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

from twisted.logger import Logger

log = Logger()

TOOL_MODULES = ("observe", "analyze", "generate", "configure", "interact")

Handler = Callable[[Any, dict[str, Any]], Any]


def load_tables() -> dict[str, dict[str, Handler]]:
    """``tool -> MODES`` for every tool module that imports; a module that is missing or fails
    to import gives an empty table (its modes answer ``not_implemented``) and a logged failure."""
    tables: dict[str, dict[str, Handler]] = {}
    for tool in TOOL_MODULES:
        try:
            module = importlib.import_module(f"gasoline.mcp.modes.{tool}")
        except ModuleNotFoundError as e:
            if e.name != f"gasoline.mcp.modes.{tool}":
                log.failure("mode table {tool} failed to import", tool=tool)
            tables[tool] = {}
            continue
        except Exception:
            log.failure("mode table {tool} failed to import", tool=tool)
            tables[tool] = {}
            continue
        modes = getattr(module, "MODES", None)
        tables[tool] = dict(modes) if isinstance(modes, dict) else {}
    return tables

"""
Aggregated tool names: C{<server>__<tool>}, at most 64 characters of C{[A-Za-z0-9_-]}.

Claude Desktop enforces C{^[a-zA-Z0-9_-]{1,64}$} and the Anthropic API refuses longer names, so
a name that is too long or has other characters becomes its first characters (others replaced by
C{_}) plus C{_} and 8 hex digits of the SHA-256 of the full, unchanged name, 64 at most:
deterministic (the same child tool gets the same name in every session and after restarts) and
mapped back through a table, never by splitting the string.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 64
SEPARATOR = "__"
_BAD = re.compile(r"[^A-Za-z0-9_-]")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def aggregated_name(server: str, tool: str) -> str:
    """The name agents see for C{server}'s tool C{tool}."""
    full = f"{server}{SEPARATOR}{tool}"
    if len(full) <= MAX_NAME and not _BAD.search(full):
        return full
    # A changed or long name carries a hash of the original, so two tools that sanitize to the
    # same string ("a.b" and "a_b") still get different names.
    suffix = "_" + _digest(full)
    return _BAD.sub("_", full)[: MAX_NAME - len(suffix)] + suffix


def build_table(server_tools: dict[str, list[str]]) -> dict[str, tuple[str, str]]:
    """C{{aggregated name: (server, tool)}} for every server's tools (collisions get a hash)."""
    table: dict[str, tuple[str, str]] = {}
    for server, tools in server_tools.items():
        for tool in tools:
            name = aggregated_name(server, tool)
            if name in table and table[name] != (server, tool):
                name = name[: MAX_NAME - 9] + "_" + _digest(f"{server}\0{tool}")
            table[name] = (server, tool)
    return table

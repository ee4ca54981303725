"""
Tool calls through the real MCP dispatcher of an in-memory daemon (C{build(Config, clock)}): one
session per client id, C{tools/call} requests, and the C{"summary\\n{json}"} text every tool answers.
"""

from __future__ import annotations

import json
from typing import Any

from gasoline.mcp import jsonrpc


def session_for(app: Any, client_id: str, protocol: str = "2025-06-18") -> Any:
    """An initialized streamable MCP session of C{client_id}."""
    session = app.mcp.open_session(client_id, "streamable")
    app.mcp.handle(session, jsonrpc.request(0, "initialize", {
        "protocolVersion": protocol, "capabilities": {},
        "clientInfo": {"name": client_id, "version": "1"}}))
    return session


def start(app: Any, session: Any, tool: str, args: dict[str, Any], rid: int = 1) -> list:
    """Start a C{tools/call}; return the list its JSON-RPC response lands in (empty until then)."""
    out: list = []
    app.mcp.handle(session, jsonrpc.request(rid, "tools/call", {
        "name": tool, "arguments": args})).addCallback(out.append)
    return out


def parse(response: dict[str, Any]) -> tuple[bool, str, Any]:
    """C{(isError, summary line, decoded JSON payload or None)} of a C{tools/call} response."""
    result = response["result"]
    summary, _, payload = result["content"][0]["text"].partition("\n")
    return result["isError"], summary, json.loads(payload) if payload else None


def parsed(out: list) -> tuple[bool, str, Any]:
    """L{parse} the answer that landed in C{out} (a list from L{start})."""
    assert out, "no answer yet"
    return parse(out[0])


def call(app: Any, session: Any, tool: str, args: dict[str, Any]) -> tuple[bool, str, Any]:
    """A call that must answer synchronously, parsed."""
    return parsed(start(app, session, tool, args))


def tool_calls(tool: str):
    """C{(ok, error)} for one tool: C{ok(app, session, **args)} asserts success and returns
    C{(summary, data)}; C{error(app, session, **args)} asserts failure and returns the error body."""

    def ok(app: Any, session: Any, **args: Any) -> tuple[str, Any]:
        err, summary, data = call(app, session, tool, args)
        assert not err, (summary, data)
        return summary, data

    def error(app: Any, session: Any, **args: Any) -> Any:
        err, summary, data = call(app, session, tool, args)
        assert err, (summary, data)
        return data

    return ok, error

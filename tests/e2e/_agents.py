"""A minimal synchronous MCP agent for the end-to-end streaming tests and benches: the connector
form of C{POST /mcp} (C{X-Gasoline-Client} with its proof, C{X-Gasoline-Connection}), JSON answers."""

from __future__ import annotations

import itertools
import json
import urllib.request
from typing import Any

from gasoline.testing import client_headers


class HttpAgent:
    def __init__(self, daemon: Any, client_id: str) -> None:
        self.url = daemon.url + "/mcp"
        self.headers = {**client_headers(daemon, client_id), "X-Gasoline-Connection": client_id,
                        "Content-Type": "application/json", "Accept": "application/json"}
        self._ids = itertools.count(1)
        self.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": client_id, "version": "1"}})
        self.rpc("notifications/initialized", None)

    def rpc(self, method: str, params: dict[str, Any] | None, timeout: float = 30.0) -> Any:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not method.startswith("notifications/"):
            msg["id"] = next(self._ids)
        req = urllib.request.Request(self.url, data=json.dumps(msg).encode(), method="POST",
                                     headers=self.headers)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if body else None

    def tool(self, name: str, args: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """The tool's JSON payload (asserting success)."""
        answer = self.rpc("tools/call", {"name": name, "arguments": args}, timeout)
        result = answer["result"]
        text = result["content"][0]["text"]
        assert result["isError"] is False, text
        return json.loads(text.partition("\n")[2] or "{}")

    def events(self, wait_ms: int = 0) -> list[dict[str, Any]]:
        """Unread streaming events (waiting up to C{wait_ms} for one), acknowledged."""
        out = self.tool("observe", {"what": "events", "wait_ms": wait_ms},
                        timeout=wait_ms / 1000 + 30)
        return out["events"]

"""Context streaming through the official ``mcp`` SDK client, over all three transports.

A real ``twistd -n gasoline`` (the C{daemon} fixture); the SDK connects three agents over one
transport: streamable HTTP (``/mcp``, notifications on its GET stream), legacy HTTP+SSE
(``/mcp/sse``) or stdio through the ``gasoline connect`` connector (its GET stream, forwarded to
stdout). Agent S subscribes to errors with url / exclude patterns, a severity floor and a rate limit
of 3/s; agent O subscribes to another event type; agent N does not subscribe. The extension side
posts console entries; S must receive exactly what its filters let through, the rate limit must
produce one ``rate_limit_exceeded`` notice, O and N must receive nothing, and ``observe
{what:"events"}`` must return what the notifications carried, in order, then nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from gasoline.testing import EXTENSION_HEADERS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

API = "https://api.example.com"
ENTRIES = [
    {"level": "error", "type": "exception", "message": "E1", "url": f"{API}/a", "tabId": 4,
     "stack": "at one (app.js:1:1)"},
    {"level": "error", "type": "console", "message": "medium, below the floor", "url": f"{API}/b"},
    {"level": "error", "type": "exception", "message": "E-www", "url": "https://www.example.com/"},
    {"level": "error", "type": "exception", "message": "ignore-me please", "url": f"{API}/c"},
    {"level": "warn", "type": "console", "message": "a warning", "url": f"{API}/d"},
    {"level": "error", "type": "exception", "message": "E2", "url": f"{API}/e"},
    {"level": "error", "type": "exception", "message": "E3", "url": f"{API}/f"},
    {"level": "error", "type": "exception", "message": "E4", "url": f"{API}/g"},
    {"level": "error", "type": "exception", "message": "E5", "url": f"{API}/h"},
]


def _post_logs(url: str, entries: list[dict]) -> None:
    req = urllib.request.Request(url + "/logs", data=json.dumps({"entries": entries}).encode(),
                                 headers=EXTENSION_HEADERS, method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def _payload(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result
    return json.loads(result.content[0].text.partition("\n")[2])


def _transport(kind: str, daemon: Any, name: str, tmp_path: Path, stack: contextlib.AsyncExitStack):
    if kind == "streamable":
        return streamable_http_client(daemon.url + "/mcp")
    if kind == "sse":
        return sse_client(daemon.url + "/mcp/sse")
    argv = [sys.executable, "-m", "gasoline", "connect", "--port", str(daemon.port),
            "--client-id", f"stream-{name}", "--no-autostart"]
    errlog = stack.enter_context(open(tmp_path / f"connector-{name}.err", "w"))
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(tmp_path),
                                   env=dict(os.environ))
    return stdio_client(params, errlog=errlog)


class SdkAgent:
    def __init__(self, session: ClientSession, received: list) -> None:
        self.session = session
        self.received = received

    def events(self) -> list[dict[str, Any]]:
        return [m.data for m in self.received
                if m.logger == "gasoline" and isinstance(m.data, dict) and "event_type" in m.data]

    async def status(self) -> dict[str, Any]:
        return _payload(await self.session.call_tool(
            "configure", {"what": "streaming", "streaming_action": "status"}))

    async def wait_for_stream(self) -> None:
        """Until the daemon sees this agent's server->client stream (the SDK opens it after
        initialize, asynchronously)."""
        for _ in range(100):
            if (await self.status()).get("stream"):
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the agent's stream never attached")


async def _scenario(kind: str, daemon: Any, tmp_path: Path) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        agents: dict[str, SdkAgent] = {}
        for name in ("S", "O", "N"):
            received: list = []

            async def on_log(params, received=received) -> None:
                received.append(params)

            read, write = await stack.enter_async_context(
                _transport(kind, daemon, name, tmp_path, stack))
            session = await stack.enter_async_context(
                ClientSession(read, write, logging_callback=on_log))
            await session.initialize()
            agents[name] = SdkAgent(session, received)
        s, o, n = agents["S"], agents["O"], agents["N"]
        answer = _payload(await s.session.call_tool("configure", {
            "what": "streaming", "enabled": True, "subscribe": ["error"],
            "filters": {"severity": "high", "url_pattern": r"^https://api\.example\.com",
                        "exclude_pattern": "ignore-me", "rate_limit": 3}}))
        assert answer["configured"] is True and answer["streaming_enabled"] is True
        _payload(await o.session.call_tool("configure", {
            "what": "streaming", "subscribe": ["websocket_close", "network_failure"]}))
        await s.wait_for_stream()
        await o.wait_for_stream()
        await asyncio.to_thread(_post_logs, daemon.url, ENTRIES)
        for _ in range(100):  # three events, then the notice after the one-second window
            if len(s.events()) >= 4:
                break
            await asyncio.sleep(0.05)
        pushed = s.events()
        await asyncio.sleep(0.3)  # anything extra (a duplicate, a leak) would arrive now
        first = _payload(await s.session.call_tool("observe", {"what": "events"}))
        second = _payload(await s.session.call_tool("observe", {"what": "events"}))
        return {"pushed": pushed, "pushed_later": s.events(), "first": first, "second": second,
                "other": o.events(), "none": n.events()}


@pytest.mark.parametrize("kind", ["streamable", "sse", "stdio"])
def test_streaming_over_each_transport(daemon, tmp_path, kind):
    out = asyncio.run(asyncio.wait_for(_scenario(kind, daemon, tmp_path), 60))
    pushed = out["pushed"]
    assert [e["event_type"] for e in pushed] == ["error"] * 3 + ["rate_limit_exceeded"]
    assert [e["message"] for e in pushed[:3]] == ["E1", "E2", "E3"]
    first = pushed[0]
    assert first["severity"] == "high" and first["url"] == f"{API}/a" and first["tabId"] == 4
    assert first["stack_trace"] == "at one (app.js:1:1)" and first["timestamp"]
    assert pushed[3]["throttled"] == 2
    assert [e["seq"] for e in pushed] == [1, 2, 3, 4]
    assert out["pushed_later"] == pushed  # no duplicate, nothing else
    # observe events: what the notifications carried, in order; then nothing after the ack
    assert out["first"]["events"] == pushed
    assert out["second"]["count"] == 0 and out["second"]["acknowledged"] == 4
    # other filters, or no subscription: nothing
    assert out["other"] == [] and out["none"] == []

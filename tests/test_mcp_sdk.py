"""The official ``mcp`` Python SDK (pinned in pyproject.toml) as an independent client of a real daemon.

Over streamable HTTP (``/mcp``) and legacy HTTP+SSE (``/mcp/sse``): initialize, list the tools,
call ``observe``, read ``gasoline://guide`` and receive a ``notifications/message`` (Gasoline sends
one when the log level is set and one per tool call once a level is set; see docs/mcp.md).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from gasoline.testing import EXTENSION_HEADERS

pytestmark = [
    pytest.mark.integration,
    # mcp 2.3.0 warns that a future revision deprecates logging; the four we speak all have it.
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

FIVE_TOOLS = {"observe", "analyze", "generate", "configure", "interact"}


def _post_logs(url: str, entries: list[dict]) -> None:
    req = urllib.request.Request(
        url + "/logs", data=json.dumps({"entries": entries}).encode(), headers=EXTENSION_HEADERS,
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


async def _exercise(session: ClientSession, messages: list) -> dict:
    result = await session.initialize()
    assert result.server_info.name == "gasoline"
    assert "observe" in (result.instructions or "")
    tools = await session.list_tools()
    names = {t.name for t in tools.tools}
    assert FIVE_TOOLS <= names
    observe = next(t for t in tools.tools if t.name == "observe")
    assert "errors" in observe.input_schema["properties"]["what"]["enum"]

    await session.set_logging_level("debug")
    first = await session.call_tool("observe", {"what": "errors"})
    assert first.is_error is False
    text = first.content[0].text
    summary, _, payload = text.partition("\n")
    data = json.loads(payload)
    second = await session.call_tool("observe", {"what": "errors"})
    again = json.loads(second.content[0].text.partition("\n")[2])

    guide = await session.read_resource("gasoline://guide")
    assert guide.contents[0].mime_type == "text/markdown"
    assert "# Gasoline usage guide" in guide.contents[0].text
    # configure streaming (tests/test_streaming_sdk.py covers the pushes).
    streaming = await session.call_tool("configure", {"what": "streaming",
                                                      "streaming_action": "status"})
    # Give the server->client stream a moment to deliver the log records.
    for _ in range(50):
        if len(messages) >= 2:
            break
        await asyncio.sleep(0.05)
    return {"summary": summary, "data": data, "again": again, "streaming": streaming}


def _run(client_factory, url: str) -> dict:
    async def main() -> dict:
        messages: list = []

        async def on_log(params) -> None:
            messages.append(params)

        async with client_factory(url) as (read, write):
            async with ClientSession(read, write, logging_callback=on_log) as session:
                out = await _exercise(session, messages)
        out["messages"] = messages
        return out

    return asyncio.run(asyncio.wait_for(main(), 30))


def _check(out: dict) -> None:
    # Two errors were buffered (one console error, one exception); the info entry is not an error.
    assert out["data"]["count"] == 2
    assert [e["message"] for e in out["data"]["entries"]] == ["boom", "TypeError: x is undefined"]
    assert out["data"]["extension_connected"] in (True, False)
    assert out["summary"].startswith("2 new errors")
    # The cursor moved: the second read is empty.
    assert out["again"]["count"] == 0
    assert out["again"]["cursor"] == out["data"]["cursor"]
    assert out["streaming"].is_error is False
    assert out["streaming"].content[0].text.startswith("streaming is off")
    levels = [m.level for m in out["messages"]]
    assert "info" in levels  # "log level set to debug"
    assert "debug" in levels  # one record per tool call
    assert any(isinstance(m.data, dict) and m.data.get("tool") == "observe" for m in out["messages"])


ENTRIES = [
    {"level": "info", "message": "hello", "type": "console", "ts": "2026-01-01T00:00:00Z"},
    {"level": "error", "message": "boom", "type": "console", "ts": "2026-01-01T00:00:01Z"},
    {"level": "error", "type": "exception", "message": "TypeError: x is undefined",
     "ts": "2026-01-01T00:00:02Z"},
]


def test_sdk_over_streamable_http(daemon):
    _post_logs(daemon.url, ENTRIES)
    _check(_run(lambda url: streamable_http_client(url), daemon.url + "/mcp"))


def test_sdk_over_legacy_sse(daemon):
    _post_logs(daemon.url, ENTRIES)
    _check(_run(lambda url: sse_client(url), daemon.url + "/mcp/sse"))


def test_sdk_clients_on_both_transports_have_separate_cursors(daemon):
    """Two HTTP sessions without X-Gasoline-Client get their own client ids, so both see everything."""
    _post_logs(daemon.url, ENTRIES)
    a = _run(lambda url: streamable_http_client(url), daemon.url + "/mcp")
    b = _run(lambda url: sse_client(url), daemon.url + "/mcp/sse")
    assert a["data"]["count"] == 2 and b["data"]["count"] == 2

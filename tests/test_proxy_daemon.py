"""The session proxy in a real ``twistd gasoline --proxy-config FILE`` process: no child survives
the daemon's stop or its crash (SIGKILL: the watchdog's PR_SET_PDEATHSIG), an invalid servers file
is refused at start, and the official ``mcp`` SDK reaches the aggregated tools through
``gasoline connect`` over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from _proxy_harness import fake_server
from support import DaemonProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def _post(url, body, headers=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Accept": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


def _alive(pids):
    """The pids that name a live process (not a zombie) now."""
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


def _gone(pids, timeout=10.0):
    """Wait up to C{timeout} s for every pid to end; the ones still alive (checked at least
    once, and once more at the deadline however late this process got the CPU back)."""
    deadline = time.monotonic() + timeout
    left = _alive(pids)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _alive(pids)
    return left


def _start(tmp_path, servers):
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    daemon = DaemonProcess(state_dir=tmp_path / "state", args=["--proxy-config", str(config),
                                                              "--no-persist"])
    return daemon.start()


def _session_pids(daemon, wd):
    """Open a session; return its id and the pids of the server, its grandchild and its group."""
    sid = _post(daemon.url + "/session/init", {"workingDirectory": str(wd)})["sessionId"]
    h = {"Mcp-Session-Id": sid}
    _post(daemon.url + "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}, h)

    def call(name, rid, arguments=None):
        r = _post(daemon.url + "/mcp", {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                        "params": {"name": name, "arguments": arguments or {}}},
                  h)
        return json.loads(r["result"]["content"][0]["text"])

    where = call("fake__whereami", 2)
    grandchild = call("fake__spawn_grandchild", 3)["grandchild"]
    stubborn = call("fake__spawn_grandchild", 4, {"ignore_term": True})["grandchild"]
    # Daemonised (setsid after a fork, the parent gone): outside the watchdog's group.
    detached = call("fake__spawn_grandchild", 5, {"detach": True})["grandchild"]
    detached_stubborn = call("fake__spawn_grandchild", 6,
                             {"detach": True, "ignore_term": True})["grandchild"]
    for pid in (detached, detached_stubborn):
        assert os.getsid(pid) != where["pgid"] and os.getpgid(pid) != where["pgid"]
        if sys.platform.startswith("linux"):  # re-parented to the watchdog (the subreaper)
            assert psutil.Process(pid).ppid() == where["pgid"]
    return sid, [where["pid"], where["pgid"], grandchild, stubborn, detached, detached_stubborn]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "crash"])
def test_no_child_survives_the_daemon(tmp_path, sig):
    wd = tmp_path / "proj"
    wd.mkdir()
    daemon = _start(tmp_path, {"fake": fake_server()})
    try:
        _, pids = _session_pids(daemon, wd)
        assert _alive(pids) == pids
    finally:
        daemon.stop(sig)
    # The server, its group's leader (the watchdog), a grandchild, and one that ignores SIGTERM
    # (killed when the grace period is over, also when the daemon crashed), and the same two
    # detached from the group (setsid, double fork): the watchdog is their subreaper. Within
    # the bound: two grace periods (2 s each) and the start of a loaded machine's processes.
    assert _gone(pids) == []


def test_an_invalid_servers_file_is_refused_at_start(tmp_path):
    from support import twistd_path

    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"x": {"command": "y", "colour": "red"}}}))
    out = subprocess.run(
        [twistd_path(), "-n", "--pidfile=", "gasoline", "--listen", "tcp:0:interface=127.0.0.1",
         "--state-dir", str(tmp_path / "state"), "--proxy-config", str(config)],
        capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "unknown field(s) colour" in out.stdout + out.stderr


def test_connector_with_the_official_sdk_sees_the_aggregated_tools(tmp_path):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    wd = tmp_path / "proj"
    wd.mkdir()
    daemon = _start(tmp_path, {"fake": fake_server()})
    try:
        async def run():
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "gasoline", "connect", "--port", str(daemon.port)],
                cwd=str(wd), env={**os.environ, "GASOLINE_STATE_DIR": str(tmp_path / "state")})
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = {t.name for t in (await session.list_tools()).tools}
                    where = await session.call_tool("fake__whereami", {})
                    echo = await session.call_tool("fake__echo", {"path": str(wd / "f")})
                    refused = await session.call_tool("fake__echo", {"path": "/etc/passwd"})
                    gasoline = await session.call_tool("configure", {"what": "health"})
                    return tools, where, echo, refused, gasoline

        tools, where, echo, refused, gasoline = asyncio.run(run())
        assert {"observe", "analyze", "generate", "configure", "interact",
                "fake__echo"} <= tools
        assert json.loads(where.content[0].text)["cwd"] == str(wd)
        assert not echo.is_error and refused.is_error
        assert "path_not_allowed" in refused.content[0].text
        assert not gasoline.is_error
        # The connector ended its proxy session when it exited: no child is left.
        pid = json.loads(where.content[0].text)["pid"]
        assert _gone([pid]) == []
    finally:
        daemon.stop()


def test_connector_passes_the_agents_sampling_and_elicitation_to_its_children(tmp_path):
    # The official SDK declares sampling and elicitation (it has callbacks for them); the
    # connector's proxy session offers them to its children, and their requests reach the
    # SDK's callbacks through the connector, their answers the child.
    from mcp import types
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    wd = tmp_path / "proj"
    wd.mkdir()
    daemon = _start(tmp_path, {"fake": fake_server()})
    asked: list = []

    async def sampling(context, params):
        asked.append(("sampling", params.max_tokens))
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="from the agent"),
            model="sdk-test")

    async def elicitation(context, params):
        asked.append(("elicitation", params.message))
        return types.ElicitResult(action="accept", content={"branch": "main"})

    try:
        async def run():
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "gasoline", "connect", "--port", str(daemon.port)],
                cwd=str(wd), env={**os.environ, "GASOLINE_STATE_DIR": str(tmp_path / "state")})
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write, sampling_callback=sampling,
                                         elicitation_callback=elicitation) as session:
                    await session.initialize()
                    where = await session.call_tool("fake__whereami", {})
                    sampled = await session.call_tool("fake__sample", {})
                    elicited = await session.call_tool("fake__elicit", {})
                    return where, sampled, elicited

        where, sampled, elicited = asyncio.run(run())
        offered = json.loads(where.content[0].text)["capabilities"]
        assert "sampling" in offered and "elicitation" in offered
        assert not sampled.is_error, sampled
        assert json.loads(sampled.content[0].text)["result"]["content"]["text"] == \
            "from the agent"
        assert json.loads(elicited.content[0].text)["result"] == {
            "action": "accept", "content": {"branch": "main"}}
        assert asked == [("sampling", 5), ("elicitation", "Which branch?")]
    finally:
        daemon.stop()

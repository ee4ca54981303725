"""The session proxy with real third-party MCP servers: the reference
``@modelcontextprotocol/server-filesystem`` and ``server-everything`` (npm, pinned in
.ci/node/package.json, run with the Node 22 from .ci/node) and ``mcp-server-time`` (PyPI, the test
extra). Under ``CI=true`` a missing tool fails these tests; locally they skip with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest
import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater

from _proxy_harness import (
    EVERYTHING,
    FILESYSTEM,
    Daemon,
    group_members,
    node_server,
    text_of,
    wait_for,
)
from support import require_tool

pytestmark = [pytest.mark.integration]


def _filesystem():
    node = node_server(FILESYSTEM, "@modelcontextprotocol/server-filesystem@2026.8.31")
    return {"command": node, "args": [FILESYSTEM, "{workingDirectory}"]}


def _everything():
    node = node_server(EVERYTHING, "@modelcontextprotocol/server-everything@2026.8.31")
    return {"command": node, "args": [EVERYTHING, "stdio"]}


async def _call(d, sid, name, arguments, rid=7):
    return await d.mcp(sid, "tools/call", {"name": name, "arguments": arguments}, rid)


def _projects(tmp_path):
    a, b = tmp_path / "alice", tmp_path / "bob"
    a.mkdir()
    b.mkdir()
    (a / "notes.txt").write_text("alice's notes")
    (b / "notes.txt").write_text("bob's notes")
    return a, b


@pytest_twisted.ensureDeferred
async def test_two_sessions_each_read_their_own_file_and_are_refused_the_other(tmp_path):
    a, b = _projects(tmp_path)
    d = Daemon(tmp_path, {"filesystem": _filesystem()}).start()
    try:
        sa, sb = (await d.init(a))["sessionId"], (await d.init(b))["sessionId"]
        for sid in (sa, sb):
            await d.mcp_initialize(sid)
        tools = {t["name"] for t in (await d.mcp(sa, "tools/list", {}, 2))["result"]["tools"]}
        assert "filesystem__read_text_file" in tools and "filesystem__list_allowed_directories" \
            in tools
        read = "filesystem__read_text_file"
        assert text_of(await _call(d, sa, read, {"path": str(a / "notes.txt")})) == "alice's notes"
        assert text_of(await _call(d, sb, read, {"path": str(b / "notes.txt")})) == "bob's notes"
        # Relative paths are the session's own directory.
        assert text_of(await _call(d, sb, read, {"path": "notes.txt"})) == "bob's notes"
        for sid, other in ((sa, b), (sb, a)):
            r = await _call(d, sid, read, {"path": str(other / "notes.txt")}, rid=8)
            assert r["result"]["isError"] is True
            assert "path_not_allowed" in text_of(r) and "'s notes" not in text_of(r)
        # The child itself was told only its own directory (roots/list answered by the daemon).
        dirs = text_of(await _call(d, sa, "filesystem__list_allowed_directories", {}, rid=9))
        assert str(a) in dirs and str(b) not in dirs
        # A symlink out of the project is refused too.
        (a / "to-bob").symlink_to(b)
        r = await _call(d, sa, read, {"path": str(a / "to-bob" / "notes.txt")}, rid=10)
        assert r["result"]["isError"] is True
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_500_read_text_file_calls_in_a_minute_at_default_options_are_all_answered(tmp_path):
    """Gasoline's budget (100 calls per minute per client, the daemon's default)
    is for its own tools; an agent reading files through server-filesystem is not refused."""
    a, _ = _projects(tmp_path)
    d = Daemon(tmp_path, {"filesystem": _filesystem()}).start()
    try:
        sid = await d.session(a)
        files = []
        for i in range(10):
            (a / f"f{i}.txt").write_text(f"file {i}")
            files.append(str(a / f"f{i}.txt"))
        read = "filesystem__read_text_file"
        started = reactor.seconds()
        answers = []
        for batch in range(50):  # 10 calls at once, 50 times
            rs = await defer.gatherResults([
                defer.ensureDeferred(_call(d, sid, read, {"path": files[i]},
                                           rid=100 + batch * 10 + i))
                for i in range(10)])
            answers.extend(text_of(r) for r in rs)
        elapsed = reactor.seconds() - started
        assert answers == [f"file {i}" for i in range(10)] * 50
        # All in one minute (Gasoline's own window), and none counted against its budget.
        assert elapsed < 60, f"500 calls took {elapsed:.1f} s: the test proves nothing"
        limiter = d.app.mcp.tools.limiter
        assert limiter.limit == 100
        assert limiter.usage(d.app.proxy.sessions[sid].client_id)["used"] == 0
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_a_1_mb_file_is_read_whole_through_the_proxy(tmp_path):
    """Gasoline's 100 kB result cap is for its own tools."""
    a, _ = _projects(tmp_path)
    line = "0123456789abcdefghijklmnopqrstuvwxyz-the-same-line-again-and-again\n"
    content = (line * (1024 * 1024 // len(line) + 1))[:1024 * 1024]
    (a / "big.txt").write_text(content)
    d = Daemon(tmp_path, {"filesystem": _filesystem()}).start()
    try:
        sid = await d.session(a)
        r = await _call(d, sid, "filesystem__read_text_file", {"path": str(a / "big.txt")})
        assert r["result"].get("isError") is not True
        got = text_of(r)
        assert len(got) == 1024 * 1024 and got == content
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_delete_and_idle_timeout_leave_no_node_process_behind(tmp_path):
    a, b = _projects(tmp_path)
    d = Daemon(tmp_path, {"filesystem": _filesystem(), "everything": _everything()},
               proxy={"sessionIdleTimeout": 5.0}).start()
    try:
        sa = (await d.init(a))["sessionId"]
        groups_a = [c.pid for c in d.children(sa)]
        sb = (await d.init(b))["sessionId"]
        groups_b = [c.pid for c in d.children(sb)]
        states = [(c.name, c.state, c.last_error) for sid in (sa, sb) for c in d.children(sid)]
        assert all(group_members(g) for g in groups_a + groups_b), states
        code, _ = await d.request("DELETE", f"/session/{sa}")
        assert code == 200
        assert [group_members(g) for g in groups_a] == [[], []]
        states = [(c.name, c.state, c.last_error) for c in d.children(sb)]
        assert all(group_members(g) for g in groups_b), states
        # Nobody talks to session b: the idle timeout ends it and its children.
        assert await wait_for(lambda: sb not in d.app.proxy.sessions, timeout=10)
        assert await wait_for(lambda: all(group_members(g) == [] for g in groups_b), timeout=10)
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_a_filesystem_child_killed_mid_session_is_restarted(tmp_path):
    a, _ = _projects(tmp_path)
    d = Daemon(tmp_path, {"filesystem": _filesystem()}).start()
    try:
        sid = await d.session(a)
        child = d.children(sid)[0]
        old = child.pid
        os.killpg(old, signal.SIGKILL)
        assert await wait_for(lambda: child.state == "down")
        r = await _call(d, sid, "filesystem__read_text_file", {"path": str(a / "notes.txt")})
        assert r["result"]["isError"] is True and "server_unavailable" in text_of(r)
        assert await wait_for(lambda: child.state == "ready", timeout=15)
        assert child.pid != old and child.restarts == 1
        r = await _call(d, sid, "filesystem__read_text_file", {"path": str(a / "notes.txt")}, 8)
        assert text_of(r) == "alice's notes"
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_progress_and_cancellation_pass_through_server_everything(tmp_path):
    a, _ = _projects(tmp_path)
    d = Daemon(tmp_path, {"everything": _everything()}).start()
    try:
        sid = await d.session(a)
        session = d.app.mcp.sessions[sid]
        tool = "everything__trigger-long-running-operation"
        emitted = []
        result = await d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": {"duration": 0.6, "steps": 3},
                       "_meta": {"progressToken": "tok-a"}}}, emitted.append)
        assert "Long running operation completed" in text_of(result)
        progress = [m["params"] for m in emitted if m.get("method") == "notifications/progress"]
        assert [(p["progressToken"], p["progress"], p["total"]) for p in progress] == \
            [("tok-a", 1, 3), ("tok-a", 2, 3), ("tok-a", 3, 3)]

        # Cancellation: the child gets notifications/cancelled with its own request id and
        # (as the SDK does for an aborted request) never answers it; the agent gets no answer.
        child = d.children(sid)[0]
        sent, answered = [], []
        send, line = child._send, child._line
        child._send = lambda m: (sent.append(m), send(m))[1]

        def record(raw):
            msg = json.loads(raw)
            if "id" in msg and "method" not in msg:
                answered.append(msg["id"])
            return line(raw)

        child._line = record
        emitted.clear()
        pending = d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": {"duration": 1.0, "steps": 4},
                       "_meta": {"progressToken": 99}}}, emitted.append)
        assert await wait_for(lambda: any(m.get("method") == "notifications/progress"
                                          for m in emitted))
        child_id = next(m["id"] for m in sent if m.get("method") == "tools/call")
        await d.app.mcp.handle(session, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                         "params": {"requestId": 2, "reason": "user"}})
        assert await pending is None
        assert {"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": child_id, "reason": "cancelled by the caller"}} in sent
        await deferLater(reactor, 1.5, lambda: None)  # longer than the operation
        assert child_id not in answered
        # The child still answers other calls.
        r = await d.mcp(sid, "tools/call", {"name": "everything__echo",
                                            "arguments": {"message": "still here"}}, 3)
        assert "still here" in text_of(r)
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_everything_roots_come_from_the_daemon_not_the_agent(tmp_path):
    a, _ = _projects(tmp_path)
    d = Daemon(tmp_path, {"everything": _everything()}).start()
    try:
        sid = (await d.init(a))["sessionId"]
        # The agent declares roots of its own; the child still sees only the allowed directory.
        await d.mcp_initialize(sid, {"roots": {"listChanged": True}})
        r = await d.mcp(sid, "tools/call", {"name": "everything__get-roots-list",
                                            "arguments": {}}, 4)
        text = json.dumps(r)
        assert a.as_uri() in text
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_mcp_server_time_from_pypi_is_proxied(tmp_path):
    a, _ = _projects(tmp_path)
    require_tool("mcp-server-time", os.path.join(os.path.dirname(sys.executable),
                                                 "mcp-server-time"),
                 why="pip install -e .[test] (mcp-server-time==2026.10.19)")
    d = Daemon(tmp_path, {"time": {"command": sys.executable,
                                   "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
                                   "allowedDirectories": []}}).start()
    try:
        sid = (await d.init(a))["sessionId"]
        await d.mcp_initialize(sid)
        r = await d.mcp(sid, "tools/call", {"name": "time__get_current_time",
                                            "arguments": {"timezone": "Europe/Paris"}}, 2)
        body = json.loads(text_of(r))
        assert body["timezone"] == "Europe/Paris" and "datetime" in body
    finally:
        await d.stop()

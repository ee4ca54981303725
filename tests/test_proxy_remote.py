"""Remote MCP servers by ``url`` (docs/proxy.md): streamable HTTP and the legacy SSE transport,
against independent implementations: the official ``mcp`` Python SDK (tests/proxy/remote_server.py,
the test extra) and ``@modelcontextprotocol/server-everything``'s ``streamableHttp`` and ``sse``
modes (npm, .ci/node). Real reactor, real sockets on 127.0.0.1; under ``CI=true`` a missing Node
fails the Node tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from _proxy_harness import EVERYTHING, ROOT, Daemon, node_server, text_of, wait_for

pytestmark = pytest.mark.integration

REMOTE = str(ROOT / "tests" / "proxy" / "remote_server.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A remote MCP server subprocess on 127.0.0.1:<port>."""

    def __init__(self, argv: list[str], port: int, env: dict[str, str] | None = None) -> None:
        self.argv, self.port, self.env = argv, port, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Server":
        env = dict(os.environ)
        env.update(self.env or {})
        self.proc = subprocess.Popen(self.argv, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # blocking is fine: before the test's reactor work
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv} exited: {self.proc.stderr.read()[-2000:]!r}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.argv} did not listen on {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(10)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None


def sdk_server(transport: str, port: int | None = None) -> Server:
    port = port or _free_port()
    return Server([sys.executable, REMOTE, transport, str(port)], port)


def everything_server(mode: str) -> Server:
    node = node_server(EVERYTHING, "@modelcontextprotocol/server-everything@2026.8.31")
    port = _free_port()
    return Server([node, EVERYTHING, mode], port, {"PORT": str(port)})


@pytest.fixture
def sdk_http():
    server = sdk_server("streamable-http").start()
    yield server
    server.stop()


def _project(tmp_path: Path) -> Path:
    wd = tmp_path / "proj"
    wd.mkdir(exist_ok=True)
    return wd


async def _call(d, sid, name, arguments=None, rid=7):
    return await d.mcp(sid, "tools/call", {"name": name, "arguments": arguments or {}}, rid)


@pytest_twisted.ensureDeferred
async def test_streamable_http_server_is_listed_called_and_shared(tmp_path, sdk_http,
                                                                   monkeypatch):
    monkeypatch.setenv("REMOTE_TOKEN", "s3cret")
    url = f"http://127.0.0.1:{sdk_http.port}/mcp"
    d = Daemon(tmp_path, {"remote": {"url": url + "?key=${REMOTE_TOKEN}",
                                     "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}}}
               ).start()
    try:
        a, b = tmp_path / "a", tmp_path / "b"
        a.mkdir()
        b.mkdir()
        init = await d.init(a)
        entry = init["servers"]["remote"]
        assert entry["executionContext"] == "remote" and entry["enabled"] is True
        assert entry["status"] == "ready" and entry["transport"] == "streamable-http"
        # The endpoint is shown without its query (it may hold a secret).
        assert entry["endpoint"] == url and "s3cret" not in json.dumps(init)
        names = {t["name"] for t in init["tools"]}
        assert {"remote__echo", "remote__whoami", "remote__slow"} <= names
        sa = init["sessionId"]
        sb = (await d.init(b))["sessionId"]
        for sid in (sa, sb):
            await d.mcp_initialize(sid)
        assert text_of(await _call(d, sa, "remote__echo", {"message": "hi"})) == "echo: hi"
        # headers with ${ENV} reach the server.
        assert text_of(await _call(d, sb, "remote__whoami")) == "Bearer s3cret"
        # One shared instance, one MCP session on the server, for both proxy sessions.
        ca, cb = d.children(sa)[0], d.children(sb)[0]
        assert ca is cb and ca.session_id and ca.protocol_version == "2025-06-18"
        # A bad argument is the server's own error, passed on.
        r = await _call(d, sa, "remote__echo", {}, rid=9)
        assert r["result"]["isError"] is True
        # Ending a session leaves the shared server to the other one.
        code, _ = await d.request("DELETE", f"/session/{sa}")
        assert code == 200 and cb.state == "ready"
        assert text_of(await _call(d, sb, "remote__echo", {"message": "b"})) == "echo: b"
    finally:
        await d.stop()
    assert cb.state == "closed"


@pytest_twisted.ensureDeferred
async def test_progress_list_changed_and_roots_with_a_remote_server(tmp_path, sdk_http):
    d = Daemon(tmp_path, {"remote": {"url": f"http://127.0.0.1:{sdk_http.port}/mcp",
                                     "allowedDirectories": [str(tmp_path)]}}).start()
    try:
        sid = (await d.init(_project(tmp_path)))["sessionId"]
        await d.mcp_initialize(sid)
        session = d.app.mcp.sessions[sid]
        emitted: list = []
        result = await d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "remote__slow", "arguments": {"steps": 3},
                       "_meta": {"progressToken": "agent-tok"}}}, emitted.append)
        assert text_of(result) == "done after 3 steps"
        progress = [m["params"] for m in emitted if m.get("method") == "notifications/progress"]
        assert [(p["progressToken"], p["progress"]) for p in progress] == \
            [("agent-tok", 1), ("agent-tok", 2), ("agent-tok", 3)]
        before = len(session.standalone)
        assert text_of(await _call(d, sid, "remote__grow")) == "grew"
        assert await wait_for(lambda: "remote__grown" in d.app.proxy.sessions[sid].tools)
        await deferLater(reactor, 0.7, lambda: None)
        notes = [json.loads(p) for _, _, p in list(session.standalone._log)[before:]]
        assert [n["method"] for n in notes] == ["notifications/tools/list_changed"]
        assert text_of(await _call(d, sid, "remote__grown", rid=8)) == "grown"
        # A request from the server (roots/list) is answered by the daemon, from the server's
        # absolute allowedDirectories, never with the agent's roots.
        assert text_of(await _call(d, sid, "remote__roots", rid=9)) == tmp_path.as_uri()
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_cancellation_reaches_a_remote_server(tmp_path, sdk_http):
    d = Daemon(tmp_path, {"remote": {"url": f"http://127.0.0.1:{sdk_http.port}/mcp"}}).start()
    try:
        sid = (await d.init(_project(tmp_path)))["sessionId"]
        await d.mcp_initialize(sid)
        session = d.app.mcp.sessions[sid]
        child = d.children(sid)[0]
        sent = []
        post = child._post
        child._post = lambda m: (sent.append(m), post(m))[1]
        emitted: list = []
        pending = d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "remote__slow", "arguments": {"steps": 30},
                       "_meta": {"progressToken": 1}}}, emitted.append)
        assert await wait_for(lambda: any(m.get("method") == "notifications/progress"
                                          for m in emitted))
        await d.app.mcp.handle(session, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                         "params": {"requestId": 2, "reason": "user"}})
        assert await pending is None
        child_id = next(m["id"] for m in sent if m.get("method") == "tools/call")
        assert {"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": child_id, "reason": "cancelled by the caller"}} in sent
        assert child._streams == {} and child._pending == {}
        assert text_of(await _call(d, sid, "remote__echo", {"message": "on"})) == "echo: on"
    finally:
        await d.stop()


@pytest.mark.parametrize("spec", [{"type": "sse"}, {}], ids=["type-sse", "detected"])
@pytest_twisted.ensureDeferred
async def test_legacy_sse_transport_with_the_sdk(tmp_path, spec):
    # With "type": "sse", or detected: a POST of initialize to the SSE URL is refused (4xx).
    server = sdk_server("sse").start()
    d = Daemon(tmp_path, {"old": {**spec, "url": f"http://127.0.0.1:{server.port}/sse"}}
               ).start()
    try:
        init = await d.init(_project(tmp_path))
        assert init["servers"]["old"]["status"] == "ready", init["servers"]
        assert init["servers"]["old"]["transport"] == "sse"
        sid = init["sessionId"]
        await d.mcp_initialize(sid)
        assert text_of(await _call(d, sid, "old__echo", {"message": "sse"})) == "echo: sse"
        session = d.app.mcp.sessions[sid]
        emitted: list = []
        result = await d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "old__slow", "arguments": {"steps": 2},
                       "_meta": {"progressToken": "t"}}}, emitted.append)
        assert text_of(result) == "done after 2 steps"
        assert len([m for m in emitted if m.get("method") == "notifications/progress"]) == 2
    finally:
        await d.stop()
        server.stop()


@pytest_twisted.ensureDeferred
async def test_a_remote_server_that_goes_away_fails_fast_then_comes_back(tmp_path):
    server = sdk_server("streamable-http").start()
    d = Daemon(tmp_path, {"remote": {"url": f"http://127.0.0.1:{server.port}/mcp"}}).start()
    try:
        sid = (await d.init(_project(tmp_path)))["sessionId"]
        await d.mcp_initialize(sid)
        child = d.children(sid)[0]
        old_session = child.session_id
        assert text_of(await _call(d, sid, "remote__echo", {"message": "1"})) == "echo: 1"
        server.stop()
        r = await _call(d, sid, "remote__echo", {"message": "2"}, rid=8)
        assert r["result"]["isError"] is True and "server_unavailable" in text_of(r)
        assert child.state in ("down", "starting")
        r = await _call(d, sid, "remote__echo", {"message": "3"}, rid=9)
        assert r["result"]["isError"] is True  # fails fast while it is down
        # The server comes back on the same port (a new process: it forgot the old session).
        server = sdk_server("streamable-http", server.port).start()
        assert await wait_for(lambda: child.state == "ready", timeout=20), child.last_error
        assert child.session_id != old_session and child.restarts >= 1
        assert text_of(await _call(d, sid, "remote__echo", {"message": "4"}, rid=10)) == "echo: 4"
    finally:
        await d.stop()
        server.stop()


@pytest_twisted.ensureDeferred
async def test_a_server_that_forgot_its_session_gets_a_new_initialize(tmp_path, sdk_http):
    d = Daemon(tmp_path, {"remote": {"url": f"http://127.0.0.1:{sdk_http.port}/mcp"}}).start()
    try:
        sid = (await d.init(_project(tmp_path)))["sessionId"]
        await d.mcp_initialize(sid)
        child = d.children(sid)[0]
        old = child.session_id
        child.session_id = "0" * 32  # as if the server had restarted: it answers 404
        r = await _call(d, sid, "remote__echo", {"message": "x"})
        assert r["result"]["isError"] is True and "HTTP 404" in text_of(r)
        assert await wait_for(lambda: child.state == "ready", timeout=15), child.last_error
        assert child.session_id not in (old, "0" * 32)
        assert text_of(await _call(d, sid, "remote__echo", {"message": "y"}, 8)) == "echo: y"
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_unreachable_and_refusing_servers_are_listed_down_with_their_error(tmp_path,
                                                                                 sdk_http):
    port = _free_port()
    d = Daemon(tmp_path, {
        "gone": {"url": f"http://127.0.0.1:{port}/mcp"},
        "wrongpath": {"url": f"http://127.0.0.1:{sdk_http.port}/nothing-here"},
    }, proxy={"startTimeout": 5}).start()
    try:
        init = await d.init(_project(tmp_path))
        gone, wrong = init["servers"]["gone"], init["servers"]["wrongpath"]
        # (By the time the slower one failed, the first may be retrying: "starting".)
        assert gone["status"] in ("down", "starting") and "cannot reach" in gone["error"], gone
        assert wrong["status"] in ("down", "starting") and "HTTP 404" in wrong["error"], wrong
        assert init["tools"] == []
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_a_remote_server_that_does_not_answer_times_out(tmp_path):
    # A socket that accepts and never answers: the server's "timeout" bounds the start.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        d = Daemon(tmp_path, {"mute": {"url": f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"}},
                   proxy={"startTimeout": 0.5}).start()
        try:
            started = time.monotonic()
            init = await d.init(_project(tmp_path))
            assert time.monotonic() - started < 5
            assert init["servers"]["mute"]["status"] == "down", init["servers"]
            assert "within 0.5 s" in init["servers"]["mute"]["error"]
        finally:
            await d.stop()
    finally:
        sock.close()


@pytest.mark.parametrize("mode, path", [("streamableHttp", "/mcp"), ("sse", "/sse")])
@pytest_twisted.ensureDeferred
async def test_server_everything_over_http(tmp_path, mode, path):
    server = everything_server(mode).start()
    spec = {"url": f"http://127.0.0.1:{server.port}{path}"}
    if mode == "sse":
        spec["type"] = "sse"
    d = Daemon(tmp_path, {"everything": spec}).start()
    try:
        init = await d.init(_project(tmp_path))
        assert init["servers"]["everything"]["status"] == "ready", init["servers"]
        sid = init["sessionId"]
        await d.mcp_initialize(sid)
        r = await _call(d, sid, "everything__echo", {"message": "over http"})
        assert "over http" in text_of(r)
        session = d.app.mcp.sessions[sid]
        emitted: list = []
        result = await d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "everything__trigger-long-running-operation",
                       "arguments": {"duration": 0.4, "steps": 2},
                       "_meta": {"progressToken": "e"}}}, emitted.append)
        assert "Long running operation completed" in text_of(result)
        progress = [m["params"] for m in emitted if m.get("method") == "notifications/progress"]
        assert [(p["progressToken"], p["progress"]) for p in progress] == [("e", 1), ("e", 2)]
    finally:
        await d.stop()
        server.stop()


@pytest_twisted.ensureDeferred
async def test_a_session_with_a_remote_server_survives_a_daemon_restart(tmp_path, sdk_http):
    servers = {"remote": {"url": f"http://127.0.0.1:{sdk_http.port}/mcp"}}
    state = tmp_path / "state"
    d = Daemon(tmp_path, servers, persist=True).start()
    try:
        sid = (await d.init(_project(tmp_path)))["sessionId"]
        await d.mcp_initialize(sid)
        first = d.children(sid)[0].session_id
    finally:
        await d.stop()
    d2 = Daemon(tmp_path, servers, persist=True, state_dir=state).start()
    try:
        child = d2.children(sid)[0]
        assert child.state == "stopped" and "remote__echo" in d2.app.proxy.sessions[sid].tools
        assert text_of(await _call(d2, sid, "remote__echo", {"message": "back"})) == "echo: back"
        assert child.state == "ready" and child.session_id not in (None, first)
    finally:
        await d2.stop()


@pytest_twisted.ensureDeferred
async def test_sampling_from_a_shared_remote_server_reaches_the_session_whose_call_asked(
        tmp_path, sdk_http):
    # Two sessions call the same shared server at once; each call makes the server ask for a
    # sampling (on that call's answer stream). Each agent gets the request for its own call
    # only, and each call gets its own agent's answer.
    d = Daemon(tmp_path, {"remote": {"url": f"http://127.0.0.1:{sdk_http.port}/mcp",
                                     "allowedDirectories": []}}).start()
    try:
        sessions = {}
        for name in ("a", "b"):
            wd = tmp_path / name
            wd.mkdir()
            sid = (await d.init(wd, capabilities={"sampling": {}}))["sessionId"]
            await d.mcp_initialize(sid, {"sampling": {}})
            sessions[name] = (sid, d.app.mcp.sessions[sid], [])
        calls = {name: d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "remote__sample", "arguments": {"prompt": f"for {name}"}}},
            emitted.append) for name, (_, session, emitted) in sessions.items()}

        def asked(name):
            return [m for m in sessions[name][2] if m.get("method") == "sampling/createMessage"]

        assert await wait_for(lambda: asked("a") and asked("b"))
        for name, (_, session, _) in sessions.items():
            (request,) = asked(name)
            assert request["params"]["messages"][0]["content"]["text"] == f"for {name}"
            await d.app.mcp.handle(session, {"jsonrpc": "2.0", "id": request["id"], "result": {
                "role": "assistant", "content": {"type": "text", "text": f"agent {name}"},
                "model": "m"}})
        for name, call in calls.items():
            assert text_of(await call) == f"agent {name}"
    finally:
        await d.stop()

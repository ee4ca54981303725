"""``gasoline connect`` as a real process against a real daemon.

The official ``mcp`` SDK's stdio client spawns the connector; raw pipes drive the hostile-input and
auto-start cases. Every process started here is stopped here (by pid).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from gasoline.testing import EXTENSION_HEADERS
from support import DaemonProcess

pytestmark = [
    pytest.mark.integration,
    # mcp 2.3.0 warns that a future revision deprecates logging; the revisions we speak have it.
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

FIVE_TOOLS = {"observe", "analyze", "generate", "configure", "interact"}
ENTRIES = [
    {"level": "info", "message": "hello", "type": "console", "ts": "2026-01-01T00:00:00Z"},
    {"level": "error", "message": "boom", "type": "console", "ts": "2026-01-01T00:00:01Z"},
    {"level": "error", "type": "exception", "message": "TypeError: x is undefined",
     "ts": "2026-01-01T00:00:02Z"},
]


def connector_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "gasoline", "connect", *args]


def post_logs(url: str, entries: list[dict]) -> None:
    req = urllib.request.Request(url + "/logs", data=json.dumps({"entries": entries}).encode(),
                                 headers=EXTENSION_HEADERS, method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def observe_payload(result) -> dict:
    assert result.is_error is False, result
    return json.loads(result.content[0].text.partition("\n")[2])


def sdk_params(port: int, client_id: str, cwd: Path, *extra: str) -> StdioServerParameters:
    argv = connector_argv("--port", str(port), "--client-id", client_id, "--no-autostart", *extra)
    return StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(cwd), env=dict(os.environ))


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


# -- the official SDK over stdio ------------------------------------------------------------------


def test_sdk_stdio_client_through_connector(daemon, tmp_path):
    post_logs(daemon.url, ENTRIES)

    async def main():
        messages: list = []

        async def on_log(params) -> None:
            messages.append(params)

        with open(tmp_path / "connector.err", "w") as errlog:
            async with stdio_client(sdk_params(daemon.port, "sdk-a", tmp_path), errlog=errlog) as (r, w):
                async with ClientSession(r, w, logging_callback=on_log) as session:
                    init = await session.initialize()
                    assert init.server_info.name == "gasoline"
                    tools = await session.list_tools()
                    assert FIVE_TOOLS <= {t.name for t in tools.tools}
                    await session.set_logging_level("debug")
                    first = observe_payload(await session.call_tool("observe", {"what": "errors"}))
                    second = observe_payload(await session.call_tool("observe", {"what": "errors"}))
                    guide = await session.read_resource("gasoline://guide")
                    for _ in range(100):
                        if any(m.level == "debug" for m in messages):
                            break
                        await asyncio.sleep(0.05)
                    clients = get_json(daemon.url + "/clients")
        return first, second, guide, messages, clients

    first, second, guide, messages, clients = run(main())
    assert first["count"] == 2
    assert [e["message"] for e in first["entries"]] == ["boom", "TypeError: x is undefined"]
    assert second["count"] == 0
    assert "# Gasoline usage guide" in guide.contents[0].text
    # notifications/message arrived through the connector's GET /mcp stream.
    assert any(m.level == "debug" for m in messages)
    assert {c["id"]: c["connected"] for c in clients["list"]}["sdk-a"] is True
    # On stdin EOF the connector unregistered.
    after = get_json(daemon.url + "/clients")
    assert {c["id"]: c["connected"] for c in after["list"]}["sdk-a"] is False


def test_three_connectors_each_see_every_buffered_log_once(daemon, tmp_path):
    post_logs(daemon.url, ENTRIES)

    async def agent(client_id: str):
        with open(tmp_path / f"{client_id}.err", "w") as errlog:
            async with stdio_client(sdk_params(daemon.port, client_id, tmp_path), errlog=errlog) as (r, w):
                async with ClientSession(r, w) as session:
                    await session.initialize()
                    first = observe_payload(await session.call_tool("observe", {"what": "logs"}))
                    again = observe_payload(await session.call_tool("observe", {"what": "logs"}))
                    return first, again

    async def main():
        return await asyncio.gather(agent("agent-1"), agent("agent-2"), agent("agent-3"))

    results = run(main())
    for first, again in results:
        assert [e["message"] for e in first["entries"]] == [
            "hello", "boom", "TypeError: x is undefined"]
        assert again["count"] == 0
    ids = {c["id"] for c in get_json(daemon.url + "/clients")["list"]}
    assert {"agent-1", "agent-2", "agent-3"} <= ids


def test_a_checkpoint_or_noise_rule_set_through_one_connector_is_invisible_to_the_others(
        daemon, tmp_path):
    post_logs(daemon.url, ENTRIES)

    async def agent(client_id: str, sets_state: bool, ready: asyncio.Event):
        with open(tmp_path / f"{client_id}.err", "w") as errlog:
            async with stdio_client(sdk_params(daemon.port, client_id, tmp_path), errlog=errlog) as (r, w):
                async with ClientSession(r, w) as session:
                    await session.initialize()
                    if sets_state:
                        for args in ({"what": "checkpoint", "name": "before"},
                                     {"what": "noise_rule", "noise_action": "add",
                                      "pattern": "boom", "field": "message"}):
                            assert (await session.call_tool("configure", args)).is_error is False
                        ready.set()
                    else:
                        await ready.wait()
                    listed = observe_payload(await session.call_tool(
                        "configure", {"what": "checkpoint", "checkpoint_action": "list"}))
                    errors = observe_payload(await session.call_tool("observe", {"what": "errors"}))
                    return listed, [e["message"] for e in errors["entries"]]

    async def main():
        ready = asyncio.Event()
        return await asyncio.gather(agent("setter", True, ready), agent("other-1", False, ready),
                                    agent("other-2", False, ready))

    (setter_list, setter_errors), *others = run(main())
    assert [c["name"] for c in setter_list["checkpoints"]] == ["before"]
    assert setter_errors == ["TypeError: x is undefined"]  # its own rule hides "boom"
    for listed, errors in others:
        assert listed["checkpoints"] == []
        assert errors == ["boom", "TypeError: x is undefined"]


def test_generate_save_to_writes_inside_the_agents_directory_and_nowhere_else(daemon, tmp_path):
    """The connector reports its working directory; save_to may write there, not elsewhere."""
    project = tmp_path / "project"
    project.mkdir()
    outside = tmp_path / "outside.har"

    async def agent():
        with open(tmp_path / "agent.err", "w") as errlog:
            async with stdio_client(sdk_params(daemon.port, "writer", project), errlog=errlog) as (r, w):
                async with ClientSession(r, w) as session:
                    await session.initialize()
                    inside = await session.call_tool(
                        "generate", {"what": "har", "save_to": str(project / "capture.har")})
                    refused = await session.call_tool(
                        "generate", {"what": "har", "save_to": str(outside)})
                    return inside, refused

    inside, refused = run(agent())
    assert inside.is_error is False, inside
    assert json.loads((project / "capture.har").read_text())["log"]["version"] == "1.2"
    assert refused.is_error is True and not outside.exists()


def test_two_connectors_with_one_client_id_share_its_cursor(daemon, tmp_path):
    """Two terminals in one repo are one client: what one has read is read for the other."""
    post_logs(daemon.url, ENTRIES)

    async def main():
        with open(tmp_path / "a.err", "w") as ea, open(tmp_path / "b.err", "w") as eb:
            async with stdio_client(sdk_params(daemon.port, "same-repo", tmp_path), errlog=ea) as (ra, wa), \
                    stdio_client(sdk_params(daemon.port, "same-repo", tmp_path), errlog=eb) as (rb, wb):
                async with ClientSession(ra, wa) as a, ClientSession(rb, wb) as b:
                    await a.initialize()
                    await b.initialize()
                    first = observe_payload(await a.call_tool("observe", {"what": "logs"}))
                    second = observe_payload(await b.call_tool("observe", {"what": "logs"}))
                    listed = get_json(daemon.url + "/clients")
                    return first, second, listed

    first, second, listed = run(main())
    assert first["count"] == 3 and second["count"] == 0
    (entry,) = [c for c in listed["list"] if c["id"] == "same-repo"]
    assert entry["connections"] == 2


def test_connector_recovers_when_the_daemon_is_killed_and_restarted(tmp_path):
    state = tmp_path / "state"
    first = DaemonProcess(state_dir=state).start()
    port = first.port
    second = DaemonProcess(state_dir=state, args=["--listen", f"tcp:{port}:interface=127.0.0.1"])
    try:
        post_logs(first.url, ENTRIES)

        async def main():
            with open(tmp_path / "connector.err", "w") as errlog:
                async with stdio_client(sdk_params(port, "survivor", tmp_path), errlog=errlog) as (r, w):
                    async with ClientSession(r, w) as session:
                        await session.initialize()
                        before = observe_payload(await session.call_tool("observe", {"what": "errors"}))
                        first.kill()  # a crash, mid-session
                        call = asyncio.ensure_future(session.call_tool("observe", {"what": "errors"}))
                        await asyncio.sleep(1.0)
                        assert not call.done()  # held by the connector, not failed
                        t0 = time.monotonic()
                        await asyncio.to_thread(second.start)
                        during = observe_payload(await call)
                        waited = time.monotonic() - t0
                        tools = await session.list_tools()
                        post_logs(second.url, [{"level": "error", "message": "after restart",
                                                "type": "console", "ts": "2026-01-01T00:00:09Z"}])
                        after = observe_payload(await session.call_tool("observe", {"what": "errors"}))
                        return before, during, waited, tools, after

        before, during, waited, tools, after = run(main(), timeout=90)
        assert before["count"] == 2
        assert isinstance(during["count"], int)  # answered, not an error
        assert waited < 20
        assert FIVE_TOOLS <= {t.name for t in tools.tools}
        assert "after restart" in [e["message"] for e in after["entries"]]
    finally:
        first.stop()
        second.stop()


# -- raw pipes ------------------------------------------------------------------------------------


class RawConnector:
    """The connector as a subprocess with line-oriented access to its stdout."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.stderr_path = cwd / f"connector-{time.monotonic_ns()}.err"
        self._err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(argv, cwd=str(cwd), stdin=subprocess.PIPE, env=env,
                                     stdout=subprocess.PIPE, stderr=self._err)
        self.lines: queue.Queue = queue.Queue()
        self.raw: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.raw.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def recv(self, timeout: float = 15) -> dict:
        line = self.lines.get(timeout=timeout)
        assert line is not None, f"connector exited; stderr:\n{self.stderr()}"
        return json.loads(line)

    def stderr(self) -> str:
        if not self._err.closed:
            self._err.flush()
        return self.stderr_path.read_text(errors="replace")

    def kill(self) -> None:
        """Clean-up: make sure the process is gone."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        if not self._err.closed:
            self._err.close()

    def close(self, timeout: float = 15) -> int:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise
        finally:
            self._err.close()


INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}}


def test_hostile_stdin_gets_jsonrpc_errors_and_the_session_continues(daemon, tmp_path):
    c = RawConnector(connector_argv("--port", str(daemon.port), "--client-id", "hostile",
                                    "--no-autostart", "--max-line", "1048576"), tmp_path)
    try:
        c.send(INIT)
        assert c.recv()["result"]["serverInfo"]["name"] == "gasoline"
        c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        c.send_raw(b"{this is not json\n")
        bad = c.recv()
        assert bad["id"] is None and bad["error"]["code"] == -32700
        huge = b'{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"observe","arguments":{"x":"'
        c.send_raw(huge + b"a" * (2 * 1024 * 1024) + b'"}}}\n')
        too_big = c.recv()
        assert too_big["id"] == 41 and too_big["error"]["code"] == -32600
        assert too_big["error"]["data"]["error"] == "message_too_large"
        c.send({"jsonrpc": "2.0", "id": 42, "method": "tools/call",
                "params": {"name": "observe", "arguments": {"what": 12}}})
        wrong_type = c.recv()
        assert wrong_type["id"] == 42
        assert "error" in wrong_type or wrong_type["result"].get("isError") is True
        c.send({"jsonrpc": "2.0", "id": 43, "method": "ping"})
        assert c.recv() == {"jsonrpc": "2.0", "id": 43, "result": {}}
        assert c.close() == 0
        # Nothing but JSON-RPC lines ever reached stdout.
        assert all(json.loads(line).get("jsonrpc") == "2.0" for line in c.raw)
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(5)


def test_request_is_answered_with_error_when_no_daemon_appears_within_the_bound(tmp_path):
    port = _free_port()
    c = RawConnector(connector_argv("--port", str(port), "--no-autostart", "--bound", "1.5"), tmp_path)
    try:
        t0 = time.monotonic()
        c.send(INIT)
        err = c.recv(timeout=15)
        assert err["id"] == 0 and err["error"]["code"] == -32000
        assert err["error"]["data"]["error"] == "daemon_unavailable"
        assert 1.0 < time.monotonic() - t0 < 10
        assert c.close() == 0
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _daemon_pid(state: Path) -> int | None:
    for name in ("daemon.json", "gasoline.pid"):
        try:
            text = (state / name).read_text()
            return int(json.loads(text)["pid"]) if name.endswith(".json") else int(text.strip())
        except (OSError, ValueError, KeyError):
            continue
    return None


def test_connector_autostarts_a_detached_daemon(tmp_path):
    port = _free_port()
    state = tmp_path / "auto-state"
    project = tmp_path / "project"
    project.mkdir()
    c = RawConnector(connector_argv("--port", str(port), "--state-dir", str(state)), project)
    pid = None
    try:
        c.send(INIT)
        init = c.recv(timeout=30)
        assert init["result"]["serverInfo"]["name"] == "gasoline", c.stderr()
        pid = _daemon_pid(state)
        assert pid is not None and psutil.pid_exists(pid)
        assert (state / "daemon.log").exists()
        health = get_json(f"http://127.0.0.1:{port}/health")
        assert health["service-name"] == "gasoline"
        # Identity from the working directory.
        from gasoline.core.clients.registry import client_id_for_cwd

        ids = [x["id"] for x in get_json(f"http://127.0.0.1:{port}/clients")["list"]]
        assert client_id_for_cwd(project) in ids
        assert c.close() == 0
        # The daemon is detached: it outlives the connector.
        assert psutil.pid_exists(pid)
        assert get_json(f"http://127.0.0.1:{port}/health")["service-name"] == "gasoline"
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(5)
        pid = pid or _daemon_pid(state)
        if pid is not None and psutil.pid_exists(pid):
            os.kill(pid, signal.SIGTERM)
            try:
                psutil.Process(pid).wait(10)
            except psutil.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass


def test_sigterm_unregisters_and_exits(daemon, tmp_path):
    c = RawConnector(connector_argv("--port", str(daemon.port), "--client-id", "termed",
                                    "--no-autostart"), tmp_path)
    try:
        c.send(INIT)
        assert "result" in c.recv()
        listed = {x["id"]: x["connected"] for x in get_json(daemon.url + "/clients")["list"]}
        assert listed["termed"] is True
        c.proc.send_signal(signal.SIGTERM)
        assert c.proc.wait(15) == 0
        listed = {x["id"]: x["connected"] for x in get_json(daemon.url + "/clients")["list"]}
        assert listed["termed"] is False
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(5)


def test_connector_uses_the_api_key_of_a_keyed_daemon(tmp_path):
    with DaemonProcess(state_dir=tmp_path / "state", args=["--api-key", "k-123"]) as keyed:
        argv = connector_argv("--port", str(keyed.port), "--client-id", "keyed", "--no-autostart",
                              "--bound", "2")
        env = dict(os.environ, GASOLINE_API_KEY="k-123")
        ok = RawConnector(argv, tmp_path, env=env)
        try:
            ok.send(INIT)
            assert "result" in ok.recv()
            assert ok.close() == 0
        finally:
            ok.kill()
        env.pop("GASOLINE_API_KEY")
        refused = RawConnector(argv, tmp_path, env=env)
        try:
            started = time.monotonic()
            refused.send(INIT)
            err = refused.recv()
            # A refusal waiting cannot fix: answered at once (not after --bound), then the
            # connector ends non-zero with one line that says what to do.
            assert err["id"] == 0 and err["error"]["code"] == -32000
            assert err["error"]["data"]["error"] == "daemon_refused", err
            assert "unauthorized" in err["error"]["message"] and "--api-key" in \
                err["error"]["message"]
            assert refused.proc.wait(15) == 1
            assert time.monotonic() - started < 10
        finally:
            refused.kill()
        lines = [line for line in refused.stderr().splitlines()
                 if line.startswith("gasoline connect:")]
        assert len(lines) == 1 and "--api-key" in lines[0], refused.stderr()
        assert "Traceback" not in refused.stderr()


def test_the_connector_proves_its_id_with_the_key_of_the_daemons_state_dir(daemon, tmp_path):
    """The daemon runs on a state dir the connector was not told about (its default points
    elsewhere): the connector reads the key where the daemon's /health says and its agent is
    served as its id, while a caller with the id alone is refused; nothing but protocol lines
    reach stdout."""
    elsewhere = tmp_path / "connector-default-state"
    elsewhere.mkdir()
    env = dict(os.environ, GASOLINE_STATE_DIR=str(elsewhere))
    assert Path(daemon.state_dir) != elsewhere and (Path(daemon.state_dir) / "client-key").exists()
    c = RawConnector(connector_argv("--port", str(daemon.port), "--client-id", "proven",
                                    "--no-autostart"), tmp_path, env=env)
    try:
        c.send(INIT)
        assert "result" in c.recv()
        c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        c.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "configure", "arguments": {"what": "streaming", "subscribe": ["error"]}}})
        answer = c.recv()
        assert answer["id"] == 1 and answer["result"]["isError"] is False, answer
        listed = {x["id"]: x["connected"] for x in get_json(daemon.url + "/clients")["list"]}
        assert listed["proven"] is True
        # A caller with only the id (no key) is refused on the daemon's HTTP API.
        req = urllib.request.Request(daemon.url + "/clients/proven", method="DELETE",
                                     headers={"X-Gasoline-Client": "proven"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=5)
        assert refused.value.code == 403
        assert c.close() == 0
    finally:
        c.kill()
    assert all(json.loads(line).get("jsonrpc") == "2.0" for line in c.raw)
    assert "cannot read the daemon's client key" not in c.stderr(), c.stderr()
    assert f"the daemon's state dir is {daemon.state_dir}" in c.stderr()


def test_a_connector_that_cannot_read_the_key_says_so_on_stderr_and_its_agent_gets_errors(
        tmp_path):
    """The key file is gone (the daemon holds its key in memory): the connector cannot prove
    its id, says why on stderr, and answers its agent with JSON-RPC errors on stdout."""
    with DaemonProcess(state_dir=tmp_path / "state") as d:
        (Path(d.state_dir) / "client-key").unlink()
        c = RawConnector(connector_argv("--port", str(d.port), "--client-id", "keyless",
                                        "--no-autostart", "--bound", "3"), tmp_path)
        try:
            c.send(INIT)
            answer = c.recv(timeout=30)
            assert answer["id"] == 0 and "error" in answer, answer
            # The daemon refuses the proof-less id twice: final, the connector ends non-zero.
            assert answer["error"]["data"]["error"] == "daemon_refused", answer
            assert c.proc.wait(15) == 1
        finally:
            c.kill()
        assert all(json.loads(line).get("jsonrpc") == "2.0" for line in c.raw)
        err = c.stderr()
        assert "cannot read the daemon's client key" in err and "client-key" in err, err
        listed = [x["id"] for x in get_json(d.url + "/health")["clients"]["list"]]
        assert "keyless" not in listed


def test_every_request_piped_before_eof_is_answered_even_if_stdout_is_read_late(daemon, tmp_path):
    """``printf ... | gasoline connect``: answers are drained through a full pipe before exit."""
    requests = [INIT] + [{"jsonrpc": "2.0", "id": i, "method": "tools/list"} for i in range(1, 41)]
    data = b"".join(json.dumps(m).encode() + b"\n" for m in requests)
    proc = subprocess.Popen(
        connector_argv("--port", str(daemon.port), "--client-id", "piped", "--no-autostart"),
        cwd=str(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL)
    try:
        proc.stdin.write(data)
        proc.stdin.close()
        time.sleep(1.0)  # nobody reads stdout meanwhile: the connector's writes back up
        out = proc.stdout.read()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 0
    answers = [json.loads(line) for line in out.splitlines()]
    assert sorted(a["id"] for a in answers) == list(range(41))
    assert all("result" in a for a in answers)
    assert len(out) > 256 * 1024  # more than a pipe buffer: the drain really waited


def test_connector_starts_nothing_when_something_else_holds_the_port(tmp_path):
    """A port held by a service that is not Gasoline (here: a raw TCP service that answers one
    line and closes) gets no daemon started beside it, and the agent is told why."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"220 not gasoline\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    state = tmp_path / "auto-state"
    c = RawConnector(connector_argv("--port", str(port), "--state-dir", str(state),
                                    "--bound", "3"), tmp_path)
    try:
        c.send(INIT)
        err = c.recv(timeout=30)
        assert err["id"] == 0 and "error" in err, err
        assert "not a Gasoline daemon" in json.dumps(err), err
        assert c.close() == 0
        assert _daemon_pid(state) is None
        assert not (state / "daemon.log").exists()
    finally:
        stop.set()
        thread.join(5)
        server.close()
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(5)


def test_an_http_server_that_is_not_gasoline_ends_the_connector_at_once(tmp_path):
    """Something else answers HTTP 404 on the port: the agent's initialize gets an error at once
    (not after --bound), the connector writes one line on stderr and exits 1, and starts
    nothing."""
    import http.server

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state = tmp_path / "auto-state"
    c = RawConnector(connector_argv("--port", str(server.server_address[1]), "--state-dir",
                                    str(state), "--bound", "30"), tmp_path)
    try:
        started = time.monotonic()
        c.send(INIT)
        err = c.recv(timeout=30)
        assert err["id"] == 0 and err["error"]["data"]["error"] == "daemon_refused", err
        assert "not a Gasoline daemon" in err["error"]["message"]
        assert c.proc.wait(15) == 1
        assert time.monotonic() - started < 10  # far less than --bound
    finally:
        c.kill()
        server.shutdown()
        server.server_close()
        thread.join(5)
    lines = [line for line in c.stderr().splitlines() if line.startswith("gasoline connect:")]
    assert len(lines) == 1 and "HTTP 404" in lines[0], c.stderr()
    assert "Traceback" not in c.stderr()
    assert _daemon_pid(state) is None

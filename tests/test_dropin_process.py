"""The drop-in, end to end with real processes: an agent that uses only the published Gasoline's
names through ``gasoline connect`` (no initialize, published parameter names), a malformed line
before the initialize answer, ``gasoline doctor | status | stop``, and the version everyone
reports."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from gasoline.testing import EXTENSION_HEADERS
from support import DaemonProcess
from test_connector_integration import INIT, RawConnector, connector_argv, post_logs

pytestmark = [pytest.mark.integration]


def gasoline(*args: str, timeout: float = 30, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "gasoline", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=5) as resp:
        return json.loads(resp.read())


def tool_json(answer: dict) -> tuple[bool, str, dict]:
    result = answer["result"]
    summary, _, payload = result["content"][0]["text"].partition("\n")
    return result["isError"], summary, json.loads(payload) if payload else {}


def test_an_agent_using_only_the_published_names_end_to_end(daemon, tmp_path):
    """What the published Gasoline's users send: no initialize, action/format aliases,
    store_action + data, rules:[{match_spec}], list_sequences, annotation_report."""
    c = RawConnector(connector_argv("--port", str(daemon.port), "--client-id", "published",
                                    "--no-autostart"), tmp_path)
    rid = iter(range(1, 100))

    def tool(tool_name, **arguments):
        i = next(rid)
        c.send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                "params": {"name": tool_name, "arguments": arguments}})
        answer = c.recv()
        assert answer["id"] == i, answer
        return tool_json(answer)

    try:
        c.send({"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
        listed = c.recv()
        assert {t["name"] for t in listed["result"]["tools"]} == {
            "observe", "analyze", "generate", "configure", "interact"}
        err, summary, data = tool("configure", action="store", store_action="save",
                                  key="notes", data={"bug": "login loops"})
        assert not err and "preferred here" in summary, (summary, data)
        err, _, data = tool("configure", action="store", store_action="load", key="notes")
        assert not err and data["value"] == {"bug": "login loops"}
        err, _, data = tool("configure", action="store", store_action="list")
        assert data["keys"] == ["notes"]
        err, summary, data = tool("configure", action="noise_rule", noise_action="add", rules=[
            {"category": "console", "classification": "known noise",
             "match_spec": {"message_regex": "^analytics"}}])
        assert not err, (summary, data)
        post_logs(daemon.url, [
            {"level": "error", "message": "analytics: dropped beacon", "type": "console",
             "ts": "2026-01-01T00:00:00Z"},
            {"level": "error", "message": "TypeError: real bug", "type": "console",
             "ts": "2026-01-01T00:00:01Z"}])
        err, _, data = tool("observe", what="errors")
        seen = json.dumps(data)
        assert "TypeError: real bug" in seen and "dropped beacon" not in seen
        # The rules come back in the shape they were added (rules[].id, match_spec).
        err, _, data = tool("configure", action="noise_rule", noise_action="list")
        mine = [r for r in data["rules"] if r.get("match_spec") == {"message_regex": "^analytics"}]
        assert not err and len(mine) == 1 and mine[0]["id"], data["rules"]
        assert mine[0]["classification"] == "known noise" and mine[0]["category"] == "console"
        # streaming takes the published event names.
        err, _, data = tool("configure", action="streaming", streaming_action="enable",
                            events=["errors", "network_errors"])
        assert not err and data["subscribe"] == ["error", "network_failure"], data
        err, _, data = tool("configure", action="streaming", streaming_action="enable",
                            events=["ci"])
        assert err and data["error"] == "invalid_param" and "ci" in data["message"]
        # A relative upload path that is not there: the answer says an absolute path is needed.
        err, _, data = tool("interact", action="upload", selector="#file",
                            file_path="relative/path/file.txt")
        assert err and "absolute path" in data["message"], data
        err, _, data = tool("configure", action="save_sequence", name="login",
                            description="log in", tags=["smoke", "auth"],
                            steps=[{"action": "navigate", "url": "https://app.test/"}])
        assert not err, data
        err, _, data = tool("configure", action="list_sequences")
        assert [s["name"] for s in data["sequences"]] == ["login"] and data["count"] == 1
        assert data["sequences"][0]["tags"] == ["smoke", "auth"]
        err, _, data = tool("configure", action="get_sequence", name="login")
        assert data["steps"] == [{"what": "navigate", "url": "https://app.test/"}]
        # The published answer's fields: status, name, description, tags, step_count, saved_at.
        assert (data["status"], data["name"], data["description"], data["tags"],
                data["step_count"]) == ("ok", "login", "log in", ["smoke", "auth"], 1), data
        assert data["saved_at"].endswith("Z")
        err, _, data = tool("configure", action="delete_sequence", name="login")
        assert not err
        # No extension is connected: the published error contract fields are there.
        err, _, data = tool("generate", format="annotation_report")
        assert err and data["error"] == "extension_disconnected", data
        assert data["retryable"] is True and data["retry"]
        assert data["aliases"][0] == {"published": "format", "preferred": "what"}
        err, _, data = tool("configure", action="store", store_action="stats")
        assert err and data["retryable"] is False and data["error"] == "invalid_param"
        # The client the connector named is who the daemon saw: state is the client's.
        clients = health(daemon.url)["clients"]["list"]
        assert "published" in json.dumps(clients)
    finally:
        assert c.close() == 0


@pytest.mark.parametrize("data", [
    b'{"jsonrpc": "2.0", "id": 1, "method": \n' + json.dumps(INIT).encode() + b"\n",
    json.dumps(INIT).encode() + b"\n{not json\n",
], ids=["malformed-first", "malformed-after-initialize"])
def test_a_malformed_line_before_the_initialize_answer_gets_exactly_one_parse_error(
        daemon, tmp_path, data):
    c = RawConnector(connector_argv("--port", str(daemon.port), "--client-id", "malformed",
                                    "--no-autostart"), tmp_path)
    try:
        c.send_raw(data)
        c.send({"jsonrpc": "2.0", "id": 7, "method": "ping"})
        got = [c.recv(), c.recv(), c.recv()]
    finally:
        assert c.close() == 0
    parse_errors = [m for m in got if m.get("error", {}).get("code") == -32700]
    assert len(parse_errors) == 1 and parse_errors[0]["id"] is None, got
    assert [m for m in got if m.get("id") == 0][0]["result"]["serverInfo"]["name"]
    assert [m for m in got if m.get("id") == 7][0]["result"] == {}
    assert c.lines.empty() or c.lines.get(timeout=1) is None, c.raw


def test_health_and_server_info_report_the_real_version(daemon, tmp_path):
    version = importlib.metadata.version("gasoline")
    h = health(daemon.url)
    assert h["version"] == version and h["pid"] == json.loads(daemon.info_path.read_text())["pid"]
    c = RawConnector(connector_argv("--port", str(daemon.port), "--client-id", "v",
                                    "--no-autostart"), tmp_path)
    try:
        c.send(INIT)
        assert c.recv()["result"]["serverInfo"]["version"] == version
    finally:
        assert c.close() == 0
    assert gasoline("--version").stdout.strip() == f"gasoline {version}"


def test_help_lists_the_operations_commands():
    out = gasoline("--help")
    assert out.returncode == 0
    for command in ("serve", "connect", "doctor", "status", "stop"):
        assert f"\n  {command} " in out.stdout, out.stdout


def test_status_doctor_stop_against_a_real_daemon(tmp_path):
    """The whole round with the extension syncing; the daemon named by its state dir. (That
    these commands touch no other daemon: tests/test_lifecycle_cli.py.)"""
    state = tmp_path / "state"
    d = DaemonProcess(state_dir=state).start()
    try:
        where = ["--state-dir", str(state)]
        out = gasoline("status", *where)
        assert out.returncode == 0, out.stderr
        assert f"running at {d.url} (pid {d.process.pid})" in out.stdout
        out = gasoline("status", "--port", str(d.port), "--json")
        data = json.loads(out.stdout)
        assert data["running"] and data["pid"] == d.process.pid and data["version"]
        # No extension is connected: doctor says so and exits non-zero.
        out = gasoline("doctor", *where)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "[FAIL] extension_connected" in out.stdout and "[ok  ] daemon" in out.stdout
        # With the extension syncing, every check passes.
        req = urllib.request.Request(d.url + "/sync", data=json.dumps({
            "session_id": "s", "settings": {"pilot_enabled": True}}).encode(),
            headers=EXTENSION_HEADERS, method="POST")
        urllib.request.urlopen(req, timeout=30).read()  # a long poll (5 s)
        out = gasoline("doctor", *where, "--json")
        data = json.loads(out.stdout)
        assert out.returncode == 0 and data["ok"], data
        assert {c["check"] for c in data["checks"]} >= {"daemon", "port", "extension_connected",
                                                         "persistence_writable"}
        # stop: graceful (daemon.json removed by the daemon itself), then nothing to stop.
        out = gasoline("stop", *where)
        assert out.returncode == 0 and "stopped" in out.stdout, out.stdout + out.stderr
        # twistd re-raises the SIGTERM after its graceful shutdown; the services did stop (each
        # removes what it owns: daemon.json is gone).
        assert d.process.wait(10) in (0, -15)
        assert not d.info_path.exists()
        assert gasoline("stop", *where).returncode == 0
        out = gasoline("status", *where)
        assert out.returncode == 3 and "no daemon runs for state dir" in out.stdout
        out = gasoline("doctor", *where)
        assert out.returncode == 1 and "[FAIL] daemon" in out.stdout
    finally:
        d.stop()


def test_stop_refuses_a_pid_that_is_not_gasoline(tmp_path):
    """Something on a (random) port answers /health as Gasoline but names a pid that is not a
    Gasoline daemon: stop leaves that process alone."""
    import http.server
    import threading

    sleeper = subprocess.Popen(["sleep", "30"])

    class Liar(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"service-name": "gasoline", "pid": sleeper.pid}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Liar)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = gasoline("stop", "--port", str(server.server_address[1]))
        assert out.returncode == 1 and "not a Gasoline daemon" in out.stderr, out
        assert sleeper.poll() is None
    finally:
        server.shutdown()
        server.server_close()
        sleeper.kill()
        sleeper.wait()


def test_the_operations_commands_do_not_import_twisted(tmp_path):
    code = ("import sys\nfrom gasoline.cli import main\n"
            "rc = main(['status', '--port', '9', '--timeout', '0.2'])\n"
            f"rc2 = main(['status', '--state-dir', {str(tmp_path)!r}])\n"
            "print(rc, rc2, 'twisted' in sys.modules, 'orjson' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30)
    assert out.stdout.split()[-4:] == ["3", "3", "False", "False"], out.stdout + out.stderr

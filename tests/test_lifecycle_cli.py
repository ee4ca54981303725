"""``gasoline status | doctor | stop | identity`` act only on the daemon they name.

Every test that starts daemons starts two, on random ports, in two state dirs: the commands name
one; the other must survive and answer. Nothing here binds, stops or talks to port 7890 (the
session check in conftest.py fails the run if what listened there at the start is gone).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from gasoline import admin_cli
from gasoline.cli import main as cli_main
from gasoline.testing import EXTENSION_HEADERS, client_headers
from support import DaemonProcess, listening_sockets

pytestmark = [pytest.mark.integration]


def gasoline(*args: str, env: dict | None = None, timeout: float = 30):
    return subprocess.run([sys.executable, "-m", "gasoline", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def get(url: str, headers: dict | None = None, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json",
                                                          **(headers or {})},
                                 method="GET" if data is None else "POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


@pytest.fixture
def two(tmp_path):
    """Two real daemons on random ports: C{named} (the commands' target) and C{bystander}."""
    named = DaemonProcess(state_dir=tmp_path / "named").start()
    try:
        bystander = DaemonProcess(state_dir=tmp_path / "bystander").start()
    except BaseException:
        named.stop()
        raise
    try:
        yield named, bystander
    finally:
        named.stop()
        bystander.stop()


def assert_alive(d: DaemonProcess) -> None:
    assert d.process is not None and d.process.poll() is None, "the bystander daemon was stopped"
    assert get(d.url + "/health")["pid"] == d.process.pid


def test_commands_on_a_state_dir_without_daemon_json_touch_no_daemon(two, tmp_path):
    named, bystander = two
    empty = tmp_path / "empty"
    empty.mkdir()
    for env in ({}, {"GASOLINE_STATE_DIR": str(empty)}):  # --state-dir, or the default one
        where = [] if env else ["--state-dir", str(empty)]
        out = gasoline("status", *where, env=env)
        assert out.returncode == 3, out
        assert f"no daemon runs for state dir {empty}" in out.stdout
        out = gasoline("doctor", *where, env=env)
        assert out.returncode == 1 and "[FAIL] daemon: no daemon runs for state dir" in out.stdout
        out = gasoline("stop", *where, env=env)
        assert out.returncode == 0 and "nothing to stop" in out.stdout, out
        out = gasoline("identity", *where, env=env)
        assert out.returncode == 3 and "no daemon runs for state dir" in out.stderr, out
        assert not (empty / "identity.pem").exists()  # identity never creates a key
    assert_alive(named)
    assert_alive(bystander)


def test_a_stale_or_foreign_daemon_json_does_not_reach_the_daemon_on_its_port(two, tmp_path):
    """A daemon.json left by a crash (its pid gone) or naming a port where another state dir's
    daemon now answers (another pid) names no daemon: stop does not stop the one on the port."""
    named, bystander = two
    info = json.loads(bystander.info_path.read_text())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for pid, words in ((dead.pid, "which has exited"), (os.getpid(), "another state dir's")):
        stale = tmp_path / f"stale-{pid}"
        stale.mkdir()
        (stale / "daemon.json").write_text(json.dumps({**info, "pid": pid}))
        out = gasoline("stop", "--state-dir", str(stale))
        assert out.returncode == 0 and words in out.stdout and "nothing to stop" in out.stdout, out
        out = gasoline("status", "--state-dir", str(stale))
        assert out.returncode == 3 and words in out.stdout, out
    assert_alive(named)
    assert_alive(bystander)


@pytest.mark.parametrize("naming", ["state-dir", "port", "url"])
def test_status_doctor_identity_stop_act_on_the_named_daemon_only(two, naming):
    named, bystander = two
    where = {"state-dir": ["--state-dir", str(named.state_dir)],
             "port": ["--port", str(named.port)], "url": ["--url", named.url]}[naming]
    out = gasoline("status", *where, "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["pid"] == named.process.pid and data["port"] == named.port
    out = gasoline("doctor", *where)
    assert out.returncode == 1, out  # no extension
    assert f"[ok  ] port: listening on port {named.port}" in out.stdout
    assert "[FAIL] extension_connected: no sync in the last 10 s" in out.stdout
    # identity asks the running daemon: its GET /pairing, not a key file of some state dir.
    offered = get(named.url + "/pairing", EXTENSION_HEADERS)["fingerprint"]
    other = get(bystander.url + "/pairing", EXTENSION_HEADERS)["fingerprint"]
    assert offered != other
    out = gasoline("identity", *where, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["fingerprint"] == offered, out
    out = gasoline("stop", *where)
    assert out.returncode == 0 and f"stopped the daemon (pid {named.process.pid})" in out.stdout
    assert named.process.wait(10) in (0, -15)
    assert not named.info_path.exists()
    assert gasoline("status", *where).returncode == 3
    assert_alive(bystander)


def test_status_lists_connected_clients_only_and_doctor_registers_nobody(two):
    named, bystander = two
    get(named.url + "/clients", client_headers(named, "left"), body={"client_id": "left"})
    req = urllib.request.Request(named.url + "/clients/left", method="DELETE",
                                 headers=client_headers(named, "left"))
    urllib.request.urlopen(req, timeout=10).read()
    assert get(named.url + "/clients", client_headers(named, "here"),
               body={"client_id": "here"})["inherited"] is False
    for _ in range(2):
        assert gasoline("doctor", "--port", str(named.port)).returncode == 1
    out = gasoline("status", "--port", str(named.port), "--json")
    data = json.loads(out.stdout)
    assert [c["id"] for c in data["clients"]] == ["here"], data
    assert data["clients_remembered"] == 1
    listed = [c["id"] for c in get(named.url + "/health")["clients"]["list"]]
    assert sorted(listed) == ["here", "left"]  # doctor registered no client
    out = gasoline("status", "--port", str(named.port))
    assert "clients: 1 connected (1 more gone" in out.stdout and "left" not in out.stdout
    named.stop()
    saved = sorted(p.stem for p in (Path(named.state_dir) / "clients").glob("*.json"))
    assert saved == ["here", "left"]  # and persisted none
    assert_alive(bystander)


def test_doctor_names_the_pairing_wait_and_what_to_do(two):
    """An extension that asks for the daemon's identity but does not sync waits for the user to
    pair it: doctor, configure health and an agent's extension-bound call say so."""
    named, _ = two
    # gasoline identity asks GET /pairing too, from no extension origin: that is no pairing wait.
    assert gasoline("identity", "--port", str(named.port)).returncode == 0
    out = gasoline("doctor", "--port", str(named.port), "--json")
    check = {c["check"]: c for c in json.loads(out.stdout)["checks"]}["extension_connected"]
    assert check["detail"] == "no sync in the last 10 s", check
    headers = {**EXTENSION_HEADERS, "Origin": "chrome-extension://abcdefghijklmnopabcdefghijklmnop"}
    get(named.url + "/pairing", headers)
    out = gasoline("doctor", "--port", str(named.port), "--json")
    check = {c["check"]: c for c in json.loads(out.stdout)["checks"]}["extension_connected"]
    assert check["status"] == "fail" and "waiting for the user to pair" in check["detail"], check
    assert "Pair with this daemon" in check["fix"] and "gasoline identity" in check["fix"]
    out = gasoline("status", "--port", str(named.port))
    assert "extension: waiting for the user to pair it" in out.stdout, out.stdout
    # The headers of a hand-wired HTTP MCP client with a fixed id: `gasoline client-proof`.
    out = gasoline("client-proof", "pairing-agent", "--state-dir", str(named.state_dir), "--json")
    assert out.returncode == 0, out.stderr
    mcp = {**json.loads(out.stdout), "MCP-Protocol-Version": "2026-07-28",
           "Accept": "application/json, text/event-stream"}

    def call(name, **arguments):
        answer = get(named.url + "/mcp", mcp, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                              "params": {"name": name, "arguments": arguments}})
        summary, _, payload = answer["result"]["content"][0]["text"].partition("\n")
        return summary, json.loads(payload)

    summary, health = call("configure", what="health")
    assert health["extension"]["state"] == "waiting_for_pairing", health
    assert "waiting for the user to pair" in summary
    summary, error = call("interact", what="navigate", url="https://example.test/")
    assert error["error"] == "extension_disconnected", error
    assert "waiting for the user to pair" in error["message"]
    assert "Pair with this daemon" in error["retry"]


# -- the class: every lifecycle command, every way of naming no daemon: no connection at all ----------


@pytest.mark.parametrize("command", sorted(admin_cli.COMMANDS))
@pytest.mark.parametrize("naming", ["--state-dir", "GASOLINE_STATE_DIR", "default"])
def test_no_lifecycle_command_connects_anywhere_when_its_state_dir_has_no_daemon(
        command, naming, tmp_path, monkeypatch, capsys):
    """In process, with every socket connection recorded: a command naming a state dir that
    holds no daemon.json connects to nothing (the old fallback went to port 7890)."""
    tried: list = []

    def refuse(self, address, *a, **k):
        tried.append(address)
        raise ConnectionRefusedError("the test allows no connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    argv = []
    if naming == "--state-dir":
        argv = ["--state-dir", str(tmp_path)]
    elif naming == "GASOLINE_STATE_DIR":
        monkeypatch.setenv("GASOLINE_STATE_DIR", str(tmp_path))
    else:  # the platform's default state dir, here an empty one
        monkeypatch.delenv("GASOLINE_STATE_DIR", raising=False)
        monkeypatch.setattr("gasoline.common.default_state_dir", lambda: tmp_path)
    rc = cli_main([command, *argv])
    out = capsys.readouterr()
    assert tried == [], (command, tried)
    assert rc in (0, 1, 3) and "no daemon runs for state dir" in out.out + out.err
    assert list(tmp_path.iterdir()) == []  # nothing created in the state dir


def test_the_user_port_check_sees_a_listener_and_its_end(tmp_path):
    """The session check of conftest.py, on a random port: a listener is seen (without being
    connected to) and its end is noticed."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    seen = listening_sockets(port)
    if seen is None:
        pytest.skip("SKIPPED LOUDLY — no /proc/net/tcp here: the user-port check is not made")
    assert len(seen) == 1
    s.close()
    assert listening_sockets(port) == set()
    # And what the suite's processes find as their default state dir is the suite's own.
    assert "gasoline-suite-state-" in os.environ["GASOLINE_STATE_DIR"]


def test_help_of_connect_and_identity(tmp_path):
    for command, prog in (("identity", "usage: gasoline identity"),
                          ("status", "usage: gasoline status"),
                          ("connect", "Usage: gasoline connect")):
        out = gasoline(command, "--help")
        assert out.returncode == 0 and out.stdout.startswith(prog) and out.stderr == "", out
        out = gasoline(command, "--bogus")
        assert out.returncode == 2 and out.stdout == "", out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "--bogus" in lines[0] and "--help" in lines[0], out.stderr
    out = gasoline("--help")
    assert out.returncode == 0 and "identity" in out.stdout


def test_every_command_naming_a_port_finds_the_daemons_state_dir_as_the_connector_does(two):
    """`--port` alone (the default state dir points at the other daemon's): pair, client-proof,
    status, doctor and identity act on the state dir the named daemon's /health reports, its
    identity checked; the other daemon's dir is never used."""
    named, bystander = two
    env = {"GASOLINE_STATE_DIR": str(bystander.state_dir)}
    port = str(named.port)
    pair = gasoline("pair", "--port", port, env=env)
    assert pair.returncode == 0, pair.stderr
    proof = gasoline("client-proof", "fixed-app", "--port", port, "--json", env=env)
    assert proof.returncode == 0, proof.stderr
    headers = json.loads(proof.stdout)
    # What it printed is what the named daemon serves as fixed-app (the bystander's key would
    # be refused with 403).
    answer = get(named.url + "/clients", headers=headers, body={"client_id": "fixed-app"})
    assert answer["client_id"] == "fixed-app"
    status = gasoline("status", "--port", port, "--json", env=env)
    assert status.returncode == 0 and json.loads(status.stdout)["state_dir"] == \
        str(named.state_dir)
    assert f"state dir: {named.state_dir}" in gasoline("status", "--port", port, env=env).stdout
    doctor = gasoline("doctor", "--port", port, "--json", env=env)
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["state_dir"]["status"] == "ok" and str(named.state_dir) in \
        checks["state_dir"]["detail"]
    ident = gasoline("identity", "--port", port, "--json", env=env)
    assert ident.returncode == 0
    assert_alive(bystander)


def test_a_port_whose_daemon_names_another_daemons_state_dir_is_refused(two, tmp_path):
    """A process on the port that says its state dir is another daemon's (its /health names it)
    but cannot offer that dir's identity: pair and client-proof refuse, status and doctor say
    the state dir is unknown."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    named, bystander = two
    pairing = json.dumps(get(bystander.url + "/pairing", headers=EXTENSION_HEADERS)).encode()
    health = get(named.url + "/health")  # names named's state dir

    class Squatter(BaseHTTPRequestHandler):
        def do_GET(self):
            body = pairing if self.path == "/pairing" else json.dumps(health).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Squatter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = str(server.server_address[1])
    try:
        for args in (["pair", "--port", port], ["client-proof", "x-app", "--port", port]):
            out = gasoline(*args)
            assert out.returncode == 1 and out.stdout == "", out
            assert "offers identity" in out.stderr and str(named.state_dir) in out.stderr, out
        status = gasoline("status", "--port", port)
        assert "state dir: unknown (the daemon at" in status.stdout, status.stdout
        doctor = json.loads(gasoline("doctor", "--port", port, "--json").stdout)
        assert any(c["check"] == "state_dir" and c["status"] == "fail"
                   for c in doctor["checks"]), doctor
    finally:
        server.shutdown()
        server.server_close()

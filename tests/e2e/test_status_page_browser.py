"""The live status page in a real Chromium.

A real daemon; its extension is a real one, launched and paired by ``gasoline browser --headless``;
agents are real ``gasoline connect`` processes. A second, extension-less Chromium opens
``http://127.0.0.1:<port>/``: the page renders the connected agent and the connected, paired
extension, then — without a reload — shows a second agent as soon as it connects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from harness import Chromium, wait_until
from support import reap

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def launch_browser(daemon, tmp_path: Path, chromium_bin: str) -> tuple[subprocess.Popen, Path]:
    """``gasoline browser --headless`` against ``daemon``; (process, its output file) once ready."""
    out_path = tmp_path / "browser.out"
    env = {**os.environ, "PATH": f"{Path(chromium_bin).parent}:{os.environ.get('PATH', '')}"}
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gasoline", "browser", "--headless", "--port", str(daemon.port),
             "--state-dir", str(daemon.state_dir)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
    wait_until(lambda: proc.poll() is not None or "in tab" in out_path.read_text(), 90,
               what="gasoline browser to be ready", describe=out_path.read_text)
    assert proc.poll() is None, out_path.read_text()
    return proc, out_path


def connect_agent(daemon, client_id: str, cwd: Path, tmp_path: Path) -> subprocess.Popen:
    """A ``gasoline connect`` agent that initializes, makes one tool call and stays connected."""
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gasoline", "connect", "--port", str(daemon.port),
         "--client-id", client_id, "--no-autostart"],
        cwd=str(cwd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=open(tmp_path / f"{client_id}.err", "wb"))
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "status-test", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "observe", "arguments": {"what": "errors"}}},
    ]
    for line in lines:
        proc.stdin.write(json.dumps(line).encode() + b"\n")
    proc.stdin.flush()
    for _ in range(2):  # the two answers: initialize, tools/call
        assert proc.stdout.readline(), f"{client_id}: the connector closed stdout"
    return proc


def page_text(viewer: Chromium, session: str) -> str:
    return viewer.cdp.evaluate(session, "document.body.innerText")


def test_status_page_shows_agents_and_extension_and_updates_live(daemon, chromium_bin, tmp_path):
    launched, out = launch_browser(daemon, tmp_path, chromium_bin)
    agents: list[subprocess.Popen] = []
    viewer = Chromium(executable=chromium_bin, extension_dir=None)
    try:
        agents.append(connect_agent(daemon, "agent-one", tmp_path / "shop-frontend", tmp_path))
        viewer.start()
        _, page, _ = viewer.new_page(daemon.url + "/")

        def shows(selector: str) -> bool:
            return viewer.cdp.evaluate(page, f"!!document.querySelector({json.dumps(selector)})")

        wait_until(lambda: shows('tr[data-agent="agent-one"]'), 30, what="agent-one on the page",
                   describe=lambda: page_text(viewer, page))
        text = page_text(viewer, page)
        assert "shop-frontend" in text  # the agent's project directory
        assert "extension connected" in text  # the summary line
        extension = viewer.cdp.evaluate(page, "document.querySelector('#extension').innerText")
        assert "paired\nyes" in extension.replace("\t", "\n"), extension
        assert "observe" in viewer.cdp.evaluate(
            page, "document.querySelector('tr[data-agent=\"agent-one\"]').innerText")
        # No reload from here on: a marker on the window must survive the update.
        viewer.cdp.evaluate(page, "window.__noReload = 42")
        assert not shows('tr[data-agent="agent-two"]')

        agents.append(connect_agent(daemon, "agent-two", tmp_path / "billing-api", tmp_path))
        wait_until(lambda: shows('tr[data-agent="agent-two"]'), 15, what="agent-two to appear live",
                   describe=lambda: page_text(viewer, page))
        # Its project directory arrives with the connector's registration, a moment later.
        wait_until(lambda: "billing-api" in page_text(viewer, page), 10,
                   what="agent-two's project directory", describe=lambda: page_text(viewer, page))
        assert "2 agents connected" in page_text(viewer, page)
        assert viewer.cdp.evaluate(page, "window.__noReload") == 42
    finally:
        viewer.stop()
        for agent in agents:
            agent.stdin.close()
            reap(agent)
        launched.terminate()
        reap(launched, 30)


def test_status_page_refuses_framing_and_foreign_origins(daemon):
    with urllib.request.urlopen(daemon.url + "/", timeout=5) as resp:
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
        assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        req = urllib.request.Request(daemon.url + "/ui/state", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5)
        assert e.value.code == 403


def test_with_an_api_key_the_page_asks_for_it_then_shows_the_state(chromium_bin, tmp_path):
    from support import DaemonProcess

    daemon = DaemonProcess(state_dir=tmp_path / "state", args=["--api-key", "k3y-for-the-page"])
    viewer = Chromium(executable=chromium_bin, extension_dir=None)
    try:
        daemon.start()
        viewer.start()
        _, page, _ = viewer.new_page(daemon.url + "/")

        def visible(element_id: str) -> bool:
            return viewer.cdp.evaluate(page, f"!document.getElementById({json.dumps(element_id)}).hidden")

        wait_until(lambda: visible("keyform"), 15, what="the key form",
                   describe=lambda: page_text(viewer, page))
        assert not visible("main")
        viewer.cdp.evaluate(page, "document.getElementById('key').value = 'wrong';"
                                  " document.getElementById('keyform').requestSubmit(); true")
        wait_until(lambda: "refused" in page_text(viewer, page), 15, what="the wrong key refused")
        viewer.cdp.evaluate(page, "document.getElementById('key').value = 'k3y-for-the-page';"
                                  " document.getElementById('keyform').requestSubmit(); true")
        wait_until(lambda: visible("main") and "agents connected" in page_text(viewer, page), 15,
                   what="the state after the key", describe=lambda: page_text(viewer, page))
        assert not visible("keyform")
    finally:
        viewer.stop()
        daemon.stop()

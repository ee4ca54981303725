"""``gasoline browser``: one command gives an agent a paired, tracking browser.

``gasoline browser --headless URL`` runs on a random free port with a temporary state dir and no
daemon running: it starts the daemon (as the connector does), starts Debian's Chromium with the
extension, pre-pairs it over the DevTools pipe and opens ``URL`` in the tracked tab. An agent —
the official ``mcp`` SDK through ``gasoline connect`` — then sees the page's console error with no
other step. When the command gets SIGTERM, the browser's processes and its temporary profile are
gone.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from harness import wait_until
from support import reap

pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

MARKER = "gasoline-browser-launch-marker"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert port != 7890
    return port


def browser_processes(profile_hint: str) -> list[psutil.Process]:
    """Live processes whose command line names a gasoline-browser profile under ``profile_hint``."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(profile_hint in part for part in (p.info["cmdline"] or ())) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def stop_daemon(state_dir: Path) -> None:
    """Stop the daemon ``gasoline browser`` started (twistd's pid file in the state dir)."""
    pid_file = state_dir / "gasoline.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
               15, what="the daemon to stop")


async def agent_sees(port: int, cwd: Path, errlog, timeout: float = 60.0) -> str:
    """An SDK agent through ``gasoline connect``: poll ``observe {what:"errors"}`` until it shows
    the page's console error; the text it saw."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gasoline", "connect", "--port", str(port), "--no-autostart"],
        cwd=str(cwd), env=dict(os.environ))
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            deadline = time.monotonic() + timeout
            text = ""
            while time.monotonic() < deadline:
                result = await session.call_tool("observe", {"what": "errors"})
                text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
                if MARKER in text:
                    return text
                await asyncio.sleep(0.5)
            raise AssertionError(f"the agent never saw the console error; last answer: {text[:2000]}")


def run_launch(chromium_bin, tmp_path: Path, state_dir: Path, during=None) -> None:
    """``gasoline browser --headless URL`` on a free port with ``state_dir``; an SDK agent sees the
    page's console error; ``during(port)`` runs while the browser is up; SIGTERM ends the browser
    and removes its profile and its launch grant."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(
        f"<!doctype html><title>launch</title><h1>launch</h1>"
        f"<script>console.error('{MARKER}: boom')</script>")
    server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1",
                               "--directory", str(site)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    port = free_port()
    command = None
    try:
        site_port = int(server.stdout.readline().split(" port ")[1].split()[0])
        url = f"http://127.0.0.1:{site_port}/index.html"
        env = {**os.environ, "PATH": f"{Path(chromium_bin).parent}:{os.environ.get('PATH', '')}"}
        out = open(tmp_path / "browser.out", "w")
        command = subprocess.Popen(
            [sys.executable, "-m", "gasoline", "browser", "--headless", "--port", str(port),
             "--state-dir", str(state_dir), url],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)

        def launched():
            return command.poll() is not None or "in tab" in (tmp_path / "browser.out").read_text()

        wait_until(launched, 90, what="gasoline browser to report the browser ready",
                   describe=lambda: (tmp_path / "browser.out").read_text())
        output = (tmp_path / "browser.out").read_text()
        assert command.poll() is None, f"gasoline browser exited {command.returncode}: {output}"
        assert f"started a daemon at http://127.0.0.1:{port}" in output
        profile = Path(output.split(", profile ")[1].split(")")[0])
        assert profile.name.startswith("gasoline-browser-") and profile.is_dir()
        assert browser_processes(str(profile)), "no browser process uses the temporary profile"

        with open(tmp_path / "connect.err", "w") as errlog:
            seen = asyncio.run(agent_sees(port, tmp_path, errlog))
        assert MARKER in seen
        # What the extension reports back: the opened tab is the tracked one, the pilot is off
        # (no --pilot), and the page loaded after tracking began.
        tab = int(output.split(" in tab ")[1].split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            capture = json.load(resp)["capture"]
        assert capture["extension_connected"] is True
        assert capture["tracked_tab_id"] == tab and capture["pilot_enabled"] is False
        # The launched extension pairs on a grant of this launch, not as the pinned extension.
        assert len(capture["pairing"]["launched_extensions"]) == 1
        assert len(list((state_dir / "launched").iterdir())) == 1
        if during is not None:
            during(port)

        command.send_signal(signal.SIGTERM)
        assert reap(command, 30) == 0, (tmp_path / "browser.out").read_text()
        assert browser_processes(str(profile)) == []
        assert not profile.exists()
        assert list((state_dir / "launched").iterdir()) == []  # the grant ends with the launch

        def launched_extensions():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
                return json.load(resp)["capture"]["pairing"]["launched_extensions"]

        # the daemon looks at a launched session's grant again at most once a second
        wait_until(lambda: launched_extensions() == [], 5, what="the launched session to end",
                   describe=launched_extensions)
    finally:
        if command is not None and command.poll() is None:
            command.kill()
            reap(command)
        server.terminate()
        reap(server)
        stop_daemon(state_dir)


def test_gasoline_browser_headless_gives_an_agent_the_page_console_error(chromium_bin, tmp_path):
    state_dir = tmp_path / "state"
    run_launch(chromium_bin, tmp_path, state_dir)
    # The launched (temporary) extension did not take the first pin: the user's own extension,
    # pairing later, will be the pinned one.
    from gasoline.core.trust.pins import PIN_FILE, read_pin_file

    assert read_pin_file(state_dir / PIN_FILE)["pinned"] is None


def test_gasoline_browser_works_when_the_daemon_already_pins_another_extension(chromium_bin, tmp_path):
    """The user's own extension is pinned (a pin file holding another key): the launched browser's
    extension (new profile, new key) still gets capture to the agent, and the pin is unchanged."""
    from cryptography.hazmat.primitives import serialization

    from gasoline.core.trust.identity import b64u, fingerprint_of
    from gasoline.core.trust.pins import PIN_FILE, read_pin_file, write_pin_file

    state_dir = tmp_path / "state"
    user_key = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    user = {"key": b64u(user_key), "fingerprint": fingerprint_of(user_key),
            "pinned_at": "2026-01-01T00:00:00Z"}
    write_pin_file(state_dir / PIN_FILE, user, [])
    before = (state_dir / PIN_FILE).read_bytes()

    def still_pinned(port: int) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            pairing = json.load(resp)["capture"]["pairing"]
        assert pairing["extension_fingerprint"] == user["fingerprint"]
        assert pairing["launched_extensions"] != [user["fingerprint"]]
        assert pairing["refused_extensions"] == []  # the launched key was never refused

    run_launch(chromium_bin, tmp_path, state_dir, during=still_pinned)
    assert (state_dir / PIN_FILE).read_bytes() == before
    assert read_pin_file(state_dir / PIN_FILE)["pinned"]["key"] == user["key"]


def test_gasoline_browser_reports_a_missing_browser_clearly(tmp_path):
    """No Chromium: one clear line and exit status 1, and nothing left behind."""
    state_dir = tmp_path / "state"
    result = subprocess.run(
        [sys.executable, "-m", "gasoline", "browser", "--headless", "--port", str(free_port()),
         "--state-dir", str(state_dir), "--chromium", str(tmp_path / "no-such-browser")],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "no such executable" in result.stderr
    assert json.dumps(result.stdout) and "Traceback" not in result.stderr


async def launch_and_see(port: int, cwd: Path, errlog, url: str) -> tuple[dict, str]:
    """An SDK agent asks for a browser (``interact launch_browser``), then reads the errors once."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gasoline", "connect", "--port", str(port), "--no-autostart"],
        cwd=str(cwd), env=dict(os.environ))
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("interact", {
                "what": "launch_browser", "url": url, "headless": True})
            text = result.content[0].text
            assert result.is_error is False, text
            launched = json.loads(text.partition("\n")[2])
            # The answer came once the page's capture was flowing: the very next call sees
            # what the page logged while loading (no polling).
            answer = await session.call_tool("observe", {"what": "errors"})
            return launched, answer.content[0].text


def test_an_agent_may_launch_a_browser_when_the_daemon_allows_it(chromium_bin, tmp_path):
    """``--allow-launch-browser``: ``interact launch_browser`` runs ``gasoline browser --detach``;
    the agent then sees the page's console error; ending the detached command (SIGTERM) ends the
    browser and removes its profile."""
    from support import DaemonProcess

    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(f"<!doctype html><script>console.error('{MARKER}')</script>")
    server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1",
                               "--directory", str(site)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    env = {"PATH": f"{Path(chromium_bin).parent}:{os.environ.get('PATH', '')}"}
    daemon = DaemonProcess(state_dir=tmp_path / "state", args=["--allow-launch-browser"], env=env)
    detached = None
    try:
        site_port = int(server.stdout.readline().split(" port ")[1].split()[0])
        daemon.start()
        with open(tmp_path / "connect.err", "w") as errlog:
            launched, seen = asyncio.run(launch_and_see(
                daemon.port, tmp_path, errlog, f"http://127.0.0.1:{site_port}/"))
        assert launched["capture_flowing"] is True, launched
        assert MARKER in seen, seen
        output = launched["output"]
        assert "detached (pid " in output, output
        detached = psutil.Process(int(output.split("detached (pid ")[1].split(",")[0]))
        profiles = [a.split("=", 1)[1] for p in detached.children(recursive=True)
                    for a in (p.cmdline() if p.is_running() else ()) if a.startswith("--user-data-dir=")]
        assert profiles, "the detached command's browser has no profile"
        profile = Path(profiles[0])
        assert profile.is_dir()
        detached.terminate()
        detached.wait(30)
        detached = None
        wait_until(lambda: not browser_processes(str(profile)), 15, what="the browser to end")
        assert not profile.exists()
    finally:
        if detached is not None and detached.is_running():
            detached.terminate()
        # A detached launch this test could not reach (it failed early): end it all the same.
        for leftover in browser_processes(str(tmp_path / "state")):
            if "--ready-file" in leftover.cmdline():
                leftover.terminate()
                leftover.wait(30)
        daemon.stop()
        server.terminate()
        reap(server)

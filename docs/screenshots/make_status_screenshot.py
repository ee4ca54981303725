"""Regenerate docs/screenshots/status-page.png: the daemon's live status page with real parts.

    .venv/bin/python docs/screenshots/make_status_screenshot.py [--chromium PATH]

A daemon on a free loopback port with a temporary state dir; a page with console errors opened by
``gasoline browser --headless`` (the real extension, pre-paired); two agents through
``gasoline connect`` (one subscribed to error events, one with a failing call); then a second,
extension-less Chromium photographs ``http://127.0.0.1:<port>/``. Everything it starts is stopped
and every temporary directory removed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "e2e")]

from harness import CHROMIUM, Chromium, wait_until  # noqa: E402
from support import DaemonProcess, reap  # noqa: E402

OUT = Path(__file__).with_name("status-page.png")


def agent(port: int, client_id: str, cwd: Path, calls: list[dict]) -> subprocess.Popen:
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gasoline", "connect", "--port", str(port), "--client-id",
         client_id, "--no-autostart"], cwd=str(cwd), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "screenshot", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    lines += [{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": c}
              for i, c in enumerate(calls, 1)]
    for line in lines:
        proc.stdin.write(json.dumps(line).encode() + b"\n")
    proc.stdin.flush()
    for _ in range(1 + len(calls)):
        proc.stdout.readline()
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=CHROMIUM)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gasoline-shot-"))
    site = work / "site"
    site.mkdir()
    (site / "index.html").write_text(
        "<!doctype html><title>shop</title><h1>shop</h1><script>"
        "console.error('checkout failed'); console.warn('slow image');"
        "fetch('/missing.json').catch(() => {});</script>")
    server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1",
                               "--directory", str(site)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    daemon = DaemonProcess(state_dir=work / "state")
    procs: list[subprocess.Popen] = []
    viewer = Chromium(executable=args.chromium, extension_dir=None)
    try:
        site_port = int(server.stdout.readline().split(" port ")[1].split()[0])
        daemon.start()
        env = {**os.environ, "PATH": f"{Path(args.chromium).parent}:{os.environ.get('PATH', '')}"}
        out = work / "browser.out"
        with open(out, "w") as f:
            browser = subprocess.Popen(
                [sys.executable, "-m", "gasoline", "browser", "--headless", "--pilot",
                 "--port", str(daemon.port), "--state-dir", str(daemon.state_dir),
                 f"http://127.0.0.1:{site_port}/index.html"],
                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, env=env)
        procs.append(browser)
        wait_until(lambda: "in tab" in out.read_text(), 90, what="gasoline browser",
                   describe=out.read_text)
        projects = work / "projects"
        procs.append(agent(daemon.port, "a3f9c2e81b04", projects / "shop-frontend", [
            {"name": "configure", "arguments": {"what": "streaming", "enabled": True,
                                                "subscribe": ["error"]}},
            {"name": "observe", "arguments": {"what": "errors"}},
            {"name": "observe", "arguments": {"what": "network_waterfall"}}]))
        procs.append(agent(daemon.port, "7be01d55c920", projects / "billing-api", [
            {"name": "observe", "arguments": {"what": "logs"}},
            {"name": "analyze", "arguments": {"what": "no_such_mode"}}]))
        viewer.start()
        _, page, _ = viewer.new_page(daemon.url + "/")
        viewer.cdp.call("Emulation.setDeviceMetricsOverride",
                        {"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
                        session=page)
        wait_until(lambda: viewer.cdp.evaluate(
            page, "document.querySelectorAll('tr[data-agent]').length === 2"
                  " && document.body.innerText.includes('extension connected')"), 30,
            what="the page to show both agents and the extension")
        time.sleep(2.5)  # a rate sample or two
        shot = viewer.cdp.call("Page.captureScreenshot", {"format": "png"}, session=page)
        OUT.write_bytes(base64.b64decode(shot["data"]))
        print(f"wrote {OUT.relative_to(ROOT)}")
        return 0
    finally:
        viewer.stop()
        for p in reversed(procs):
            if p.stdin:
                p.stdin.close()
            p.terminate()
            reap(p, 30)
        daemon.stop()
        server.terminate()
        reap(server)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

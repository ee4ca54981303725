"""
Command round trips through the real extension: an agent's ``tools/call`` over ``POST /mcp``, to the
daemon, through ``/sync`` to the extension's service worker, into the page and back.

One real daemon (``twistd -n gasoline``), Debian's Chromium, headless, with the unpacked extension,
the e2e test site (``/agent.html``), the pilot on and the page's tab tracked. The agent calls, back to
back as a scripted agent does, in rounds: ``interact get_text``, ``interact click``, ``interact
execute_js`` (isolated world, ``return 1``), ``analyze dom`` and ``interact navigate`` (between two
URLs of the same page); p50 and p99 per mode. ``--modes`` also takes the real-input modes
(``hover``, ``key_press`` Control+K, ``dialog_status``, ``emulate``: a resize), which go through
the agent's debugger session on the tab, and ``snapshot`` (``observe {what:"snapshot"}``).

``--baseline DIR`` measures a second tree in the same run (its daemon, run from DIR's sources, and
its extension, in a browser of its own), e.g. ``main`` exported with
``git archive main | tar -x -C /tmp/gasoline-main``. Both setups run at the same time and are measured
in alternating rounds, so the machine's changing load falls on both alike.

``--bytes`` also prints the bytes an agent reads (the text of the tool results) for a few typical
calls, with the same setups (after the timed rounds: the session has made calls already).

    .venv/bin/python bench/commands.py [--rounds 20] [--baseline /tmp/gasoline-main] [--bytes]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))

from _common import HTTPConnection, median, percentile, print_table, write_json  # noqa: E402
from harness import CHROMIUM, Chromium, TestSite, daemon_get, wait_until  # noqa: E402

from gasoline.testing import client_headers  # noqa: E402
from gasoline.testing_process import DaemonProcess  # noqa: E402

MODES = ("get_text", "click", "execute_js", "analyze_dom", "navigate")
#: The real-input modes (the agent's debugger session): not in the default set, as a baseline tree
#: from before them does not have them. ``--modes click,hover,key_press,dialog_status,emulate``.
INPUT_MODES = ("hover", "key_press", "dialog_status", "emulate", "snapshot")


def _answer(status: int, body: bytes) -> dict:
    text = body.decode()
    if not text.lstrip().startswith("{"):  # an SSE-framed answer
        text = next(line[5:].strip() for line in text.splitlines() if line.startswith("data:"))
    reply = json.loads(text)
    if status != 200 or "result" not in reply:
        raise RuntimeError(f"/mcp answered {status}: {text[:300]}")
    return reply["result"]


class Setup:
    """One tree under test: its daemon, its extension in a browser of its own, a tracked tab."""

    def __init__(self, label: str, tree: Path, site: TestSite, chromium: str) -> None:
        self.label = label
        self.tree = tree
        self.site = site
        env = None if tree == HERE.parent else {"PYTHONPATH": str(tree)}
        # No tool rate limit (100 calls a minute by default): the rounds make more calls than that.
        self.daemon = DaemonProcess(state_dir=Path(tempfile.mkdtemp(prefix="gasoline-bench-cmd-")) / "state",
                                    args=["--tool-rate-limit", "0"], env=env, cwd=tree)
        self.browser = Chromium(executable=chromium, extension_dir=tree / "extension")
        self.conn: HTTPConnection | None = None
        self.calls = 0

    def start(self) -> "Setup":
        self.daemon.start()
        self.browser.start()
        url = self.site.url + "/agent.html?bench"
        sw = self.browser.service_worker()
        _, self.page, _ = self.browser.new_page(url)
        tab = self.browser.tab_id_for(sw, url)
        self.browser.storage_set(sw, {"serverUrl": self.daemon.url, "trackedTabId": tab, "trackedTabUrl": url,
                                      "aiWebPilotEnabled": True})

        def synced() -> bool:
            c = daemon_get(self.daemon.url, "/health")["capture"]
            return c["extension_connected"] and c["tracked_tab_id"] == tab and c["pilot_enabled"] is True

        wait_until(synced, 30, interval=0.2, what=f"{self.label}: the extension to sync")
        self.conn = HTTPConnection("127.0.0.1", self.daemon.port)
        # As the connector (gasoline connect) speaks: one session per (client id, connection id),
        # so the calls are a session's (without it each call is answered statelessly).
        self.headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                        "X-Gasoline-Connection": "bench-connection",
                        **client_headers(self.daemon, "bench-agent")}
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "gasoline-bench", "version": "1"}}}
        _answer(*self.conn.request("POST", "/mcp", json.dumps(init).encode(), self.headers))
        self.conn.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(),
                          self.headers)
        return self

    def call(self, tool: str, args: dict[str, Any]) -> tuple[float, dict]:
        """One tools/call; (milliseconds, result)."""
        self.calls += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.calls, "method": "tools/call",
                           "params": {"name": tool, "arguments": args}}).encode()
        assert self.conn is not None
        t0 = time.perf_counter()
        status, raw = self.conn.request("POST", "/mcp", body, self.headers)
        ms = (time.perf_counter() - t0) * 1000
        result = _answer(status, raw)
        if result.get("isError"):
            raise RuntimeError(f"{self.label}: {tool} {args} failed: {result['content'][0]['text'][:500]}")
        return ms, result

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.browser.stop()
        self.daemon.stop()


def mode_call(setup: Setup, mode: str, i: int) -> float:
    site = setup.site.url
    if mode == "get_text":
        ms, _ = setup.call("interact", {"what": "get_text", "selector": "#greeting"})
    elif mode == "click":
        ms, _ = setup.call("interact", {"what": "click", "selector": "text=Send greeting"})
    elif mode == "execute_js":
        ms, _ = setup.call("interact", {"what": "execute_js", "script": "return 1"})
    elif mode == "analyze_dom":
        ms, _ = setup.call("analyze", {"what": "dom", "selector": "#fruits li"})
    elif mode == "navigate":
        ms, _ = setup.call("interact", {"what": "navigate", "url": f"{site}/agent.html?n={i}"})
    elif mode == "hover":
        ms, _ = setup.call("interact", {"what": "hover", "selector": "text=Send greeting"})
    elif mode == "key_press":
        ms, _ = setup.call("interact", {"what": "key_press", "key": "Control+K"})
    elif mode == "dialog_status":
        ms, _ = setup.call("interact", {"what": "dialog"})
    elif mode == "snapshot":
        ms, _ = setup.call("observe", {"what": "snapshot"})
    elif mode == "emulate":
        ms, _ = setup.call("interact", {"what": "resize", "width": 800 + (i % 2) * 100, "height": 600})
    else:
        raise ValueError(mode)
    return ms


#: Typical calls whose answer sizes (the text an agent reads) are compared, in a session that has
#: already made calls (what every later call of an agent's session reads). Before them the tracked
#: tab visits /bench.html (console output, five fetches, a WebSocket) and then /agent.html, which
#: makes one fetch of its own: the current page is /agent.html.
BYTE_CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("interact get_text", "interact", {"what": "get_text", "selector": "#greeting"}),
    ("interact click", "interact", {"what": "click", "selector": "text=Send greeting"}),
    ("interact type", "interact", {"what": "type", "selector": "#who", "text": "Ada"}),
    ("interact execute_js", "interact", {"what": "execute_js", "script": "return 1"}),
    ("analyze dom", "analyze", {"what": "dom", "selector": "#fruits li"}),
    ("interact list_interactive", "interact", {"what": "list_interactive"}),
    ("list_interactive again (diff)", "interact", {"what": "list_interactive", "diff": True}),
    ("observe errors", "observe", {"what": "errors"}),
    ("observe network_bodies", "observe", {"what": "network_bodies"}),
    ("observe vitals", "observe", {"what": "vitals"}),
    ("interact hover", "interact", {"what": "hover", "selector": "text=Send greeting"}),
    ("interact key_press", "interact", {"what": "key_press", "key": "Control+K"}),
    ("interact navigate", "interact", {"what": "navigate", "url": "{site}/agent.html?bytes=2"}),
]


def byte_sizes(setup: "Setup") -> dict[str, int]:
    site = setup.site.url
    setup.call("interact", {"what": "navigate", "url": site + "/bench.html?bytes"})
    time.sleep(1.0)
    setup.call("interact", {"what": "navigate", "url": site + "/agent.html?bytes"})
    setup.call("interact", {"what": "execute_js", "world": "main",
                            "script": "return fetch('/api/ok?bytes=1', {method: 'POST', body: 'b'}).then((r) => r.status)"})
    time.sleep(2.0)  # the bodies and the performance snapshots reach the daemon
    return {name: answer_bytes(setup.call(tool, {k: v.replace("{site}", site) if isinstance(v, str) else v
                                                 for k, v in call_args.items()})[1])
            for name, tool, call_args in BYTE_CALLS}


def answer_bytes(result: dict) -> int:
    """Bytes of the text content an agent reads (images are not counted)."""
    return sum(len(c.get("text", "").encode()) for c in result.get("content", []) if c.get("type") == "text")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="rounds; each calls every mode once per setup")
    parser.add_argument("--warmup", type=int, default=2, help="rounds not counted")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another tree (its gasoline/ and extension/) measured in the same run")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--bytes", action="store_true", help="also compare the bytes of typical answers")
    parser.add_argument("--chromium", default=CHROMIUM)
    args = parser.parse_args()
    if not os.path.exists(args.chromium):
        print(f"Chromium not found at {args.chromium}", file=sys.stderr)
        return 2
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES + INPUT_MODES:
            parser.error(f"unknown mode {m!r} (one of {', '.join(MODES + INPUT_MODES)})")
    site = TestSite().start()
    setups = [Setup("this tree", HERE.parent, site, args.chromium)]
    if args.baseline is not None:
        setups.insert(0, Setup("baseline", args.baseline.resolve(), site, args.chromium))
    samples: dict[str, dict[str, list[float]]] = {s.label: {m: [] for m in modes} for s in setups}
    sizes: dict[str, dict[str, int]] = {s.label: {} for s in setups}
    load = os.getloadavg()
    try:
        for s in setups:
            s.start()
        for rnd in range(args.warmup + args.rounds):
            order = setups if rnd % 2 == 0 else setups[::-1]
            for s in order:
                for m in modes:
                    ms = mode_call(s, m, rnd)
                    if rnd >= args.warmup:
                        samples[s.label][m].append(ms)
        if args.bytes:
            for s in setups:
                sizes[s.label] = byte_sizes(s)
    finally:
        for s in setups:
            s.stop()
        site.stop()
    load_after = os.getloadavg()

    columns = ["mode"] + [f"{s.label} {q}" for s in setups for q in ("p50 ms", "p99 ms")]
    if len(setups) == 2:
        columns.append("p50 ratio")
    rows = []
    report: dict[str, Any] = {}
    for m in modes:
        row: list[Any] = [m]
        for s in setups:
            v = samples[s.label][m]
            row += [median(v), percentile(v, 99)]
            report.setdefault(m, {})[s.label] = {"p50_ms": median(v), "p99_ms": percentile(v, 99),
                                                 "min_ms": min(v), "calls": len(v)}
        if len(setups) == 2:
            row.append(f"{median(samples[setups[0].label][m]) / median(samples[setups[1].label][m]):.1f}x")
        rows.append(row)
    print_table(f"command round trips ({args.rounds} rounds; load average {load[0]:.1f} before, "
                f"{load_after[0]:.1f} after; {os.cpu_count()} CPUs)", columns, rows)
    data: dict[str, Any] = {"rounds": args.rounds, "load_average": [load[0], load_after[0]], "modes": report,
                            "setups": {s.label: str(s.tree) for s in setups}}
    if args.bytes:
        rows = [[name] + [sizes[s.label][name] for s in setups] for name, _, _ in BYTE_CALLS]
        rows.append(["median"] + [int(median(list(sizes[s.label].values()))) for s in setups])
        rows.append(["total"] + [sum(sizes[s.label].values()) for s in setups])
        print_table("bytes an agent reads per call (text content of the tool result)",
                    ["call"] + [s.label for s in setups], rows)
        data["answer_bytes"] = sizes
    print(f"\nwrote {write_json('commands', data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

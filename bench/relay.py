"""
The CDP hub relay's overhead: round-trip times through the daemon's relay (``/cdp/<id>`` -> daemon ->
the extension's ``chrome.debugger`` -> the tab) against the same calls over Chromium's own DevTools
endpoint, side by side in one run, with 1 and with 4 concurrent clients.

  .venv/bin/python bench/relay.py [--evals 500] [--navs 40] [--blocks 4]

Setup: Debian's Chromium (headless) with the extension, the real daemon (``twistd gasoline`` on port
0), the e2e test site; four tabs tracked with the AI Web Pilot on. Each client has its own
WebSocket connection (websocket-client) and its own tab: client ``i`` attaches to tab ``i`` either
directly (Chromium's browser endpoint, flat session) or through the relay (a fresh
``webSocketDebuggerUrl`` from ``/json/version``). Measured:

 - ``Runtime.evaluate("1")``: send to answer, per call;
 - navigation: ``Page.navigate`` to a test-site page until ``Page.loadEventFired`` on the session.

The two paths alternate in blocks (direct, relay, direct, relay, ...) so drift hits both alike;
every block of every configuration is kept, and the table reports p50/p99 of all calls of a path
with the relay's extra time at p50 (relay p50 - direct p50) and the ratio. The target is
less than 2 ms extra at p50 for evaluate.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))

from _common import median, percentile, print_table, write_json  # noqa: E402
from harness import CDP, CHROMIUM, Chromium, TestSite, wait_until  # noqa: E402

from gasoline.testing_process import DaemonProcess  # noqa: E402

CLIENTS = (1, 4)


class Client(CDP):
    """A browser-level CDP connection attached to one tab, with a wait for one event."""

    def attach_url(self, url: str) -> str:
        target = next(t for t in self.call("Target.getTargets")["targetInfos"]
                      if t["type"] == "page" and t["url"] == url)
        self.session = self.attach(target["targetId"])
        self.call("Page.enable", session=self.session)
        return self.session

    def evaluate_one(self) -> float:
        started = time.perf_counter()
        result = self.call("Runtime.evaluate", {"expression": "1"}, session=self.session)
        elapsed = time.perf_counter() - started
        assert result["result"]["value"] == 1, result
        return elapsed * 1000

    def navigate(self, url: str, timeout: float = 30.0) -> float:
        self.events.clear()
        started = time.perf_counter()
        self.call("Page.navigate", {"url": url}, session=self.session)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" and e.get("sessionId") == self.session
                      for e in self.events):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no load event for {url}")
            message = self._recv(remaining)
            if "method" in message:
                self.events.append(message)
        return (time.perf_counter() - started) * 1000


def relay_ws_url(daemon) -> str:
    with urllib.request.urlopen(daemon.url + "/json/version", timeout=5) as r:
        return json.loads(r.read())["webSocketDebuggerUrl"]


def relay_targets(daemon) -> list[str]:
    with urllib.request.urlopen(daemon.url + "/json/list", timeout=5) as r:
        return [t["url"] for t in json.loads(r.read())]


def run_block(clients: list[Client], kind: str, count: int, site_url: str, tag: str) -> list[float]:
    """Every client does C{count} operations at once (one thread each); all timings (ms)."""
    out: list[list[float]] = [[] for _ in clients]
    errors: list[BaseException] = []

    def work(i: int, client: Client) -> None:
        try:
            for n in range(count):
                if kind == "evaluate":
                    out[i].append(client.evaluate_one())
                else:
                    out[i].append(client.navigate(f"{site_url}/blank.html?c={i}&n={n}&{tag}"))
        except BaseException as e:  # re-raised below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i, c)) for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [x for part in out for x in part]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evals", type=int, default=500, help="evaluations per client per path")
    parser.add_argument("--navs", type=int, default=40, help="navigations per client per path")
    parser.add_argument("--blocks", type=int, default=4, help="alternating blocks per path")
    args = parser.parse_args()

    state = Path(tempfile.mkdtemp(prefix="gasoline-bench-relay-"))
    daemon = DaemonProcess(state / "state").start()
    site = TestSite().start()
    browser = Chromium(executable=CHROMIUM).start()
    try:
        urls = [f"{site.url}/blank.html?tab={i}" for i in range(max(CLIENTS))]
        sw = browser.service_worker()
        tab_ids = []
        for url in urls:
            browser.new_page(url)
            tab_ids.append(browser.tab_id_for(sw, url))
        browser.storage_set(sw, {"serverUrl": daemon.url, "trackedTabId": tab_ids[0],
                                 "gasolineTrackedTabs": tab_ids[1:], "aiWebPilotEnabled": True})
        wait_until(lambda: sorted(relay_targets(daemon)) == sorted(urls), 30,
                   what="the relay to list the four tracked tabs")
        with urllib.request.urlopen(f"http://127.0.0.1:{browser.port}/json/version", timeout=5) as r:
            direct_ws = json.loads(r.read())["webSocketDebuggerUrl"]
        rows, results = [], {}
        for n_clients in CLIENTS:
            direct = [Client(direct_ws) for _ in range(n_clients)]
            relay = [Client(relay_ws_url(daemon)) for _ in range(n_clients)]
            for i in range(n_clients):
                direct[i].attach_url(urls[i])
                relay[i].attach_url(urls[i])
            # Warm up both paths (JIT, connection, first-call costs are not what we measure).
            run_block(direct, "evaluate", 20, site.url, "warm")
            run_block(relay, "evaluate", 20, site.url, "warm")
            timings: dict[str, dict[str, list[float]]] = {
                "evaluate": {"direct": [], "relay": []}, "navigate": {"direct": [], "relay": []}}
            for kind, per_client in (("evaluate", args.evals), ("navigate", args.navs)):
                per_block = max(1, per_client // args.blocks)
                for block in range(args.blocks):
                    for path, clients in (("direct", direct), ("relay", relay)):
                        timings[kind][path] += run_block(clients, kind, per_block, site.url,
                                                         f"b={block}&p={path}")
                # Leave every tab on its own page again for the next configuration.
            for i in range(n_clients):
                direct[i].navigate(urls[i])
            for c in direct + relay:
                c.close()
            for kind, by_path in timings.items():
                d, r = by_path["direct"], by_path["relay"]
                row = {
                    "calls": len(r),
                    "direct_p50_ms": median(d), "direct_p99_ms": percentile(d, 99),
                    "relay_p50_ms": median(r), "relay_p99_ms": percentile(r, 99),
                }
                row["overhead_p50_ms"] = row["relay_p50_ms"] - row["direct_p50_ms"]
                row["ratio_p50"] = row["relay_p50_ms"] / row["direct_p50_ms"]
                results[f"{kind}/{n_clients}"] = row
                rows.append([kind, n_clients, row["calls"], row["direct_p50_ms"], row["direct_p99_ms"],
                             row["relay_p50_ms"], row["relay_p99_ms"], row["overhead_p50_ms"],
                             row["ratio_p50"]])
        print_table(
            "CDP round trips: Chromium's own endpoint (direct) vs the Gasoline relay, same tabs, "
            "alternating blocks (ms)",
            ["call", "clients", "calls/path", "direct p50", "direct p99", "relay p50", "relay p99",
             "relay extra p50", "ratio p50"],
            rows,
        )
        target = results["evaluate/1"]["overhead_p50_ms"]
        print(f"\ntarget: relay overhead < 2 ms at p50 for evaluate (1 client): "
              f"{target:.2f} ms -> {'met' if target < 2 else 'NOT met'}")
        path = write_json("relay", {"args": vars(args), "chromium": browser.cdp.call("Browser.getVersion")["product"],
                                    "results": results})
        print(f"wrote {path}")
    finally:
        browser.stop()
        site.stop()
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

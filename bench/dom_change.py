"""
C{dom_change} latency: from an element appearing in the tracked tab to the subscribed agent's
C{observe {what:"events", wait_ms}} long poll returning with it (target: 200 ms p99).

A real daemon, Debian's Chromium with the extension, the e2e test site. Two agents: A watches
C{#bench-target} (appears), B watches another selector. Each round removes the element, waits
for the watcher to see it gone, starts A's long poll, then appends the element (the page's
C{Date.now()} just before C{appendChild} is the start; the moment A's answer arrives in this
process is the end: one machine, one clock). B must hear nothing.

    .venv/bin/python bench/dom_change.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))

from _agents import HttpAgent  # noqa: E402
from _common import median, percentile, print_table, write_json  # noqa: E402
from harness import CHROMIUM, Chromium, TestSite, daemon_get, wait_until  # noqa: E402

from gasoline.testing_process import DaemonProcess  # noqa: E402

APPEND = """(() => { const d = document.createElement('div'); d.id = 'bench-target';
  d.textContent = 'round %d'; const t = Date.now(); document.body.appendChild(d); return t; })()"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--chromium", default=CHROMIUM)
    args = ap.parse_args()
    latencies: list[float] = []
    b_events = 0
    with tempfile.TemporaryDirectory(prefix="gasoline-bench-dom-") as tmp:
        daemon = DaemonProcess(state_dir=Path(tmp) / "state").start()
        site = TestSite().start()
        browser = Chromium(executable=args.chromium).start()
        try:
            url = site.url + "/blank.html"
            sw, page, tab = browser.track_new_tab(url, daemon.url, trackedTabUrl=url)
            wait_until(lambda: daemon_get(daemon.url, "/health")["capture"]["tracked_tab_id"]
                       == tab, 25, what="the tracked tab")
            a, b = HttpAgent(daemon, "bench-a"), HttpAgent(daemon, "bench-b")
            a.tool("configure", {"what": "streaming", "subscribe": ["dom_change"],
                                 "filters": {"rate_limit": 100},
                                 "watch": [{"selector": "#bench-target"}]})
            b.tool("configure", {"what": "streaming", "subscribe": ["dom_change"],
                                 "watch": [{"selector": "#not-there"}]})
            wait_until(lambda: browser.cdp.evaluate(sw, f"""chrome.scripting.executeScript(
                {{target: {{tabId: {tab}}}, func: () => !!globalThis.__gasolineDomWatch}})
                .then(r => r[0].result)"""), 20, what="the watcher in the tab")
            for i in range(args.rounds + 3):
                browser.cdp.evaluate(page, "(document.getElementById('bench-target') || "
                                           "{remove() {}}).remove(), true")
                time.sleep(0.15)  # the watcher sees it gone (its baseline is "absent" again)
                a.events()  # nothing left unread
                got: list = []
                poll = threading.Thread(target=lambda: got.append(
                    (a.events(wait_ms=5000), time.time())))
                poll.start()
                time.sleep(0.15)  # the long poll is waiting
                start_ms = browser.cdp.evaluate(page, APPEND % i)
                poll.join(15)
                events, end = got[0]
                assert any(e["event_type"] == "dom_change" for e in events), events
                if i >= 3:  # the first rounds warm the paths
                    latencies.append(end * 1000 - start_ms)
            b_events = len([e for e in b.events() if e["event_type"] == "dom_change"])
        finally:
            browser.stop()
            site.stop()
            daemon.stop()
    row = [len(latencies), f"{median(latencies):.1f}", f"{percentile(latencies, 99):.1f}",
           f"{max(latencies):.1f}", b_events]
    print_table("dom_change: element appended -> subscribed agent's long poll answered (ms)",
                ["rounds", "p50", "p99", "max", "events to the other agent"], [row])
    print(f"wrote {write_json('dom_change', {'latencies_ms': latencies, 'other_agent_events': b_events})}")
    return 0 if b_events == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""
How often the extension's C{/sync} reaches the daemon, and what a liveness threshold would make of
it: the daemon marks the extension gone after C{DISCONNECT_AFTER} seconds without a sync; this
measures the gaps between consecutive syncs in a real Chromium with the extension and counts the
gaps a 5 s and a 10 s threshold would have taken for "gone" (every one of them a false "gone": the
extension was there all along).

Phases: C{tracked} (a tab tracked, nothing happening on it) and C{idle} (nothing tracked, pilot off:
the worker's slowest poll). The sync times are read from the daemon's own clock (C{/ui/state},
C{extension.last_seen}) polled every 50 ms.

    .venv/bin/python bench/liveness.py --seconds 60
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))

from _common import median, percentile, print_table, write_json  # noqa: E402
from harness import CHROMIUM, Chromium, TestSite, wait_until  # noqa: E402

from gasoline.testing_process import DaemonProcess  # noqa: E402

THRESHOLDS = (5.0, 10.0)


def last_seen(url: str) -> float | None:
    with urllib.request.urlopen(url + "/ui/state", timeout=5) as r:
        return json.loads(r.read())["extension"]["last_seen"]


def record(url: str, seconds: float) -> list[float]:
    """Distinct sync arrival times seen in C{seconds}."""
    seen: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = last_seen(url)
        if t is not None and (not seen or t != seen[-1]):
            seen.append(t)
        time.sleep(0.05)
    return seen


def summarise(name: str, times: list[float], seconds: float) -> dict:
    gaps = [b - a for a, b in zip(times, times[1:])]
    row = {"phase": name, "seconds": seconds, "syncs": len(times),
           "gap_median_s": round(median(gaps), 3) if gaps else None,
           "gap_p99_s": round(percentile(gaps, 99), 3) if gaps else None,
           "gap_max_s": round(max(gaps), 3) if gaps else None}
    for t in THRESHOLDS:
        gone = sum(1 for g in gaps if g > t)
        row[f"false_gone_at_{t:g}s"] = gone
        row[f"false_gone_rate_at_{t:g}s"] = round(gone / len(gaps), 3) if gaps else None
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="per phase")
    ap.add_argument("--chromium", default=CHROMIUM)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gasoline-liveness-") as tmp:
        daemon = DaemonProcess(state_dir=Path(tmp) / "state")
        daemon.start()
        site = TestSite().start()
        browser = Chromium(executable=args.chromium).start()
        try:
            url = site.url + "/blank.html"
            sw, _, _ = browser.track_new_tab(url, daemon.url, trackedTabUrl=url)
            wait_until(lambda: last_seen(daemon.url), 30, what="the first sync")
            rows.append(summarise("tracked", record(daemon.url, args.seconds), args.seconds))
            browser.storage_set(sw, {"trackedTabId": None, "trackedTabUrl": "", "pilotEnabled": False},
                                pair=False)
            time.sleep(2)
            rows.append(summarise("idle", record(daemon.url, args.seconds), args.seconds))
        finally:
            browser.stop()
            site.stop()
            daemon.stop()
    columns = list(rows[0])
    print_table("/sync gaps and false \"gone\" per threshold", columns,
                [[r[c] for c in columns] for r in rows])
    write_json("liveness", {"rows": rows, "thresholds": THRESHOLDS})


if __name__ == "__main__":
    main()

"""
Extension overhead: page-load time and main-thread long-task time of test pages in Debian's Chromium
(headless) without the extension, in an untracked tab of the browser with it, and in a tracked tab
streaming into a real daemon.

Every comparison is made inside one browser: the extension is loaded and removed over the DevTools
pipe (``Extensions.loadUnpacked`` / ``Extensions.uninstall``) between blocks of loads, one block
without it and one with it per round, their order alternating, so "without" and "with" share the
browser process, the tab and the renderer conditions (two instances of the same browser differ by
up to 20 ms in median load time on this machine). Every block loads two tabs in turn, load by load:
tab A (the tracked tab when the extension is in) and tab B (untracked). A load brings its tab to the
front, so a block without the extension loads both tabs too; each configuration is compared with the
loads of its own tab without the extension ("without" for tab A, "without, tab B"). A random 0-50 ms
pause comes before each navigation (a load's DOMContentLoaded moves by a whole rendering frame
depending on when it starts). Each load is read 300 ms after its load event,
then the next one starts. Medians over all loads (at least 10), in one run.

    .venv/bin/python bench/extension_overhead.py [--instances 2] [--rounds 8] [--loads 10] [--pages bench.html,app.html]

Pages (tests/e2e/testsite.py): ``bench.html`` (minimal, ~30 ms) and ``app.html`` (app-like: a
stylesheet, a ~220 kB bundle, API calls and images answered after 30-40 ms; ~150 ms). Prints a table
per page and writes ``bench/results/extension_overhead-*.json``. Target: < 5 % on load time.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))

from _common import median, percentile, print_table, write_json  # noqa: E402
from harness import CHROMIUM, Chromium, TestSite, daemon_get, wait_until  # noqa: E402

from gasoline.testing_process import DaemonProcess  # noqa: E402

MEASURE = """
new Promise((resolve) => {
  const done = () => setTimeout(() => {
    const nav = performance.getEntriesByType('navigation')[0];
    resolve({
      load: nav.loadEventEnd,
      dcl: nav.domContentLoadedEventEnd,
      long_tasks: (window.__longTasks || []).reduce((a, b) => a + b, 0),
    });
  }, 300);
  if (document.readyState === 'complete' && performance.getEntriesByType('navigation')[0].loadEventEnd > 0) done();
  else addEventListener('load', done, {once: true});
})
"""


def load_once(browser: Chromium, target: tuple[str, str], url: str) -> dict:
    target_id, page = target
    browser.cdp.call("Target.activateTarget", {"targetId": target_id})
    browser.cdp.call("Page.navigate", {"url": url}, session=page)
    return wait_until(
        lambda: browser.cdp.evaluate(page, f"location.href === {url!r} && document.readyState === 'complete'")
        and browser.cdp.evaluate(page, MEASURE),
        20, interval=0.05, what=f"{url} to load",
    )


def open_tab(browser: Chromium, url: str) -> tuple[str, str]:
    """A tab attached over CDP without enabling the Runtime domain: with it enabled DevTools records
    every console call of the page (what an open DevTools window costs), which is not the state
    a page normally loads in and would make every console-heavy load slower in all three
    configurations."""
    target_id = browser.cdp.call("Target.createTarget", {"url": url})["targetId"]
    return target_id, browser.cdp.attach(target_id)


def wait_connected(browser: Chromium, sw: str) -> None:
    """Until this install of the extension has synced with the daemon (its own status, not the
    daemon's view, which may still remember the previous install)."""
    wait_until(
        lambda: browser.cdp.evaluate(
            sw, "chrome.storage.session.get('gasolineStatus').then(r => !!(r.gasolineStatus && r.gasolineStatus.connected))"),
        20, interval=0.2, what="the extension to connect",
    )


def install(browser: Chromium, extension: Path, daemon, site, tracked: tuple[str, str], untracked: tuple[str, str]) -> str:
    """Load the extension, track the first tab, and wait until it has synced."""
    load_once(browser, tracked[:2], f"{site.url}/blank.html?{tracked[2]}")  # found by its URL below
    ext_id = browser.install_extension(extension)
    sw = browser.service_worker()
    tab = wait_until(
        lambda: browser.cdp.evaluate(sw, f"chrome.tabs.query({{}}).then(ts => (ts.find(t => t.url.includes({tracked[2]!r})) || {{}}).id || 0)"),
        10, what="the tracked tab's id",
    )
    browser.storage_set(sw, {"serverUrl": daemon.url, "trackedTabId": tab, "trackedTabUrl": site.url + "/blank.html?" + tracked[2]})
    wait_connected(browser, sw)
    browser.cdp.call("Target.detachFromTarget", {"sessionId": sw})
    return ext_id


def run_instance(args, site, daemon, samples: dict, per_instance: list, pages: list[str]) -> None:
    """One browser measures every configuration. Each round has a block without any extension and
    a block with each extension measured (``--extension``, and ``--compare`` if given), in an order
    that rotates per round; an extension is loaded over the DevTools pipe (Extensions.loadUnpacked)
    before its block and removed after it, so all of them run in the same browser process, the same
    tabs and the same renderer conditions."""
    browser = Chromium(executable=args.chromium, extension_dir=None, pipe=True).start()
    try:
        tab_a = (*open_tab(browser, site.url + "/blank.html?tab-a"), "tab-a")
        tab_b = (*open_tab(browser, site.url + "/blank.html?tab-b"), "tab-b")
        mine: dict = {}
        builds = [("", args.extension)] + ([(f"{args.compare_label} ", args.compare)] if args.compare else [])
        blocks = [None] + builds
        for rnd in range(args.rounds):
            for block in blocks[rnd % len(blocks):] + blocks[:rnd % len(blocks)]:
                ext_id = install(browser, block[1], daemon, site, tab_a, tab_b) if block else None
                try:
                    # Every block loads both tabs in turn, so each load brings its tab to the front
                    # the same way with and without the extension; each configuration is compared
                    # with the "without" loads of its own tab.
                    configs = ([("without", tab_a), (BASE_UNTRACKED, tab_b)] if block is None
                               else [(f"{block[0]}with", tab_a), (f"{block[0]}with, untracked tab", tab_b)])
                    for page_name in pages:
                        measure_block(browser, site, configs, page_name, rnd, args, samples, mine, hooked=block is not None)
                finally:
                    if ext_id:
                        browser.uninstall_extension(ext_id)
        per_instance.append({p: {n: median(v) for n, v in d.items()} for p, d in mine.items()})
    finally:
        browser.stop()


def measure_block(browser, site, configs, page_name, rnd, args, samples, mine, hooked: bool) -> None:
    # Warm the block (first loads compile and cache; the tracked tab's first load after an install
    # gets its verdict).
    for _ in range(2):
        for _name, tab in configs:
            load_once(browser, tab[:2], f"{site.url}/{page_name}?warm")
    present = browser.cdp.evaluate(configs[0][1][1], "!!window.__gasolineHooks")
    if present != hooked:
        raise RuntimeError(f"{configs[0][0]!r}: page hooks present = {present}")
    for i in range(args.loads):
        order = configs[i % len(configs):] + configs[:i % len(configs)]
        for name, tab in order:
            # A random pause breaks any lock-step between our navigations and the browser's
            # frame clock (a load's DCL waits for a rendering frame).
            time.sleep(random.uniform(0, 0.05))
            row = load_once(browser, tab[:2], f"{site.url}/{page_name}?r={rnd}-{i}")
            samples[page_name].setdefault(name, []).append(row)
            mine.setdefault(page_name, {}).setdefault(name, []).append(row["load"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=2,
                        help="fresh browsers, one after another (every comparison is made within one browser)")
    parser.add_argument("--rounds", type=int, default=8,
                        help="install/remove rounds per browser (each: a block without the extension and one with it)")
    parser.add_argument("--loads", type=int, default=10, help="loads of each page per configuration per block")
    parser.add_argument("--extension", type=Path, default=HERE.parent / "extension",
                        help="the unpacked extension to measure (default: this repository's)")
    parser.add_argument("--compare", type=Path, default=None,
                        help="a second unpacked extension measured in the same run, e.g. an older build "
                        "(git archive <commit> extension | tar -x -C /tmp/old)")
    parser.add_argument("--compare-label", default="compared,",
                        help="prefix of the second extension's configurations in the table")
    parser.add_argument("--pages", default="bench.html,app.html",
                        help="comma-separated test-site pages (bench.html: minimal; app.html: app-like)")
    parser.add_argument("--chromium", default=CHROMIUM)
    args = parser.parse_args()
    if args.loads * args.rounds * args.instances < 10:
        parser.error("--loads x --rounds x --instances must be at least 10")
    if not os.path.exists(args.chromium):
        print(f"Chromium not found at {args.chromium}", file=sys.stderr)
        return 2
    pages = [p.strip() for p in args.pages.split(",") if p.strip()]
    samples: dict = {p: {} for p in pages}
    per_instance: list = []
    site = TestSite().start()
    daemon = DaemonProcess(state_dir=Path(tempfile.mkdtemp(prefix="gasoline-bench-")) / "state").start()
    try:
        for _ in range(args.instances):
            run_instance(args, site, daemon, samples, per_instance, pages)
        time.sleep(1.5)
        entries = daemon_get(daemon.url, "/health")["logs"]["entries"]
    finally:
        daemon.stop()
        site.stop()

    report: dict = {}
    for page_name in pages:
        report[page_name] = summarize(page_name, samples[page_name], [pi[page_name] for pi in per_instance], args)
    print(f"console entries the daemon received from the tracked runs: {entries}")
    path = write_json("extension_overhead", {
        "method": "one browser per instance, extension loaded/removed over the DevTools pipe between blocks",
        "instances": args.instances, "rounds": args.rounds, "loads_per_block": args.loads, "pages": report,
        "extension": str(args.extension), "compare": str(args.compare) if args.compare else None,
        "daemon_entries": entries, "per_instance_load_medians": per_instance,
        "samples": samples, "target_percent": 5,
    })
    print(f"wrote {path}")
    return 0


BASE_UNTRACKED = "without, tab B"  # the untracked tab's loads in the blocks without the extension


def summarize(page_name: str, samples: dict, per_instance: list, args) -> dict:
    summary = {}
    for name, rows in samples.items():
        summary[name] = {
            "load_ms_median": median([r["load"] for r in rows]),
            "load_ms_p90": percentile([r["load"] for r in rows], 90),
            "dcl_ms_median": median([r["dcl"] for r in rows]),
            "long_task_ms_median": median([r["long_tasks"] for r in rows]),
            "loads": len(rows),
        }
    def baseline(name: str) -> str:
        """The "without" loads of the same tab."""
        return BASE_UNTRACKED if name.endswith("untracked tab") else "without"

    def over(name: str) -> float:
        base = summary[baseline(name)]["load_ms_median"]
        return (summary[name]["load_ms_median"] - base) / base * 100 if base else float("nan")

    measured = [name for name in samples if name not in ("without", BASE_UNTRACKED)]
    overhead, untracked_overhead = over("with"), over("with, untracked tab")
    loads = {name: [r["load"] for r in rows] for name, rows in samples.items()}
    ci = {name: overhead_interval(loads[baseline(name)], loads[name]) for name in measured}
    lt_delta = summary["with"]["long_task_ms_median"] - summary["without"]["long_task_ms_median"]
    base = summary["without"]["load_ms_median"]
    print_table(
        f"Extension overhead on /{page_name} ({args.instances} browsers x {args.rounds} rounds x {args.loads} loads per "
        f"configuration, medians)",
        ["browser", "load ms", "load p90 ms", "DCL ms", "long tasks ms", "per-instance load medians"],
        [
            [name, f"{s['load_ms_median']:.1f}", f"{s['load_ms_p90']:.1f}", f"{s['dcl_ms_median']:.1f}",
             f"{s['long_task_ms_median']:.1f}", " ".join(f"{pi[name]:.1f}" for pi in per_instance)]
            for name, s in summary.items()
        ],
    )
    for name in measured:
        if name not in ("with", "with, untracked tab"):
            print(f"/{page_name} {name}: {over(name):+.1f} % (95 % CI {ci[name][0]:+.1f} .. {ci[name][1]:+.1f})")
    verdict = "meets" if overhead < 5 else "misses"
    print(f"/{page_name} load-time overhead: {overhead:+.1f} % tracked (95 % CI {ci['with'][0]:+.1f} .. {ci['with'][1]:+.1f}; "
          f"{verdict} the < 5 % target), {untracked_overhead:+.1f} % untracked (95 % CI {ci['with, untracked tab'][0]:+.1f} .. "
          f"{ci['with, untracked tab'][1]:+.1f}); absolute {summary['with']['load_ms_median'] - base:+.1f} ms; "
          f"long-task delta: {lt_delta:+.1f} ms")
    return {"summary": summary, "load_overhead_percent": overhead, "load_overhead_percent_ci95": ci["with"],
            "untracked_load_overhead_percent": untracked_overhead,
            "untracked_load_overhead_percent_ci95": ci["with, untracked tab"], "long_task_delta_ms": lt_delta,
            "overhead_percent_by_configuration": {name: over(name) for name in measured},
            "ci95_by_configuration": ci, "meets_target": overhead < 5}


def overhead_interval(base: list[float], other: list[float], rounds: int = 2000, seed: int = 7) -> list[float]:
    """A 95 % bootstrap interval of the median overhead in percent: both samples resampled with
    replacement, the overhead of their medians taken each time. On this machine single loads of the
    same page spread over tens of milliseconds, so the interval says how far one run's median
    overhead can be trusted."""
    rng = random.Random(seed)
    values = []
    for _ in range(rounds):
        b = median(rng.choices(base, k=len(base)))
        o = median(rng.choices(other, k=len(other)))
        values.append((o - b) / b * 100 if b else float("nan"))
    values.sort()
    return [values[int(0.025 * rounds)], values[int(0.975 * rounds) - 1]]


if __name__ == "__main__":
    raise SystemExit(main())

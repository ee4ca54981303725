"""
Query routing benchmark (issue 4).

10 clients x 100 concurrent ``dom`` calls per round through the query router, answered by the
FakeExtension (in its own process, ``bench/_queries_fake.py``) over real HTTP (``POST /sync`` on
127.0.0.1) against the daemon's components running in this process on the real reactor (the MCP tools are not wired to the router yet, so the calls
enter at ``QueryRouter.call``). Reports:

 - calls/s per round (queue -> /sync long poll -> fake extension -> result sync -> Deferred);
 - routing overhead p50/p99: from the arrival of the extension's result POST at the daemon (the
   request fully received, ``requestReceived``) to the firing of the caller's Deferred; extension
   work is excluded by construction. Results arrive in batches (one sync carries every result the
   fake finished in one reactor turn), so the figure includes parsing the whole batch and
   resolving the results ahead of this one in it;
 - misrouted results: answers whose selector is not the one the caller asked for (must be 0),
   plus results the router could not route.

Two scenarios: instant answers (every result of a round comes back in one or two syncs: the worst
case for batching) and 0..20 ms of simulated extension work per command.

    .venv/bin/python bench/queries.py [--clients 10] [--calls 100] [--rounds 5] [--work-ms 20]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median, percentile, print_table, write_json  # noqa: E402

from gasoline.app import Config, build  # noqa: E402
from gasoline.http.request import GasolineRequest, GasolineSite  # noqa: E402

#: perf_counter() when the request now being processed was fully received, else None.
_arrival: list[float | None] = [None]


class TimedRequest(GasolineRequest):
    """Notes when the request is fully received; everything up to the caller's Deferred firing
    runs synchronously inside C{requestReceived}, so a callback reads its own sync's arrival."""

    def requestReceived(self, command, path, version):
        _arrival[0] = time.perf_counter()
        try:
            super().requestReceived(command, path, version)
        finally:
            _arrival[0] = None


async def _sleep(reactor, seconds: float) -> None:
    from twisted.internet.task import deferLater  # noqa: PLC0415

    await deferLater(reactor, seconds, lambda: None)


async def run(reactor, clients: int, calls: int, rounds: int, work_ms: float) -> dict:
    """One scenario. The FakeExtension runs in its own process (bench/_queries_fake.py). With
    C{work_ms} > 0 each dom command takes a uniform 0..work_ms of simulated extension work, so
    results arrive spread out, in smaller syncs, as from a real browser."""
    from twisted.internet.defer import gatherResults  # noqa: PLC0415

    state = Path(tempfile.mkdtemp(prefix="gasoline-bench-queries-"))
    app = build(Config(state_dir=state, persist=False), reactor)
    site = GasolineSite(app.resource, reactor=reactor)
    site.requestFactory = TimedRequest
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    url = f"http://127.0.0.1:{port.getHost().port}"
    fake = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_queries_fake.py")), url, str(work_ms)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
    )
    router = app.router
    out: dict = {"work_ms": work_ms, "rounds": []}
    try:
        for _ in range(500):
            if app.extension.connected:
                break
            await _sleep(reactor, 0.02)
        else:
            raise RuntimeError("the fake extension process never synced")
        overhead_all: list[float] = []
        misrouted = unattributed = 0
        for r in range(rounds + 1):  # round 0 warms up and is not reported
            overhead: list[float] = []
            wrong = [0, 0]

            def check(result, selector):
                arrived = _arrival[0]
                if arrived is None:
                    wrong[1] += 1
                else:
                    overhead.append((time.perf_counter() - arrived) * 1000.0)
                if not isinstance(result, dict) or result.get("selector") != selector:
                    wrong[0] += 1
                return result

            ds = []
            syncs0 = app.extension.syncs
            t0 = time.perf_counter()
            for i in range(calls):
                for c in range(clients):
                    selector = f"#client-{c}-round-{r}-call-{i}"
                    d = router.call(f"client-{c}", "dom", {"selector": selector}, timeout=60)
                    ds.append(d.addCallback(check, selector))
            await gatherResults(ds, consumeErrors=True)
            elapsed = time.perf_counter() - t0
            if r == 0:
                continue
            n = clients * calls
            row = {
                "round": r, "calls": n, "seconds": elapsed, "calls_per_s": n / elapsed,
                "overhead_p50_ms": percentile(overhead, 50),
                "overhead_p99_ms": percentile(overhead, 99),
                "overhead_max_ms": max(overhead) if overhead else float("nan"),
                "misrouted": wrong[0], "unattributed": wrong[1],
                "syncs": app.extension.syncs - syncs0,
            }
            out["rounds"].append(row)
            overhead_all += overhead
            misrouted += wrong[0]
            unattributed += wrong[1]
            await _sleep(reactor, 0.2)  # let the last result syncs settle between rounds
        rows = out["rounds"]
        out["summary"] = {
            "clients": clients, "concurrent_calls_per_client": calls, "rounds": rounds,
            "simulated_extension_work_ms": f"uniform 0..{work_ms:g}" if work_ms else "none",
            "calls_per_s_median": median([x["calls_per_s"] for x in rows]),
            "overhead_p50_ms": percentile(overhead_all, 50),
            "overhead_p99_ms": percentile(overhead_all, 99),
            "misrouted": misrouted,
            "unrouted_results": router.stats["unrouted_results"],
            "unattributed": unattributed,
            "targets": {"overhead_p99_ms": 5.0, "misrouted": 0},
        }
    finally:
        fake.stdin.close()
        for _ in range(250):
            if fake.poll() is not None:
                break
            await _sleep(reactor, 0.02)
        else:
            fake.kill()
            fake.wait()
        router.close()
        app.extension.stop()
        app.store.notifier.stop()
        await port.stopListening()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--calls", type=int, default=100, help="concurrent calls per client")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work-ms", type=float, default=20.0,
                        help="simulated extension work per command in the second scenario "
                        "(uniform 0..N ms); 0 runs only the instant scenario")
    args = parser.parse_args()

    from twisted.internet import reactor  # noqa: PLC0415  (a benchmark, not library code)
    from twisted.internet.defer import Deferred  # noqa: PLC0415

    scenarios = [0.0] + ([args.work_ms] if args.work_ms > 0 else [])
    results: list[dict] = []
    error: list[str] = []

    async def all_scenarios():
        for work in scenarios:
            results.append(await run(reactor, args.clients, args.calls, args.rounds, work))

    def go():
        d = Deferred.fromCoroutine(all_scenarios())
        d.addErrback(lambda f: (f.printTraceback(), error.append(f.getErrorMessage())))
        d.addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(go)
    reactor.run()
    if error:
        return 1
    misrouted = 0
    for result in results:
        s = result["summary"]
        name = ("instant answers: every result of a round in one or two syncs (worst-case batching)"
                if not result["work_ms"] else
                f"0..{result['work_ms']:g} ms simulated extension work per command")
        print_table(
            f"{args.clients} clients x {args.calls} concurrent dom calls, FakeExtension over real "
            f"HTTP; {name}",
            ["round", "calls", "calls/s", "overhead p50 ms", "overhead p99 ms", "max ms",
             "syncs", "misrouted"],
            [[x["round"], x["calls"], x["calls_per_s"], x["overhead_p50_ms"],
              x["overhead_p99_ms"], x["overhead_max_ms"], x["syncs"], x["misrouted"]]
             for x in result["rounds"]],
        )
        print_table("summary", ["metric", "value", "target"], [
            ["calls/s (median round)", s["calls_per_s_median"], ""],
            ["routing overhead p50 ms", s["overhead_p50_ms"], ""],
            ["routing overhead p99 ms", s["overhead_p99_ms"], "< 5"],
            ["misrouted results", s["misrouted"], "0"],
            ["unrouted results", s["unrouted_results"], "0"],
            ["callbacks outside a result POST", s["unattributed"], "0"],
        ])
        misrouted += s["misrouted"]
    print(f"\nwrote {write_json('queries', {'scenarios': results})}")
    return 0 if misrouted == 0 else 2


if __name__ == "__main__":
    sys.exit(main())

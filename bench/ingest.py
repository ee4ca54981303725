"""
Ingest benchmark: the reference workload against ``twistd -n gasoline``.

4 keep-alive connections POST ``/logs`` with 50 console entries per request (~270 B each, the
extension's format and headers) for a fixed time. Reports entries/s, POST latency p50/p95/p99, the
daemon's CPU time per entry (user + system, its threads included: steady on a busy machine, where
entries/s is not), daemon RSS idle and after, and — in a second phase with a 100 000-entry console
buffer — RSS bytes per stored entry. ``--compare-reference`` runs the same phases, in the same run, against the published Gasoline
0.7.9 daemon and prints the ratios.

    .venv/bin/python bench/ingest.py [--seconds 10] [--compare-reference]

``--baseline DIR`` measures another checkout of Gasoline (e.g. ``git worktree add /tmp/base 530dacc``)
side by side with this one: its daemon runs with ``PYTHONPATH=DIR``, and ``--rounds N`` alternates
the two throughput phases N times (this tree first in odd rounds, the baseline first in even ones),
then prints the medians of entries/s and CPU us/entry and their ratios (this tree / baseline). On a
machine other processes load too, only such side-by-side medians can be compared.

    .venv/bin/python bench/ingest.py --baseline /tmp/base --rounds 5 --seconds 8

``--sealed`` makes this tree's load a paired extension's (sealed bodies): the bench pairs with the
daemon as the extension does (its own key, pinned on first use) and every ``POST /logs`` is sealed
(AES-256-GCM under the session key). Each request is sealed as it is sent, with the session's
next request number: the daemon refuses a sealed request it has already opened (replay), so
a request sealed once is sent once. The requests of a timed phase are sealed, and built into the
bytes sent, before it starts (L{Sealer}), so that the load loop does no more per request than the
plain load's: the load generator shares the cores with the daemon, and a slower generator makes
fewer entries/s and, as the daemon then wakes up for fewer requests at a time, more daemon CPU per
entry. With ``--baseline`` that is the paired run "sealed ingest (this tree) vs today's (the
baseline's plain ingest)":

    .venv/bin/python bench/ingest.py --baseline /tmp/base --rounds 5 --seconds 8 --sealed

``--both-sealed`` seals the baseline's load too (a baseline that has sealed ingest): the paired
run "sealed ingest (this tree) vs sealed ingest (the baseline)":

    .venv/bin/python bench/ingest.py --baseline /tmp/base --rounds 5 --seconds 8 --both-sealed

``--state-key`` runs this tree's daemon with ``--state-key-file`` (a fresh key: journals and client
state encrypted at rest). With ``--baseline .`` (this very tree, without the option) it is the
paired cost of encryption at rest on ingest, option on vs off:

    .venv/bin/python bench/ingest.py --baseline . --rounds 5 --seconds 8 --state-key
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    HTTPConnection,
    build_request,
    ReferenceDaemon,
    cpu_seconds,
    median,
    percentile,
    print_table,
    rss,
    run_threads,
    write_json,
)

from gasoline.testing import EXTENSION_HEADERS
from gasoline.testing_process import DaemonProcess

from _workload import BATCH, batches, console_entry  # noqa: F401

CONNECTIONS = 4
#: Sealed requests made ready per second of a sealed phase (above what the daemon answers here;
#: past them the load seals inline).
PRESEAL_PER_SECOND = 4000


class Sealer:
    """Seals C{POST /logs} bodies for one paired session, one request number each (thread-safe:
    the load's threads share the session, as the worker's parallel requests do).

    L{preseal} seals the requests of a timed phase before it starts, numbered in the order the
    load's threads will take them, and builds the bytes each is sent as: sealing (or building a
    request) inside the load loop (one lock, one GIL, on the daemon's two cores) made the load
    generator, not the daemon, the bottleneck of a sealed run. A request is still sent once only
    (the daemon refuses replays)."""

    def __init__(self, ext, host_header: bytes) -> None:
        self.ext = ext
        self.host_header = host_header
        self.lock = threading.Lock()
        self.ready: collections.deque[bytes] = collections.deque()

    def _request(self, body: bytes) -> bytes:
        headers, sealed, _ = self.ext.seal("POST", "/logs", body)
        return build_request(self.host_header, "POST", "/logs", sealed, headers)

    def preseal(self, bodies: list[bytes], count: int) -> None:
        for i in range(count):
            self.ready.append(self._request(bodies[i % len(bodies)]))

    def __call__(self, body: bytes) -> bytes:
        """The next sealed request (its bytes), sealed now if none is ready."""
        try:
            return self.ready.popleft()  # atomic: threads take the numbers in order
        except IndexError:
            pass
        with self.lock:
            return self._request(body)


def sealed_requests(port: int, bodies: list[bytes]) -> Sealer:
    """Pair with the daemon on C{port} as the extension does; a sealer of C{POST /logs} bodies."""
    import base64

    from gasoline.testing import PairedExtensionKeys

    conn = HTTPConnection("127.0.0.1", port)
    status, text = conn.request("GET", "/pairing", b"", EXTENSION_HEADERS)
    key = json.loads(text)["key"]
    ext = PairedExtensionKeys(base64.urlsafe_b64decode(key + "=" * (-len(key) % 4)))
    status, text = conn.request("POST", "/pairing/challenge", json.dumps(ext.challenge()).encode(),
                                EXTENSION_HEADERS)
    conn.close()
    if status != 200 or not ext.finish(json.loads(text)):
        raise RuntimeError(f"pairing failed: {status} {text[:200]!r}")
    return Sealer(ext, conn.host_header)


def load(port: int, bodies: list[bytes], seconds: float, connections: int = CONNECTIONS,
         sealed: Sealer | None = None) -> dict:
    """Keep C{connections} connections busy for C{seconds}; return counts and latencies."""
    stop_at = time.perf_counter() + seconds
    results: list[tuple[int, int, list[float]]] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        conn = HTTPConnection("127.0.0.1", port)
        raws = [conn.build("POST", "/logs", body, EXTENSION_HEADERS) for body in bodies]
        ok = bad = 0
        lat: list[float] = []
        i = offset
        while time.perf_counter() < stop_at:
            raw = raws[i % len(raws)] if sealed is None else sealed(bodies[i % len(bodies)])
            t0 = time.perf_counter()
            status, _ = conn.send_raw(raw)
            lat.append((time.perf_counter() - t0) * 1000.0)
            if status == 200:
                ok += 1
            else:
                bad += 1
            i += 1
        conn.close()
        with lock:
            results.append((ok, bad, lat))

    threads = [threading.Thread(target=worker, args=(k * 7,)) for k in range(connections)]
    elapsed = run_threads(threads)
    ok = sum(r[0] for r in results)
    bad = sum(r[1] for r in results)
    lat = [x for r in results for x in r[2]]
    return {
        "seconds": elapsed,
        "requests_ok": ok,
        "requests_failed": bad,
        "entries_per_second": ok * BATCH / elapsed,
        "post_ms_p50": percentile(lat, 50),
        "post_ms_p95": percentile(lat, 95),
        "post_ms_p99": percentile(lat, 99),
        "post_ms_median": median(lat),
    }


def fill(port: int, entries: int) -> None:
    conn = HTTPConnection("127.0.0.1", port)
    for body in batches(entries // BATCH, start=10_000_000):
        status, text = conn.request("POST", "/logs", body, EXTENSION_HEADERS)
        if status != 200:
            raise RuntimeError(f"fill failed: {status} {text[:200]!r}")
    conn.close()


def stored_entries(port: int) -> int:
    conn = HTTPConnection("127.0.0.1", port)
    status, body = conn.request("GET", "/health", b"", {})
    conn.close()
    return int(json.loads(body)["logs"]["entries"])


def throughput(start, seconds: float, sealed: bool = False) -> dict:
    """The throughput phase alone: default options, warm-up, then C{seconds} of load (with
    C{sealed}, as a paired extension: see the module's docstring)."""
    out: dict = {"sealed": sealed}
    bodies = batches(64)
    with start(None) as d:
        time.sleep(0.5)
        out["rss_idle_bytes"] = rss(d.pid)
        requests = sealed_requests(d.port, bodies) if sealed else None
        if requests is not None:
            requests.preseal(bodies, PRESEAL_PER_SECOND)
        load(d.port, bodies, 1.0, sealed=requests)  # warm-up
        if requests is not None:
            requests.ready.clear()  # numbers left from the warm-up are behind the window
            requests.preseal(bodies, int(PRESEAL_PER_SECOND * seconds))
        cpu = cpu_seconds(d.pid)
        out.update(load(d.port, bodies, seconds, sealed=requests))
        # The daemon's CPU per stored entry: unlike entries/s, it hardly moves when other
        # processes compete for the cores, so it shows a change on the ingest path on a busy box.
        out["cpu_us_per_entry"] = ((cpu_seconds(d.pid) - cpu) * 1e6
                                   / max(out["requests_ok"] * BATCH, 1))
        out["rss_after_bytes"] = rss(d.pid)
    return out


def run_target(name: str, start, seconds: float, memory_entries: int, sealed: bool = False) -> dict:
    """Throughput phase at default sizes, then a memory phase with a large console buffer."""
    out: dict = {"target": name}
    out.update(throughput(start, seconds, sealed))
    with start(memory_entries) as d:
        time.sleep(0.5)
        before = rss(d.pid)
        fill(d.port, memory_entries)
        time.sleep(1.0)
        after = rss(d.pid)
        held = stored_entries(d.port)
        out["memory_phase"] = {
            "buffer_entries": memory_entries,
            "entries_held": held,
            "rss_before_bytes": before,
            "rss_after_bytes": after,
            "rss_bytes_per_entry": (after - before) / max(held, 1),
        }
    return out


class _Ours:
    """Context manager around DaemonProcess exposing pid/port like ReferenceDaemon."""

    def __init__(self, max_entries: int | None, source: str | None = None,
                 state_key: bool = False) -> None:
        args = ["--max-entries", str(max_entries)] if max_entries else []
        self._tmp = tempfile.TemporaryDirectory(prefix="gasoline-bench-")
        if state_key:
            key = Path(self._tmp.name) / "state.key"
            key.write_text(os.urandom(32).hex())
            key.chmod(0o600)
            args += ["--state-key-file", str(key)]
        env = {"PYTHONPATH": source} if source else None
        self.d = DaemonProcess(state_dir=Path(self._tmp.name) / "state", args=args, env=env)

    def __enter__(self):
        self.d.start()
        self.port = self.d.port
        self.pid = self.d.process.pid
        return self

    def __exit__(self, *exc):
        self.d.stop()
        self._tmp.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the load phase")
    parser.add_argument("--memory-entries", type=int, default=100_000)
    parser.add_argument("--compare-reference", action="store_true",
                        help="also run the published Gasoline 0.7.9 daemon in the same run")
    parser.add_argument("--baseline", metavar="DIR",
                        help="another Gasoline checkout to measure side by side (PYTHONPATH=DIR)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternating throughput rounds with --baseline")
    parser.add_argument("--sealed", action="store_true",
                        help="this tree's load is a paired extension's: sealed POST /logs")
    parser.add_argument("--both-sealed", action="store_true",
                        help="with --baseline: both trees' loads are sealed")
    parser.add_argument("--state-key", action="store_true",
                        help="this tree's daemon encrypts its state at rest (--state-key-file)")
    args = parser.parse_args()
    if args.baseline:
        return side_by_side(args.baseline, args.rounds, args.seconds,
                            args.sealed or args.both_sealed, args.state_key, args.both_sealed)

    runs = [run_target("gasoline" + (" sealed" if args.sealed else ""), _Ours, args.seconds,
                       args.memory_entries, args.sealed)]
    if args.compare_reference:
        runs.append(run_target("reference-0.7.9", lambda n: ReferenceDaemon(n), args.seconds,
                               args.memory_entries))

    rows = [
        [r["target"], r["entries_per_second"], r["cpu_us_per_entry"], r["post_ms_p50"],
         r["post_ms_p95"], r["post_ms_p99"], r["requests_failed"], r["rss_idle_bytes"] / 2**20, r["rss_after_bytes"] / 2**20,
         r["memory_phase"]["entries_held"], r["memory_phase"]["rss_bytes_per_entry"]]
        for r in runs
    ]
    print_table(
        f"POST /logs, {CONNECTIONS} keep-alive connections x {BATCH} entries/request, "
        f"{args.seconds:.0f} s; memory phase: {args.memory_entries:,}-entry console buffer",
        ["target", "entries/s", "CPU us/entry", "p50 ms", "p95 ms", "p99 ms", "failed", "RSS idle MiB",
         "RSS after MiB", "held", "RSS B/entry"],
        rows,
    )
    result = {"runs": runs, "seconds": args.seconds, "connections": CONNECTIONS, "batch": BATCH}
    if len(runs) == 2:
        ours, ref = runs
        ratios = {
            "entries_per_second": ours["entries_per_second"] / ref["entries_per_second"],
            "post_ms_p99": ours["post_ms_p99"] / ref["post_ms_p99"],
            "rss_bytes_per_entry": ours["memory_phase"]["rss_bytes_per_entry"]
            / ref["memory_phase"]["rss_bytes_per_entry"],
        }
        result["ratios_ours_over_reference"] = ratios
        print_table("ratios (gasoline / reference)", ["metric", "ratio"],
                    [[k, v] for k, v in ratios.items()])
        print("targets: entries/s ratio >= 8, p99 ratio < 1, RSS per entry <= 600 B")
    path = write_json("ingest", result)
    print(f"\nwrote {path}")
    return 0


def side_by_side(baseline: str, rounds: int, seconds: float, sealed: bool = False,
                 state_key: bool = False, both_sealed: bool = False) -> int:
    """Alternate this tree's and C{baseline}'s throughput phases; medians and ratios (with
    C{sealed}, this tree's load is sealed, the baseline's plain unless C{both_sealed})."""
    source = str(Path(baseline).resolve())
    if not (Path(source) / "gasoline" / "tap.py").is_file():
        raise SystemExit(f"--baseline {baseline}: no gasoline/tap.py there")
    variants = {"this tree": lambda n: _Ours(n, state_key=state_key),
                "baseline": lambda n: _Ours(n, source)}
    samples: dict[str, list[dict]] = {name: [] for name in variants}
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            result = throughput(variants[name], seconds,
                                sealed and (both_sealed or name == "this tree"))
            samples[name].append(result)
            print(f"round {r + 1} {name:9s}: {result['entries_per_second']:>9,.0f} entries/s, "
                  f"{result['cpu_us_per_entry']:.2f} CPU us/entry, p99 {result['post_ms_p99']:.2f} ms",
                  flush=True)
    keys = ["entries_per_second", "cpu_us_per_entry", "post_ms_p50", "post_ms_p99"]
    medians = {name: {k: median([s[k] for s in runs]) for k in keys}
               for name, runs in samples.items()}
    ours, base = medians["this tree"], medians["baseline"]
    print_table(
        f"POST /logs side by side, {rounds} alternating rounds of {seconds:.0f} s, medians "
        f"(baseline: {source})"
        f"{'; both sealed' if both_sealed else '; this tree sealed, the baseline plain' if sealed else ''}"
        f"{'; this tree with --state-key-file' if state_key else ''}",
        ["metric", "this tree", "baseline", "ratio"],
        [[k, ours[k], base[k], ours[k] / base[k]] for k in keys],
    )
    load_avg = os.getloadavg()
    print(f"load average at the end: {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}")
    path = write_json("ingest-side-by-side", {
        "baseline": source, "sealed": sealed, "both_sealed": both_sealed, "state_key": state_key, "rounds": rounds, "seconds": seconds, "samples": samples,
        "medians": medians, "ratios": {k: ours[k] / base[k] for k in keys},
        "loadavg": load_avg,
    })
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

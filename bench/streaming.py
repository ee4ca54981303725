"""
Context streaming benchmark.

The daemon's components run in this process on the real reactor (a background thread), listening
on 127.0.0.1:0; the extension side is a separate process (``--generator``) posting ``/logs`` over
4 keep-alive connections, 50 console entries per POST (the extension's format: ~30 % errors,
exceptions and failed requests on several hosts). Ten agents are MCP sessions of ten client ids
whose server->client stream writer formats each event as SSE, exactly as the HTTP transports do,
and records when it was called: that is "the notification written to the agent's stream".

Phases, in one run:
 1. latency: the generator paces 10,000 entries/s for ``--seconds``; the 10 agents are subscribed
    with different filters (rate limit 100/s, the maximum, so that many events are measured).
    Latency = writer call - arrival of the ingest request that carried the entry (the moment
    twisted.web hands the complete request to the resource), p50/p99 per agent and over all;
 2. throughput: the generator posts as fast as it can, in alternating blocks without any
    subscription, with the 10 subscriptions at ``--rate-limit``, and with them at the daemon's
    default rate limits (no ``rate_limit`` given: what users get) (``--blocks`` rounds of one
    block of each kind, in a shuffled order each round, ``--block-seconds`` each); medians of entries/s and of the daemon's CPU time per entry, side
    by side, and their ratios;
 3. matching cost, in CPU time (so that a busy machine inflates it less): every agent's compiled
    matcher over the same classified events (ns per event per agent), and the whole subscriber
    path (classification + matching + inbox + push) per entry per agent, measured on the reactor
    thread inside the daemon during phase 1.

    .venv/bin/python bench/streaming.py [--seconds 10] [--blocks 7] [--block-seconds 2]
                                        [--rate-limit 100]

Seven short blocks of each kind by default rather than three long ones (42 s of blocks against
36 s): the load of a shared machine comes in spells, and a median of three blocks moved by 0.07
from one run to the next (docs/streaming.md, session 11).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    HTTPConnection,
    median,
    percentile,
    print_table,
    run_threads,
    write_json,
)

from gasoline.testing import EXTENSION_HEADERS

BATCH = 50
CONNECTIONS = 4
HOSTS = ["https://api.example.com", "https://www.example.com", "https://cdn.example.net",
         "http://localhost:3000"]

#: Ten agents, ten different subscriptions.
FILTERS: list[dict[str, Any]] = [
    {"subscribe": ["error"]},
    {"subscribe": ["error"], "filters": {"severity": "high"}},
    {"subscribe": ["network_failure"]},
    {"subscribe": ["error", "network_failure"], "filters": {"url_pattern": r"^https://api\."}},
    {"subscribe": ["error"], "filters": {"exclude_pattern": "ResizeObserver|favicon"}},
    {"subscribe": ["all"]},
    {"subscribe": ["error", "network_failure"], "filters": {"url_pattern": "localhost:3000"}},
    {"subscribe": ["network_failure"], "filters": {"severity": "high",
                                                   "exclude_pattern": r"/healthz$"}},
    {"subscribe": ["error", "security_violation"], "filters": {"url_pattern": r"example\.(com|net)"}},
    {"subscribe": ["websocket_close", "error"], "filters": {"severity": "medium",
                                                            "url_pattern": "cdn"}},
]
#: Every agent's rate limit (``--rate-limit``): 100/s, the maximum, by default, so that the
#: subscribers do the most work and many notifications are measured. Users get 5/s (10/s for
#: ``all``) unless they ask for more: the throughput phase also runs with the filters as given
#: above, no rate limit, that is the daemon's defaults.
DEFAULT_BENCH_RATE_LIMIT = 100


def set_rate_limit(limit: int | None) -> None:
    """Every agent's rate limit: C{limit}, or (None) none given (the daemon's defaults)."""
    for f in FILTERS:
        if limit is None:
            f.get("filters", {}).pop("rate_limit", None)
        else:
            f.setdefault("filters", {})["rate_limit"] = limit


def with_rate_limit(limit: int | None) -> list[dict[str, Any]]:
    """L{FILTERS} with every agent's rate limit set to C{limit} (None: the daemon's default)."""
    out = []
    for f in FILTERS:
        filters = {k: v for k, v in f.get("filters", {}).items() if k != "rate_limit"}
        if limit is not None:
            filters["rate_limit"] = limit
        out.append({**f, "filters": filters})
    return out


set_rate_limit(DEFAULT_BENCH_RATE_LIMIT)


def entry(batch: int, k: int) -> dict[str, Any]:
    """Entry C{k} of batch C{batch}, with the fields the extension sends for each type
    (extension/content/capture.js; extension-protocol.md §4): about 285 bytes of JSON on
    average, like the ingest benchmark's workload (bench/_workload.py)."""
    host = HOSTS[(batch + k) % len(HOSTS)]
    r = (batch * 7 + k) % 20
    tag = f"b{batch}-{k}"
    ts = f"2026-11-26T10:{(batch // 60) % 60:02d}:{batch % 60:02d}.{k * 7 % 1000:03d}Z"
    script = f"{host}/static/js/main.chunk.js"
    if r < 3:
        return {"ts": ts, "url": f"{host}/app", "type": "console", "level": "error",
                "message": f"{tag} failed to render widget", "source": f"{script}:812:9",
                "args": [f"{tag} failed to render widget", {"widget": k, "retry": r}],
                "tabId": 11}
    if r < 5:
        return {"ts": ts, "url": f"{host}/app", "level": "error", "type": "exception",
                "message": f"{tag} TypeError: x is null", "source": f"{script}:1:2",
                "filename": script, "lineno": 1, "colno": 2,
                "stack": f"TypeError: x is null\n    at f ({script}:1:2)", "tabId": 11}
    if r == 5:
        status, text = (500, "Internal Server Error") if k % 2 else (404, "Not Found")
        return {"ts": ts, "url": f"{host}/api/items", "level": "error", "type": "network",
                "method": "GET", "status": status, "statusText": text, "duration": 40 + k,
                "response": '{"error":"unavailable"}', "page_url": f"{host}/app",
                "message": f"{tag} GET {host}/api/items → {status} {text}", "tabId": 11}
    return {"ts": ts, "url": f"{host}/app", "type": "console",
            "level": ("log", "info", "warn", "debug")[r % 4],
            "message": f"{tag} widget refreshed in {r} ms", "source": f"{script}:10:3",
            "args": [f"{tag} widget refreshed in", r, "ms"], "tabId": 11}


# -- the extension side (a separate process) ----------------------------------------------------


def generator(port: int, seconds: float, rate: float | None, start_batch: int) -> dict[str, Any]:
    """Post batches for C{seconds}: paced to C{rate} entries/s, or as fast as possible."""
    per_conn_interval = None if not rate else CONNECTIONS * BATCH / rate
    stop_at = time.perf_counter() + seconds
    counts = [0] * CONNECTIONS
    failed = [0] * CONNECTIONS
    latencies: list[list[float]] = [[] for _ in range(CONNECTIONS)]

    def worker(c: int) -> None:
        conn = HTTPConnection("127.0.0.1", port)
        b = start_batch + c
        next_at = time.perf_counter() + c * (per_conn_interval or 0) / CONNECTIONS
        while time.perf_counter() < stop_at:
            if per_conn_interval is not None:
                delay = next_at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                next_at += per_conn_interval
            body = json.dumps({"entries": [entry(b, k) for k in range(BATCH)]},
                              separators=(",", ":")).encode()
            headers = dict(EXTENSION_HEADERS, **{"X-Bench-Batch": str(b)})
            t0 = time.perf_counter()
            status, _ = conn.request("POST", "/logs", body, headers)
            latencies[c].append((time.perf_counter() - t0) * 1000.0)
            if status == 200:
                counts[c] += 1
            else:
                failed[c] += 1
            b += CONNECTIONS
        conn.close()

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(CONNECTIONS)]
    elapsed = run_threads(threads)
    lat = [x for per in latencies for x in per]
    return {"seconds": elapsed, "posts": sum(counts), "failed": sum(failed),
            "entries_per_second": sum(counts) * BATCH / elapsed,
            "post_ms_p50": percentile(lat, 50), "post_ms_p99": percentile(lat, 99)}


def run_generator(port: int, seconds: float, rate: float | None, start_batch: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--generator", "--port", str(port), "--seconds", str(seconds),
           "--start-batch", str(start_batch)]
    cmd += ["--rate", str(rate or 0)]  # 0: as fast as possible
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=seconds + 60)
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the daemon side (this process) -------------------------------------------------------------


class Bench:
    def __init__(self, state_dir: Path) -> None:
        from twisted.internet import reactor
        from twisted.web.resource import Resource

        from gasoline.app import Config, build
        from gasoline.http.request import GasolineSite

        self.reactor = reactor
        self.app = build(Config(state_dir=state_dir, persist=False), reactor)
        #: batch number -> perf_counter() when its request reached the resource tree.
        self.arrivals: dict[int, float] = {}
        #: (perf_counter at the writer call, client id, payload)
        self.writes: list[tuple[float, str, bytes]] = []
        self.recording = False
        root = self.app.resource
        arrivals = self.arrivals

        class Arrival(Resource):
            isLeaf = True

            def render(self, request):
                batch = request.getHeader(b"x-bench-batch")
                if batch is not None:
                    arrivals[int(batch)] = time.perf_counter()
                return root.render(request)

        self.site = GasolineSite(Arrival(), reactor=reactor)
        self.port = None
        self.sessions: list[Any] = []
        # The whole subscriber path, timed inside the daemon.
        streaming = self.app.streaming
        original = streaming.on_write
        self.on_write_seconds = 0.0
        self.on_write_entries = 0

        def timed(write: Any) -> None:
            if not self.recording:  # (thread_time is a system call: only when it is needed)
                original(write)
                return
            t0 = time.thread_time()  # CPU time of the reactor thread: robust to a busy machine
            original(write)
            if write.buffer == "console":
                self.on_write_seconds += time.thread_time() - t0
                self.on_write_entries += len(write.entries)

        # The notifier holds the bound method it was given: swap the subscription for the timed
        # one, with the hub's own predicate (a write no agent can want is not even queued).
        streaming._unsubscribe()
        streaming._unsubscribe = self.app.store.notifier.subscribe(timed, wants=streaming.wants)

    def call(self, fn, *args):
        from twisted.internet.threads import blockingCallFromThread

        return blockingCallFromThread(self.reactor, fn, *args)

    def start(self) -> int:
        thread = threading.Thread(target=self.reactor.run, kwargs={"installSignalHandlers": False},
                                  daemon=True)
        thread.start()
        self.port = self.call(lambda: self.reactor.listenTCP(0, self.site, interface="127.0.0.1"))
        self.call(self._agents)
        return self.port.getHost().port

    def _agents(self) -> None:
        from gasoline.http.mcp_sse import _sse_event

        server = self.app.mcp
        for i in range(len(FILTERS)):
            cid = f"agent-{i}"
            session = server.open_session(cid, "connector")
            server.handle(session, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"}}})
            server.handle(session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            writes = self.writes

            def writer(event_id: str, payload: bytes, cid=cid) -> None:
                _sse_event(event_id, payload)  # the bytes the HTTP transport would write
                if self.recording:
                    writes.append((time.perf_counter(), cid, payload))

            session.standalone.attach(writer)
            self.sessions.append(session)

    def subscribe(self, on: bool, filters: list[dict[str, Any]] | None = None) -> None:
        """Subscribe the ten agents (C{filters}, default L{FILTERS}), or unsubscribe them."""
        filters = FILTERS if filters is None else filters

        def do() -> None:
            for i, session in enumerate(self.sessions):
                args = {"what": "streaming", **filters[i]} if on else {
                    "what": "streaming", "enabled": False}
                d = self.app.mcp.handle(session, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                                  "params": {"name": "configure",
                                                             "arguments": args}})
                result = d.result
                assert result["result"]["isError"] is False, result

        self.call(do)

    def drain_inboxes(self) -> None:
        def do() -> None:
            for agent in self.app.streaming.agents.values():
                agent.inbox.ack(agent.inbox.last_seq)

        self.call(do)

    def stop(self) -> None:
        self.call(lambda: self.port.stopListening())
        self.call(self.app.streaming.stop)
        self.call(self.app.store.notifier.stop)
        self.reactor.callFromThread(self.reactor.stop)


def matcher_cost(events_n: int = 20_000) -> dict[str, Any]:
    from gasoline.streaming.events import classify
    from gasoline.streaming.subscription import Matcher, parse

    try:  # the bucket path (gasoline.streaming.tally); absent from older checkouts
        from gasoline.streaming.events import console_keys
        from gasoline.streaming.tally import KeySpec
    except ImportError:
        console_keys = KeySpec = None

    entries = [entry(b, k) for b in range(events_n // BATCH) for k in range(BATCH)]
    # CPU time (process_time), not wall time: the figure should not depend on what else runs.
    t0 = time.process_time()
    events = classify("console", entries, time.time())
    classify_ns = (time.process_time() - t0) * 1e9 / len(entries)
    matchers = [Matcher(parse(f)) for f in FILTERS]
    t0 = time.process_time()
    hits = 0
    for m in matchers:
        matches = m.matches
        for e in events:
            if matches(e):
                hits += 1
    elapsed = time.process_time() - t0
    keys_ns = float("nan")
    if console_keys is not None:
        spec = KeySpec(matchers)
        t0 = time.process_time()
        for b in range(0, len(entries), BATCH):
            console_keys(entries[b:b + BATCH], spec.types, spec.excl)
        keys_ns = (time.process_time() - t0) * 1e9 / len(entries)
    return {"entries": len(entries), "events": len(events), "agents": len(matchers),
            "classify_ns_per_entry": classify_ns, "bucket_keys_ns_per_entry": keys_ns,
            "match_ns_per_event_per_agent": elapsed * 1e9 / (len(events) * len(matchers)),
            "matched": hits}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="latency phase length")
    ap.add_argument("--rate", type=float, default=10_000.0, help="entries/s in the latency phase")
    ap.add_argument("--blocks", type=int, default=7, help="throughput blocks of each kind")
    ap.add_argument("--block-seconds", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0, help="seed of the blocks' order in each round")
    ap.add_argument("--rate-limit", type=int, default=DEFAULT_BENCH_RATE_LIMIT,
                    help="every agent's rate limit, events/s (1-100; users get 5 by default)")
    ap.add_argument("--generator", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--start-batch", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generator:
        print(json.dumps(generator(args.port, args.seconds, args.rate if args.rate else None,
                                   args.start_batch)))
        return 0
    rate = args.rate
    set_rate_limit(args.rate_limit)

    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        port = bench.start()
        try:
            # 1. latency at 10,000 entries/s with 10 subscribed agents
            bench.subscribe(True)
            run_generator(port, 1.0, rate, 10_000_000)  # warm-up
            bench.drain_inboxes()
            cpu0 = bench.call(time.thread_time)  # the reactor thread's CPU time
            bench.recording = True
            paced = run_generator(port, args.seconds, rate, 0)
            time.sleep(0.5)
            bench.recording = False
            reactor_cpu = bench.call(time.thread_time) - cpu0
            writes = list(bench.writes)
            arrivals = dict(bench.arrivals)
            in_daemon = {"seconds": bench.on_write_seconds, "entries": bench.on_write_entries}
            # 2. throughput, alternating blocks without subscriptions, with them at --rate-limit
            # and with them at the daemon's default rate limits (what users get); with each
            # block's CPU time of the reactor thread per entry (robust to the machine's load).
            kinds = {"without": FILTERS, "with": FILTERS, "with_default": with_rate_limit(None)}
            blocks: dict[str, list[float]] = {kind: [] for kind in kinds}
            cpu_us: dict[str, list[float]] = {kind: [] for kind in kinds}
            batch0 = 20_000_000
            # Each round runs the kinds in a new order (seeded: --seed), so that no kind always
            # follows another (a slow first block, caches warmed by the previous kind).
            rng = random.Random(args.seed)
            order = list(kinds)
            for i in range(args.blocks):
                rng.shuffle(order)
                for kind in order:
                    filters = kinds[kind]
                    bench.subscribe(kind != "without", filters)
                    bench.drain_inboxes()
                    cpu0 = bench.call(time.thread_time)
                    out = run_generator(port, args.block_seconds, None, batch0)
                    cpu = bench.call(time.thread_time) - cpu0
                    batch0 += 10_000_000
                    blocks[kind].append(out["entries_per_second"])
                    entries = out["posts"] * BATCH
                    cpu_us[kind].append(cpu * 1e6 / entries if entries else float("nan"))
        finally:
            bench.stop()

    per_agent: dict[str, list[float]] = {}
    for t, cid, payload in writes:
        data = json.loads(payload)["params"]["data"]
        tag = str(data.get("message", "")).split(" ", 1)[0]
        if not tag.startswith("b"):
            continue  # a rate_limit_exceeded / buffer_full notice
        batch = int(tag[1:].split("-", 1)[0])
        arrived = arrivals.get(batch)
        if arrived is not None:
            per_agent.setdefault(cid, []).append((t - arrived) * 1000.0)
    every = [x for v in per_agent.values() for x in v]
    cost = matcher_cost()
    subscribers_path_us = (in_daemon["seconds"] * 1e6 / in_daemon["entries"] / len(FILTERS)
                           if in_daemon["entries"] else float("nan"))
    #: The subscribers' share of the daemon's (reactor thread's) CPU time in the paced phase: the
    #: throughput they cost when ingest is CPU-bound, measured without depending on the load.
    streaming_share = in_daemon["seconds"] / reactor_cpu if reactor_cpu else float("nan")

    rows = []
    for i in range(len(FILTERS)):
        lat = per_agent.get(f"agent-{i}", [])
        rows.append([f"agent-{i}", json.dumps(FILTERS[i]["subscribe"]), len(lat),
                     percentile(lat, 50), percentile(lat, 99)])
    rows.append(["all agents", "", len(every), percentile(every, 50), percentile(every, 99)])
    rows.append(["(reference) POST /logs round trip", "", paced["posts"], paced["post_ms_p50"],
                 paced["post_ms_p99"]])
    print_table(f"Ingest arrival -> notification written (paced {paced['entries_per_second']:,.0f} "
                f"entries/s for {paced['seconds']:.1f} s; target p99 < 10 ms)",
                ["agent", "subscribe", "notifications", "p50 ms", "p99 ms"], rows)
    without, with_ = median(blocks["without"]), median(blocks["with"])
    with_default = median(blocks["with_default"])
    cpu_without, cpu_with = median(cpu_us["without"]), median(cpu_us["with"])
    cpu_default = median(cpu_us["with_default"])
    labels = {"without": "none", "with": f"10 agents, rate limit {args.rate_limit}/s",
              "with_default": "10 agents, default rate limits (5/s; 10/s for all)"}
    # Each block's CPU per entry against that of the block without subscriptions of the same
    # round (moments before or after): the machine's load moves slowly, so these paired ratios spread
    # less than the blocks do.
    paired = {kind: [base / cpu for cpu, base in zip(cpu_us[kind], cpu_us["without"])]
              for kind in kinds}
    print_table("Ingest throughput, as fast as possible, alternating blocks (target: within 10 %)",
                ["subscriptions", "blocks (entries/s)", "median entries/s", "ratio",
                 "daemon CPU µs/entry (median)", "CPU ratio", "paired CPU ratios p25/p50/p75"],
                [[labels[kind], ", ".join(f"{x:,.0f}" for x in blocks[kind]),
                  median(blocks[kind]), median(blocks[kind]) / without, median(cpu_us[kind]),
                  cpu_without / median(cpu_us[kind]),
                  "/".join(f"{percentile(paired[kind], q):.2f}" for q in (25, 50, 75))]
                 for kind in kinds])
    print_table("Matching cost, CPU time (target < 50 µs per event per agent)",
                ["measure", "value"],
                [["classification, ns per console entry", cost["classify_ns_per_entry"]],
                 ["bucket keys (what counting uses), ns per console entry",
                  cost["bucket_keys_ns_per_entry"]],
                 ["compiled matcher, ns per event per agent", cost["match_ns_per_event_per_agent"]],
                 ["whole subscriber path in the daemon, µs per entry per agent",
                  subscribers_path_us],
                 ["subscriber path's share of the daemon's CPU (paced phase)", streaming_share]])
    load = os.getloadavg()
    print(f"\nload average during the run (1/5/15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"on {os.cpu_count()} CPUs")
    result = {
        "load_average": load,
        "config": {"seconds": args.seconds, "rate": rate, "blocks": args.blocks,
                   "block_seconds": args.block_seconds, "agents": len(FILTERS),
                   "seed": args.seed,
                   "batch": BATCH, "connections": CONNECTIONS, "filters": FILTERS},
        "paced": paced,
        "latency_ms": {"p50": percentile(every, 50), "p99": percentile(every, 99),
                       "notifications": len(every),
                       "per_agent": {cid: {"n": len(v), "p50": percentile(v, 50),
                                           "p99": percentile(v, 99)}
                                     for cid, v in sorted(per_agent.items())}},
        "throughput": {**{kind: blocks[kind] for kind in kinds},
                       "median_without": without, "median_with": with_, "ratio": with_ / without,
                       "median_with_default": with_default,
                       "ratio_default": with_default / without,
                       "cpu_us_per_entry": cpu_us, "cpu_ratio": cpu_without / cpu_with,
                       "cpu_ratio_default": cpu_without / cpu_default,
                       "ratios": {kind: median(blocks[kind]) / without for kind in kinds},
                       "cpu_ratios": {kind: cpu_without / median(cpu_us[kind]) for kind in kinds},
                       "paired_cpu_ratios": paired},
        "matching": {**cost, "subscriber_path_us_per_entry_per_agent": subscribers_path_us,
                     "subscriber_share_of_daemon_cpu": streaming_share,
                     "reactor_cpu_seconds_paced": reactor_cpu},
    }
    print(f"\nwrote {write_json('streaming', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""
What the ten subscribed agents of bench/streaming.py cost per ingested entry, without sockets and
side by side: the daemon built by C{gasoline.tap.makeService} (C{--no-persist}, as in
bench/streaming.py), its C{Site} driven over a C{StringTransport} with C{POST /logs} requests of
bench/streaming.py's entry mix (50 console entries each), one reactor turn (C{runUntilCurrent},
where the store's notifier delivers to the streaming hub) after each request. The ten agents are MCP
sessions with an attached stream writer and bench/streaming.py's ten filters (rate limit 100/s).

The reactor's clock is virtual and moves C{50 / --rate} seconds per request, so the rate windows
see an ingest rate like that of the throughput blocks of bench/streaming.py (75,000 entries/s by
default, 45,000-60,000 there: after its first hundred events each agent's window is full and its
events are only counted).

Default: C{--rounds} short rounds of C{--requests} requests, alternately without and with the
subscriptions, in one process; prints the reactor thread's CPU microseconds per entry (10th
percentile and median of each variant), the ratio of the 10th percentiles and the quartiles of
the ratios of adjacent rounds (what the issue's throughput target means when ingest is
CPU-bound). On a loaded machine CPU time still varies; under callgrind the instruction counts are
exact, one variant at a time (the difference between two request counts is the cost of those
requests), but they are not time: Python runs fewer instructions per nanosecond than the C of
the ingest path, and callgrind does not see memory that has left the caches:

    .venv/bin/python bench/streaming_path.py
    WARM=300 valgrind --tool=callgrind --callgrind-out-file=a.out \\
        .venv/bin/python bench/streaming_path.py --only with --requests 50
    WARM=300 valgrind --tool=callgrind --callgrind-out-file=b.out \\
        .venv/bin/python bench/streaming_path.py --only with --requests 250
    # (Ir of b.out - Ir of a.out) / 200 = instructions per request; --only without likewise
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

import streaming as sb
from _common import write_json

from gasoline.testing import EXTENSION_HEADERS


def build(rate: float) -> tuple[Any, Any, Any, Any, list[float]]:
    import gasoline.tap as tap
    from twisted.internet import reactor as clock

    tmp = tempfile.mkdtemp(prefix="gasoline-streaming-path-")
    atexit.register(shutil.rmtree, tmp, True)
    opts = tap.Options()
    # No tool-call rate limit: the rounds below subscribe and unsubscribe the ten agents more
    # often than 100 times a (virtual) minute; ingest, what is measured, does not meet it.
    opts.parseOptions(["--state-dir", tmp, "--listen", "tcp:0:interface=127.0.0.1",
                       "--no-persist", "--tool-rate-limit", "0"])
    now = [time.time()]
    clock.seconds = lambda: now[0]  # virtual time: see the module docstring
    top = tap.makeService(opts, reactor=clock)

    def start(s: Any) -> None:
        from twisted.application.service import IServiceCollection

        if IServiceCollection.providedBy(s):
            s.running = 1
            for c in s:
                start(c)
        elif not any(word in type(s).__name__ for word in ("Endpoint", "Listener", "DaemonInfo")):
            s.startService()

    start(top)
    app = top.gasoline
    from gasoline.http.request import GasolineSite

    site = GasolineSite(app.resource)
    proto = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 50000))
    transport = StringTransport()
    proto.makeConnection(transport)
    return app, clock, proto, transport, now


def sessions(app: Any) -> list[Any]:
    from gasoline.http.mcp_sse import _sse_event

    out = []
    for i in range(len(sb.FILTERS)):
        session = app.mcp.open_session(f"agent-{i}", "connector")
        app.mcp.handle(session, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}}})
        app.mcp.handle(session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        session.standalone.attach(lambda eid, payload: _sse_event(eid, payload))
        out.append(session)
    return out


def subscribe(app: Any, agents: list[Any], on: bool) -> None:
    for i, session in enumerate(agents):
        args = {"what": "streaming", **sb.FILTERS[i]} if on else {"what": "streaming",
                                                                  "enabled": False}
        d = app.mcp.handle(session, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                     "params": {"name": "configure", "arguments": args}})
        assert d.result["result"]["isError"] is False, d.result


def requests(n: int = 64) -> list[bytes]:
    raw = []
    for b in range(n):
        body = json.dumps({"entries": [sb.entry(b, k) for k in range(sb.BATCH)]},
                          separators=(",", ":")).encode()
        head = (f"POST /logs HTTP/1.1\r\nHost: 127.0.0.1:7890\r\nContent-Length: {len(body)}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in EXTENSION_HEADERS.items()) + "\r\n")
        raw.append(head.encode() + body)
    return raw


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=75_000.0, help="virtual entries/s")
    ap.add_argument("--requests", type=int, default=300, help="requests per round")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--only", choices=("with", "without"), help="one variant, one round")
    ap.add_argument("--rate-limit", type=lambda v: None if v == "default" else int(v),
                    default=sb.DEFAULT_BENCH_RATE_LIMIT,
                    help="every agent's rate limit, events/s, or 'default' (none given: the "
                         "daemon's defaults, 5/s and 10/s for all)")
    args = ap.parse_args()
    sb.set_rate_limit(args.rate_limit)
    app, clock, proto, transport, now = build(args.rate)
    agents = sessions(app)
    raws = requests()
    step = sb.BATCH / args.rate
    sent = [0]

    def run(k: int) -> None:
        for _ in range(k):
            # The clock moves while a request arrives and while it is handled, as it does on a
            # real reactor (a notifier that spaces its flushes sees time pass between writes).
            now[0] += step / 2
            proto.dataReceived(raws[sent[0] % len(raws)])
            sent[0] += 1
            now[0] += step / 2
            clock.runUntilCurrent()
            if not transport.value().startswith(b"HTTP/1.1 200"):
                raise SystemExit(transport.value()[:300])
            transport.clear()

    def measure(k: int) -> float:
        t0 = time.thread_time()
        run(k)
        return (time.thread_time() - t0) * 1e6 / (k * sb.BATCH)

    warm = int(os.environ.get("WARM", "300"))
    if args.only:
        subscribe(app, agents, args.only == "with")
        run(warm)
        print(json.dumps({"variant": args.only, "us_per_entry": measure(args.requests),
                          "notifications": app.streaming.notifications}))
        return 0
    # Many short alternating rounds: on a shared machine the load comes in spells, so the low
    # percentiles and the ratios of adjacent rounds say more than one long round of each.
    cpu: dict[str, list[float]] = {"without": [], "with": []}
    run(warm)
    for r in range(args.rounds):
        for variant in ("without", "with") if r % 2 == 0 else ("with", "without"):
            subscribe(app, agents, variant == "with")
            run(50)
            cpu[variant].append(measure(args.requests))
    paired = sorted(w / x for w, x in zip(cpu["without"], cpu["with"]))
    p10 = {v: sorted(cpu[v])[len(cpu[v]) // 10] for v in cpu}
    quartiles = [paired[len(paired) // 4], statistics.median(paired),
                 paired[3 * len(paired) // 4]]
    print(f"CPU µs per entry, {args.rounds} alternating rounds of {args.requests} requests "
          f"(virtual {args.rate:,.0f} entries/s):")
    for variant in ("without", "with"):
        print(f"  {variant:8s} p10 {p10[variant]:.2f}  "
              f"median {statistics.median(cpu[variant]):.2f}")
    print(f"  ratio (without / with): p10s {p10['without'] / p10['with']:.3f}; paired rounds "
          f"p25/p50/p75 {'/'.join(f'{q:.3f}' for q in quartiles)}; notifications "
          f"{app.streaming.notifications}; load average {os.getloadavg()[0]:.2f}")
    path = write_json("streaming-path", {
        "config": {"rate": args.rate, "requests": args.requests, "rounds": args.rounds,
                   "rate_limit": args.rate_limit if args.rate_limit is not None else "default"},
        "cpu_us_per_entry": cpu, "p10": p10, "ratio_p10": p10["without"] / p10["with"],
        "paired_ratio_quartiles": quartiles, "notifications": app.streaming.notifications,
        "load_average": os.getloadavg()})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

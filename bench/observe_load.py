"""
``observe errors`` latency under ingest: 50 clients poll ``observe {what:"errors"}`` over
``POST /mcp`` (each with its own ``X-Gasoline-Client``, hence its own cursor) while a paced writer
ingests 10 000 console entries/s through ``POST /logs``, against a real ``twistd -n gasoline``.
Target: observe p99 < 50 ms.

Each client polls every ``--interval`` seconds (0.5 s by default: 20 calls in 10 s, inside the
per-client tool rate limit of 100 calls/min, which stays on); the clients' phases are spread evenly
over one interval, as independent agents' polls are.

    .venv/bin/python bench/observe_load.py [--seconds 10] [--clients 50] [--rate 10000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    HTTPConnection,
    median,
    percentile,
    print_table,
    rss,
    run_threads,
    write_json,
)
from ingest import BATCH, batches

from gasoline.testing import EXTENSION_HEADERS, client_headers
from gasoline.testing_process import DaemonProcess

PROTOCOL = "2025-06-18"


def mcp_headers(client_id: str, state_dir: Path) -> dict[str, str]:
    """The connector form for C{client_id}, proven with the daemon's client key."""
    return {"Content-Type": "application/json", "Accept": "application/json",
            **client_headers(state_dir, client_id), "X-Gasoline-Connection": f"conn-{client_id}"}


def rpc(conn: HTTPConnection, headers: dict, message: dict) -> tuple[int, dict | None]:
    status, body = conn.request("POST", "/mcp", json.dumps(message).encode(), headers)
    return status, (json.loads(body) if body.strip() else None)


def poller(port: int, client_id: str, stop_at: float, interval: float, phase: float, out: list,
           lock, state_dir: Path) -> None:
    conn = HTTPConnection("127.0.0.1", port)
    headers = mcp_headers(client_id, state_dir)
    rpc(conn, headers, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": PROTOCOL, "capabilities": {},
                                   "clientInfo": {"name": client_id, "version": "1"}}})
    rpc(conn, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    latencies, errors, entries, i = [], 0, 0, 0
    # Agents are not synchronized: spread the clients' polls evenly over one interval.
    next_at = time.perf_counter() + phase
    while True:
        now = time.perf_counter()
        if now >= stop_at:
            break
        if now < next_at:
            time.sleep(next_at - now)
        next_at += interval
        i += 1
        t0 = time.perf_counter()
        status, reply = rpc(conn, headers, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                            "params": {"name": "observe",
                                                       "arguments": {"what": "errors", "limit": 100}}})
        latencies.append((time.perf_counter() - t0) * 1000)
        result = (reply or {}).get("result") or {}
        if status != 200 or result.get("isError"):
            errors += 1
        else:
            text = result["content"][0]["text"]
            entries += text.count('"level":"error"')
    conn.close()
    with lock:
        out.append((latencies, errors, entries))


def writer(port: int, rate: float, stop_at: float, sent: list) -> None:
    conn = HTTPConnection("127.0.0.1", port)
    raws = [conn.build("POST", "/logs", body, EXTENSION_HEADERS) for body in batches(64)]
    period = BATCH / rate
    next_at, n = time.perf_counter(), 0
    while time.perf_counter() < stop_at:
        now = time.perf_counter()
        if now < next_at:
            time.sleep(next_at - now)
        conn.send_raw(raws[n % len(raws)])
        n += 1
        next_at += period
    conn.close()
    sent.append(n * BATCH)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rate", type=float, default=10_000.0, help="console entries/s ingested")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between one client's polls")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gasoline-obsload-") as tmp:
        with DaemonProcess(state_dir=Path(tmp) / "state",
                           args=["--max-clients", str(args.clients + 5)]) as d:
            stop_at = time.perf_counter() + args.seconds
            out: list = []
            sent: list = []
            lock = threading.Lock()
            threads = [threading.Thread(target=writer, args=(d.port, args.rate, stop_at, sent))]
            threads += [threading.Thread(target=poller, args=(
                d.port, f"load-{k}", stop_at, args.interval, args.interval * k / args.clients,
                out, lock, d.state_dir)) for k in range(args.clients)]
            proc = psutil.Process(d.process.pid)
            cpu0 = proc.cpu_times()
            bench0 = psutil.Process().cpu_times()
            elapsed = run_threads(threads)
            cpu1 = proc.cpu_times()
            bench1 = psutil.Process().cpu_times()
            daemon_rss = rss(d.process.pid)
    daemon_cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / elapsed
    bench_cpu = (bench1.user + bench1.system - bench0.user - bench0.system) / elapsed
    lat = [x for r in out for x in r[0]]
    result = {
        "clients": args.clients, "seconds": elapsed, "poll_interval_s": args.interval,
        "ingest_target_entries_per_s": args.rate,
        "ingested_entries_per_s": (sent[0] if sent else 0) / elapsed,
        "observe_calls": len(lat), "observe_errors": sum(r[1] for r in out),
        "observe_ms_p50": percentile(lat, 50), "observe_ms_p95": percentile(lat, 95),
        "observe_ms_p99": percentile(lat, 99), "observe_ms_median": median(lat),
        "error_entries_returned": sum(r[2] for r in out), "daemon_rss_bytes": daemon_rss,
        "daemon_cpu_share": daemon_cpu, "load_generator_cpu_share": bench_cpu,
        "target_p99_ms": 50.0,
    }
    print_table(
        f"observe errors over POST /mcp: {args.clients} clients polling every {args.interval} s "
        f"while ingesting {args.rate:,.0f} entries/s, {args.seconds:.0f} s",
        ["ingested/s", "calls", "errors", "p50 ms", "p95 ms", "p99 ms", "target p99",
         "daemon CPU", "load-gen CPU"],
        [[result["ingested_entries_per_s"], result["observe_calls"], result["observe_errors"],
          result["observe_ms_p50"], result["observe_ms_p95"], result["observe_ms_p99"], "< 50",
          f"{daemon_cpu:.0%}", f"{bench_cpu:.0%}"]],
    )
    print(f"\nwrote {write_json('observe_load', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

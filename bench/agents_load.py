"""
Fifty agents and a chatty page on one daemon: per-kind tool-call latency, ingest held, daemon CPU
per call and RSS, against a real ``twistd -n gasoline``; ``--baseline DIR`` runs the same load
against another checkout (``PYTHONPATH=DIR``) in the same run, one after the other.

The load (the defaults):

 - ``--agents`` agents (50), each its own client id in the connector form, each making
   ``--rate`` tool calls per second (2): ``observe errors`` and ``observe logs`` (limit 100) in
   turn, every fifth call an ``analyze dom`` that a simulated extension answers after 20 ms;
   the agents' phases spread over one interval;
 - ``--streamers`` of them (10) also subscribed to ``error`` events, each with a long poll
   (``observe events``, ``wait_ms`` 5 000) always open on a second connection;
 - a page posting ``--entries`` console entries per second (5 000, 50 per ``POST /logs``, over
   4 connections, each post waiting for its answer as the extension does), 20 network bodies of
   2 KB per second and 200 WebSocket frames per second;
 - the simulated extension: a ``/sync`` long poll taking commands, each answered 20 ms later.

The tool rate limit is off (``--tool-rate-limit 0``: 2 calls/s is 120 a minute, over the default
100) and ``--max-clients`` is the agents plus 10, for both trees. Before the load, an ingest-only
phase of the same length (``--calibrate`` seconds) measures the CPU the page's posts cost, so
``CPU per call`` is (daemon CPU under load - ingest CPU) / tool calls answered.

    .venv/bin/python bench/agents_load.py [--seconds 120] [--agents 50] [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import HTTPConnection, percentile, print_table, write_json
from _workload import BATCH, batches

from gasoline.testing import DEFAULT_FAKE_SETTINGS, EXTENSION_HEADERS, client_headers
from gasoline.testing_process import DaemonProcess

PROTOCOL = "2025-06-18"
DOM_DELAY = 0.020
#: Seconds the simulated extension syncs before the measured window starts.
WARM_UP = 1.5


class Stats:
    """Latencies (ms) per kind, outcomes, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lat: dict[str, list[float]] = {}
        self.outcome: dict[str, int] = {}

    def add(self, kind: str, ms: float, outcome: str) -> None:
        with self.lock:
            self.lat.setdefault(kind, []).append(ms)
            self.outcome[outcome] = self.outcome.get(outcome, 0) + 1


def _headers(state_dir: Path, client_id: str, connection: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Accept": "application/json",
            **client_headers(state_dir, client_id), "X-Gasoline-Connection": connection}


def _rpc(conn: HTTPConnection, headers: dict, message: dict) -> tuple[int, dict | None]:
    status, body = conn.request("POST", "/mcp", json.dumps(message).encode(), headers)
    return status, (json.loads(body) if body.strip() else None)


def _init(conn: HTTPConnection, headers: dict, name: str) -> None:
    _rpc(conn, headers, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                         "params": {"protocolVersion": PROTOCOL, "capabilities": {},
                                    "clientInfo": {"name": name, "version": "1"}}})
    _rpc(conn, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})


def _outcome(status: int, reply: dict | None) -> str:
    if status != 200 or reply is None:
        return f"http_{status}"
    result = reply.get("result") or {}
    if not result.get("isError"):
        return "ok"
    text = result.get("content", [{}])[0].get("text", "")
    return text[text.find("(") + 1:text.find(")")] if text.startswith("Error (") else "error"


CALLS = [("observe_errors", "observe", {"what": "errors", "limit": 100}),
         ("observe_logs", "observe", {"what": "logs", "limit": 100})]
DOM = ("analyze_dom", "analyze", {"what": "dom", "selector": "#app"})


def agent(port: int, state_dir: Path, k: int, start_at: float, stop_at: float, interval: float,
          phase: float, stats: Stats) -> None:
    cid = f"agent-{k}"
    conn = HTTPConnection("127.0.0.1", port)
    headers = _headers(state_dir, cid, f"conn-{cid}")
    _init(conn, headers, cid)
    next_at = start_at + phase
    i = 0
    while True:
        now = time.perf_counter()
        if now >= stop_at:
            break
        if now < next_at:
            time.sleep(next_at - now)
        next_at += interval
        i += 1
        kind, tool, args = DOM if i % 5 == 0 else CALLS[i % 2]
        t0 = time.perf_counter()
        status, reply = _rpc(conn, headers, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                             "params": {"name": tool, "arguments": args}})
        if t0 < stop_at:  # a call that started in the window counts
            stats.add(kind, (time.perf_counter() - t0) * 1000, _outcome(status, reply))
    conn.close()


def streamer(port: int, state_dir: Path, k: int, stop_at: float, delivered: list) -> None:
    cid = f"agent-{k}"
    conn = HTTPConnection("127.0.0.1", port, timeout=60)
    headers = _headers(state_dir, cid, f"stream-{cid}")
    _init(conn, headers, cid + "-stream")
    _rpc(conn, headers, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "configure", "arguments": {"what": "streaming", "enabled": True,
                                           "subscribe": ["error"]}}})
    n = i = 0
    while time.perf_counter() < stop_at:
        i += 1
        wait = int(max(0.0, min(5.0, stop_at - time.perf_counter())) * 1000)
        status, reply = _rpc(conn, headers, {"jsonrpc": "2.0", "id": 100 + i,
                                             "method": "tools/call", "params": {
                                                 "name": "observe", "arguments": {
                                                     "what": "events", "wait_ms": wait}}})
        if status == 200 and reply and not reply.get("result", {}).get("isError"):
            text = reply["result"]["content"][0]["text"]
            try:
                n += json.loads(text.partition("\n")[2]).get("count", 0)
            except ValueError:
                pass
    conn.close()
    delivered.append(n)


def poster(port: int, path: str, bodies: list[bytes], per_second: float, start_at: float,
           stop_at: float, per_body: int, out: list, lat: list) -> None:
    """Post C{bodies} in turn at C{per_second} requests/s, each waiting for its answer."""
    conn = HTTPConnection("127.0.0.1", port)
    headers = {**EXTENSION_HEADERS, "Content-Type": "application/json"}
    raws = [conn.build("POST", path, b, headers) for b in bodies]
    period = 1.0 / per_second
    next_at, n, accepted, refused = start_at, 0, 0, 0
    while time.perf_counter() < stop_at:
        now = time.perf_counter()
        if now < next_at:
            time.sleep(next_at - now)
        next_at += period
        t0 = time.perf_counter()
        status, _ = conn.send_raw(raws[n % len(raws)])
        lat.append((time.perf_counter() - t0) * 1000)
        n += 1
        if status == 200:
            accepted += per_body
        else:
            refused += 1
    conn.close()
    out.append((accepted, refused))


def extension(port: int, stop_at: float, answered: list) -> None:
    """The simulated extension: a /sync long poll; each command answered DOM_DELAY later."""
    poll = HTTPConnection("127.0.0.1", port, timeout=30)
    report = HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {**EXTENSION_HEADERS, "Content-Type": "application/json"}
    base = {"ext_session_id": "ext_bench", "extension_version": "0.7.9",
            "settings": dict(DEFAULT_FAKE_SETTINGS)}
    pending: list[tuple[float, dict]] = []
    lock = threading.Lock()
    ack: list[str] = []
    done = [0]

    def reporter() -> None:
        while time.perf_counter() < stop_at + 1:
            now = time.perf_counter()
            with lock:
                due = [c for t, c in pending if t <= now]
                pending[:] = [(t, c) for t, c in pending if t > now]
            if due:
                results = [{"id": c["id"], "status": "complete", "result": {
                    "selector": (c.get("params") or {}).get("selector"), "match_count": 1,
                    "matches": [{"tag": "div", "text": "bench", "visible": True}]}}
                    for c in due]
                body = {**base, "command_results": results}
                if ack:
                    body["last_command_ack"] = ack[-1]
                report.request("POST", "/sync", json.dumps(body).encode(), headers)
                done[0] += len(due)
            else:
                time.sleep(0.002)

    t = threading.Thread(target=reporter, daemon=True)
    t.start()
    while time.perf_counter() < stop_at:
        body = dict(base)
        if ack:
            body["last_command_ack"] = ack[-1]
        status, raw = poll.request("POST", "/sync", json.dumps(body).encode(), headers)
        if status != 200:
            time.sleep(0.1)
            continue
        answer = json.loads(raw)
        commands = answer.get("commands") or []
        now = time.perf_counter()
        with lock:
            for c in commands:
                pending.append((now + DOM_DELAY, c))
        if commands:
            ack.append(commands[-1]["id"])
    t.join(timeout=5)
    poll.close()
    report.close()
    answered.append(done[0])


def _bodies_load() -> list[bytes]:
    body = "x" * 2000
    return [json.dumps({"bodies": [{"url": f"http://localhost:3000/api/items/{i}",
                                    "method": "GET", "status": 200, "duration": 12,
                                    "response_body": body, "content_type": "text/plain",
                                    "ts": f"2026-11-26T01:00:{i % 60:02d}.000Z"}]}).encode()
            for i in range(20)]


def _ws_load() -> list[bytes]:
    return [json.dumps({"events": [{"event": "message", "id": "ws-1",
                                    "url": "ws://localhost:3000/live", "direction": "incoming",
                                    "data": f'{{"tick":{i * 10 + j}}}', "size": 12}
                                   for j in range(10)]}).encode()
            for i in range(20)]


def _page(port: int, start_at: float, stop_at: float, entries: float, out: dict,
          lat: list) -> list[threading.Thread]:
    logs_out: list = []
    threads = []
    writers = 4
    per_writer = entries / BATCH / writers
    console = batches(64)
    for w in range(writers):
        threads.append(threading.Thread(target=poster, args=(
            port, "/logs", console[w::writers], per_writer, start_at, stop_at, BATCH, logs_out,
            lat)))
    extra: list = []
    threads.append(threading.Thread(target=poster, args=(
        port, "/network-bodies", _bodies_load(), 20, start_at, stop_at, 1, extra, [])))
    threads.append(threading.Thread(target=poster, args=(
        port, "/websocket-events", _ws_load(), 20, start_at, stop_at, 10, extra, [])))
    out["logs"] = logs_out
    out["extra"] = extra
    return threads


def _sampler(pid: int, stop: threading.Event, peak: list) -> None:
    proc = psutil.Process(pid)
    while not stop.wait(0.5):
        try:
            rss = proc.memory_info().rss
            for child in proc.children(recursive=True):
                rss += child.memory_info().rss
            peak[0] = max(peak[0], rss)
        except psutil.Error:
            return


def _cpu(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def run(label: str, source: str | None, args: argparse.Namespace) -> dict[str, Any]:
    env = {"PYTHONPATH": source} if source else None
    with tempfile.TemporaryDirectory(prefix="gasoline-agents-") as tmp:
        state = Path(tmp) / "state"
        d = DaemonProcess(state_dir=state, env=env, args=[
            "--max-clients", str(args.agents + 10), "--tool-rate-limit", "0", "--no-persist"])
        with d:
            proc = psutil.Process(d.process.pid)
            # 1. Ingest only: what the page's posts cost.
            calib_out: dict = {}
            start_at = time.perf_counter()
            threads = _page(d.port, start_at, start_at + args.calibrate, args.entries, calib_out,
                            [])
            cpu0 = _cpu(proc)
            for t in threads:
                t.start()
            time.sleep(max(0.0, start_at + args.calibrate - time.perf_counter()))
            ingest_cpu_rate = (_cpu(proc) - cpu0) / args.calibrate
            for t in threads:
                t.join()
            # 2. The full load: the extension first (connected before the agents call).
            stats = Stats()
            delivered: list = []
            answered: list = []
            page_out: dict = {}
            logs_lat: list = []
            load0 = os.getloadavg()
            start_at = time.perf_counter() + WARM_UP
            stop_at = start_at + args.seconds
            interval = 1.0 / args.rate
            ext = threading.Thread(target=extension, args=(d.port, stop_at, answered))
            ext.start()
            threads = _page(d.port, start_at, stop_at, args.entries, page_out, logs_lat)
            threads += [threading.Thread(target=agent, args=(
                d.port, state, k, start_at, stop_at, interval, interval * k / args.agents, stats))
                for k in range(args.agents)]
            threads += [threading.Thread(target=streamer, args=(d.port, state, k, stop_at,
                                                                delivered))
                        for k in range(min(args.streamers, args.agents))]
            peak = [proc.memory_info().rss]
            stop = threading.Event()
            sampler = threading.Thread(target=_sampler, args=(d.process.pid, stop, peak))
            sampler.start()
            for t in threads:
                t.start()
            time.sleep(max(0.0, start_at - time.perf_counter()))
            cpu0 = _cpu(proc)
            bench0 = psutil.Process().cpu_times()
            time.sleep(max(0.0, stop_at - time.perf_counter()))
            cpu = _cpu(proc) - cpu0
            bench1 = psutil.Process().cpu_times()
            elapsed = args.seconds
            for t in [ext, *threads]:
                t.join()
            stop.set()
            sampler.join()
            load1 = os.getloadavg()
    calls = sum(len(v) for v in stats.lat.values())
    ok = stats.outcome.get("ok", 0)
    ingested = sum(a for a, _ in page_out["logs"])
    observe = stats.lat.get("observe_errors", []) + stats.lat.get("observe_logs", [])
    result: dict[str, Any] = {
        "tree": label, "source": source or "this tree", "agents": args.agents,
        "seconds": elapsed, "calls_offered_per_s": args.agents * args.rate,
        "calls_done_per_s": calls / elapsed, "calls_ok": ok, "outcomes": stats.outcome,
        "kinds": {k: {"n": len(v), "p50_ms": percentile(v, 50), "p99_ms": percentile(v, 99)}
                  for k, v in sorted(stats.lat.items())},
        "observe_p50_ms": percentile(observe, 50), "observe_p99_ms": percentile(observe, 99),
        "ingest_offered_per_s": args.entries, "ingest_held_per_s": ingested / elapsed,
        "logs_post_p50_ms": percentile(logs_lat, 50), "logs_post_p99_ms": percentile(logs_lat, 99),
        "logs_refused": sum(r for _, r in page_out["logs"]),
        "daemon_cpu_share": cpu / elapsed, "ingest_only_cpu_share": ingest_cpu_rate,
        "cpu_ms_per_call": 1000 * max(0.0, cpu - ingest_cpu_rate * elapsed) / max(1, calls),
        "rss_peak_bytes": peak[0], "stream_events_delivered": sum(delivered),
        "dom_answered_by_extension": sum(answered),
        "load_generator_cpu_share": (bench1.user + bench1.system - bench0.user - bench0.system)
        / elapsed,
        "load_average_before": load0, "load_average_after": load1,
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--calibrate", type=float, default=10.0,
                        help="seconds of the ingest-only phase")
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--streamers", type=int, default=10)
    parser.add_argument("--rate", type=float, default=2.0, help="tool calls/s per agent")
    parser.add_argument("--entries", type=float, default=5000.0, help="console entries/s")
    parser.add_argument("--baseline", metavar="DIR",
                        help="another Gasoline checkout, run with the same load after this tree")
    args = parser.parse_args()
    runs = [run("this tree", None, args)]
    if args.baseline:
        source = str(Path(args.baseline).resolve())
        if not (Path(source) / "gasoline" / "tap.py").exists():
            raise SystemExit(f"--baseline {args.baseline}: no gasoline/tap.py there")
        runs.append(run("baseline", source, args))
    kinds = sorted({k for r in runs for k in r["kinds"]})
    print_table(
        f"{args.agents} agents x {args.rate:g} calls/s ({args.streamers} streaming) while a page "
        f"posts {args.entries:,.0f} console entries/s + bodies + WebSocket frames, "
        f"{args.seconds:g} s; load average {runs[0]['load_average_before'][0]:.1f} at the start",
        ["tree", "calls/s offered -> done", "ok", *(f"{k} p50/p99 ms" for k in kinds),
         "ingest held/s", "/logs p99 ms", "daemon CPU", "CPU ms/call", "RSS peak MB"],
        [[r["tree"], f"{r['calls_offered_per_s']:g} -> {r['calls_done_per_s']:.0f}",
          r["calls_ok"],
          *(f"{r['kinds'][k]['p50_ms']:.0f} / {r['kinds'][k]['p99_ms']:.0f}"
            if k in r["kinds"] else "-" for k in kinds),
          r["ingest_held_per_s"], r["logs_post_p99_ms"], f"{r['daemon_cpu_share']:.0%}",
          r["cpu_ms_per_call"], r["rss_peak_bytes"] / 2**20] for r in runs],
    )
    for r in runs:
        print(f"{r['tree']}: outcomes {r['outcomes']}; stream events {r['stream_events_delivered']}; "
              f"ingest-only CPU {r['ingest_only_cpu_share']:.0%}; load average "
              f"{r['load_average_before'][0]:.1f} -> {r['load_average_after'][0]:.1f}")
    print(f"\nwrote {write_json('agents_load', {'runs': runs, 'args': vars(args)})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

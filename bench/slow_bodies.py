"""
Slow bodies against the connection cap: new clients' ``GET /health`` latency while 1,000
connections hold ``POST /logs`` bodies open (full headers, ``Content-Length: 1000000``, one byte
sent), against ``twistd -n gasoline`` on loopback.

Phases, per daemon: ``/health`` probes with nothing else open (each probe a new connection:
connect, request, answer, close), then the 1,000 slow-body connections are opened and the same
probes run while they are open (within the body policy's grace period, so they are all still
open), and how many of them the daemon still holds ``--linger`` seconds after they were opened
is counted. A probe that gets no answer in ``--timeout`` seconds, or whose connection is closed at once
(the connection cap), is a failure. ``--baseline DIR`` runs another checkout's daemon the same way
in the same run (``PYTHONPATH=DIR``), for the figures before the body policy.

    .venv/bin/python bench/slow_bodies.py [--connections 1000] [--probes 40] [--baseline DIR]

Bounded: loopback only, at most ``--connections`` + 1 sockets, a few seconds per daemon.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median, percentile, print_table, write_json

from gasoline.testing_process import DaemonProcess

SLOW_HEAD = (b"POST /logs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             b"X-Gasoline-Client: gasoline-extension/0.7.9\r\nContent-Length: 1000000\r\n\r\n{")
HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def probe(port: int, timeout: float) -> float | None:
    """Seconds for one new client's /health (None: refused, closed or timed out)."""
    start = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(HEALTH)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    return None
                data += chunk
            if not data.startswith(b"HTTP/1.1 200"):
                return None
    except OSError:
        return None
    return time.perf_counter() - start


def probes(port: int, n: int, timeout: float) -> dict[str, float | int]:
    times = [probe(port, timeout) for _ in range(n)]
    ok = [t * 1000 for t in times if t is not None]
    return {"answered": len(ok), "failed": n - len(ok), "p50_ms": median(ok) if ok else float("nan"),
            "p95_ms": percentile(ok, 95), "max_ms": max(ok) if ok else float("nan")}


def still_open(socks: list[socket.socket]) -> int:
    """How many of C{socks} the daemon still holds (a closed one reads EOF or is reset)."""
    alive = 0
    for s in socks:
        s.setblocking(False)
        try:
            s.recv(1)  # b"": closed by the daemon
        except BlockingIOError:
            alive += 1  # open, nothing to read
        except OSError:
            pass  # reset by the daemon
    return alive


def measure(source: str | None, connections: int, n: int, timeout: float,
            linger: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="gasoline-bench-slow-") as tmp:
        env = {"PYTHONPATH": source} if source else None
        daemon = DaemonProcess(state_dir=Path(tmp) / "state", env=env).start()
        socks: list[socket.socket] = []
        try:
            quiet = probes(daemon.port, n, timeout)
            opened = time.monotonic()
            for i in range(connections):
                s = socket.create_connection(("127.0.0.1", daemon.port), timeout=timeout)
                s.sendall(SLOW_HEAD)
                socks.append(s)
                if i % 40 == 39:
                    time.sleep(0.05)  # past the listen backlog (50), a SYN waits 1 s to retry
            opened_s = time.monotonic() - opened
            time.sleep(1.0)  # the daemon accepts them all
            loaded = probes(daemon.port, n, timeout)
            held = time.monotonic() - opened
            alive = still_open(socks)
            time.sleep(max(0.0, linger - (time.monotonic() - opened)))
            alive_later = still_open(socks)
        finally:
            for s in socks:
                s.close()
            daemon.stop()
    return {"quiet": quiet, "loaded": loaded, "slow_open_after": alive, "phase_s": held,
            "open_s": opened_s, "linger_s": linger, "slow_open_after_linger": alive_later}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--baseline", metavar="DIR", help="another checkout, measured the same way")
    parser.add_argument("--linger", type=float, default=14.0,
                        help="seconds after opening them to count the slow connections again "
                             "(past the body policy's 10 s grace period)")
    args = parser.parse_args()
    variants: dict[str, str | None] = {"this tree": None}
    if args.baseline:
        source = str(Path(args.baseline).resolve())
        if not (Path(source) / "gasoline" / "tap.py").exists():
            raise SystemExit(f"--baseline {args.baseline}: no gasoline/tap.py there")
        variants["baseline"] = source
    results = {name: measure(src, args.connections, args.probes, args.timeout, args.linger)
               for name, src in variants.items()}
    rows = []
    for name, r in results.items():
        for phase in ("quiet", "loaded"):
            p = r[phase]
            rows.append([f"{name}, {phase}", p["answered"], p["failed"], p["p50_ms"], p["p95_ms"],
                         p["max_ms"]])
    load = os.getloadavg()
    print_table(f"/health from new clients, {args.probes} probes; 'loaded': {args.connections} "
                f"slow-body connections open (load average {load[0]:.2f})",
                ["daemon, phase", "answered", "failed", "p50 ms", "p95 ms", "max ms"], rows)
    for name, r in results.items():
        print(f"{name}: {args.connections} slow connections opened in {r['open_s']:.1f} s; "
              f"{r['slow_open_after']} still open after the loaded phase ({r['phase_s']:.1f} s "
              f"after the first), {r['slow_open_after_linger']} after {r['linger_s']:.0f} s")
    path = write_json("slow_bodies", {"connections": args.connections, "probes": args.probes,
                                      "load_average": load, "results": results})
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

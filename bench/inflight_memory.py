"""
The daemon's memory bound under two floods, against ``twistd -n gasoline`` on loopback (its RSS
sampled every 50 ms with psutil; the bound is stated in docs/operations.md, "Memory").

1. **Fragment flood**: ``--clients`` (48) WebSocket connections to ``/cdp/<id>`` each send
   ``--fragment-mib`` (18) MiB of a message in 1 MiB fragments and never finish it, then hold the
   connection open. Before the in-flight budget every byte stayed in the daemon. Binary frames
   with a zero mask (valid WebSocket; they take the same buffering path as text frames without
   the UTF-8 check, so the bench measures memory, not validation).
2. **Large-entry flood**: 4 connections ``POST /logs`` batches of 100 console entries of 6 kB
   (the extension's format) until ``--entries`` (60 000: six times the console buffer) are in.

For each: RSS idle, the peak during the flood, RSS after it, the WebSocket connections the daemon
closed (close code 4013) and ``gasoline_inflight_*`` from ``/metrics``. ``--baseline DIR`` runs
another checkout's daemon the same way in the same run.

    .venv/bin/python bench/inflight_memory.py [--clients 48] [--fragment-mib 18] [--baseline DIR]

Bounded: loopback only, at most ``--clients`` + 4 sockets, about a minute per daemon.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
from _common import HTTPConnection, print_table, write_json

from gasoline.testing import EXTENSION_HEADERS
from gasoline.testing_process import DaemonProcess

MiB = 1024 * 1024
ZERO_MASK = b"\0\0\0\0"


def ws_frame(opcode: int, payload: bytes, fin: bool) -> bytes:
    """One client frame (masked with a zero key: the payload is sent as is)."""
    first = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        head = bytes([first, 0x80 | n])
    elif n < 65536:
        head = bytes([first, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([first, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + ZERO_MASK + payload


def ws_open(port: int, path: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError("the daemon closed the WebSocket handshake")
        data += chunk
    if not data.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(f"no WebSocket: {data[:80]!r}")
    return s


def close_code(s: socket.socket) -> int | None:
    """The close code the daemon sent on C{s}, if it sent one (reads what is there)."""
    s.setblocking(False)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (BlockingIOError, OSError):
        pass
    i = 0
    while i + 2 <= len(data):
        opcode, n = data[i] & 0x0F, data[i + 1] & 0x7F
        i += 2
        if n == 126:
            n, i = int.from_bytes(data[i:i + 2], "big"), i + 2
        elif n == 127:
            n, i = int.from_bytes(data[i:i + 8], "big"), i + 8
        if opcode == 8 and n >= 2:
            return int.from_bytes(data[i:i + 2], "big")
        i += n
    return None


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak = 0
        self.running = True

    def run(self) -> None:
        while self.running:
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.05)


def metrics(port: int) -> dict[str, float]:
    conn = HTTPConnection("127.0.0.1", port)
    try:
        _, body = conn.request("GET", "/metrics", b"", {})
    finally:
        conn.close()
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("gasoline_inflight"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def fragment_flood(port: int, pid: int, clients: int, fragment_mib: int) -> dict:
    rss0 = psutil.Process(pid).memory_info().rss
    sampler = Sampler(pid)
    sampler.start()
    socks: list[socket.socket] = []
    cut = [0] * clients
    sent = [0] * clients

    def flood(i: int, s: socket.socket) -> None:
        chunk = b" " * MiB
        try:
            for n in range(fragment_mib):
                s.sendall(ws_frame(0x2 if n == 0 else 0x0, chunk, fin=False))
                sent[i] += MiB
        except OSError:
            cut[i] = 1

    for i in range(clients):
        socks.append(ws_open(port, f"/cdp/flood{i}"))
    threads = [threading.Thread(target=flood, args=(i, s)) for i, s in enumerate(socks)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    took = time.monotonic() - start
    time.sleep(1.0)  # held open: what the daemon keeps
    rss_held = psutil.Process(pid).memory_info().rss
    series = metrics(port)
    codes = [close_code(s) for s in socks]
    for s in socks:
        s.close()
    time.sleep(1.0)
    sampler.running = False
    sampler.join()
    return {"rss_idle": rss0, "rss_peak": sampler.peak, "rss_held": rss_held,
            "rss_after": psutil.Process(pid).memory_info().rss, "seconds": took,
            "sent_mib": sum(sent) / MiB, "closed_4013": codes.count(4013), "cut": sum(cut),
            "closed_other": sum(1 for c in codes if c not in (None, 4013)), "metrics": series}


def entry_flood(port: int, pid: int, entries: int) -> dict:
    rss0 = psutil.Process(pid).memory_info().rss
    sampler = Sampler(pid)
    sampler.start()
    message = "x" * 6000
    batch = json.dumps({"entries": [{"level": "error", "message": message, "ts": 1700000000000,
                                     "url": "http://localhost:3000/app", "args": []}] * 100}
                       ).encode()
    headers = dict(EXTENSION_HEADERS)
    per = entries // 100 // 4
    failures = [0]

    def post() -> None:
        conn = HTTPConnection("127.0.0.1", port)
        try:
            for _ in range(per):
                code, _ = conn.request("POST", "/logs", batch, headers)
                if code != 200:
                    failures[0] += 1
        finally:
            conn.close()

    threads = [threading.Thread(target=post) for _ in range(4)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    took = time.monotonic() - start
    time.sleep(1.0)
    sampler.running = False
    sampler.join()
    return {"rss_idle": rss0, "rss_peak": sampler.peak,
            "rss_after": psutil.Process(pid).memory_info().rss, "seconds": took,
            "entries": per * 4 * 100, "failed_requests": failures[0]}


def measure(source: str | None, args) -> dict:
    out = {}
    env = {"PYTHONPATH": source} if source else None
    for name in ("fragments", "entries"):
        with tempfile.TemporaryDirectory(prefix="gasoline-bench-mem-") as tmp:
            daemon = DaemonProcess(state_dir=Path(tmp) / "state", env=env).start()
            try:
                time.sleep(0.5)
                pid = daemon.process.pid
                if name == "fragments":
                    out[name] = fragment_flood(daemon.port, pid, args.clients, args.fragment_mib)
                else:
                    out[name] = entry_flood(daemon.port, pid, args.entries)
            finally:
                daemon.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=48)
    parser.add_argument("--fragment-mib", type=int, default=18)
    parser.add_argument("--entries", type=int, default=60_000)
    parser.add_argument("--baseline", metavar="DIR", help="another checkout, measured the same way")
    args = parser.parse_args()
    variants: dict[str, str | None] = {"this tree": None}
    if args.baseline:
        source = str(Path(args.baseline).resolve())
        if not (Path(source) / "gasoline" / "tap.py").exists():
            raise SystemExit(f"--baseline {args.baseline}: no gasoline/tap.py there")
        variants["baseline"] = source
    results = {name: measure(src, args) for name, src in variants.items()}
    load = os.getloadavg()
    rows = []
    for name, r in results.items():
        f, e = r["fragments"], r["entries"]
        rows.append([f"{name}: fragment flood", f["rss_idle"] / MiB, f["rss_peak"] / MiB,
                     f["rss_held"] / MiB, f["rss_after"] / MiB,
                     f"{f['sent_mib']:.0f} MiB sent; {f['cut']} cut by the daemon "
                     f"({f['closed_4013']} close frames 4013 read before the reset)"])
        rows.append([f"{name}: 6 kB entries", e["rss_idle"] / MiB, e["rss_peak"] / MiB, "",
                     e["rss_after"] / MiB, f"{e['entries']:,} entries, "
                                           f"{e['failed_requests']} failed requests"])
    print_table(f"daemon RSS, MiB ({args.clients} clients x {args.fragment_mib} MiB unfinished; "
                f"load average {load[0]:.2f})",
                ["daemon: flood", "idle", "peak", "held open", "after", "notes"], rows)
    for name, r in results.items():
        if r["fragments"]["metrics"]:
            print(f"{name}: /metrics {r['fragments']['metrics']}")
    path = write_json("inflight_memory", {"args": vars(args), "load_average": load,
                                          "results": results})
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""
Memory per stored console entry (not a test): fill a TelemetryStore's console buffer the way ingest
does and report the RSS it costs per entry.

Each batch of 50 realistic extension console entries (~270 B of JSON each) is encoded as the
extension sends it, parsed with orjson as the ingest route does, and handed to ``store.add``. The
console journal is attached (persistence on, writing to a temporary state dir) unless
``--no-persist``. Two figures are reported: after the buffer first fills (``--entries``, default
100 000) and after as many again have gone through it (steady state: every write evicts one).

Target: <= 600 B of RSS per stored entry with a 100 000-entry buffer (the published daemon: ~2.5 KB).

Then, for every other buffer, at its default capacity with entries of its own kind (network bodies,
WebSocket events, actions, waterfall, extension logs): memory held per stored entry (tracemalloc) and
JSON bytes per entry. Last, the idle RSS of a real daemon (``twistd -n gasoline``, default options, nothing
ingested, after it has settled), split into anonymous and file-backed memory: at its first start on a
new state dir (which creates the identity key) and started again on it; the same
daemon after use (the extension paired, opened its CDP link and posted a batch, every tool called
once: not idle, for scale); the stack's own
floor (twistd alone, and a hello-world Klein app under twistd); side by side with the published
daemon's with ``--compare-reference`` (the target: under 40 MB idle).

    .venv/bin/python bench/memory.py [--entries 100000] [--no-persist] [--compare-reference]
                                     [--idle-only]
    .venv/bin/python bench/memory.py --baseline /tmp/base [--rounds 3]   # idle RSS, before/after
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import print_table, write_json
import _workload
from twisted.internet import task

from gasoline.core.storage.journal import ConsoleJournal
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    DEFAULT_BUFFERS,
    EXTENSION_LOGS,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
    BufferSpec,
    TelemetryStore,
)

BATCH = 50
PAGES = ["dashboard", "settings", "checkout", "profile", "search"]


def console_entry(i: int) -> dict:
    """One console entry in the extension's format, ~270 bytes of compact JSON, from one of five
    pages (the reference workload's entry, L{_workload.console_entry})."""
    return _workload.console_entry(i, PAGES[i % len(PAGES)])


def network_body(i: int) -> dict:
    """A captured request/response pair with a JSON response body of ~1.5 kB."""
    items = [{"id": i * 10 + k, "name": f"item {k}", "price": k * 3.5, "tags": ["a", "b"]}
             for k in range(16)]
    return {"ts": "2026-11-26T01:00:00.000Z", "method": "GET", "status": 200,
            "url": f"http://localhost:3000/api/items?page={i}", "content_type": "application/json",
            "duration": 12 + i % 50, "request_headers": {"accept": "application/json"},
            "response_headers": {"content-type": "application/json", "cache-control": "no-store"},
            "response_body": orjson.dumps({"items": items, "page": i}).decode(), "tabId": 1}


def websocket_event(i: int) -> dict:
    return {"ts": "2026-11-26T01:00:00.000Z", "event": "message", "id": f"ws-{i % 4}",
            "url": "ws://localhost:3000/live", "direction": "incoming" if i % 3 else "outgoing",
            "data": orjson.dumps({"type": "tick", "seq": i, "price": i * 0.25}).decode(),
            "size": 48, "tabId": 1}


def action(i: int) -> dict:
    return {"ts": 1795000000000 + i, "type": "click", "url": "http://localhost:3000/app",
            "selectors": {"testId": f"button-{i % 40}", "css": f"#main > div.row:nth-child({i % 9})"
                          " > button.primary", "text": "Save"}, "source": "human", "tabId": 1}


def waterfall(i: int) -> dict:
    return {"name": f"http://localhost:3000/static/chunk-{i}.js", "initiatorType": "script",
            "startTime": i * 1.5, "duration": 20.25, "transferSize": 10240 + i,
            "encodedBodySize": 10000, "decodedBodySize": 30000, "pageURL": "http://localhost:3000/"}


def extension_log(i: int) -> dict:
    return {"ts": "2026-11-26T01:00:00.000Z", "level": "debug", "category": "sync",
            "message": f"sync {i}: 3 commands delivered, 0 results pending"}


MAKERS = {
    NETWORK_BODIES: network_body,
    WEBSOCKET_EVENTS: websocket_event,
    ACTIONS: action,
    WATERFALL: waterfall,
    EXTENSION_LOGS: extension_log,
}


def per_buffer() -> list[dict]:
    """Memory held per stored entry of each non-console buffer at its default capacity.

    Measured with tracemalloc (Python allocations still alive after the fill), not RSS: these
    buffers are small enough that the allocator reuses memory freed by the previous one, which
    would hide them from an RSS delta."""
    import tracemalloc

    out = []
    for name, make in MAKERS.items():
        spec = DEFAULT_BUFFERS[name]
        clock = task.Clock()
        batches = [[make(b + k) for k in range(BATCH)] for b in range(0, 2 * spec.entries, BATCH)]
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        store = TelemetryStore(clock, {name: spec})
        for batch in batches:  # filled, then every write evicts one
            store.add(name, batch)
        gc.collect()
        held_bytes = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        held = len(store.buffers[name])
        out.append({"buffer": name, "entries": held, "capacity": spec.entries,
                    "held_bytes_per_entry": held_bytes / max(held, 1),
                    "json_bytes_per_entry": store.buffers[name].bytes_used / max(held, 1)})
        del store, batches
    return out


#: The stack's own idle RSS, for scale: twistd with no application, and a hello-world Klein app
#: behind twisted.web, each as twistd runs it.
FLOORS = {
    "floor: twistd, no application": (
        "from twisted.application import service\n"
        "application = service.Application('floor')\n"),
    "floor: twistd + twisted.web + Klein hello world": (
        "from twisted.application import service, strports\n"
        "from twisted.web.server import Site\n"
        "from klein import Klein\n"
        "app = Klein()\n"
        "@app.route('/')\n"
        "def home(request):\n"
        "    return 'hello'\n"
        "application = service.Application('floor')\n"
        "strports.service('tcp:0:interface=127.0.0.1', Site(app.resource()))"
        ".setServiceParent(application)\n"),
}
_TWISTD = "from twisted.scripts.twistd import run; run()"


def idle_rss(reference: bool) -> list[dict]:
    """Idle RSS of a real daemon (and of the published one): started, settled, nothing ingested;
    then the same daemon after use, and the stack's floors."""
    from _common import ReferenceDaemon

    from gasoline.testing_process import DaemonProcess

    rows = []
    with tempfile.TemporaryDirectory(prefix="gasoline-idle-") as tmp:
        # The first start creates the identity key; every later start reads it. Both are
        # reported.
        with DaemonProcess(state_dir=Path(tmp) / "state") as d:
            time.sleep(3.0)
            rows.append(_rss_row("gasoline (first start)", d.process.pid))
        with DaemonProcess(state_dir=Path(tmp) / "state") as d:
            time.sleep(3.0)
            rows.append(_rss_row("gasoline", d.process.pid))
            use(d.port, d.state_dir)
            time.sleep(3.0)
            rows.append(_rss_row("gasoline after use (pairing, CDP link, ingest, 1 call per tool)",
                                 d.process.pid))
        for name, tac in FLOORS.items():
            path = Path(tmp) / "floor.tac"
            path.write_text(tac)
            proc = subprocess.Popen(
                [sys.executable, "-c", _TWISTD, "-n", "--pidfile=", "--logfile",
                 str(Path(tmp) / "floor.log"), "-y", str(path)],
                cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
            try:
                time.sleep(3.0)
                if proc.poll() is None:
                    rows.append(_rss_row(name, proc.pid))
            finally:
                proc.terminate()
                proc.wait(10)
    if reference:
        with ReferenceDaemon() as ref:
            time.sleep(3.0)
            rows.append(_rss_row("reference-0.7.9", ref.pid))
    return rows


#: One call of each tool that needs no browser (each loads its tool's module).
TOOL_CALLS = (
    ("observe", {"what": "errors"}),
    ("analyze", {"what": "error_clusters"}),
    ("generate", {"what": "har"}),
    ("configure", {"what": "health"}),
    ("interact", {"what": "list_states"}),
)


def open_cdp_link(port: int, session: str) -> None:
    """The extension's CDP link (lib/cdp.js): a WebSocket to /extension/cdp with its pairing
    session; the daemon's first message is its proof. Closed once that message arrived."""
    import base64
    import socket

    key = base64.b64encode(os.urandom(16)).decode()
    nonce = base64.urlsafe_b64encode(os.urandom(24)).rstrip(b"=").decode()
    request = (f"GET /extension/cdp?session={session}&nonce={nonce} HTTP/1.1\r\n"
               f"Host: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               "Origin: chrome-extension://abcdefghijklmnop\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode())
        data = b""
        while b"Gasoline.proof" not in data:
            chunk = sock.recv(65536)
            assert chunk, data[:300]
            data += chunk
        assert data.startswith(b"HTTP/1.1 101"), data[:300]


def use(port: int, state_dir: Path) -> None:
    """What a daemon in use has done: the extension paired (a challenge: ECDH with the daemon's
    key), opened its CDP relay link (it does at every start) and posted a batch; an agent
    initialized, listed the tools and called each once."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from gasoline.core.trust.identity import b64u
    from _common import HTTPConnection

    from gasoline.testing import EXTENSION_HEADERS

    conn = HTTPConnection("127.0.0.1", port)
    try:
        ephemeral = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        challenge = {"key": b64u(ephemeral), "nonce": b64u(os.urandom(32))}
        status, reply = conn.request("POST", "/pairing/challenge", orjson.dumps(challenge),
                                     EXTENSION_HEADERS)
        assert status == 200 and b"proof" in reply, (status, reply[:200])
        open_cdp_link(port, orjson.loads(reply)["session"])
        status, _ = conn.request("POST", "/logs", body(0), EXTENSION_HEADERS)
        assert status == 200, status
        from gasoline.testing import client_headers

        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   **client_headers(state_dir, "memory-bench"),
                   "X-Gasoline-Connection": "conn-memory"}
        messages = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
                     "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "memory-bench", "version": "1"}}},
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]
        messages += [{"jsonrpc": "2.0", "id": 2 + i, "method": "tools/call",
                      "params": {"name": name, "arguments": args}}
                     for i, (name, args) in enumerate(TOOL_CALLS)]
        for message in messages:
            status, reply = conn.request("POST", "/mcp", orjson.dumps(message), headers)
            assert status in (200, 202), (status, reply[:200])
            if "id" in message and message["method"] == "tools/call":
                result = orjson.loads(reply)["result"]
                assert not result.get("isError"), (message, reply[:300])
    finally:
        conn.close()


def _rss_row(target: str, pid: int) -> dict:
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                fields[name] = int(value.split()[0]) * 1024
    return {"target": target, "rss_bytes": fields.get("VmRSS", 0),
            "anon_bytes": fields.get("RssAnon", 0), "file_bytes": fields.get("RssFile", 0)}


def body(start: int) -> bytes:
    """One POST /logs body as the extension sends it."""
    return orjson.dumps({"entries": [console_entry(start + k) for k in range(BATCH)]})


def rss() -> int:
    gc.collect()
    return psutil.Process(os.getpid()).memory_info().rss


def fill(store: TelemetryStore, start: int, count: int) -> None:
    for b in range(start, start + count, BATCH):
        entries = orjson.loads(body(b))["entries"]  # what the ingest route hands the store
        store.add(CONSOLE, entries)


def idle_side_by_side(baseline: str, rounds: int) -> dict:
    """This tree's and C{baseline}'s idle RSS (first start, started again), alternating which goes
    first round by round; medians and ratios (this tree / baseline)."""
    from statistics import median

    from gasoline.testing_process import DaemonProcess

    source = str(Path(baseline).resolve())
    if not (Path(source) / "gasoline" / "tap.py").exists():
        raise SystemExit(f"--baseline {baseline}: no gasoline/tap.py there")
    kinds = ("first start", "started again")
    samples: dict[str, dict[str, list[dict]]] = {v: {k: [] for k in kinds}
                                                 for v in ("this tree", "baseline")}
    for r in range(rounds):
        order = [("this tree", None), ("baseline", source)]
        for name, src in (order if r % 2 == 0 else order[::-1]):
            with tempfile.TemporaryDirectory(prefix="gasoline-idle-") as tmp:
                for kind in kinds:
                    env = {"PYTHONPATH": src} if src else None
                    with DaemonProcess(state_dir=Path(tmp) / "state", env=env) as d:
                        time.sleep(3.0)
                        samples[name][kind].append(_rss_row(f"{name} ({kind})", d.process.pid))
    rows, medians = [], {}
    for kind in kinds:
        m = {name: {f: median(s[f] for s in samples[name][kind])
                    for f in ("rss_bytes", "anon_bytes", "file_bytes")} for name in samples}
        medians[kind] = m
        ours, base = m["this tree"], m["baseline"]
        rows.append([kind, ours["rss_bytes"] / 2**20, base["rss_bytes"] / 2**20,
                     ours["rss_bytes"] / base["rss_bytes"], ours["anon_bytes"] / 2**20,
                     base["anon_bytes"] / 2**20])
    print_table(f"idle daemon RSS side by side, {rounds} alternating rounds, medians "
                f"(baseline: {source})",
                ["start", "this tree MiB", "baseline MiB", "ratio", "this tree anon MiB",
                 "baseline anon MiB"], rows)
    return {"baseline": source, "rounds": rounds, "medians": medians, "samples": samples}


def print_idle(reference: bool) -> list[dict]:
    idle = idle_rss(reference)
    print_table("idle daemon RSS (default options, nothing ingested; target < 40 MiB)",
                ["target", "RSS MiB", "anonymous MiB", "file-backed MiB"],
                [[r["target"], r["rss_bytes"] / 2**20, r["anon_bytes"] / 2**20,
                  r["file_bytes"] / 2**20] for r in idle])
    return idle


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000, help="console buffer capacity")
    parser.add_argument("--no-persist", action="store_true", help="no console journal")
    parser.add_argument("--compare-reference", action="store_true",
                        help="also the published daemon's idle RSS")
    parser.add_argument("--idle-only", action="store_true",
                        help="only the idle daemon's RSS (writes bench/results/memory_idle.json)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="only the idle RSS, side by side with another Gasoline checkout "
                        "(PYTHONPATH=DIR)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds with --baseline")
    args = parser.parse_args()
    if args.baseline:
        path = write_json("memory_idle_side_by_side", idle_side_by_side(args.baseline,
                                                                        args.rounds))
        print(f"wrote {path}")
        return 0
    if args.idle_only:
        path = write_json("memory_idle", {"idle": print_idle(args.compare_reference)})
        print(f"wrote {path}")
        return 0
    n = args.entries - args.entries % BATCH

    clock = task.Clock()
    with tempfile.TemporaryDirectory(prefix="gasoline-memory-") as tmp:
        # Warm-up: pay one-time costs (first use of each code path, native allocations) before
        # the baseline, with a small store and journal of their own.
        warm = TelemetryStore(clock, {CONSOLE: BufferSpec(BATCH, 0)})
        warm_journal = ConsoleJournal(Path(tmp) / "warm-up", clock, list, max_entries=BATCH)
        warm.journals[CONSOLE] = warm_journal
        warm_journal.startService()
        fill(warm, 0, BATCH * 20)
        warm_journal.stopService()
        del warm, warm_journal
        baseline = rss()
        spec = BufferSpec(n, DEFAULT_BUFFERS[CONSOLE].max_bytes)
        store = TelemetryStore(clock, {CONSOLE: spec})
        journal = None
        if not args.no_persist:
            ring = store.buffers[CONSOLE]
            journal = ConsoleJournal(Path(tmp), clock, lambda: list(ring), max_entries=n)
            store.journals[CONSOLE] = journal
            journal.startService()
        empty = rss()
        started = time.perf_counter()
        fill(store, 0, n)
        took = time.perf_counter() - started
        full = rss()
        ring = store.buffers[CONSOLE]
        held_full = len(ring)
        json_bytes = ring.bytes_used / max(held_full, 1)
        fill(store, n, n)  # every write now evicts the oldest entry
        steady = rss()
        held_steady = len(ring)
        if journal is not None:
            journal.stopService()
            journal_size = (Path(tmp) / "console.jsonl").stat().st_size
        else:
            journal_size = 0

    per_full = (full - baseline) / max(held_full, 1)
    per_steady = (steady - baseline) / max(held_steady, 1)
    rows = [
        ["buffer filled once", held_full, (full - baseline) / 2**20, per_full, json_bytes],
        ["after 2x writes (evicting)", held_steady, (steady - baseline) / 2**20, per_steady,
         json_bytes],
    ]
    print_table(
        f"RSS per stored console entry ({n:,}-entry buffer, batches of {BATCH}, "
        f"persistence {'off' if args.no_persist else 'on'}; target <= 600 B)",
        ["phase", "entries held", "RSS delta MiB", "RSS B/entry", "JSON B/entry"],
        rows,
    )
    print(f"\nbaseline RSS {baseline / 2**20:.1f} MiB; empty buffer costs "
          f"{(empty - baseline) / 2**20:.1f} MiB (slot arrays); filled at "
          f"{n / took:,.0f} entries/s in-process")
    result = {
        "buffer_entries": n,
        "batch": BATCH,
        "persist": not args.no_persist,
        "rss_baseline_bytes": baseline,
        "rss_empty_buffer_bytes": empty,
        "rss_full_bytes": full,
        "rss_steady_bytes": steady,
        "entries_held": held_steady,
        "json_bytes_per_entry": json_bytes,
        "rss_bytes_per_entry_full": per_full,
        "rss_bytes_per_entry_steady": per_steady,
        "journal_file_bytes": journal_size,
        "fill_entries_per_second": n / took,
        "target_bytes_per_entry": 600,
        "meets_target": max(per_full, per_steady) <= 600,
    }
    buffers = per_buffer()
    print_table("every other buffer at its default capacity, filled twice (evicting)",
                ["buffer", "entries held", "held B/entry (tracemalloc)", "JSON B/entry"],
                [[b["buffer"], b["entries"], b["held_bytes_per_entry"], b["json_bytes_per_entry"]]
                 for b in buffers])
    idle = print_idle(args.compare_reference)
    result["buffers"] = buffers
    result["idle"] = idle
    path = write_json("memory", result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""
Memory per stored console entry (not a test): fill a TelemetryStore's console buffer the way ingest
does and report the RSS it costs per entry.

Each batch of 50 realistic extension console entries (~270 B of JSON each) is encoded as the
extension sends it, parsed with orjson as the ingest route does, and handed to ``store.add``. The
console journal is attached (persistence on, writing to a temporary state dir) unless
``--no-persist``. Two figures are reported: after the buffer first fills (``--entries``, default
100 000) and after as many again have gone through it (steady state: every write evicts one).

Target: <= 600 B of RSS per stored entry with a 100 000-entry buffer (the published daemon: ~2.5 KB).

    .venv/bin/python bench/memory.py [--entries 100000] [--no-persist]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import print_table, write_json  # noqa: E402
from twisted.internet import task  # noqa: E402

from gasoline.core.persist import ConsoleJournal  # noqa: E402
from gasoline.core.store import CONSOLE, DEFAULT_BUFFERS, BufferSpec, TelemetryStore  # noqa: E402

BATCH = 50
LEVELS = ["log", "info", "warn", "error", "debug"]
PAGES = ["dashboard", "settings", "checkout", "profile", "search"]


def console_entry(i: int) -> dict:
    """One console entry in the extension's format, ~270 bytes of compact JSON."""
    page = PAGES[i % len(PAGES)]
    return {
        "ts": f"2026-11-26T01:{(i // 60) % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z",
        "url": f"http://localhost:3000/app/{page}",
        "message": f"[{page}] widget {i} refreshed in {i % 97} ms (cache miss)",
        "source": "http://localhost:3000/static/js/main.chunk.js:1234:17",
        "level": LEVELS[i % len(LEVELS)],
        "type": "console",
        "args": [f"widget {i}", {"ms": i % 97}],
        "tabId": 1234567,
    }


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000, help="console buffer capacity")
    parser.add_argument("--no-persist", action="store_true", help="no console journal")
    args = parser.parse_args()
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
    path = write_json("memory", result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

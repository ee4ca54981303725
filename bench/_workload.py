"""
The reference ingest workload (bench/ingest.py, bench/ingest_path.py): console entries as the
extension sends them, 50 per request. Nothing but the standard library, so that a benchmark can
build the same requests for another checkout of Gasoline (C{--baseline}, C{PYTHONPATH}).
"""

from __future__ import annotations

import json

LEVELS = ["log", "info", "warn", "error", "debug"]
BATCH = 50


def console_entry(i: int, page: str = "dashboard") -> dict:
    """One console entry as the extension sends it (~270 bytes of JSON), from C{page} of the app."""
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


def batches(n: int, start: int = 0) -> list[bytes]:
    return [
        json.dumps({"entries": [console_entry(start + b * BATCH + k) for k in range(BATCH)]},
                   separators=(",", ":")).encode()
        for b in range(n)
    ]

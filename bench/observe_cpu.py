"""
CPU per ``observe`` call, in process (the daemon's object graph on one clock, no HTTP): ``--agents``
agents (50) call ``observe logs`` (limit 100) and ``observe errors`` in turn over a full console
buffer (10,000 entries), in two phases:

 - ``reads``: nothing new arrives (each stored entry is read by every agent: the redact-once cache
   serves all but the first read);
 - ``with ingest``: before each call ``--per-call`` new entries (50: 5,000 entries/s shared by
   100 calls/s) are stored, so every call also pays its share of storing and of redacting and
   noise-checking new entries the first time they are read.

Target: under 1 ms of CPU per call. ``--baseline DIR`` runs the same in a second interpreter with
``PYTHONPATH=DIR`` (another checkout) and prints both.

    .venv/bin/python bench/observe_cpu.py [--agents 50] [--rounds 10] [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _workload import console_entry  # noqa: E402


def measure(agents: int, rounds: int, per_call: int) -> dict:
    from twisted.internet import task

    from gasoline.app import Config, build
    from gasoline.core.storage.store import CONSOLE
    from gasoline.mcp import jsonrpc

    with tempfile.TemporaryDirectory(prefix="gasoline-obscpu-") as tmp:
        app = build(Config(state_dir=Path(tmp), persist=False, max_clients=agents + 5,
                           tool_rate_limit=0), task.Clock())
        app.store.add(CONSOLE, [console_entry(i) for i in range(10_000)])
        sessions = []
        for k in range(agents):
            s = app.mcp.open_session(f"agent-{k}", "streamable")
            app.mcp.handle(s, jsonrpc.request(0, "initialize", {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "b", "version": "1"}}))
            sessions.append(s)
        n = [10_000]

        def phase(ingest: int) -> float:
            calls = 0
            t0 = time.process_time()
            for r in range(rounds):
                for s in sessions:
                    if ingest:
                        app.store.add(CONSOLE, [console_entry(n[0] + i) for i in range(ingest)])
                        n[0] += ingest
                    what = "logs" if (r + calls) % 2 else "errors"
                    out: list = []
                    app.mcp.handle(s, jsonrpc.request(r + 1, "tools/call", {
                        "name": "observe", "arguments": {"what": what, "limit": 100}})
                    ).addCallback(out.append)
                    assert out and not out[0]["result"]["isError"], out
                    calls += 1
            return (time.process_time() - t0) * 1000 / calls

        reads = phase(0)
        with_ingest = phase(per_call)
        app.mcp.close_all()
    return {"reads_ms_per_call": reads, "with_ingest_ms_per_call": with_ingest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-call", type=int, default=50,
                        help="new console entries stored before each call in the second phase")
    parser.add_argument("--baseline", metavar="DIR")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ours = measure(args.agents, args.rounds, args.per_call)
    if args.json:
        print(json.dumps(ours))
        return 0
    from _common import print_table, write_json

    rows = [["this tree", ours["reads_ms_per_call"], ours["with_ingest_ms_per_call"]]]
    result = {"this tree": ours, "args": vars(args)}
    if args.baseline:
        source = str(Path(args.baseline).resolve())
        out = subprocess.run(
            [sys.executable, __file__, "--agents", str(args.agents), "--rounds",
             str(args.rounds), "--per-call", str(args.per_call), "--json"],
            env={**os.environ, "PYTHONPATH": source}, capture_output=True, text=True, check=True)
        base = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(["baseline", base["reads_ms_per_call"], base["with_ingest_ms_per_call"]])
        result["baseline"] = base
    print_table(f"CPU ms per observe call, {args.agents} agents, in process (target < 1 ms); "
                f"load average {os.getloadavg()[0]:.1f}",
                ["tree", "reads only", f"with {args.per_call} new entries per call"], rows)
    print(f"\nwrote {write_json('observe_cpu', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""
The context-streaming subscriber path's cost per entry, in-process on a C{task.Clock}: the ten
agents and filters of bench/streaming.py (each with an attached stream), console batches of its
entry mix written through C{store.add} at a simulated 10,000 entries/s (50 entries every 5 ms of
clock time). Prints CPU microseconds per entry; C{NOSUB=1} runs the same writes without any
subscription, so the difference is what the subscribers cost. Deterministic under callgrind (the
instruction counts of two batch counts differ by exactly the cost of the extra batches):

    .venv/bin/python bench/streaming_path.py 2000
    NOSUB=1 .venv/bin/python bench/streaming_path.py 2000
    WARM=50 valgrind --tool=callgrind --callgrind-out-file=a.out .venv/bin/python bench/streaming_path.py 20
    WARM=50 valgrind --tool=callgrind --callgrind-out-file=b.out .venv/bin/python bench/streaming_path.py 220
    # (Ir of b.out - Ir of a.out) / 200 = instructions per 50-entry batch
"""
import atexit
import os
import shutil
import sys
import tempfile
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pathlib import Path
from twisted.internet.task import Clock
import streaming as sb
from gasoline.app import Config, build
from gasoline.http.mcp_http import _sse_event

def main(n_batches, profile=False, subscribed=True):
    clock = Clock(); clock.advance(1_700_000_000)
    tmp = tempfile.mkdtemp(prefix="gasoline-streaming-path-")
    atexit.register(shutil.rmtree, tmp, True)
    app = build(Config(state_dir=Path(tmp), persist=False), clock)
    server = app.mcp
    sessions = []
    written = [0]
    for i in range(len(sb.FILTERS)):
        cid = f"agent-{i}"
        s = server.open_session(cid, "connector")
        server.handle(s, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}}})
        server.handle(s, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        def writer(eid, payload):
            _sse_event(eid, payload); written[0] += 1
        s.standalone.attach(writer)
        sessions.append(s)
        if subscribed:
            d = server.handle(s, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "configure", "arguments": {"what": "streaming", **sb.FILTERS[i]}}})
            assert d.result["result"]["isError"] is False
    batches = [[sb.entry(b, k) for k in range(sb.BATCH)] for b in range(200)]
    store = app.store
    def run(n):
        for b in range(n):
            store.add("console", [dict(e) for e in batches[b % len(batches)]])
            clock.advance(0.005)  # 50 entries per 5 ms: 10,000 entries/s
    run(int(os.environ.get('WARM', '200')))
    t0 = time.process_time()
    if profile:
        import cProfile, pstats
        pr = cProfile.Profile(); pr.enable(); run(n_batches); pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(30)
    else:
        run(n_batches)
    cpu = time.process_time() - t0
    print(f"subscribed={subscribed} us/entry {cpu*1e6/(n_batches*sb.BATCH):.2f}  notifications {written[0]}")

if __name__ == "__main__":
    # RATE_LIMIT=5: every agent at the default rate limit instead of bench/streaming.py's 100/s.
    if os.environ.get("RATE_LIMIT"):
        sb.set_rate_limit(int(os.environ["RATE_LIMIT"]))
    main(int(sys.argv[1]), profile=bool(os.environ.get("PROFILE")), subscribed=not os.environ.get("NOSUB"))

"""
Memory of slow readers: streams that never read, while a page floods errors.

The real daemon (``twistd -n gasoline``, default options, port 0) first takes ``--warm`` console
errors with no stream open (its console buffer, 100 000 entries by default, is then full: what the
flood adds to the store from there on is steady state, not growth), then gets, before the flood:

 - ``--agents`` agents (connector form: ``X-Gasoline-Client`` + ``X-Gasoline-Connection``), each
   subscribed to error events at the highest rate limit, each with a ``GET /mcp`` stream and a
   ``GET /events`` stream on raw sockets that are never read;
 - a fake extension (pairing, the CDP link, one tab) and one CDP client attached to that tab with
   ``Runtime.enable``, which then stops reading (a paused client);

then 4 keep-alive connections POST ``/logs`` (50 errors per request, the extension's headers) as
fast as the daemon takes them for ``--seconds``, while the fake extension sends the tab's console
events (``Runtime.consoleAPICalled``) to the relay as fast as the daemon reads them. Sampled every 0.25 s: the daemon's RSS; every 0.5 s: a
``GET /health`` on a fresh connection (latency). Then every stream is closed and, after
``--settle`` seconds, RSS again.

Printed: RSS at the start, peak RSS over the start, RSS after the streams closed, entries/s,
``/health`` p50/p99/max, whether the daemon cut the stalled readers. Written to
``bench/results/streams_memory-*.json``. The bound is stated in docs/operations.md ("Slow readers").

    .venv/bin/python bench/streams_memory.py [--agents 10] [--seconds 30] [--settle 5]
                                             [--baseline DIR]

``--subscriptions N`` measures instead what one streaming subscription costs (in process, on a
``task.Clock``, ``tracemalloc``): N agents with an MCP session each, then the bytes per agent added
by subscribing (empty inbox), by a full inbox (100 error events, each agent's own copy with its
``seq``), and by a full ``over_limit: "queue"`` queue (100 more, shared with the other agents' copies
of the same redacted event), for agents that subscribe alike and for agents whose subscriptions all
differ, each in a fresh process. Each figure is given as tracemalloc reports it (the sizes asked
for) and in pymalloc's 16-byte blocks (what the allocator hands out); a full collection before each
reading empties CPython's free lists, which would otherwise hide or keep blocks. With
``--baseline DIR`` the same measurement runs first on that checkout's ``gasoline`` (paired). Not
measured: RE2's own memory for ``url_pattern`` / ``exclude_pattern`` (native, outside
tracemalloc; these subscriptions have none). The figures are in docs/streaming.md ("Memory per
subscription").

    .venv/bin/python bench/streams_memory.py --subscriptions 50 [--baseline DIR]

``--baseline DIR`` runs the daemon of another checkout (``PYTHONPATH=DIR``, as bench/ingest.py
does), e.g. the tree before the bounded writer, to compare (mind the machine's memory: without
the bound the paused CDP client alone grew by gigabytes in tens of seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import HTTPConnection, median, percentile, print_table, rss, write_json  # noqa: E402

sys.path.insert(0, str(HERE.parent / "tests"))
from support import DaemonProcess, open_link, pair  # noqa: E402

from gasoline.testing import EXTENSION_HEADERS, client_headers  # noqa: E402

BATCH = 50
TAB = {"tabId": 1, "targetId": "0" * 31 + "1", "url": "https://app.example.test/", "title": "app"}


def _mcp(port: int, body: dict, headers: dict[str, str]) -> tuple[int, bytes]:
    conn = HTTPConnection("127.0.0.1", port)
    try:
        return conn.request("POST", "/mcp", json.dumps(body).encode(), {
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            **headers})
    finally:
        conn.close()


def agent(port: int, i: int, state_dir: Path) -> list[socket.socket]:
    """One subscribed agent (its client id proven); its two streams, opened and never read."""
    cid = f"bench-agent-{i}"
    try:
        named = client_headers(state_dir, cid)
    except FileNotFoundError:  # a --baseline daemon from before client proofs: no key file
        named = {"X-Gasoline-Client": cid}
    headers = {**named, "X-Gasoline-Connection": f"conn{i}"}
    status, body = _mcp(port, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}}, headers)
    assert status == 200, body
    _mcp(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
    status, body = _mcp(port, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "configure", "arguments": {"what": "streaming", "enabled": True,
                                           "subscribe": ["error"], "filters": {"rate_limit": 100}}}},
                        headers)
    assert status == 200 and b'"isError":false' in body.replace(b" ", b""), body
    streams = []
    for path in ("/mcp", f"/events?client=bench-agent-{i}"):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that takes nothing
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Accept: text/event-stream",
                 *(f"{k}: {v}" for k, v in headers.items()), "", ""]
        s.sendall("\r\n".join(lines).encode())
        streams.append(s)
    return streams


class FakeExtension:
    """The extension's side of the CDP link: one tab, answers every request, sends events."""

    def __init__(self, port: int) -> None:
        session, key = pair(port)
        self.ws = open_link(port, session, key)
        self.ws.send(json.dumps({"method": "hello", "params": {
            "product": "Chrome/142.0.0.0", "userAgent": "bench", "targets": [TAB]}}))
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self._answer, daemon=True)
        self.thread.start()

    def _answer(self) -> None:
        self.ws.settimeout(0.5)
        while not self.stop:
            try:
                message = json.loads(self.ws.recv())
            except Exception:
                continue
            if "id" in message:
                with self.lock:
                    self.ws.send(json.dumps({"id": message["id"], "result": {}}))

    def console_event(self, n: int) -> None:
        text = json.dumps({"method": "event", "params": {
            "tabId": 1, "method": "Runtime.consoleAPICalled", "params": {
                "type": "error", "executionContextId": 1, "timestamp": time.time() * 1000,
                "args": [{"type": "string", "value": f"bench error {n} " + "x" * 200}]}}})
        with self.lock:
            self.ws.send(text)


def paused_cdp_client(port: int) -> socket.socket:
    """A CDP client attached to the tab with Runtime enabled, then reading nothing (raw socket)."""
    import websocket

    ws = websocket.create_connection(f"ws://127.0.0.1:{port}/cdp/bench-paused", timeout=10)
    ws.send(json.dumps({"id": 1, "method": "Target.attachToTarget",
                        "params": {"targetId": TAB["targetId"], "flatten": True}}))
    session = None
    while session is None:
        message = json.loads(ws.recv())
        if message.get("id") == 1:
            session = message["result"]["sessionId"]
    ws.send(json.dumps({"id": 2, "method": "Runtime.enable", "sessionId": session}))
    while json.loads(ws.recv()).get("id") != 2:
        pass
    sock = ws.sock
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return sock


def flood(port: int, until: float, counts: list[int], most: int | None = None) -> None:
    conn = HTTPConnection("127.0.0.1", port)
    n = 0
    while time.monotonic() < until and (most is None or n * BATCH < most):
        entries = [{"level": "error", "type": "console", "message": f"TypeError: flood {n}-{k} "
                    + "y" * 120, "url": "https://app.example.test/", "tabId": 1,
                    "ts": "2026-11-27T10:00:00.000Z"} for k in range(BATCH)]
        status, _ = conn.request("POST", "/logs", json.dumps({"entries": entries}).encode(),
                                 EXTENSION_HEADERS)
        if status == 200:
            counts.append(BATCH)
        n += 1
    conn.close()


def console_events(ext: FakeExtension, until: float) -> None:
    n = 0
    while time.monotonic() < until:
        ext.console_event(n)
        n += 1


def health_ms(port: int) -> float:
    started = time.perf_counter()
    conn = HTTPConnection("127.0.0.1", port, timeout=30)
    status, _ = conn.request("GET", "/health", b"", {})
    conn.close()
    assert status == 200
    return (time.perf_counter() - started) * 1000


def _pool_bytes(snapshot: Any) -> int:
    """The traced blocks' sizes as the allocator hands them out: pymalloc serves requests of up
    to 512 bytes in 16-byte size classes (tracemalloc reports the size asked for)."""
    return sum(-(-t.size // 16) * 16 if t.size <= 512 else t.size for t in snapshot.traces)


def subscription_memory(n: int, distinct: bool) -> dict[str, Any]:
    """Bytes per agent: subscribed (empty inbox), full inbox, full over-limit queue.

    With C{distinct} every agent's subscription differs (its own C{slow_ms}, 1001, 1002, ...,
    which an C{error} subscription never reads but keeps and saves): no two agents can share a
    subscription, its saved form or its matcher, only what every subscription to the same event
    types has alike. Without it every agent subscribes alike (a fleet of agents of one kind)."""
    import gc
    import tracemalloc

    from twisted.internet.task import Clock

    from gasoline.app import Config, build
    from gasoline.core.storage.store import CONSOLE
    from gasoline.mcp import jsonrpc
    from gasoline.streaming.inbox import DEFAULT_INBOX, QUEUE_CAPACITY
    from gasoline.streaming.subscription import parse

    clock = Clock()
    clock.advance(1_700_000_000)
    with tempfile.TemporaryDirectory(prefix="gasoline-bench-subs-") as tmp:
        app = build(Config(state_dir=Path(tmp), persist=False, max_clients=n + 10), clock)
        sessions = []
        for i in range(n):
            session = app.mcp.open_session(f"agent-{i}", "connector")
            app.mcp.handle(session, jsonrpc.request(0, "initialize", {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "b", "version": "1"}}))
            sessions.append(session)

        def subscribe(over_limit: str) -> None:
            # What configure {what:"streaming"} does, without the tool call around it (its
            # audit record and answer are the call's cost, not the subscription's). The
            # arguments are built per agent, as each call's JSON would be.
            for i, session in enumerate(sessions):
                filters = {"rate_limit": 100, "over_limit": over_limit}
                if distinct:
                    filters["slow_ms"] = 1001 + i
                app.streaming.configure(session.state, parse({"subscribe": ["error"],
                                                              "filters": filters}))

        def errors(k: int, tag: str) -> None:
            app.store.add(CONSOLE, [{"level": "error", "type": "console", "tabId": 1,
                                     "message": f"TypeError: cannot read 'x' of undefined {tag}{j}",
                                     "url": f"https://app.example.test/page/{j % 7}"}
                                    for j in range(k)])
            clock.advance(0)

        def measure() -> tuple[int, int]:
            # A full collection also empties CPython's free lists (dicts, lists, tuples,
            # floats): a block parked in one would be counted as held, and a block taken from
            # one (allocated before tracing began) would not be counted at all.
            gc.collect()
            snapshot = tracemalloc.take_snapshot()
            figures = tracemalloc.get_traced_memory()[0], _pool_bytes(snapshot)
            del snapshot  # (it is traced itself: gone before the next measure)
            gc.collect()
            return figures

        # The agent table is read once before (its refresh timer, not the subscription).
        app.streaming.active()
        tracemalloc.start()
        base = measure()
        subscribe("drop")
        subscribed = measure()
        errors(DEFAULT_INBOX, "a")
        full_inbox = measure()
        clock.advance(1.0)
        subscribe("queue")
        errors(100 + QUEUE_CAPACITY, "b")  # the window's 100 replace the inbox, the rest queue
        full_queue = measure()
        queued = sum(a.queued for a in app.streaming.agents.values())
        tracemalloc.stop()
        app.mcp.close_all()
        app.streaming.stop()
        app.store.notifier.stop()
        app.extension.stop()
        app.router.close()
    assert queued == n * QUEUE_CAPACITY, queued

    def per_agent(figures: tuple[int, int]) -> list[float]:
        return [(figures[k] - base[k]) / n for k in (0, 1)]

    import gasoline

    return {"agents": n, "distinct": distinct, "gasoline": str(Path(gasoline.__file__).parent),
            "subscription_bytes": per_agent(subscribed),
            "full_inbox_bytes": per_agent(full_inbox),
            "full_inbox_and_queue_bytes": per_agent(full_queue), "queued": queued}


def subscriptions_main(args: argparse.Namespace) -> int:
    """Each tree (the baseline's, then this one) and each kind of subscription in a fresh
    process (the module-level shared tables start empty, nothing carries over)."""
    import subprocess

    trees = ([("baseline", str(Path(args.baseline).resolve()))] if args.baseline else []) \
        + [("this tree", None)]
    results: dict[str, dict[str, Any]] = {}
    for label, path in trees:
        for distinct in (False, True):
            env = dict(os.environ)
            if path is not None:
                env["PYTHONPATH"] = path
            out = subprocess.run(
                [sys.executable, __file__, "--subscriptions", str(args.subscriptions),
                 "--one", "distinct" if distinct else "alike"],
                env=env, check=True, capture_output=True, text=True).stdout
            results[f"{label}, {'distinct' if distinct else 'alike'}"] = json.loads(
                out.strip().splitlines()[-1])
    load = os.getloadavg()
    rows = []
    for state, key in (("subscribed, empty inbox", "subscription_bytes"),
                       ("full inbox (100 events)", "full_inbox_bytes"),
                       ("full inbox + full queue", "full_inbox_and_queue_bytes")):
        for name, figures in results.items():
            rows.append([state, name, f"{figures[key][0]:,.0f}", f"{figures[key][1]:,.0f}"])
    print_table(f"Memory per streaming subscription ({args.subscriptions} agents; bytes per agent, "
                f"tracemalloc; load average {load[0]:.1f})",
                ["state", "tree, subscriptions", "requested", "in 16-byte blocks"], rows)
    for name, figures in results.items():
        print(f"{name}: gasoline from {figures['gasoline']}")
    print("alike: every agent {subscribe: [error], filters: {rate_limit: 100}}; distinct: "
          "each its own slow_ms as well (no two alike)")
    print(f"wrote {write_json('subscription_memory', {'agents': args.subscriptions, 'load': load, 'baseline': args.baseline, 'results': results})}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=10,
                        help="agents, each with an unread GET /mcp and GET /events stream")
    parser.add_argument("--seconds", type=float, default=40.0,
                        help="length of the flood (longer than the 30 s stall time)")
    parser.add_argument("--warm", type=int, default=110_000,
                        help="console errors posted before the streams open (fills the buffer)")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds after the streams close before RSS is read again")
    parser.add_argument("--baseline", metavar="DIR", help="run another checkout's daemon")
    parser.add_argument("--no-cdp", action="store_true",
                        help="no paused CDP client (a control: the flood alone)")
    parser.add_argument("--subscriptions", type=int, metavar="N",
                        help="measure the memory of N streaming subscriptions instead")
    parser.add_argument("--one", choices=("alike", "distinct"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(subscription_memory(args.subscriptions, args.one == "distinct")))
        return 0
    if args.subscriptions:
        return subscriptions_main(args)

    state = Path(tempfile.mkdtemp(prefix="gasoline-bench-streams-"))
    env = {"PYTHONPATH": str(Path(args.baseline).resolve())} if args.baseline else None
    daemon = DaemonProcess(state / "state", env=env, startup_timeout=60).start()
    streams: list[socket.socket] = []
    ext = None
    try:
        port, pid = daemon.port, daemon.process.pid
        warmed: list[int] = []
        warmers = [threading.Thread(target=flood, args=(port, time.monotonic() + 600, warmed,
                                                        args.warm // 4)) for _ in range(4)]
        for t in warmers:
            t.start()
        for t in warmers:
            t.join()
        print(f"warm: {sum(warmed):,} console errors stored before the streams open; "
              f"RSS {rss(pid) / 2**20:.1f} MiB", flush=True)
        ext = FakeExtension(port)
        for i in range(args.agents):
            streams += agent(port, i, daemon.state_dir)
        if not args.no_cdp:
            streams.append(paused_cdp_client(port))
        time.sleep(1.0)
        start_rss = rss(pid)
        samples, health = [start_rss], []
        counts: list[int] = []
        until = time.monotonic() + args.seconds
        senders = [threading.Thread(target=flood, args=(port, until, counts))
                   for _ in range(4)]
        if not args.no_cdp:
            senders.append(threading.Thread(target=console_events, args=(ext, until)))
        began = time.monotonic()
        for t in senders:
            t.start()
        next_health = time.monotonic()
        while any(t.is_alive() for t in senders):
            samples.append(rss(pid))
            if time.monotonic() >= next_health:
                health.append(health_ms(port))
                next_health += 0.5
            time.sleep(0.25)
        elapsed = time.monotonic() - began
        peak = max(samples)
        with_streams = rss(pid)
        cut = 0
        for s in streams:  # did the daemon drop the reader that took nothing?
            s.setblocking(False)
            try:
                while True:
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        cut += 1
                        break
            except (BlockingIOError, ConnectionResetError) as e:
                cut += isinstance(e, ConnectionResetError)
            s.close()
        streams = []
        time.sleep(args.settle)
        after = rss(pid)
        mib = 1 / (1024 * 1024)
        rate = sum(counts) / elapsed
        rows = [[args.agents, 2 * args.agents + 1, f"{start_rss * mib:.1f}",
                 f"{(peak - start_rss) * mib:.1f}", f"{after * mib:.1f}",
                 f"{rate:,.0f}", f"{median(health):.1f}", f"{percentile(health, 99):.1f}",
                 f"{max(health):.1f}", cut]]
        print_table(
            f"Unread streams while a page floods errors ({args.seconds:.0f} s; RSS in MiB; "
            f"{'baseline ' + args.baseline if args.baseline else 'this tree'})",
            ["agents", "streams", "RSS start", "peak over start", "RSS after close",
             "entries/s", "/health p50 ms", "p99 ms", "max ms", "streams cut"], rows)
        path = write_json("streams_memory", {
            "args": vars(args), "tree": args.baseline or "this tree", "rss_start": start_rss, "rss_peak": peak,
            "peak_over_start": peak - start_rss, "rss_with_streams_end": with_streams,
            "rss_after_close": after, "entries_per_s": rate, "health_ms": health,
            "streams": 2 * args.agents + 1, "streams_cut_by_daemon": cut})
        print(f"wrote {path}")
    finally:
        for s in streams:
            s.close()
        if ext is not None:
            ext.stop = True
            try:
                ext.ws.close()
            except Exception:
                pass
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

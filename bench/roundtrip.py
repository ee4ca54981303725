"""
MCP round-trip benchmark: one tool call's time through the daemon.

``tools/call observe {what:"errors", limit:10}`` over 200 sequential calls, through the stdio
connector (``gasoline connect``) and directly over ``POST /mcp``; median and p95. Also the connector's
start-up: process start to the first answered ``initialize``. With ``--compare-reference`` the same
runs, in the same run, against the published Gasoline 0.7.9: its stdio bridge (``gasoline --port P``)
and its ``POST /mcp``.

Connector start-up is measured on its own too (``--starts`` fresh processes each): process start to
the answered ``initialize``, and to the answered ``tools/list`` that an agent sends next, for
``gasoline connect`` (with its Twisted-free first exchange, and with it switched off through
``GASOLINE_CONNECT_FAST=0``) and, with ``--compare-reference``, the published connector: in rounds,
each round starting every connector once in turn, so the machine's changing load falls on all of
them alike. Wall times on a shared machine move with its load; the fastest start of each (less
sensitive to the load than the median) and the connector's CPU time (user + system) are reported
beside them. The package's bytecode is compiled first, as an install compiles it.

    .venv/bin/python bench/roundtrip.py [--calls 200] [--starts 20] [--compare-reference]
                                        [--baseline DIR]   # another tree's connector, paired
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    HTTPConnection,
    ReferenceDaemon,
    median,
    percentile,
    print_table,
    reference_binary,
    write_json,
)

from gasoline.testing import EXTENSION_HEADERS
from gasoline.testing_process import DaemonProcess

PROTOCOL = "2025-06-18"
INIT = {
    "jsonrpc": "2.0", "id": 0, "method": "initialize",
    "params": {"protocolVersion": PROTOCOL, "capabilities": {},
               "clientInfo": {"name": "gasoline-bench", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(i: int) -> dict:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "observe", "arguments": {"what": "errors", "limit": 10}}}


def seed_errors(port: int) -> None:
    """Put 200 console entries (40 errors) into the daemon so observe has something to return."""
    entries = [
        {"ts": "2026-11-26T01:00:00.000Z", "url": "http://localhost:3000/", "type": "console",
         "level": "error" if i % 5 == 0 else "log", "message": f"bench message {i}",
         "source": "app.js:1:1", "args": [f"bench message {i}"], "tabId": 1}
        for i in range(200)
    ]
    conn = HTTPConnection("127.0.0.1", port)
    for k in range(0, len(entries), 50):
        body = json.dumps({"entries": entries[k:k + 50]}).encode()
        status, text = conn.request("POST", "/logs", body, EXTENSION_HEADERS)
        if status != 200:
            raise RuntimeError(f"seeding failed: {status} {text[:200]!r}")
    conn.close()


# -- stdio -----------------------------------------------------------------------------------------


class StdioClient:
    def __init__(self, argv: list[str], cwd: str | None = None, env: dict | None = None) -> None:
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=cwd, env=env)

    def request(self, message: dict) -> dict:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("stdio peer closed its stdout")
            reply = json.loads(line)
            if reply.get("id") == message["id"]:
                return reply

    def notify(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(5)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def bench_stdio(argv: list[str], calls: int, cwd: str | None = None) -> dict:
    client = StdioClient(argv, cwd=cwd)
    try:
        init = client.request(INIT)
        startup_ms = (time.perf_counter() - client.t_start) * 1000
        if "result" not in init:
            raise RuntimeError(f"initialize failed: {init}")
        client.notify(INITIALIZED)
        lat, errors = [], 0
        for i in range(1, calls + 1):
            t0 = time.perf_counter()
            reply = client.request(call(i))
            lat.append((time.perf_counter() - t0) * 1000)
            if "result" not in reply or reply["result"].get("isError"):
                errors += 1
        return {"startup_ms": startup_ms, "median_ms": median(lat), "p95_ms": percentile(lat, 95),
                "errors": errors, "calls": calls}
    finally:
        client.close()


# -- HTTP ------------------------------------------------------------------------------------------


def _parse_mcp_body(status: int, body: bytes) -> dict:
    text = body.decode()
    if text.lstrip().startswith("{"):
        return json.loads(text)
    for line in text.splitlines():  # an SSE-framed answer
        if line.startswith("data:"):
            return json.loads(line[5:].strip())
    raise RuntimeError(f"unexpected /mcp answer {status}: {text[:200]!r}")


def bench_http(port: int, calls: int, headers: dict[str, str], session: bool) -> dict:
    conn = HTTPConnection("127.0.0.1", port)
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            **headers}
    raw = conn.sock  # noqa: F841  (keep-alive connection reused for every call)
    status, body = conn.request("POST", "/mcp", json.dumps(INIT).encode(), base)
    init = _parse_mcp_body(status, body)
    if "result" not in init:
        raise RuntimeError(f"initialize failed: {status} {body[:300]!r}")
    if session:
        # Read the session id the server issued (our /mcp is streamable HTTP).
        conn2 = HTTPConnection("127.0.0.1", port)
        conn2.sock.sendall(conn2.build("POST", "/mcp", json.dumps(INIT).encode(), base))
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn2.sock.recv(65536)
        conn2.close()
        sid = next((line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
                    if line.lower().startswith(b"mcp-session-id:")), None)
        if not sid:
            raise RuntimeError("no Mcp-Session-Id issued")
        base = {**base, "Mcp-Session-Id": sid, "MCP-Protocol-Version": PROTOCOL}
    conn.request("POST", "/mcp", json.dumps(INITIALIZED).encode(), base)
    lat, errors = [], 0
    for i in range(1, calls + 1):
        payload = json.dumps(call(i)).encode()
        t0 = time.perf_counter()
        status, body = conn.request("POST", "/mcp", payload, base)
        lat.append((time.perf_counter() - t0) * 1000)
        reply = _parse_mcp_body(status, body)
        if "result" not in reply or reply["result"].get("isError"):
            errors += 1
    conn.close()
    return {"median_ms": median(lat), "p95_ms": percentile(lat, 95), "errors": errors, "calls": calls}


def start_once(argv: list[str], cwd: str | None = None,
               env: dict | None = None) -> tuple[float, float, float]:
    """One fresh connector process: ms to the answered initialize, to the answered tools/list, and
    its CPU ms (user + system, whole process)."""
    import resource

    tools_list = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = StdioClient(argv, cwd=cwd, env=env)
    answer = client.request(INIT)
    t_init = time.perf_counter()
    client.notify(INITIALIZED)
    listed = client.request(tools_list)
    t_list = time.perf_counter()
    client.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if "result" not in answer or "result" not in listed:
        raise RuntimeError(f"connector start failed: {answer!r} {listed!r}")
    return ((t_init - client.t_start) * 1000, (t_list - client.t_start) * 1000,
            (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)


def bench_startups(variants: dict[str, tuple[list[str], str | None, dict | None]],
                   starts: int) -> dict[str, dict]:
    """C{starts} rounds; each round starts every variant (C{name: (argv, cwd, env)}) once, in
    turn, so that the machine's changing load falls on all of them alike."""
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    for _ in range(starts):
        for name, (argv, cwd, env) in variants.items():
            times[name].append(start_once(argv, cwd, env))
    out = {}
    for name, rows in times.items():
        to_init, to_list, cpu = ([r[i] for r in rows] for i in range(3))
        out[name] = {"starts": starts, "initialize_median_ms": median(to_init),
                     "initialize_p95_ms": percentile(to_init, 95),
                     "initialize_min_ms": min(to_init),
                     "tools_list_median_ms": median(to_list),
                     "tools_list_p95_ms": percentile(to_list, 95), "cpu_median_ms": median(cpu)}
    return out


def gasoline_bin() -> str:
    return str(Path(sys.executable).with_name("gasoline"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--starts", type=int, default=20, help="connector start-ups to time")
    parser.add_argument("--compare-reference", action="store_true")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also start the connector of another source tree (DIR holds its "
                             "gasoline/ package, e.g. `git archive main gasoline | tar -x -C "
                             "DIR`), in the same rounds: before/after figures from one run")
    args = parser.parse_args()
    rows, result = [], {"calls": args.calls}
    # An installed wheel has its bytecode compiled (pip and pipx do it at install time); a source
    # tree run with PYTHONDONTWRITEBYTECODE would compile gasoline's modules at every start (about
    # 4 ms of the connector's start that no user pays). Compile them, as the install does.
    import compileall

    for tree in (Path(__file__).resolve().parent.parent, *([Path(args.baseline)] if args.baseline
                                                           else [])):
        compileall.compile_dir(str(tree / "gasoline"), quiet=1)

    with tempfile.TemporaryDirectory(prefix="gasoline-rt-") as tmp:
        # 200 calls in a few seconds exceed the per-client tool rate limit (100/min), which would
        # turn half the calls into rate_limited answers: this benchmark measures latency, so the
        # limit is switched off for it (the reference has no comparable limit on these paths).
        with DaemonProcess(state_dir=Path(tmp) / "state", args=["--tool-rate-limit", "0"]) as d:
            seed_errors(d.port)
            # The connectors are given the daemon's state dir, as one that starts its daemon
            # has: the proof of their client id is made with its client key.
            ours_stdio = bench_stdio([gasoline_bin(), "connect", "--port", str(d.port),
                                      "--client-id", "bench-stdio", "--no-autostart",
                                      "--state-dir", str(d.state_dir)], args.calls)
            ours_http = bench_http(d.port, args.calls, {}, session=True)
            connect = [gasoline_bin(), "connect", "--port", str(d.port), "--client-id",
                       "bench-start", "--no-autostart", "--state-dir", str(d.state_dir)]
            import os

            # Told only --port (the default state dir, here an empty one, holds no key): the
            # first exchange asks the daemon's /health where its state dir is.
            empty = Path(tmp) / "empty-default"
            empty.mkdir()
            port_only = [gasoline_bin(), "connect", "--port", str(d.port), "--client-id",
                         "bench-start-port", "--no-autostart"]
            variants = {
                "gasoline": (connect, None, None),
                "gasoline_port_only": (port_only, None,
                                       dict(os.environ, GASOLINE_STATE_DIR=str(empty))),
                "gasoline_without_first_exchange": (
                    connect, None, dict(os.environ, GASOLINE_CONNECT_FAST="0")),
            }
            if args.baseline:
                # The same connector command, importing the other tree's gasoline package
                # (PYTHONPATH comes before the installed one); ours gets PYTHONPATH too, so both
                # pay for the same sys.path.
                here = str(Path(__file__).resolve().parent.parent)
                for name, tree in (("gasoline", here), ("baseline", args.baseline)):
                    variants[name] = (connect, None, dict(os.environ, PYTHONPATH=tree))
                    variants[f"{name}_port_only"] = (
                        port_only, None,
                        dict(os.environ, PYTHONPATH=tree, GASOLINE_STATE_DIR=str(empty)))
            if args.compare_reference:
                # Start-ups alternate with the published connector's, in the same rounds.
                with ReferenceDaemon() as ref:
                    variants["reference"] = ([str(reference_binary()), "--port", str(ref.port)],
                                             str(ref.state_dir), None)
                    result["startup"] = bench_startups(variants, args.starts)
            else:
                result["startup"] = bench_startups(variants, args.starts)
    start_fast = result["startup"]["gasoline"]
    result["gasoline"] = {"stdio": ours_stdio, "http": ours_http}
    rows += [["gasoline", "stdio (gasoline connect)", ours_stdio["median_ms"], ours_stdio["p95_ms"],
              ours_stdio["startup_ms"], ours_stdio["errors"]],
             ["gasoline", "POST /mcp (streamable HTTP)", ours_http["median_ms"], ours_http["p95_ms"],
              "", ours_http["errors"]]]

    if args.compare_reference:
        with ReferenceDaemon() as ref:
            seed_errors(ref.port)
            ref_stdio = bench_stdio([str(reference_binary()), "--port", str(ref.port)], args.calls,
                                    cwd=str(ref.state_dir))
            ref_http = bench_http(ref.port, args.calls, {}, session=False)
        ref_start = result["startup"]["reference"]
        result["reference"] = {"stdio": ref_stdio, "http": ref_http}
        rows += [["reference-0.7.9", "stdio bridge", ref_stdio["median_ms"], ref_stdio["p95_ms"],
                  ref_stdio["startup_ms"], ref_stdio["errors"]],
                 ["reference-0.7.9", "POST /mcp", ref_http["median_ms"], ref_http["p95_ms"], "",
                  ref_http["errors"]]]
        result["ratios_ours_over_reference"] = {
            "stdio_median": ours_stdio["median_ms"] / ref_stdio["median_ms"],
            "http_median": ours_http["median_ms"] / ref_http["median_ms"],
            "startup": ours_stdio["startup_ms"] / ref_stdio["startup_ms"],
            "startup_initialize_median": start_fast["initialize_median_ms"]
            / ref_start["initialize_median_ms"],
            "startup_tools_list_median": start_fast["tools_list_median_ms"]
            / ref_start["tools_list_median_ms"],
            "startup_initialize_median_port_only": result["startup"]["gasoline_port_only"][
                "initialize_median_ms"] / ref_start["initialize_median_ms"],
            "startup_initialize_fastest": start_fast["initialize_min_ms"]
            / ref_start["initialize_min_ms"],
            "startup_initialize_fastest_port_only": result["startup"]["gasoline_port_only"][
                "initialize_min_ms"] / ref_start["initialize_min_ms"],
        }
        if args.baseline:
            for name in ("baseline", "baseline_port_only"):
                result["ratios_ours_over_reference"][f"startup_initialize_median_{name}"] = (
                    result["startup"][name]["initialize_median_ms"]
                    / ref_start["initialize_median_ms"])

    print_table(f"observe {{what:errors, limit:10}}, {args.calls} sequential calls",
                ["target", "transport", "median ms", "p95 ms", "start→initialize ms", "errors"], rows)
    print_table(f"connector start-up, {args.starts} fresh processes each (target: initialize "
                "answered <= 60 ms)",
                ["connector", "initialize median ms", "p95 ms", "fastest ms",
                 "tools/list median ms", "p95 ms", "CPU ms (whole process)"],
                [[name, s["initialize_median_ms"], s["initialize_p95_ms"], s["initialize_min_ms"],
                  s["tools_list_median_ms"], s["tools_list_p95_ms"], s["cpu_median_ms"]]
                 for name, s in result["startup"].items()])
    if "ratios_ours_over_reference" in result:
        print_table("ratios (gasoline / reference)", ["metric", "ratio"],
                    [[k, v] for k, v in result["ratios_ours_over_reference"].items()])
    print(f"\nwrote {write_json('roundtrip', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

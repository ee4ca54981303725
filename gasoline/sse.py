"""
An incremental C{text/event-stream} parser, shared by the connector (the daemon's C{GET /mcp}
stream) and the session proxy (remote MCP servers over streamable HTTP and legacy SSE).

Standard library and attrs only: the connector imports nothing of the daemon.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class SSEEvent:
    data: bytes
    event: str = "message"
    id: str | None = None


class SSEParser:
    """Incremental C{text/event-stream} parser (the WHATWG rules that matter here).

    @ivar last_id: the last C{id} field seen (for C{Last-Event-ID} on reconnect).
    """

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._event = ""
        self._id: str | None = None
        self.last_id: str | None = None

    @property
    def pending(self) -> int:
        """Bytes buffered for the event being received (for callers that cap event size)."""
        return len(self._buf) + sum(len(d) for d in self._data)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buf += chunk
        out: list[SSEEvent] = []
        while True:
            idx = self._buf.find(b"\n")
            if idx < 0:
                break
            line, self._buf = self._buf[:idx], self._buf[idx + 1:]
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    out.append(SSEEvent(b"\n".join(self._data), self._event or "message", self._id))
                self._data, self._event = [], ""
                continue
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                self._data.append(value)
            elif name == b"event":
                self._event = value.decode("utf-8", "replace")
            elif name == b"id":
                self._id = value.decode("utf-8", "replace")
                self.last_id = self._id
        return out

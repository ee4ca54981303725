"""
What the daemon and the stdio connector must agree on, in one place: where the state lives, how a
project's client id is made, how timestamps are written, how option values are parsed, the
JSON-RPC 2.0 error codes (MCP, the connector and the CDP relay speak JSON-RPC) and how a quoted
string from an agent is unquoted.

The connector (L{gasoline.connect}) imports nothing else of the daemon, so this module imports
only the standard library (C{platformdirs} lazily) and L{gasoline.durations}.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timezone
from pathlib import Path

from gasoline.durations import parse_duration


def default_state_dir() -> Path:
    """C{$GASOLINE_STATE_DIR}, else the platform's user state dir for C{gasoline}."""
    env = os.environ.get("GASOLINE_STATE_DIR")
    if env:
        return Path(env)
    import platformdirs  # the connector needs it only when it starts a daemon

    return Path(platformdirs.user_state_dir("gasoline", appauthor=False))


def client_id_for_cwd(path: str | os.PathLike[str]) -> str:
    """The first 12 hex chars of SHA-256 of the absolute path: same directory, same id."""
    absolute = os.path.abspath(os.fspath(path))
    return hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def rfc3339(seconds: float | None) -> str | None:
    """Clock seconds as an RFC 3339 UTC timestamp with milliseconds (C{...Z}); C{None} for
    C{None} or a time no calendar can hold."""
    if seconds is None:
        return None
    try:
        moment = datetime.fromtimestamp(seconds, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


# -- JSON-RPC 2.0 error codes (the standard ones; Chrome's CDP uses them too) ---------------------

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: The first implementation-defined server error (-32000..-32099).
SERVER_ERROR = -32000


def unquote(text: str, quotes: str = "\"'`") -> str:
    """C{text} stripped of surrounding whitespace and of one pair of matching C{quotes}."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in quotes:
        return text[1:-1]
    return text


# -- option values (twisted.python.usage coercers: raise ValueError with the reason) -----------


def positive_int(value: str) -> int:
    """A whole number of at least 1."""
    n = int(value)
    if n < 1:
        raise ValueError("must be a positive integer")
    return n


def positive_duration(value: str) -> float:
    """A positive duration: seconds, or C{90s}, C{15m}, C{1h}, C{7d} (L{parse_duration})."""
    return parse_duration(value)


def tcp_port(value: str) -> int:
    """A TCP port, 1 to 65535."""
    n = int(value)
    if not 0 < n < 65536:
        raise ValueError("must be a TCP port (1-65535)")
    return n

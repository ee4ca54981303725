"""
What the daemon and the stdio connector must agree on, in one place: where the state lives, how a
project's client id is made, how its directories and files are made private
(L{make_private_dir}, L{make_private_file}: whoever creates them, the daemon, the connector or
C{gasoline browser}), how timestamps are written, how option values are parsed, the
JSON-RPC 2.0 error codes (MCP, the connector and the CDP relay speak JSON-RPC), how a quoted
string from an agent is unquoted, and how a caller proves the client id it names (L{client_proof}).
The rules about a client's state dir, id, key and proof are written in L{gasoline.client_rules},
which the connector's first exchange imports too; they are re-exported here.

The connector (L{gasoline.connect}) imports nothing else of the daemon, so this module imports
only the standard library (C{platformdirs} lazily) and L{gasoline.durations}.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from gasoline.client_rules import (  # noqa: F401  (the rules, re-exported where they were)
    CLIENT_KEY_BYTES,
    CLIENT_KEY_FILE,
    CLIENT_PROOF_HEADER,
    CLIENT_PROOF_LABEL,
    client_id_for_cwd,
    client_proof,
    decode_client_key,
    default_state_dir_name,
    encode_client_key,
    read_client_key,
    read_nofollow,
)
from gasoline.durations import parse_duration


def default_state_dir() -> Path:
    """C{$GASOLINE_STATE_DIR}, else the platform's user state dir for C{gasoline}
    (L{gasoline.client_rules.default_state_dir_name})."""
    return Path(default_state_dir_name())


def client_key_path(state_dir: str | os.PathLike[str]) -> Path:
    """C{<state_dir>/client-key}."""
    return Path(state_dir) / CLIENT_KEY_FILE


#: Permission bits a private state dir or file must not have (group and others).
NOT_PRIVATE = 0o077

#: How Twisted's per-connection factory log lines begin: they say nothing to a person, so neither
#: the daemon's server log nor the connector's stderr shows them.
FACTORY_CHATTER = ("Starting factory", "Stopping factory")


def is_factory_chatter(event: Mapping[str, object]) -> bool:
    """Whether the log event C{event} is one of Twisted's L{FACTORY_CHATTER} lines."""
    fmt = event.get("log_format")
    return isinstance(fmt, str) and fmt.startswith(FACTORY_CHATTER)


def make_private_dir(path: str | os.PathLike[str]) -> Path:
    """C{mkdir -p} of a directory only this user may use: created 0700 (whatever the umask);
    an existing one is left as it is (C{gasoline doctor} says when it is not private). The one
    way the daemon, the connector and C{gasoline browser} make the state dir and its folders."""
    path = Path(path)
    if not path.is_dir():
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)  # (the state dir's parents are shared)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        else:
            os.chmod(path, 0o700, follow_symlinks=False)  # a umask like 0o277 takes bits away
    return path


def not_private(state_dir: str | os.PathLike[str], limit: int = 10_000) -> list[tuple[Path, int]]:
    """The state dir, its folders and files that group or others may use (C{(path, mode)}),
    looking at no more than C{limit} entries; symbolic links are not followed (nor listed: the
    daemon refuses them). Blocking: C{gasoline doctor} only."""
    root = Path(state_dir)
    found: list[tuple[Path, int]] = []
    seen = 0
    stack = [root]
    while stack and seen < limit:
        path = stack.pop()
        try:
            info = os.lstat(path)
        except OSError:
            continue
        seen += 1
        if stat.S_ISLNK(info.st_mode):
            continue
        if info.st_mode & NOT_PRIVATE:
            found.append((path, stat.S_IMODE(info.st_mode)))
        if stat.S_ISDIR(info.st_mode):
            try:
                stack.extend(sorted(path.iterdir(), reverse=True))
            except OSError:
                continue
    return found


#: C{os.open} flags: refuse a symbolic link / close on C{exec} / do not block on a FIFO (0 where
#: the platform lacks them: Windows has none of the three).
NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)


def open_private(path: str | os.PathLike[str], flags: int) -> int:
    """Open C{path} for writing as a private regular file; return the descriptor.

    A symbolic link at C{path} is refused (C{ELOOP}), never followed; so is anything that is not a
    regular file. A new file is created 0600; an existing one with a looser mode is set back to
    0600 through the descriptor (never C{chmod} by path, which would follow a link).
    """
    try:
        fd = os.open(path, flags | NOFOLLOW | CLOEXEC, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP or (e.errno == errno.EMLINK and os.path.islink(path)):
            raise OSError(errno.ELOOP, "is a symbolic link; refusing to follow it",
                          str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "is not a regular file", str(path))
        if info.st_mode & 0o7077:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_private_file(path: str | os.PathLike[str]) -> Path:
    """Make sure the file C{path} exists and only this user may read it: created 0600, an
    existing one set back to 0600 through its descriptor (a symbolic link there is refused,
    never followed). For files another program writes into (the daemon's and the launcher's
    logs: twistd keeps the mode of the file it finds, its rotated files included)."""
    os.close(open_private(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND))
    return Path(path)


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


def session_label(session_id: str) -> str:
    """What is shown for a session id (an MCP or proxy session's, a credential): C{s-} + 12 hex
    digits of its SHA-256 (48 bits: enough to tell sessions apart in a log, useless as the id).
    The daemon and the connector log sessions by it (docs/security.md)."""
    return "s-" + hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()[:12]

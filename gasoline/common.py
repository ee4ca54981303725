"""
What the daemon and the stdio connector must agree on, in one place: where the state lives, how a
project's client id is made, how its directories and files are made private
(L{make_private_dir}, L{make_private_file}: whoever creates them, the daemon, the connector or
C{gasoline browser}), how timestamps are written, how option values are parsed, the
JSON-RPC 2.0 error codes (MCP, the connector and the CDP relay speak JSON-RPC), how a quoted
string from an agent is unquoted, and how a caller proves the client id it names (L{client_proof}).

The connector (L{gasoline.connect}) imports nothing else of the daemon, so this module imports
only the standard library (C{platformdirs} lazily) and L{gasoline.durations}.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import hmac
import os
import stat
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


#: The daemon's client key, in its state dir (L{gasoline.core.clientkey}; docs/security.md,
#: "Who may act as a client id").
CLIENT_KEY_FILE = "client-key"
#: The header that carries a client id's proof (with C{X-Gasoline-Client: <client id>}).
CLIENT_PROOF_HEADER = "X-Gasoline-Client-Proof"
#: What the HMAC of a client id is taken over: this label, then the id (UTF-8).
CLIENT_PROOF_LABEL = b"gasoline-client-v1\0"
#: Bytes of a client key.
CLIENT_KEY_BYTES = 32


def client_proof(key: bytes, client_id: str) -> str:
    """The proof that a caller holds the daemon's client key, for C{client_id}:
    base64url (no padding) of C{HMAC-SHA256(key, "gasoline-client-v1\\0" + client_id)}."""
    mac = hmac.new(key, CLIENT_PROOF_LABEL + client_id.encode("utf-8", "surrogateescape"),
                   hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def encode_client_key(key: bytes) -> bytes:
    """The client key file's contents: one base64url line."""
    return base64.urlsafe_b64encode(key).rstrip(b"=") + b"\n"


def decode_client_key(data: bytes) -> bytes:
    """The key in a client key file's contents; C{ValueError} when they are not one."""
    text = data.strip()
    try:
        key = base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))
    except (ValueError, TypeError):
        raise ValueError("the client key file is not base64url") from None
    if len(key) != CLIENT_KEY_BYTES or encode_client_key(key).strip() != text:
        raise ValueError(f"the client key file does not hold {CLIENT_KEY_BYTES} bytes")
    return key


def client_key_path(state_dir: str | os.PathLike[str]) -> Path:
    """C{<state_dir>/client-key}."""
    return Path(state_dir) / CLIENT_KEY_FILE


#: Permission bits a private state dir or file must not have (group and others).
NOT_PRIVATE = 0o077


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


def make_private_file(path: str | os.PathLike[str]) -> Path:
    """Make sure the file C{path} exists and only this user may read it: created 0600, an
    existing one set back to 0600 through its descriptor (a symbolic link there is refused,
    never followed). For files another program writes into (the daemon's and the launcher's
    logs: twistd keeps the mode of the file it finds, its rotated files included)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "is a symbolic link; refusing to follow it",
                          str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "is not a regular file", str(path))
        if info.st_mode & 0o7077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return Path(path)


def read_nofollow(path: str | os.PathLike[str], limit: int = -1) -> bytes:
    """The bytes of the regular file C{path} (at most C{limit}); a symbolic link there is
    refused (C{ELOOP}), and so is anything but a regular file (C{EINVAL})."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "is a symbolic link; refusing to follow it",
                          str(path)) from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "is not a regular file", str(path))
        return f.read(limit)


def read_client_key(state_dir: str | os.PathLike[str]) -> bytes:
    """The client key of the daemon whose state dir is C{state_dir}. A symbolic link or anything
    but a regular file there is refused. @raise OSError: unreadable. @raise ValueError: not a
    key."""
    return decode_client_key(read_nofollow(client_key_path(state_dir), 4096))


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

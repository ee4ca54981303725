"""
The rules the daemon and every client program (the stdio connector, its first exchange before
Twisted, C{gasoline browser}) must apply alike, each written once: where the state dir is
(L{default_state_dir_name}), a project's client id (L{client_id_for_cwd}), the daemon's client key
file (L{read_client_key}) and the proof of a client id under it (L{client_proof}).

The connector's first exchange (L{gasoline.connect.fast}) imports this module before it answers
the agent's C{initialize}, so it imports only the standard-library modules it cannot do without
(C{hashlib} and C{hmac}, about 2.5 ms with OpenSSL's library; base64url is done with C{binascii},
since C{base64} imports C{re}) and no Twisted, attrs, pathlib or platformdirs (that one lazily,
off Linux, where the XDG rule below is platformdirs' own).
"""

from __future__ import annotations

import binascii
import errno
import hashlib
import hmac
import os
import stat
import sys

#: The daemon's client key, in its state dir (L{gasoline.core.trust.clientkey}; docs/security.md,
#: "Who may act as a client id").
CLIENT_KEY_FILE = "client-key"
#: The header that carries a client id's proof (with C{X-Gasoline-Client: <client id>}).
CLIENT_PROOF_HEADER = "X-Gasoline-Client-Proof"
#: What the HMAC of a client id is taken over: this label, then the id (UTF-8).
CLIENT_PROOF_LABEL = b"gasoline-client-v1\0"
#: Bytes of a client key.
CLIENT_KEY_BYTES = 32
#: The standard base64 alphabet's two last characters to base64url's, and back (RFC 4648 §5).
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


def b64url(data: bytes) -> bytes:
    """base64url of C{data} without padding (C{base64.urlsafe_b64encode(data).rstrip(b"=")})."""
    return binascii.b2a_base64(data, newline=False).rstrip(b"=").translate(_TO_URLSAFE)


def default_state_dir_name() -> str:
    """C{$GASOLINE_STATE_DIR}, else the platform's user state dir for C{gasoline}: on Linux
    C{$XDG_STATE_HOME/gasoline} (C{~/.local/state/gasoline} when it is unset or blank), which is
    platformdirs' rule there, written out so the connector's start does not import platformdirs
    (~10 ms); elsewhere platformdirs' C{user_state_dir}."""
    env = os.environ.get("GASOLINE_STATE_DIR")
    if env:
        return env
    if sys.platform.startswith("linux"):
        base = os.environ.get("XDG_STATE_HOME", "").strip() or os.path.expanduser("~/.local/state")
        return os.path.join(base, "gasoline")
    import platformdirs

    return platformdirs.user_state_dir("gasoline", appauthor=False)


def client_id_for_cwd(path: str | os.PathLike[str]) -> str:
    """The first 12 hex chars of SHA-256 of the absolute path: same directory, same id."""
    absolute = os.path.abspath(os.fspath(path))
    return hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def client_proof(key: bytes, client_id: str) -> str:
    """The proof that a caller holds the daemon's client key, for C{client_id}:
    base64url (no padding) of C{HMAC-SHA256(key, "gasoline-client-v1\\0" + client_id)}."""
    mac = hmac.new(key, CLIENT_PROOF_LABEL + client_id.encode("utf-8", "surrogateescape"),
                   hashlib.sha256).digest()
    return b64url(mac).decode("ascii")


def encode_client_key(key: bytes) -> bytes:
    """The client key file's contents: one base64url line."""
    return b64url(key) + b"\n"


def decode_client_key(data: bytes) -> bytes:
    """The key in a client key file's contents; C{ValueError} when they are not one."""
    text = data.strip()
    try:
        key = binascii.a2b_base64((text + b"=" * (-len(text) % 4)).translate(_FROM_URLSAFE))
    except (ValueError, TypeError):  # binascii.Error is a ValueError
        raise ValueError("the client key file is not base64url") from None
    if len(key) != CLIENT_KEY_BYTES or encode_client_key(key).strip() != text:
        raise ValueError(f"the client key file does not hold {CLIENT_KEY_BYTES} bytes")
    return key


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
    return decode_client_key(read_nofollow(os.path.join(state_dir, CLIENT_KEY_FILE), 4096))

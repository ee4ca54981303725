"""
Encryption at rest (C{--state-key-file}): the telemetry journals, the client state files and the
daemon's small JSON documents sealed with AES-256-GCM under keys derived from the user's key.

The key file holds one 256-bit key as 64 hexadecimal characters (make one with C{python3 -c
"import secrets; print(secrets.token_hex(32))" > key; chmod 600 key}); a file readable by group or
others, missing, unreadable or of another form is refused at start with one line
(L{StateKeyError}).

Keys rotate with the files: every I{generation} of a file (a journal opened at start-up, cleared
or compacted; each client state or document write) gets a fresh random 8-byte salt, and its data
key is HKDF-SHA256(user key, salt, purpose). A journal line is sealed on its own, so a file can be
appended to and read backwards as before: C{!} + base64(salt, nonce, ciphertext and tag), the
nonce a counter of the generation (a generation is written by one process only, so a nonce never
repeats under its key). Sequence marker lines (C{#seq <first> <count>}: numbers only) stay as
they are. A whole file (client state, document) is C{GASOLINE-SEALED-1\\n} + base64(salt, nonce,
ciphertext and tag).

C{state-key.check} in the state dir, sealed under the key at its first use, tells a wrong key
(refused at start: it does not open the check) from a missing one (an encrypted state dir started
without C{--state-key-file} is refused: nothing would be readable, and new data would be written
in clear beside it).
"""

from __future__ import annotations

import binascii
import os
import stat
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from gasoline.common import make_private_dir, read_nofollow
from gasoline.core.storage.files import write_atomic

CHECK_FILE = "state-key.check"
_CHECK_TEXT = b"gasoline state key check v1"
#: A sealed whole file starts with this line.
MAGIC = b"GASOLINE-SEALED-1\n"
#: A sealed journal line starts with this byte (a clear entry starts with C{{}}).
LINE_MARK = b"!"
_SALT = 8
_NONCE = 12
_MAX_KEYS = 256


class StateKeyError(Exception):
    """The state key is missing, malformed, unsafe or wrong: one line for the user."""


def load_state_key(path: Path | str) -> bytes:
    """The 32-byte key in C{path}. @raise StateKeyError: with the one line to show."""
    where = f"--state-key-file {path}"
    try:
        st = os.stat(path)
        raw = read_nofollow(Path(path))
    except FileNotFoundError:
        raise StateKeyError(f"{where}: no such file") from None
    except OSError as e:
        raise StateKeyError(f"{where}: cannot read it ({e.strerror or e})") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise StateKeyError(f"{where}: readable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                            "chmod 600 it")
    text = raw.strip()
    try:
        key = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != 32:
        raise StateKeyError(f"{where}: must hold one 256-bit key as 64 hexadecimal characters "
                            "(python3 -c \"import secrets; print(secrets.token_hex(32))\")")
    return key


class LineSealer:
    """Seals the lines of one file generation (one salt, a nonce counter)."""

    __slots__ = ("salt", "_aead", "_aad", "_count")

    def __init__(self, aead: Any, salt: bytes, aad: bytes) -> None:
        self.salt = salt
        self._aead = aead
        self._aad = aad
        self._count = 0

    def seal(self, line: bytes) -> bytes:
        self._count += 1
        nonce = self._count.to_bytes(_NONCE, "big")
        sealed = self._aead.encrypt(nonce, line, self._aad)
        return LINE_MARK + binascii.b2a_base64(self.salt + nonce + sealed, newline=False)


class AtRest:
    """The user's key and the data keys derived from it (cached per purpose and salt)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("the state key is 32 bytes")
        self._key = key
        self._keys: dict[tuple[bytes, bytes], AESGCM] = {}

    def _aead(self, purpose: bytes, salt: bytes) -> AESGCM:
        hit = self._keys.get((purpose, salt))
        if hit is None:
            if len(self._keys) >= _MAX_KEYS:
                self._keys.clear()
            derived = HKDF(hashes.SHA256(), 32, salt, b"gasoline-at-rest-v1:" + purpose
                           ).derive(self._key)
            hit = self._keys[(purpose, salt)] = AESGCM(derived)
        return hit

    # -- journal lines -----------------------------------------------------------------------

    def line_sealer(self, purpose: bytes) -> LineSealer:
        """A new generation: a fresh salt, its data key, nonces from 1."""
        salt = os.urandom(_SALT)
        return LineSealer(self._aead(purpose, salt), salt, purpose + salt)

    def open_line(self, line: bytes, purpose: bytes) -> bytes | None:
        """The clear line of a sealed one, or None when it does not open (corrupt)."""
        try:
            raw = binascii.a2b_base64(line[1:])
        except binascii.Error:
            return None
        if len(raw) < _SALT + _NONCE + 16:
            return None
        salt, nonce, sealed = raw[:_SALT], raw[_SALT:_SALT + _NONCE], raw[_SALT + _NONCE:]
        aead = self._aead(purpose, salt)
        try:
            return aead.decrypt(nonce, sealed, purpose + salt)
        except InvalidTag:
            return None

    # -- whole files ---------------------------------------------------------------------------

    def seal_blob(self, data: bytes, purpose: bytes) -> bytes:
        salt, nonce = os.urandom(_SALT), os.urandom(_NONCE)
        sealed = self._aead(purpose, salt).encrypt(nonce, data, purpose + salt)
        return MAGIC + binascii.b2a_base64(salt + nonce + sealed, newline=False)

    def open_blob(self, data: bytes, purpose: bytes) -> bytes | None:
        """The clear content of a sealed file, or None when it does not open."""
        if not data.startswith(MAGIC):
            return None
        return self.open_line(b"!" + data[len(MAGIC):].strip(), purpose)

    # -- the state dir ---------------------------------------------------------------------------

    def check_state_dir(self, state_dir: Path | str) -> None:
        """Prove the key is this state dir's (writing the check at first use).

        @raise StateKeyError: the check was sealed under another key."""
        path = Path(state_dir) / CHECK_FILE
        try:
            raw = read_nofollow(path)
        except FileNotFoundError:
            make_private_dir(state_dir)
            write_atomic(path, self.seal_blob(_CHECK_TEXT, b"check"))
            return
        except OSError as e:
            raise StateKeyError(f"{path}: cannot read it ({e.strerror or e})") from None
        if self.open_blob(raw, b"check") != _CHECK_TEXT:
            raise StateKeyError(f"--state-key-file: wrong key: it does not open {state_dir}'s "
                                "encrypted state (sealed under another key)")


def refuse_clear_start(state_dir: Path | str) -> None:
    """Without a key: refuse a state dir that holds encrypted state (L{CHECK_FILE})."""
    if (Path(state_dir) / CHECK_FILE).exists():
        raise StateKeyError(f"{state_dir} holds encrypted state: start with --state-key-file "
                            "(its key)")


def is_sealed_line(line: bytes) -> bool:
    return line[:1] == LINE_MARK

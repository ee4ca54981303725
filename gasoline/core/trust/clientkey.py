"""
The daemon's client key: who may act as a client id (docs/security.md, "Who may act as a client
id").

Client ids are shared on purpose (the connector's is the hash of its working directory, so two
terminals in one repository share cursors, and an id keeps its state across daemon restarts), so
an id cannot be bound to its first registrant. Instead the daemon keeps one random key in
C{<state-dir>/client-key} (0600, made once, kept across restarts) and a caller that names a client
id proves it holds that key: C{X-Gasoline-Client-Proof: <base64url HMAC-SHA256(key,
"gasoline-client-v1\\0" + id)>} (L{gasoline.common.client_proof}). Checking is stateless and
constant-time. The connector reads the key from the state dir; C{gasoline client-proof <id>}
prints the header for an HTTP MCP client wired by hand.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from twisted.logger import Logger

from gasoline.common import (
    CLIENT_KEY_BYTES,
    client_key_path,
    client_proof,
    decode_client_key,
    encode_client_key,
    read_nofollow,
)
from gasoline.core.storage.files import StateFileError, make_private_dir, unlink_quietly, write_new

log = Logger()


class ClientKeyError(StateFileError):
    """The client key file exists but cannot be used (the daemon does not start over it)."""


class ClientKey:
    """One daemon's client key: makes and checks proofs of client ids."""

    __slots__ = ("_key", "path")

    def __init__(self, key: bytes, path: Path | None = None) -> None:
        if len(key) != CLIENT_KEY_BYTES:
            raise ValueError(f"a client key is {CLIENT_KEY_BYTES} bytes")
        self._key = key
        #: The file it was read from (C{None}: made in memory, for tests and embedding).
        self.path = path

    @classmethod
    def random(cls) -> ClientKey:
        """A key that lives in memory only (a component built without a state dir)."""
        return cls(secrets.token_bytes(CLIENT_KEY_BYTES))

    @classmethod
    def from_state_dir(cls, state_dir: Path | str) -> ClientKey:
        """The key in C{<state_dir>/client-key}, made there (0600) when missing. Blocking:
        start-up only.

        The new key is written to a private file of its own and then hard-linked to the final
        name, which fails when another process made it first: the file is never seen half
        written, and two daemons starting at once agree on one key.

        @raise ClientKeyError: the file is there but is not a key (or is a link).
        """
        path = client_key_path(state_dir)
        try:
            return cls(cls._read(path), path)
        except FileNotFoundError:
            pass
        make_private_dir(state_dir)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        key = secrets.token_bytes(CLIENT_KEY_BYTES)
        write_new(tmp, encode_client_key(key))
        try:
            os.link(tmp, path)
        except FileExistsError:
            return cls(cls._read(path), path)  # another daemon made it meanwhile
        finally:
            unlink_quietly(tmp)
        log.info("made the client key {path} (callers that name a client id prove it with it)",
                 path=str(path))
        return cls(key, path)

    @staticmethod
    def _read(path: Path) -> bytes:
        try:
            data = read_nofollow(path)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise ClientKeyError(f"cannot read the client key {path}: {e.strerror or e}") from None
        try:
            return decode_client_key(data)
        except ValueError as e:
            raise ClientKeyError(f"{path}: {e}; remove it and restart the daemon to make a new "
                                 "one (every connector reads the new one)") from None

    def proof(self, client_id: str) -> str:
        """The proof for C{client_id} (what L{verify} accepts)."""
        return client_proof(self._key, client_id)

    def verify(self, client_id: str, proof: bytes | str | None) -> bool:
        """Does C{proof} prove C{client_id}? Constant-time in the proof's contents."""
        if proof is None:
            return False
        if isinstance(proof, str):
            proof = proof.encode("utf-8", "replace")
        return hmac.compare_digest(proof.strip(), self.proof(client_id).encode("ascii"))

    def __repr__(self) -> str:  # never the key itself
        return f"<ClientKey {self.path or 'in memory'}>"

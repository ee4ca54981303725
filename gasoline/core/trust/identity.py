"""
The daemon's key pair, its fingerprint, and the handshake it proves the key with.

Why: any local process that binds the daemon's port while the daemon is down would otherwise
receive every capture batch and could hand the extension commands. The extension therefore pins
this daemon's public key (the user confirms its fingerprint in the popup once) and, on every new
connection, makes the daemon prove it holds the private key before it sends captured data or runs
a command. See docs/extension.md, "Pairing", for the design and what it does not protect against.

The identity is a P-256 key pair created at first start in C{<state_dir>/identity.pem} (0600) and
kept across restarts. The handshake (C{POST /pairing/challenge}) is an ephemeral-static ECDH::

    shared  = ECDH(daemon static key, extension ephemeral key)
    K       = HKDF-SHA256(shared, salt=nonce, info="gasoline-pairing-v1" | daemon key | ephemeral key)
    proof   = HMAC-SHA256(K, "gasoline-daemon-v1 challenge" | nonce)

Only the holder of the daemon's private key can compute C{K}; the extension checks C{proof} with
WebCrypto and keeps C{K} for the session.

What reads the key file without the private key (its public key, fingerprint, base64url) is
L{gasoline.core.trust.keyfile}, standard library only. The rest of pairing lives beside this
module: the extension's key the daemon pins, launch grants
and C{gasoline pair} (L{gasoline.core.trust.pins}); the sealed channel of a session, AES-GCM and the
replay window (L{gasoline.core.trust.seal}); the table of challenges and sessions, its rate limit and the
check of every extension request (L{gasoline.core.trust.pairing.DaemonIdentity}).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from twisted.logger import Logger

from gasoline.common import make_private_dir
from gasoline.core.trust.keyfile import (  # noqa: F401  (re-exported: where the trust modules import them)
    IDENTITY_FILE,
    PairingError,
    b64u,
    fingerprint_of,
    public_key_from_pem,
    unb64u,
)

log = Logger()

PROTOCOL = "gasoline-pairing-v1"
ALGORITHM = "ECDH-P256/HKDF-SHA256/HMAC-SHA256"
_CHALLENGE_LABEL = b"gasoline-daemon-v1 challenge"
_RESPONSE_LABEL = b"gasoline-daemon-v1 response"


def derive_session_key(shared: bytes, nonce: bytes, daemon_key: bytes, ephemeral_key: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) of C{shared}, salt C{nonce}, 32 bytes: one extract and one expand
    block, with the standard library's HMAC (the same bytes as C{cryptography}'s C{HKDF})."""
    info = PROTOCOL.encode() + daemon_key + ephemeral_key
    prk = hmac.new(nonce, shared, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()


def challenge_proof(key: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, _CHALLENGE_LABEL + nonce, hashlib.sha256).digest()


def response_proof(key: bytes, nonce: bytes, body: bytes) -> bytes:
    return hmac.new(key, _RESPONSE_LABEL + nonce + b"\n" + body, hashlib.sha256).digest()


def load_key(data: bytes, path: Path) -> Any:
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError(f"{path} is not a P-256 private key")
    return key


def create_key_file(state_dir: Path) -> bytes:
    """Create C{<state_dir>/identity.pem} (0600) and return its bytes; the bytes of the file
    another process created meanwhile, if one did. Blocking: start-up only."""
    return _store_key(Path(state_dir) / IDENTITY_FILE, _new_key_pem())


def _new_key_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _store_key(path: Path, pem: bytes) -> bytes:
    """Write C{pem} to C{path} (0600, atomically, never over a key another process created
    meanwhile: that one is returned instead)."""
    make_private_dir(path.parent)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    try:
        os.link(tmp, path)  # never replace a key another process created meanwhile
    except FileExistsError:
        return path.read_bytes()
    finally:
        os.unlink(tmp)
    public = public_key_from_pem(pem)
    log.info("created the daemon identity {path} (fingerprint {fp})", path=str(path),
             fp=fingerprint_of(public) if public is not None else "?")
    return pem


def raw_public_key(key: Any) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.X962,
                                         serialization.PublicFormat.UncompressedPoint)

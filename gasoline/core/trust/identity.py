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

The rest of pairing lives beside this module: the extension's key the daemon pins, launch grants
and C{gasoline pair} (L{gasoline.core.trust.pins}); the sealed channel of a session, AES-GCM and the
replay window (L{gasoline.core.trust.seal}); the table of challenges and sessions, its rate limit and the
check of every extension request (L{gasoline.core.trust.pairing.DaemonIdentity}).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from pathlib import Path
from typing import Any

from twisted.logger import Logger
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gasoline.common import make_private_dir

log = Logger()

IDENTITY_FILE = "identity.pem"
PROTOCOL = "gasoline-pairing-v1"
ALGORITHM = "ECDH-P256/HKDF-SHA256/HMAC-SHA256"
_CHALLENGE_LABEL = b"gasoline-daemon-v1 challenge"
_RESPONSE_LABEL = b"gasoline-daemon-v1 response"


class PairingError(ValueError):
    """A malformed challenge (bad key, bad nonce)."""


def b64u(data: bytes) -> str:
    """Base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64u(text: Any, what: str, max_len: int = 256) -> bytes:
    if not isinstance(text, str) or not text or len(text) > max_len:
        raise PairingError(f"field {what!r} must be a base64url string")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as e:
        raise PairingError(f"field {what!r} is not base64url") from e


def fingerprint_of(public_key: bytes) -> str:
    """What the user compares: the SHA-256 of the raw public key, first 80 bits, base32 in groups of 4."""
    digest = base64.b32encode(hashlib.sha256(public_key).digest()[:10]).decode("ascii")
    return "-".join(digest[i:i + 4] for i in range(0, len(digest), 4))


def derive_session_key(shared: bytes, nonce: bytes, daemon_key: bytes, ephemeral_key: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) of C{shared}, salt C{nonce}, 32 bytes: one extract and one expand
    block, with the standard library's HMAC (the same bytes as C{cryptography}'s C{HKDF})."""
    info = PROTOCOL.encode() + daemon_key + ephemeral_key
    prk = hmac.new(nonce, shared, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()



# -- the key file, read without cryptography -------------------------------------------------------
#
# Reading the public key, which is all that C{gasoline browser} and the daemon's start need, takes
# the key file alone (no private key is loaded until the first pairing challenge): C{identity.pem}
# is PKCS#8 and its ECPrivateKey holds the public point.

_EC_PUBLIC_KEY_OID = bytes.fromhex("06072a8648ce3d0201")  # 1.2.840.10045.2.1
_P256_OID = bytes.fromhex("06082a8648ce3d030107")  # 1.2.840.10045.3.1.7


def _der(data: bytes, at: int) -> tuple[int, bytes, int]:
    """C{(tag, value, next offset)} of the DER element at C{at}; C{ValueError} when malformed."""
    if at + 2 > len(data):
        raise ValueError("truncated DER")
    tag, length = data[at], data[at + 1]
    at += 2
    if length & 0x80:
        n = length & 0x7F
        if not 1 <= n <= 3 or at + n > len(data):
            raise ValueError("bad DER length")
        length = int.from_bytes(data[at:at + n], "big")
        at += n
    if at + length > len(data):
        raise ValueError("truncated DER")
    return tag, data[at:at + length], at + length


def _children(value: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at < len(value):
        tag, inner, at = _der(value, at)
        out.append((tag, inner))
    return out


def public_key_from_pem(data: bytes) -> bytes | None:
    """The raw P-256 public point (65 bytes, C{04 || X || Y}) stored in a PKCS#8 or SEC1 PEM
    private key, or None when it is not there or not P-256 (then cryptography reads the file)."""
    try:
        text = data.decode("ascii")
        for label in ("PRIVATE KEY", "EC PRIVATE KEY"):
            begin, end = f"-----BEGIN {label}-----", f"-----END {label}-----"
            if begin in text and end in text:
                body = text.split(begin, 1)[1].split(end, 1)[0]
                der = base64.b64decode("".join(body.split()), validate=True)
                break
        else:
            return None
        tag, value, _ = _der(der, 0)
        if tag != 0x30:
            return None
        if label == "PRIVATE KEY":  # PKCS#8: version, algorithm, OCTET STRING(ECPrivateKey)
            parts = _children(value)
            if len(parts) < 3 or parts[1][0] != 0x30 or parts[2][0] != 0x04:
                return None
            if _EC_PUBLIC_KEY_OID + _P256_OID not in parts[1][1]:
                return None
            tag, value, _ = _der(parts[2][1], 0)
            if tag != 0x30:
                return None
        for tag, inner in _children(value)[2:]:  # after version and the private key
            if tag == 0xA0 and inner != _P256_OID:
                return None
            if tag == 0xA1:
                bit_tag, bits, _ = _der(inner, 0)
                if bit_tag == 0x03 and len(bits) == 66 and bits[0] == 0 and bits[1] == 4:
                    return bits[1:]
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return None
    return None


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

"""
The daemon's key file as the programs that only read it see it: its name, the public key stored in
it, the fingerprint the user compares, and base64url. Standard library only: the operations
commands (C{gasoline status}, C{identity}, ...) and C{gasoline browser} check a daemon's identity
with it and import neither Twisted nor cryptography for that; creating the key, loading the private
key and the handshake are L{gasoline.core.trust.identity}'s.

C{identity.pem} is PKCS#8 and its ECPrivateKey holds the public point, so the public key is read
from the file's DER.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

IDENTITY_FILE = "identity.pem"


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

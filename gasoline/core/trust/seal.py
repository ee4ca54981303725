"""
The sealed channel of a pairing session: every request of the extension's session, and the
C{/sync} answer (the command channel) bound to its request, travel encrypted and authenticated
with AES-256-GCM under C{HMAC-SHA256(K, "gasoline-seal-v1 key")}, K the session key of the
handshake (L{gasoline.core.trust.identity}). A process that takes over the port reads no capture or
command result and cannot feed the extension a single command.

Each sealed request carries the session's request number (the IV's last 8 bytes, authenticated
as associated data); the daemon opens each number once, within a sliding window
(L{Session.open}), so a recorded request sent again is refused. The extension's CDP link opens
with an HMAC of a fresh nonce under K (L{extension_link_proof}), accepted once per nonce.

This is the ingest path of a paired extension: L{Session.open} runs once per capture batch, so it
makes the cipher once per session and opens the body in place.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections import OrderedDict

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gasoline.core.trust.identity import PairingError

_EXT_LINK_LABEL = b"gasoline-extension-v1 link"
_SEAL_KEY_LABEL = b"gasoline-seal-v1 key"
_SEAL_REQUEST_LABEL = b"gasoline-seal-v1 request\n"
_SEAL_RESPONSE_LABEL = b"gasoline-seal-v1 response\n"
SEAL = "AES-256-GCM"
#: C{X-Gasoline-Sealed: 1} on a sealed request or answer; its body is C{iv (12 bytes) || ciphertext || tag}.
SEALED_HEADER = b"x-gasoline-sealed"
SEALED_TYPE = b"application/x-gasoline-sealed"
_IV = 12
_TAG = 16


def seal_key_of(key: bytes) -> bytes:
    """The AES-256-GCM key of a session: C{HMAC-SHA256(K, "gasoline-seal-v1 key")}."""
    return hmac.new(key, _SEAL_KEY_LABEL, hashlib.sha256).digest()


#: L{request_aad} in one formatting operation (the ingest path builds one per request).
_REQUEST_AAD = _SEAL_REQUEST_LABEL + b"%s %s\n%s\n%d"


def request_aad(method: bytes, path: bytes, session: bytes, seq: int) -> bytes:
    """What a sealed request authenticates besides its body: its method, path, session and
    sequence number (also the last 8 bytes of its IV: L{request_iv})."""
    return _REQUEST_AAD % (method, path, session, seq)


def request_iv(seq: int) -> bytes:
    """The IV of a session's request number C{seq} (1, 2, ...): 4 random bytes, then C{seq} as 8
    bytes big-endian. Unique per session key, and it carries the number the daemon checks."""
    return os.urandom(4) + seq.to_bytes(8, "big")


#: How far behind the highest sequence number seen a request may arrive (the worker sends several
#: requests at once; they may arrive out of order) and still be accepted, once each.
REPLAY_WINDOW = 256
_WINDOW_MASK = (1 << REPLAY_WINDOW) - 1
#: Link openings remembered per session (one per CDP link the worker opens).
MAX_LINK_NONCES = 64


def response_aad(request_iv: bytes) -> bytes:
    """A sealed answer is bound to the request it answers (that request's IV)."""
    return _SEAL_RESPONSE_LABEL + request_iv



def extension_link_proof(key: bytes, nonce: bytes) -> bytes:
    """The extension's proof that opens its CDP link: C{HMAC-SHA256(K, label | nonce)}."""
    return hmac.new(key, _EXT_LINK_LABEL + nonce, hashlib.sha256).digest()



class Replayed(PairingError):
    """A sealed request whose sequence number was already used (or is too old)."""


class Session:
    """One paired connection: its key K, the extension key it belongs to (C{None}: an extension
    that proved no key, allowed only while no extension is pinned), its last use."""

    __slots__ = ("id", "key", "extension", "used", "_aead", "_sid", "launched", "checked",
                 "seq_top", "seq_seen", "link_nonces")

    def __init__(self, sid: str, key: bytes, extension: str | None, used: float,
                 launched: bytes | None = None) -> None:
        self.id, self.key, self.extension, self.used = sid, key, extension, used
        #: The session's cipher, made once (at its first sealed request): building an C{AESGCM}
        #: and its first use cost more than opening a batch.
        self._aead: AESGCM | None = None
        self._sid = sid.encode()
        #: The extension key of a launched browser's session (its grant is checked again at
        #: most once per L{gasoline.core.trust.pins.PIN_REFRESH} s), else C{None}.
        self.launched = launched
        self.checked = used
        #: Replay window (as IPsec's, RFC 4303 3.4.3): the highest request number opened, and a
        #: bitmap of the L{REPLAY_WINDOW} numbers up to it (bit i: C{seq_top - i} was opened).
        self.seq_top = 0
        self.seq_seen = 0
        #: The nonces the session's CDP links opened with (the last L{MAX_LINK_NONCES}): a link
        #: opening is accepted once.
        self.link_nonces: OrderedDict[bytes, None] = OrderedDict()

    def use(self, now: float) -> None:
        """The session was used at clock time C{now} (its idle time starts again)."""
        self.used = now

    def recheck_due(self, now: float, every: float) -> bool:
        """True (at most once per C{every} seconds) when what the session stands on (a launched
        browser's grant) is to be checked again now."""
        if now - self.checked < every:
            return False
        self.checked = now
        return True

    def first_link(self, nonce: bytes, keep: int) -> bool:
        """Record a CDP link opening with C{nonce} (the last C{keep} are remembered); false when
        it was recorded already (a replay)."""
        if nonce in self.link_nonces:
            return False
        self.link_nonces[nonce] = None
        while len(self.link_nonces) > keep:
            self.link_nonces.popitem(last=False)
        return True

    @property
    def aead(self) -> AESGCM:
        aead = self._aead
        if aead is None:
            aead = self._aead = AESGCM(seal_key_of(self.key))
        return aead

    def open(self, method: bytes, path: bytes, body: bytes | memoryview) -> tuple[bytes, bytes]:
        """C{(plaintext, iv)} of a sealed request body (bytes, or a view of them: the ciphertext
        is read in place); L{PairingError} when it does not open."""
        if len(body) < _IV + _TAG:
            raise PairingError("a sealed body is at least 28 bytes (IV and tag)")
        iv = bytes(body[:_IV])
        seq = int.from_bytes(iv[4:], "big")
        if seq < 1:
            raise PairingError("a sealed request's sequence number (the IV's last 8 bytes) "
                               "starts at 1")
        aead = self._aead
        if aead is None:
            aead = self.aead
        try:
            plain = aead.decrypt(iv, memoryview(body)[_IV:],
                                 _REQUEST_AAD % (method, path, self._sid, seq))
        except Exception as e:
            if not isinstance(e, InvalidTag):
                raise
            raise PairingError("the sealed body does not open under this session's key (or was "
                               "sealed for another route)") from None
        self._accept(seq)  # only once it opened: a forged number cannot move the window
        return plain, iv

    def _accept(self, seq: int) -> None:
        """Accept request number C{seq} once; L{Replayed} for one already opened, or one more
        than L{REPLAY_WINDOW} behind the highest."""
        top = self.seq_top
        if seq > top:
            shift = seq - top
            self.seq_seen = ((self.seq_seen << shift) | 1) & _WINDOW_MASK \
                if shift < REPLAY_WINDOW else 1
            self.seq_top = seq
            return
        behind = top - seq
        if behind >= REPLAY_WINDOW:
            raise Replayed(f"sealed request number {seq} is too old (the session is at "
                           f"{self.seq_top}; at most {REPLAY_WINDOW} behind are accepted): "
                           "refused as a possible replay")
        if self.seq_seen >> behind & 1:
            raise Replayed(f"sealed request number {seq} of this session was already received: "
                           "a replayed request is refused")
        self.seq_seen |= 1 << behind

    def seal_answer(self, request_iv: bytes, body: bytes) -> bytes:
        iv = os.urandom(_IV)
        return iv + self.aead.encrypt(iv, body, response_aad(request_iv))

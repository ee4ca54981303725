"""
The daemon's identity, and the pairing handshake the Gasoline extension requires of it.

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

The other way round the daemon pins the extension (trust on first use, below): the extension's
challenge carries its own long-term public key and a signature, the daemon keeps the first key in
C{<state_dir>/extension-pin.json} and from then on opens sessions for that key only. Every request
of a session is sealed (AES-256-GCM under C{HMAC-SHA256(K, "gasoline-seal-v1 key")}), and so is the
C{/sync} answer (the command channel), bound to its request: a process that takes over the port
reads no capture or command result and cannot feed the extension a single command.

Each sealed request carries the session's request number (authenticated; the daemon opens each
once, within a sliding window: L{Session.open}), so a recorded request sent again is refused. A
browser C{gasoline browser} launched pairs on a launch grant the launcher writes into the state
dir (L{write_launch_grant}): its key gets sessions beside the pinned one, never the pin.

Clients that do not know pairing (the published 0.7.9 extension) never send the headers; the
daemon answers them exactly as before until an extension is pinned, and refuses them after.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import io
import json
import math
import os
import secrets
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

log = Logger()

IDENTITY_FILE = "identity.pem"
PROTOCOL = "gasoline-pairing-v1"
ALGORITHM = "ECDH-P256/HKDF-SHA256/HMAC-SHA256"
_CHALLENGE_LABEL = b"gasoline-daemon-v1 challenge"
_RESPONSE_LABEL = b"gasoline-daemon-v1 response"
#: Sessions kept at once (oldest dropped first); an extension re-pairs when its session is gone.
MAX_SESSIONS = 64
#: A session unused this long (seconds) is dropped.
SESSION_IDLE = 24 * 3600.0
#: Request headers of a paired extension, and the daemon's answers.
#: What a WebSocket link's opening proof covers (the extension checks it before it sends anything).
LINK_BODY = b"gasoline-cdp-link"
SESSION_HEADER = b"x-gasoline-session"
SESSION_STATUS_HEADER = b"x-gasoline-session-status"


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
# cryptography (with its own OpenSSL: ~10 MiB of RSS, ~20 MiB once it has generated a key) is needed
# only to create the key (in a child process: L{create_key_file}) and, from the first pairing
# challenge on, for the ECDH of challenges. At start-up the daemon needs only the public key, which
# the key file carries: C{identity.pem} is PKCS#8 and its ECPrivateKey holds the public point.

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


def _load_key(data: bytes, path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization  # lazy: see above
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError(f"{path} is not a P-256 private key")
    return key


def load_or_create_key(state_dir: Path) -> Any:
    """Read C{<state_dir>/identity.pem} (a C{cryptography} P-256 private key), or create it (0600)
    in this process. Blocking: start-up and the C{gasoline identity} command only."""
    path = Path(state_dir) / IDENTITY_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = _store_key(path, _new_key_pem())
    return _load_key(data, path)


#: What the short-lived child runs to create a key (L{create_key_file}): cryptography only, the
#: PKCS#8 PEM on stdout.
_CHILD = """\
import sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
key = ec.generate_private_key(ec.SECP256R1())
sys.stdout.buffer.write(key.private_bytes(serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
"""
_PEM_BEGIN = b"-----BEGIN PRIVATE KEY-----"
_PEM_END = b"-----END PRIVATE KEY-----"


def create_key_file(state_dir: Path) -> bytes:
    """Create C{<state_dir>/identity.pem} (0600) and return its bytes; the bytes of the file
    another process created meanwhile, if one did.

    cryptography, once imported, stays in the process for its life (~20 MiB of RSS with key
    generation). A daemon needs it only at the first pairing challenge, so when this process has
    not imported it yet the key is generated in a short-lived child interpreter (~0.15 s, first
    start only) that writes the PEM to a pipe; this process only stores it. Without a usable
    child (no C{sys.executable}, the child failed) the key is generated here. Blocking: start-up
    only.
    """
    path = Path(state_dir) / IDENTITY_FILE
    pem = None if "cryptography" in sys.modules else _new_key_pem_in_child()
    if pem is None:
        pem = _new_key_pem()
    return _store_key(path, pem)


def _new_key_pem() -> bytes:
    from cryptography.hazmat.primitives import serialization  # lazy: see above
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _new_key_pem_in_child(timeout: float = 30.0) -> bytes | None:
    """A new P-256 key's PKCS#8 PEM from a child interpreter, or None (then the caller makes it)."""
    if not sys.executable:
        return None
    # -P: the child's import path does not start with the working directory.
    try:
        done = subprocess.run([sys.executable, "-P", "-c", _CHILD], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        log.warn("could not create the identity key in a child process ({error}); creating it "
                 "in the daemon", error=str(e))
        return None
    out = done.stdout
    start, end = out.find(_PEM_BEGIN), out.find(_PEM_END)
    pem = out[start:end + len(_PEM_END)] + b"\n" if 0 <= start < end else b""
    if done.returncode != 0 or public_key_from_pem(pem) is None:
        log.warn("could not create the identity key in a child process (exit {code}: {err}); "
                 "creating it in the daemon", code=done.returncode,
                 err=done.stderr.decode("utf-8", "replace").strip()[-300:])
        return None
    return pem


def _store_key(path: Path, pem: bytes) -> bytes:
    """Write C{pem} to C{path} (0600, atomically, never over a key another process created
    meanwhile: that one is returned instead)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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
    from cryptography.hazmat.primitives import serialization

    return key.public_key().public_bytes(serialization.Encoding.X962,
                                         serialization.PublicFormat.UncompressedPoint)


# -- the extension's key, pinned by the daemon (trust on first use) --------------------------------
#
# The extension holds a long-term ECDSA P-256 key of its own (WebCrypto, non-extractable, in its
# IndexedDB). Its challenge carries the public key and an ECDSA-SHA256 signature over
#     "gasoline-extension-v1 challenge" | ephemeral key | nonce
# so the session that challenge opens belongs to the holder of that key: nobody else knows the
# ephemeral private key, hence nobody else can derive the session key K. The daemon pins the first
# extension key it sees (<state_dir>/extension-pin.json) and from then on opens sessions for that
# key only. Every later request of the session proves K: capture, /sync and command results are
# sealed with AES-256-GCM under a key derived from K (L{seal_key_of}), and the CDP link opens with
# an HMAC of a fresh nonce under K. A key the daemon does not pin is refused (403) and remembered
# as a candidate the user can accept (C{gasoline pair accept <fingerprint>}).

PIN_FILE = "extension-pin.json"
_EXT_CHALLENGE_LABEL = b"gasoline-extension-v1 challenge"
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
#: Sessions of the pinned extension kept at once (it has one worker; a restarted worker re-pairs).
MAX_PINNED_SESSIONS = 8
#: Challenges of any other key (or none): a burst, then this many per second. The pinned
#: extension's own challenges are never counted, so a flood cannot lock it out.
CHALLENGE_BURST = 16
CHALLENGE_RATE = 4.0
#: Refused extension keys remembered for C{gasoline pair accept}.
MAX_CANDIDATES = 8
#: How often (seconds) the daemon looks at the pin file for a change made by C{gasoline pair}.
PIN_REFRESH = 1.0

# -- launched extensions (gasoline browser) --------------------------------------------------------
#
# A browser that C{gasoline browser} starts runs a new profile, hence an extension key of its own.
# The launcher (a local process that reads the daemon's state dir, as C{gasoline pair} does) reads
# that key over the browser's private DevTools pipe and writes a launch grant,
# C{<state_dir>/launched/<fingerprint>.json} (0600, in a 0700 directory):
#     {"key": <the extension's raw P-256 key>, "fingerprint", "pid": <the launcher>, "created"}
# The daemon opens sessions for a granted key beside the pinned one: it neither pins the key nor
# displaces the pin, and the key's sessions end when the grant goes (the launcher removes it when it
# ends the browser; a grant whose launcher no longer runs is void and removed by the daemon).

LAUNCHED_DIR = "launched"
#: Live launch grants at once (the launcher refuses to write more); sessions of launched keys.
MAX_LAUNCHED = 8
MAX_LAUNCHED_SESSIONS = 8
#: A grant file is a few hundred bytes; anything larger is ignored unread.
_MAX_GRANT_BYTES = 4096


def _pid_alive(pid: int) -> bool:
    if pid <= 0:  # 0 and negative numbers name process groups, not a launcher
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OSError:
        return False
    return True


def launch_grant_path(state_dir: Path, fingerprint: str) -> Path:
    return Path(state_dir) / LAUNCHED_DIR / f"{fingerprint}.json"


def read_launch_grant(state_dir: Path, key: bytes) -> dict[str, Any] | None:
    """The live grant of extension key C{key} in C{state_dir}, or C{None}: no file, a file that
    is not a grant of exactly this key, or one whose launcher no longer runs (then the file is
    removed). Blocking: one small file (the challenge of an unpinned key, once a second per
    launched session)."""
    path = launch_grant_path(state_dir, fingerprint_of(key))
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_GRANT_BYTES + 1)
        data = json.loads(raw) if len(raw) <= _MAX_GRANT_BYTES else None
    except (OSError, ValueError):
        return None
    if (not isinstance(data, dict) or data.get("key") != b64u(key)
            or not isinstance(data.get("pid"), int) or isinstance(data.get("pid"), bool)):
        return None
    if not _pid_alive(data["pid"]):
        try:
            path.unlink()
        except OSError:
            pass
        return None
    return data


def live_launch_grants(state_dir: Path) -> list[Path]:
    """The grant files whose launcher still runs; void ones are removed on the way."""
    folder = Path(state_dir) / LAUNCHED_DIR
    live = []
    try:
        names = sorted(folder.iterdir())
    except OSError:
        return []
    for path in names:
        if path.suffix != ".json":
            continue
        try:
            pid = json.loads(path.read_bytes()[:_MAX_GRANT_BYTES]).get("pid")
        except (OSError, ValueError, AttributeError):
            pid = None
        if isinstance(pid, int) and _pid_alive(pid):
            live.append(path)
        else:
            try:
                path.unlink()
            except OSError:
                pass
    return live


def write_launch_grant(state_dir: Path, key: bytes, pid: int) -> Path:
    """Let the daemon of C{state_dir} open sessions for extension key C{key} while process C{pid}
    (the launcher) runs; the grant file. @raise PairingError: not a P-256 key, or
    L{MAX_LAUNCHED} launches hold a grant already."""
    if len(key) != 65 or key[0] != 4:
        raise PairingError("the launched extension's key is not an uncompressed P-256 point")
    if len(live_launch_grants(state_dir)) >= MAX_LAUNCHED:
        raise PairingError(f"{MAX_LAUNCHED} launched browsers already hold a grant of this daemon "
                           "(end one of them first)")
    folder = Path(state_dir) / LAUNCHED_DIR
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = launch_grant_path(state_dir, fingerprint_of(key))
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"key": b64u(key), "fingerprint": fingerprint_of(key), "pid": int(pid),
                   "created": _iso(time.time())}, f)
    os.replace(tmp, path)
    return path


def remove_launch_grant(path: Path) -> None:
    try:
        Path(path).unlink()
    except FileNotFoundError:
        pass


class ChallengeRefused(PairingError):
    """A challenge the daemon will not answer: C{status} 403 (another extension is pinned) or 429
    (too many challenges; C{retry_after} seconds)."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.extra = extra


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


def extension_transcript(ephemeral: bytes, nonce: bytes) -> bytes:
    """What the extension signs with its long-term key in a challenge (a replayed transcript
    opens a session nobody can use: only the signer knows the ephemeral private key)."""
    return _EXT_CHALLENGE_LABEL + ephemeral + nonce


def extension_link_proof(key: bytes, nonce: bytes) -> bytes:
    """The extension's proof that opens its CDP link: C{HMAC-SHA256(K, label | nonce)}."""
    return hmac.new(key, _EXT_LINK_LABEL + nonce, hashlib.sha256).digest()


def _verify_extension_signature(public: bytes, signature: bytes, data: bytes) -> None:
    """Check a WebCrypto ECDSA P-256/SHA-256 signature (raw C{r || s}, 64 bytes)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, utils

    if len(signature) != 64:
        raise PairingError("field 'ext_sig' must be a 64-byte ECDSA P-256 signature (r || s)")
    try:
        peer = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), public)
    except ValueError as e:
        raise PairingError("field 'ext_key' is not a P-256 public key (uncompressed point)") from e
    der = utils.encode_dss_signature(int.from_bytes(signature[:32], "big"),
                                     int.from_bytes(signature[32:], "big"))
    try:
        peer.verify(der, data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise PairingError("the extension's signature does not verify: this challenge was not "
                           "made by the holder of 'ext_key'") from None


class Replayed(PairingError):
    """A sealed request whose sequence number was already used (or is too old)."""


class _NotImportedYet(Exception):
    """Stands for C{cryptography}'s C{InvalidTag} until L{_aesgcm} imported it (never raised)."""


#: What a failed decryption raises: C{cryptography.exceptions.InvalidTag} once L{_aesgcm} ran
#: (it runs before any decryption).
_InvalidTag: type[Exception] = _NotImportedYet


def _aesgcm(key: bytes) -> AESGCM:
    """An AES-256-GCM cipher of C{key} (C{cryptography} is imported here, lazily: see above)."""
    global _InvalidTag
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    _InvalidTag = InvalidTag
    return AESGCM(key)


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
        #: most once per L{PIN_REFRESH} s), else C{None}.
        self.launched = launched
        self.checked = used
        #: Replay window (as IPsec's, RFC 4303 3.4.3): the highest request number opened, and a
        #: bitmap of the L{REPLAY_WINDOW} numbers up to it (bit i: C{seq_top - i} was opened).
        self.seq_top = 0
        self.seq_seen = 0
        #: The nonces the session's CDP links opened with (the last L{MAX_LINK_NONCES}): a link
        #: opening is accepted once.
        self.link_nonces: OrderedDict[bytes, None] = OrderedDict()

    @property
    def aead(self) -> AESGCM:
        aead = self._aead
        if aead is None:
            aead = self._aead = _aesgcm(seal_key_of(self.key))
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
        except _InvalidTag:
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


class ExtensionPins:
    """The extension key this daemon pins and the keys it refused, in
    C{<state_dir>/extension-pin.json} (C{None}: in memory only)::

        {"pinned": {"key", "fingerprint", "pinned_at"} | null,
         "candidates": [{"key", "fingerprint", "first_seen", "last_seen", "refused"}]}

    C{gasoline pair accept|forget} edit the file; the daemon reads it again when it changed.
    """

    def __init__(self, path: Path | None, clock: IReactorTime) -> None:
        self.path = path
        self.clock = clock
        self.pinned: dict[str, Any] | None = None
        self.candidates: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._stamp: tuple[int, int] | None = None
        self._checked = -math.inf
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> bool:
        """Read the file again if it changed (at most every L{PIN_REFRESH} s unless C{force});
        whether the pinned key changed."""
        now = self.clock.seconds()
        if self.path is None or (not force and now - self._checked < PIN_REFRESH):
            return False
        self._checked = now
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp == self._stamp and not force:
            return False
        self._stamp = stamp
        before = self.pinned
        data = read_pin_file(self.path)
        self.pinned = data["pinned"]
        self.candidates = OrderedDict((c["fingerprint"], c) for c in data["candidates"])
        return (before or {}).get("key") != (self.pinned or {}).get("key")

    @property
    def fingerprint(self) -> str | None:
        return self.pinned["fingerprint"] if self.pinned else None

    def pin(self, key: bytes) -> None:
        self.pinned = {"key": b64u(key), "fingerprint": fingerprint_of(key),
                       "pinned_at": _iso(self.clock.seconds())}
        self.candidates.pop(self.pinned["fingerprint"], None)
        self._save()
        log.info("pinned the Gasoline extension {fp} (trust on first use; `gasoline pair "
                 "forget` unpins it)", fp=self.pinned["fingerprint"])

    def refuse(self, key: bytes) -> str:
        fp = fingerprint_of(key)
        now = _iso(self.clock.seconds())
        entry = self.candidates.pop(fp, None) or {"key": b64u(key), "fingerprint": fp,
                                                   "first_seen": now, "refused": 0}
        entry["last_seen"] = now
        entry["refused"] = int(entry.get("refused", 0)) + 1
        self.candidates[fp] = entry
        while len(self.candidates) > MAX_CANDIDATES:
            self.candidates.popitem(last=False)
        if entry["refused"] == 1:  # written once per new key, not per refused challenge
            self._save()
        return fp

    def _save(self) -> None:
        if self.path is not None:
            write_pin_file(self.path, self.pinned, list(self.candidates.values()))
            try:
                st = self.path.stat()
                self._stamp = (st.st_mtime_ns, st.st_size)
            except OSError:
                self._stamp = None


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def read_pin_file(path: Path) -> dict[str, Any]:
    """The pin file's content, checked (a missing or unreadable file: nothing pinned)."""
    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except FileNotFoundError:
        data = {}
    except (OSError, ValueError) as e:
        log.warn("the extension pin file {path} is unreadable ({error}): no extension is "
                 "pinned until it is fixed or removed", path=str(path), error=str(e))
        data = {}

    def entry(value: Any) -> dict[str, Any] | None:
        if not isinstance(value, dict) or not isinstance(value.get("key"), str):
            return None
        try:
            raw = unb64u(value["key"], "key")
        except PairingError:
            return None
        if len(raw) != 65 or raw[0] != 4:
            return None
        return {**value, "fingerprint": fingerprint_of(raw)}

    pinned = entry(data.get("pinned")) if isinstance(data, dict) else None
    candidates = data.get("candidates") if isinstance(data, dict) else None
    return {"pinned": pinned,
            "candidates": [c for c in map(entry, candidates if isinstance(candidates, list)
                                          else []) if c is not None][-MAX_CANDIDATES:]}


def write_pin_file(path: Path, pinned: dict[str, Any] | None,
                   candidates: list[dict[str, Any]]) -> None:
    """Write the pin file atomically (0600). A few hundred bytes, written when an extension is
    first pinned, first refused, or by C{gasoline pair}."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"pinned": pinned, "candidates": candidates}, f, indent=1)
    os.replace(tmp, path)


def _freeze_cryptography() -> None:
    """cryptography arrives at the first challenge, after the daemon froze what it built at start
    (C{gasoline.tap}: C{gc.freeze()}). Its modules live as long as the process too: move them out
    of the collector's generations as well, or every full collection rescans them (on the ingest
    path of a paired extension this cost more than opening the sealed batches)."""
    import gc

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: F401
    from cryptography.exceptions import InvalidTag  # noqa: F401

    if gc.get_freeze_count():  # only where the daemon froze its start-up (tap.py)
        gc.freeze()


class DaemonIdentity:
    """The daemon's key pair, the extension key it pins and the sessions of that extension.

    @param private_key: the private key, or a callable returning it: then it is loaded (and
        C{cryptography} imported) at the first challenge only, and C{public_key} must be given.
    @param pin_file: where the pinned extension key is kept (C{None}: in memory only).

    Sessions are kept per purpose: the pinned extension's sessions (at most
    L{MAX_PINNED_SESSIONS}), those of launched browsers' granted keys (at most
    L{MAX_LAUNCHED_SESSIONS}) and every other session (at most C{max_sessions}); challenges that do
    not come from the pinned extension are rate limited (L{CHALLENGE_BURST}, L{CHALLENGE_RATE}),
    so a flood of challenges neither evicts the pinned extension's session nor delays its own.
    """

    def __init__(self, private_key: Any, clock: IReactorTime,
                 max_sessions: int = MAX_SESSIONS, session_idle: float = SESSION_IDLE,
                 public_key: bytes | None = None, pin_file: Path | None = None,
                 max_pinned_sessions: int = MAX_PINNED_SESSIONS,
                 challenge_burst: int = CHALLENGE_BURST,
                 challenge_rate: float = CHALLENGE_RATE,
                 launch_dir: Path | None = None,
                 max_launched_sessions: int = MAX_LAUNCHED_SESSIONS) -> None:
        self._key = private_key
        self.clock = clock
        self.public_key = public_key if public_key is not None else raw_public_key(private_key)
        self.fingerprint = fingerprint_of(self.public_key)
        self.max_sessions = max_sessions
        self.max_pinned_sessions = max_pinned_sessions
        self.session_idle = session_idle
        self.challenge_burst = challenge_burst
        self.challenge_rate = challenge_rate
        self._tokens = float(challenge_burst)
        self._tokens_at = clock.seconds()
        #: Refused challenges since start, by reason (C{/health}).
        self.refused: dict[str, int] = {}
        self.pins = ExtensionPins(pin_file, clock)
        #: session id -> Session: the pinned extension's sessions ...
        self._pinned: OrderedDict[str, Session] = OrderedDict()
        #: ... and every other one (no extension pinned yet) ...
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        #: ... and those of browsers C{gasoline browser} launched (keys granted in C{launch_dir},
        #: the state dir; C{None}: no launch grants are read).
        self._launched: OrderedDict[str, Session] = OrderedDict()
        self.launch_dir = launch_dir
        self.max_launched_sessions = max_launched_sessions

    @classmethod
    def from_state_dir(cls, state_dir: Path, clock: IReactorTime) -> DaemonIdentity:
        """The identity in C{state_dir}: the key file is read for its public key only (no
        C{cryptography} at start-up); a missing one is created (L{create_key_file})."""
        path = Path(state_dir) / IDENTITY_FILE
        pin_file = Path(state_dir) / PIN_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = None
        if data is None:
            data = create_key_file(state_dir)
        public = public_key_from_pem(data)
        if public is not None:
            identity = cls(lambda: _load_key(data, path), clock, public_key=public,
                           pin_file=pin_file, launch_dir=Path(state_dir))
        else:  # a key file in a form the reader above does not know: cryptography reads it
            identity = cls(_load_key(data, path), clock, pin_file=pin_file,
                           launch_dir=Path(state_dir))
        log.info("daemon identity fingerprint {fp} (the Gasoline popup shows it when pairing); "
                 "pinned extension {ext}", fp=identity.fingerprint,
                 ext=identity.pins.fingerprint or "none yet")
        return identity

    def _private_key(self) -> Any:
        if callable(self._key):
            key = self._key()
            if raw_public_key(key) != self.public_key:
                raise ValueError("the identity file changed since the daemon started")
            self._key = key
            _freeze_cryptography()
        return self._key

    # -- the pin ---------------------------------------------------------------------------------

    def _refresh_pins(self, force: bool = False) -> None:
        if self.pins.refresh(force):
            # gasoline pair accept|forget changed the pinned key: only its sessions stay valid.
            pinned = self.pins.fingerprint
            self._pinned = OrderedDict((k, s) for k, s in self._pinned.items()
                                       if s.extension == pinned)
            self._sessions.clear()

    @property
    def pinned_fingerprint(self) -> str | None:
        """The pinned extension's fingerprint, or C{None} while no extension is pinned."""
        self._refresh_pins()
        return self.pins.fingerprint

    def summary(self) -> dict[str, Any]:
        """What C{/health}, C{configure health}, C{gasoline status} and the status page show (a
        copy: read-only). C{paired}: some extension holds a live session now."""
        self._refresh_pins()
        self._expire()
        live = {"pinned": len(self._pinned), "launched": len(self._launched),
                "unpinned": len(self._sessions)}
        return {
            "daemon_fingerprint": self.fingerprint,
            "extension_fingerprint": self.pins.fingerprint,
            "extension_pinned_at": (self.pins.pinned or {}).get("pinned_at"),
            "refused_extensions": [c["fingerprint"] for c in self.pins.candidates.values()],
            "launched_extensions": sorted({s.extension for s in self._launched.values()
                                           if s.extension}),
            "sessions": sum(live.values()),
            "sessions_by_kind": live,
            "paired": any(live.values()),
            "refused_challenges": dict(self.refused),
        }

    def describe(self) -> dict[str, Any]:
        """C{GET /pairing}: what the extension pins (after the user compared the fingerprint)."""
        return {
            "protocol": PROTOCOL,
            "algorithm": ALGORITHM,
            "key": b64u(self.public_key),
            "fingerprint": self.fingerprint,
            "seal": SEAL,
            "extension_pinned": self.pinned_fingerprint is not None,
        }

    def _refuse(self, reason: str, error: ChallengeRefused) -> ChallengeRefused:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        return error

    def _take_token(self) -> None:
        now = self.clock.seconds()
        self._tokens = min(float(self.challenge_burst),
                           self._tokens + (now - self._tokens_at) * self.challenge_rate)
        self._tokens_at = now
        if self._tokens < 1.0:
            retry = max(1, math.ceil((1.0 - self._tokens) / self.challenge_rate))
            raise self._refuse("rate_limited", ChallengeRefused(
                429, "pairing_rate_limited", "too many pairing challenges: try again in "
                f"{retry} s (the pinned extension's own challenges are not limited)",
                retry_after=retry))
        self._tokens -= 1.0

    def challenge(self, payload: Any) -> dict[str, Any]:
        """C{POST /pairing/challenge} C{{"key": <ephemeral P-256 point>, "nonce": <16..64 bytes>,
        "ext_key": <the extension's P-256 key>, "ext_sig": <its signature>}} (the last two are
        optional while no extension is pinned)."""
        if not isinstance(payload, dict):
            raise PairingError("the body must be a JSON object {key, nonce}")
        ephemeral = unb64u(payload.get("key"), "key")
        nonce = unb64u(payload.get("nonce"), "nonce")
        if not 16 <= len(nonce) <= 64:
            raise PairingError("field 'nonce' must be 16 to 64 bytes")
        ext_key = None
        if payload.get("ext_key") is not None:
            ext_key = unb64u(payload.get("ext_key"), "ext_key")
            signature = unb64u(payload.get("ext_sig"), "ext_sig")
        self._refresh_pins()
        pinned = self.pins.pinned
        ours = ext_key is not None and pinned is not None and b64u(ext_key) == pinned["key"]
        if not ours:
            self._take_token()  # the pinned extension is never rate limited
        if ext_key is not None:
            _verify_extension_signature(ext_key, signature,
                                        extension_transcript(ephemeral, nonce))
        granted = None
        if ext_key is not None and not ours and self.launch_dir is not None:
            granted = read_launch_grant(self.launch_dir, ext_key)
        if pinned is not None and not ours and granted is None:
            if ext_key is None:
                raise self._refuse("no_extension_key", ChallengeRefused(
                    403, "extension_key_required",
                    f"this daemon is paired with the Gasoline extension {pinned['fingerprint']}: "
                    "a challenge without an extension key is refused (update the extension, or "
                    "run `gasoline pair forget` on this machine to unpin it)",
                    extension_fingerprint=pinned["fingerprint"]))
            other = self.pins.refuse(ext_key)
            raise self._refuse("not_pinned", ChallengeRefused(
                403, "extension_not_pinned",
                f"this daemon is paired with another Gasoline extension ({pinned['fingerprint']}); "
                f"this extension is {other}. If you replaced the extension on purpose, run "
                f"`gasoline pair accept {other}` on this machine (or `gasoline pair forget`), "
                "then pair again", extension_fingerprint=other,
                pinned_fingerprint=pinned["fingerprint"]))
        from cryptography.hazmat.primitives.asymmetric import ec  # lazy

        try:
            peer = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), ephemeral)
        except ValueError as e:
            raise PairingError("field 'key' is not a P-256 public key (uncompressed point)") from e
        shared = self._private_key().exchange(ec.ECDH(), peer)
        key = derive_session_key(shared, nonce, self.public_key, ephemeral)
        if ext_key is not None and pinned is None and granted is None:
            self.pins.pin(ext_key)  # trust on first use (a launched browser's key never is)
            self._sessions.clear()  # sessions without a key end with the pin
        sid = secrets.token_urlsafe(18)
        self._expire()
        extension: str | None
        if granted is not None:
            assert ext_key is not None  # a grant is looked up by the extension's key
            extension = granted["fingerprint"] = fingerprint_of(ext_key)
            table, limit = self._launched, self.max_launched_sessions
        else:
            extension = self.pins.fingerprint if ext_key is not None else None
            table, limit = ((self._pinned, self.max_pinned_sessions) if extension is not None
                            else (self._sessions, self.max_sessions))
        table[sid] = Session(sid, key, extension, self.clock.seconds(),
                             launched=ext_key if granted is not None else None)
        while len(table) > limit:
            table.popitem(last=False)
        return {"session": sid, "proof": b64u(challenge_proof(key, nonce)),
                "fingerprint": self.fingerprint, "extension_fingerprint": extension,
                "launched": granted is not None, "seal": SEAL}

    def _expire(self) -> None:
        now = self.clock.seconds()
        cutoff = now - self.session_idle
        for table in (self._pinned, self._sessions, self._launched):
            for sid in [s for s, session in table.items() if session.used < cutoff]:
                del table[sid]
        for sid, entry in list(self._launched.items()):  # launches that ended
            if now - entry.checked >= PIN_REFRESH:
                entry.checked = now
                if (self.launch_dir is None or entry.launched is None
                        or read_launch_grant(self.launch_dir, entry.launched) is None):
                    del self._launched[sid]

    def session(self, sid: str) -> Session | None:
        """The live session C{sid} (C{None}: unknown, idle too long, or not the pinned
        extension's now that one is pinned)."""
        self._refresh_pins()
        table = self._pinned
        entry = table.get(sid)
        if entry is None:
            table = self._launched
            entry = table.get(sid)
            if entry is None:
                table = self._sessions
                entry = table.get(sid)
                if entry is None:
                    return None
        now = self.clock.seconds()
        if entry.used < now - self.session_idle:
            del table[sid]
            return None
        if entry.launched is not None:
            if now - entry.checked >= PIN_REFRESH:  # the launch ended: its grant is gone
                entry.checked = now
                if (self.launch_dir is None or entry.launched is None
                        or read_launch_grant(self.launch_dir, entry.launched) is None):
                    del table[sid]
                    return None
        elif self.pins.pinned is not None and entry.extension != self.pins.fingerprint:
            del table[sid]
            return None
        entry.used = now
        table.move_to_end(sid)
        return entry

    def session_key(self, session: str) -> bytes | None:
        entry = self.session(session)
        return entry.key if entry is not None else None

    def link_proof(self, session: str, nonce: bytes, extension_proof: bytes | None = None
                   ) -> bytes | None:
        """The proof a WebSocket link (the extension's CDP link) opens with: the session's
        L{response_proof} of C{nonce} over L{LINK_BODY}; C{None} for a session this daemon does
        not know, a nonce out of bounds, or (once an extension is pinned) a missing or wrong
        C{extension_proof} (L{extension_link_proof}): the link is then refused."""
        entry = self.session(session)
        if entry is None or not 16 <= len(nonce) <= 128:
            return None
        if entry.extension is not None or self.pins.pinned is not None:
            expected = extension_link_proof(entry.key, nonce)
            if extension_proof is None or not hmac.compare_digest(expected, extension_proof):
                return None
            if nonce in entry.link_nonces:  # a recorded link opening, sent again
                self.refused["replayed_link"] = self.refused.get("replayed_link", 0) + 1
                return None
            entry.link_nonces[nonce] = None
            while len(entry.link_nonces) > MAX_LINK_NONCES:
                entry.link_nonces.popitem(last=False)
        return response_proof(entry.key, nonce, LINK_BODY)

    def admit(self, request) -> tuple[int, str, dict[str, Any]] | None:
        """Check an extension request to a capture or command route; C{None} when it may pass.

        A request naming a session must be sealed under that session's key: its body is
        replaced by the plaintext and the session noted on the request (L{seal_answer}). A
        request naming no session (the published 0.7.9 extension) passes while no extension is
        pinned, and is refused once one is.
        """
        sid = request.getHeader(SESSION_HEADER)
        if sid is None:
            pinned = self.pinned_fingerprint
            if pinned is None:
                return None
            self.refused["unpaired_request"] = self.refused.get("unpaired_request", 0) + 1
            return 403, (f"this daemon is paired with the Gasoline extension {pinned}: requests "
                         "of an extension that has not paired (the published 0.7.9 extension, or "
                         "another one) are refused; run `gasoline pair forget` on this machine to "
                         "unpin it"), {"code": "extension_not_paired",
                                       "extension_fingerprint": pinned}
        session = self.session(sid.decode("ascii", "replace"))
        if session is None:
            request.setHeader(SESSION_STATUS_HEADER, b"unknown")
            return 401, "unknown pairing session: pair again", {"code": "unknown_session"}
        if request.getHeader(SEALED_HEADER) != b"1":
            return 400, ("a request naming a pairing session must be sealed (X-Gasoline-Sealed: 1, "
                         "AES-256-GCM under the session key)"), {"code": "not_sealed"}
        try:
            content = request.content
            if isinstance(content, io.BytesIO):  # twisted.web's: the body is opened in place
                with content.getbuffer() as view:
                    plain, iv = session.open(request.method, request.path, view)
            else:
                plain, iv = session.open(request.method, request.path,
                                         content.read() if content is not None else b"")
        except Replayed as e:
            self.refused["replayed_request"] = self.refused.get("replayed_request", 0) + 1
            return 400, str(e), {"code": "replayed"}
        except PairingError as e:
            return 400, str(e), {"code": "bad_seal"}
        request.content = io.BytesIO(plain)
        request.gasoline_sealed = (session, iv)
        return None

    @staticmethod
    def seal_answer(request, body: bytes) -> bytes:
        """An answer to a sealed request, sealed under its session and bound to that request
        (unchanged for an unsealed one)."""
        sealed = getattr(request, "gasoline_sealed", None)
        if sealed is None:
            return body
        session, iv = sealed
        request.setHeader(SEALED_HEADER, b"1")
        request.setHeader(b"content-type", SEALED_TYPE)
        return session.seal_answer(iv, body)


# -- gasoline pair ---------------------------------------------------------------------------------


def pair_command(state_dir: Path, action: str | None, fingerprint: str | None = None
                 ) -> tuple[int, str]:
    """C{gasoline pair [accept FP | forget]}: C{(exit status, text)}. Edits the pin file the
    daemon reads again within a second; no daemon needs to run."""
    path = Path(state_dir) / PIN_FILE
    data = read_pin_file(path)
    pinned, candidates = data["pinned"], data["candidates"]
    if action is None:
        lines = [f"pinned extension: {pinned['fingerprint'] if pinned else 'none yet'}"
                 + (f" (since {pinned.get('pinned_at')})" if pinned else "")]
        for c in candidates:
            lines.append(f"refused extension: {c['fingerprint']} (last tried {c.get('last_seen')}; "
                         f"`gasoline pair accept {c['fingerprint']}` to pin it instead)")
        for grant in live_launch_grants(state_dir):
            lines.append(f"launched browser's extension: {grant.stem} (`gasoline browser`, "
                         "allowed while that launch runs; not pinned)")
        return 0, "\n".join(lines) + f"\n({path})"
    if action == "forget":
        write_pin_file(path, None, candidates)
        return 0, ("forgot the pinned extension"
                   + (f" {pinned['fingerprint']}" if pinned else " (none was pinned)")
                   + ": the next extension that pairs is pinned")
    if action == "accept":
        wanted = (fingerprint or "").strip().upper()
        match = [c for c in candidates if c["fingerprint"] == wanted]
        if not match:
            known = ", ".join(c["fingerprint"] for c in candidates) or "none"
            return 1, (f"no refused extension has fingerprint {wanted!r} (refused so far: {known}); "
                       "open the Gasoline popup of the extension you want and copy its fingerprint")
        accepted = {k: v for k, v in match[0].items() if k in ("key", "fingerprint")}
        accepted["pinned_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_pin_file(path, accepted, [c for c in candidates if c["fingerprint"] != wanted])
        return 0, (f"pinned the extension {wanted}"
                   + (f" instead of {pinned['fingerprint']}" if pinned else "")
                   + ": it pairs at its next attempt")
    return 2, "usage: gasoline pair [accept FINGERPRINT | forget] [--state-dir DIR]"

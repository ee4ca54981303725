"""
The pairing table: challenges answered, the sessions they open (per purpose, bounded), the rate
limit of challenges, and the check of every extension request (L{DaemonIdentity.admit}).

The daemon proves its key in each challenge (L{gasoline.core.trust.identity}), pins the extension's key
on first use and opens sessions for that key only (L{gasoline.core.trust.pins}); every request of a
session is sealed under the session key (L{gasoline.core.trust.seal}). A browser C{gasoline browser}
launched pairs on a launch grant (L{gasoline.core.trust.pins.write_launch_grant}): its key gets
sessions beside the pinned one, never the pin.

Clients that do not know pairing (the published 0.7.9 extension) never send the headers; the
daemon answers them exactly as before until an extension is pinned, and refuses them after.
See docs/extension.md, "Pairing".
"""

from __future__ import annotations

import hmac
import io
import math
import secrets
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric import ec
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gasoline.common import read_nofollow
from gasoline.core.storage.files import StateFileError, describe
from gasoline.core.trust.identity import (
    ALGORITHM,
    IDENTITY_FILE,
    PROTOCOL,
    PairingError,
    b64u,
    challenge_proof,
    create_key_file,
    derive_session_key,
    fingerprint_of,
    load_key,
    public_key_from_pem,
    raw_public_key,
    response_proof,
    unb64u,
)
from gasoline.core.trust.pins import (
    PIN_FILE,
    PIN_REFRESH,
    ExtensionPins,
    extension_transcript,
    read_launch_grant,
    verify_extension_signature,
)
from gasoline.core.trust.request_facts import facts_of, note_sealed
from gasoline.core.trust.seal import (
    MAX_LINK_NONCES,
    SEAL,
    SEALED_HEADER,
    SEALED_TYPE,
    Replayed,
    Session,
    extension_link_proof,
)

if TYPE_CHECKING:
    from twisted.web.server import Request

log = Logger()

#: Sessions kept at once (oldest dropped first); an extension re-pairs when its session is gone.
MAX_SESSIONS = 64
#: A session unused this long (seconds) is dropped.
SESSION_IDLE = 24 * 3600.0
#: What a WebSocket link's opening proof covers (the extension checks it before it sends anything).
LINK_BODY = b"gasoline-cdp-link"
#: Request headers of a paired extension, and the daemon's answers.
SESSION_HEADER = b"x-gasoline-session"
SESSION_STATUS_HEADER = b"x-gasoline-session-status"
#: Sessions of the pinned extension kept at once (it has one worker; a restarted worker re-pairs).
MAX_PINNED_SESSIONS = 8
#: Challenges of any other key (or none): a burst, then this many per second. Challenges that
#: claim the pinned extension's key have a bucket of their own (the same numbers), and a token
#: they take is given back when the signature holds: the pinned extension's own challenges are
#: never counted, a flood of others cannot lock it out, and no claim costs a signature check
#: without a token (a claim is only a claim until its signature is checked).
CHALLENGE_BURST = 16
CHALLENGE_RATE = 4.0


class _Bucket:
    """A token bucket on the daemon's clock: C{burst} tokens, refilled at C{rate} per second."""

    __slots__ = ("burst", "rate", "tokens", "at")

    def __init__(self, burst: int, rate: float, now: float) -> None:
        self.burst, self.rate = burst, rate
        self.tokens, self.at = float(burst), now

    def take(self, now: float) -> int:
        """Take one token: 0, or the seconds to wait (nothing taken then)."""
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return max(1, math.ceil((1.0 - self.tokens) / self.rate))
        self.tokens -= 1.0
        return 0

    def give_back(self) -> None:
        self.tokens = min(float(self.burst), self.tokens + 1.0)
#: Sessions of launched browsers' extension keys kept at once.
MAX_LAUNCHED_SESSIONS = 8


#: An identity file is a few hundred bytes; more is not a key.
_MAX_KEY_FILE = 64 * 1024
_IDENTITY_FIX = ("restore it from a backup, or move it aside to make a new one at the next start "
                 "(the extension then shows the new fingerprint to compare, and pairs again)")


class IdentityFileError(StateFileError):
    """C{identity.pem} is there but is not a key the daemon can use."""


class ChallengeRefused(PairingError):
    """A challenge the daemon will not answer: C{status} 403 (another extension is pinned) or 429
    (too many challenges; C{retry_after} seconds)."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.extra = extra


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
                 max_launched_sessions: int = MAX_LAUNCHED_SESSIONS,
                 identity_path: Path | None = None) -> None:
        self._key = private_key
        self.clock = clock
        self.public_key = public_key if public_key is not None else raw_public_key(private_key)
        self.fingerprint = fingerprint_of(self.public_key)
        self.max_sessions = max_sessions
        self.max_pinned_sessions = max_pinned_sessions
        self.session_idle = session_idle
        self.challenge_burst = challenge_burst
        self.challenge_rate = challenge_rate
        #: Tokens for challenges of any other key (or none), and for those that claim the
        #: pinned key (given back when the signature holds): taken before any signature check.
        self._others = _Bucket(challenge_burst, challenge_rate, clock.seconds())
        self._claims = _Bucket(challenge_burst, challenge_rate, clock.seconds())
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
        #: The key file (C{None}: a key given in memory), named when it cannot be used.
        self.identity_path = identity_path

    @classmethod
    def from_state_dir(cls, state_dir: Path, clock: IReactorTime) -> DaemonIdentity:
        """The identity in C{state_dir}: the key file is read for its public key only (the private
        key is loaded at the first challenge); a missing one is created (L{create_key_file})."""
        path = Path(state_dir) / IDENTITY_FILE
        pin_file = Path(state_dir) / PIN_FILE
        try:
            data = read_nofollow(path, _MAX_KEY_FILE)
        except FileNotFoundError:
            data = None
        except OSError as e:
            raise IdentityFileError(f"{path} cannot be read ({describe(e)}); {_IDENTITY_FIX}"
                                    ) from None
        if data is None:
            data = create_key_file(state_dir)
        public = public_key_from_pem(data)
        if public is not None:
            identity = cls(lambda: load_key(data, path), clock, public_key=public,
                           pin_file=pin_file, launch_dir=Path(state_dir), identity_path=path)
        else:  # a key file in a form the reader above does not know: cryptography reads it
            try:
                key = load_key(data, path)
            except Exception as e:  # cryptography's ValueError, UnsupportedAlgorithm, TypeError
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise IdentityFileError(f"{path} is not a usable P-256 private key ({why}); "
                                        f"{_IDENTITY_FIX}") from None
            identity = cls(key, clock, pin_file=pin_file, launch_dir=Path(state_dir),
                           identity_path=path)
        log.info("daemon identity fingerprint {fp} (the Gasoline popup shows it when pairing); "
                 "pinned extension {ext}", fp=identity.fingerprint,
                 ext=identity.pins.fingerprint or "none yet")
        return identity

    def _private_key(self) -> Any:
        if callable(self._key):
            try:
                key = self._key()
                if raw_public_key(key) != self.public_key:
                    raise ValueError("it changed since the daemon started")
            except Exception as e:  # cryptography's ValueError, UnsupportedAlgorithm, ...
                # Its public key read at start, its private key does not load (a damaged body):
                # pairing is refused with the one line, never a traceback per challenge.
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                line = (f"{self.identity_path or IDENTITY_FILE} is not a usable P-256 private "
                        f"key ({why}); {_IDENTITY_FIX}")
                if self.refused.get("identity_file_corrupt", 0) == 0:
                    log.error("{line}", line=line)
                raise self._refuse("identity_file_corrupt", ChallengeRefused(
                    503, "identity_file_corrupt", line)) from None
            self._key = key
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

    def _take_token(self, claims_pinned: bool) -> None:
        """One token of the caller's bucket, before any signature check; 429 when it is empty."""
        bucket = self._claims if claims_pinned else self._others
        retry = bucket.take(self.clock.seconds())
        if not retry:
            return
        if claims_pinned:
            raise self._refuse("rate_limited_claims", ChallengeRefused(
                429, "pairing_rate_limited", "too many pairing challenges claiming the pinned "
                f"extension's key whose signature did not verify: try again in {retry} s",
                retry_after=retry))
        raise self._refuse("rate_limited", ChallengeRefused(
            429, "pairing_rate_limited", "too many pairing challenges: try again in "
            f"{retry} s (the pinned extension's own challenges are not limited)",
            retry_after=retry))

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
        if self.pins.corrupt is not None:
            raise self._refuse("pin_file_corrupt", ChallengeRefused(
                503, "pin_file_corrupt", self.pins.corrupt))
        pinned = self.pins.pinned
        ours = ext_key is not None and pinned is not None and b64u(ext_key) == pinned["key"]
        # Every challenge takes a token before its signature is checked (one ECDSA verify, then
        # one ECDH): a claim of the pinned key from its own bucket, given back once it verifies.
        self._take_token(claims_pinned=ours)
        if ext_key is not None:
            verify_extension_signature(ext_key, signature,
                                        extension_transcript(ephemeral, nonce))
            if ours:
                self._claims.give_back()  # the pinned extension itself: never counted
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
            if entry.recheck_due(now, PIN_REFRESH):
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
            if entry.recheck_due(now, PIN_REFRESH):  # the launch ended: its grant is gone
                if (self.launch_dir is None or entry.launched is None
                        or read_launch_grant(self.launch_dir, entry.launched) is None):
                    del table[sid]
                    return None
        elif self.pins.pinned is not None and entry.extension != self.pins.fingerprint:
            del table[sid]
            return None
        entry.use(now)
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
            if not entry.first_link(nonce, MAX_LINK_NONCES):  # a recorded opening, sent again
                self.refused["replayed_link"] = self.refused.get("replayed_link", 0) + 1
                return None
        return response_proof(entry.key, nonce, LINK_BODY)

    def admit(self, request: Request) -> bytes | tuple[int, str, dict[str, Any]]:
        """Check an extension request to a capture or command route: the body its route parses
        when it may pass, else the refusal C{(status, message, extra)}.

        A request naming a session must be sealed under that session's key: the body returned
        is its plaintext, and the session is noted in the request's facts (L{seal_answer}). A
        request naming no session (the published 0.7.9 extension) passes, its body as it came,
        while no extension is pinned, and is refused once one is.
        """
        sid = request.getHeader(SESSION_HEADER)
        if sid is None:
            pinned = self.pinned_fingerprint
            if self.pins.corrupt is not None:  # which extension is pinned is unknown
                self.refused["unpaired_request"] = self.refused.get("unpaired_request", 0) + 1
                return 503, self.pins.corrupt, {"code": "pin_file_corrupt"}
            if pinned is None:
                content = request.content
                return content.read() if content is not None else b""
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
        note_sealed(request, session, iv)
        return plain

    @staticmethod
    def seal_answer(request: Request, body: bytes) -> bytes:
        """An answer to a sealed request, sealed under its session and bound to that request
        (unchanged for an unsealed one)."""
        sealed = facts_of(request).sealed
        if sealed is None:
            return body
        session, iv = sealed
        request.setHeader(SEALED_HEADER, b"1")
        request.setHeader(b"content-type", SEALED_TYPE)
        return session.seal_answer(iv, body)

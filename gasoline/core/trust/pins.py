"""
The extension's key, pinned by the daemon (trust on first use); launch grants; C{gasoline pair}.

The extension holds a long-term ECDSA P-256 key of its own (WebCrypto, non-extractable, in its
IndexedDB). Its challenge carries the public key and an ECDSA-SHA256 signature over::

    "gasoline-extension-v1 challenge" | ephemeral key | nonce

so the session that challenge opens belongs to the holder of that key: nobody else knows the
ephemeral private key, hence nobody else can derive the session key K. The daemon pins the first
extension key it sees (C{<state_dir>/extension-pin.json}) and from then on opens sessions for that
key only (L{gasoline.core.trust.pairing.DaemonIdentity}); every later request of the session proves K
(L{gasoline.core.trust.seal}). A key the daemon does not pin is refused (403) and remembered as a
candidate the user can accept (C{gasoline pair accept <fingerprint>}).

Launched extensions (C{gasoline browser}): a browser that C{gasoline browser} starts runs a new
profile, hence an extension key of its own. The launcher (a local process that reads the daemon's
state dir, as C{gasoline pair} does) reads that key over the browser's private DevTools pipe and
writes a launch grant, C{<state_dir>/launched/<fingerprint>.json} (0600, in a 0700 directory)::

    {"key": <the extension's raw P-256 key>, "fingerprint", "pid": <the launcher>, "created"}

The daemon opens sessions for a granted key beside the pinned one: it neither pins the key nor
displaces the pin, and the key's sessions end when the grant goes (the launcher removes it when it
ends the browser; a grant whose launcher no longer runs is void and removed by the daemon).

Clients that do not know pairing (the published 0.7.9 extension) never send the headers; the
daemon answers them exactly as before until an extension is pinned, and refuses them after.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, utils
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gasoline.common import make_private_dir, read_nofollow
from gasoline.core.storage.files import StateFileError, set_aside, unreadable
from gasoline.core.trust.identity import PairingError, b64u, fingerprint_of, unb64u

log = Logger()

PIN_FILE = "extension-pin.json"
_EXT_CHALLENGE_LABEL = b"gasoline-extension-v1 challenge"
#: Refused extension keys remembered for C{gasoline pair accept}.
MAX_CANDIDATES = 8
#: How often (seconds) the daemon looks at the pin file for a change made by C{gasoline pair}.
PIN_REFRESH = 1.0

LAUNCHED_DIR = "launched"
#: Live launch grants at once (the launcher refuses to write more).
MAX_LAUNCHED = 8
#: A grant file is a few hundred bytes; anything larger is ignored unread.
_MAX_GRANT_BYTES = 4096
#: A pin file is a few kilobytes (a pin and at most L{MAX_CANDIDATES} refused keys).
_MAX_PIN_BYTES = 64 * 1024


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
    lost = ("the grant of the browser `gasoline browser` launched with this extension key "
            "(that browser's extension is refused; launch it again)")
    try:
        raw = read_nofollow(path, _MAX_GRANT_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        unreadable(path, e.strerror or str(e), lost)
        return None
    try:
        data = json.loads(raw) if len(raw) <= _MAX_GRANT_BYTES else None
    except ValueError:
        data = None
    if (not isinstance(data, dict) or data.get("key") != b64u(key)
            or not isinstance(data.get("pid"), int) or isinstance(data.get("pid"), bool)):
        set_aside(path, "not a launch grant of this key", lost)
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
    make_private_dir(folder)
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



def extension_transcript(ephemeral: bytes, nonce: bytes) -> bytes:
    """What the extension signs with its long-term key in a challenge (a replayed transcript
    opens a session nobody can use: only the signer knows the ephemeral private key)."""
    return _EXT_CHALLENGE_LABEL + ephemeral + nonce



def verify_extension_signature(public: bytes, signature: bytes, data: bytes) -> None:
    """Check a WebCrypto ECDSA P-256/SHA-256 signature (raw C{r || s}, 64 bytes)."""
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
        #: The one line saying the pin file is corrupt (it became so while the daemon ran: the
        #: last pin read stays, and pairing and unpaired capture are refused), else C{None}.
        self.corrupt: str | None = None
        self._started = False
        self.refresh(force=True)  # a corrupt file at start: PinFileError, the start stops

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
        try:
            data = read_pin_file(self.path)
        except PinFileError as e:
            if not self._started:
                raise  # at start: the daemon does not start over it
            if self.corrupt != str(e):
                log.warn("{line}", line=str(e))
            self.corrupt = str(e)
            return False
        self._started = True
        if self.corrupt is not None:
            log.info("the extension pin file {path} is readable again", path=str(self.path))
        self.corrupt = None
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
        if self.path is not None and self.corrupt is None:  # a corrupt file is the user's to fix
            write_pin_file(self.path, self.pinned, list(self.candidates.values()))
            try:
                st = self.path.stat()
                self._stamp = (st.st_mtime_ns, st.st_size)
            except OSError:
                self._stamp = None


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class PinFileError(StateFileError):
    """The pin file is there but cannot be read: which extension is pinned is unknown, so the
    daemon does not start over it (and a running daemon refuses pairing and unpaired capture
    until it is fixed)."""


def _pin_file_error(path: Path, why: str) -> PinFileError:
    return PinFileError(
        f"the extension pin file {path} is corrupt ({why}): which extension is pinned is "
        "unknown, so pairing and capture are refused; run `gasoline pair forget` (the next "
        "extension that pairs is pinned) or restore the file")


def read_pin_file(path: Path) -> dict[str, Any]:
    """The pin file's content, checked (a missing file: nothing pinned).

    @raise PinFileError: the file is there but is not a pin file (unreadable, not JSON, not an
        object, or a C{pinned} entry that is not a key): never read as "nothing pinned", which
        would let the next extension pin itself."""
    try:
        data = json.loads(read_nofollow(path, _MAX_PIN_BYTES + 1).decode("utf-8"))
    except FileNotFoundError:
        data = {}
    except OSError as e:
        raise _pin_file_error(path, e.strerror or str(e)) from None
    except ValueError as e:  # not UTF-8, not JSON
        raise _pin_file_error(path, f"not JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise _pin_file_error(path, "not a JSON object")

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

    pinned = entry(data.get("pinned"))
    if pinned is None and data.get("pinned") is not None:
        raise _pin_file_error(path, "its 'pinned' entry is not an extension key")
    candidates = data.get("candidates")
    return {"pinned": pinned,
            "candidates": [c for c in map(entry, candidates if isinstance(candidates, list)
                                          else []) if c is not None][-MAX_CANDIDATES:]}


def write_pin_file(path: Path, pinned: dict[str, Any] | None,
                   candidates: list[dict[str, Any]]) -> None:
    """Write the pin file atomically (0600). A few hundred bytes, written when an extension is
    first pinned, first refused, or by C{gasoline pair}."""
    path = Path(path)
    make_private_dir(path.parent)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"pinned": pinned, "candidates": candidates}, f, indent=1)
    os.replace(tmp, path)



# -- gasoline pair ---------------------------------------------------------------------------------


def pair_command(state_dir: Path, action: str | None, fingerprint: str | None = None
                 ) -> tuple[int, str]:
    """C{gasoline pair [accept FP | forget]}: C{(exit status, text)}. Edits the pin file the
    daemon reads again within a second; no daemon needs to run."""
    path = Path(state_dir) / PIN_FILE
    try:
        data = read_pin_file(path)
    except PinFileError as e:
        if action != "forget":
            return 1, str(e)
        write_pin_file(path, None, [])
        return 0, (f"replaced the corrupt pin file {path}: no extension is pinned; the next "
                   "extension that pairs is pinned")
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

"""
Pre-pairing: what a browser started by C{gasoline browser} is told before it talks to the daemon.

The user's own browser pairs through the popup: the user compares the fingerprint the daemon
offers with what C{gasoline identity} prints, then the extension pins that key. A browser that
C{gasoline browser} launched skips the popup, and this module is the one place that says what it
gets instead. L{prepaired_settings} builds the C{chrome.storage.local} values the popup (and the
tracking buttons) would have written; L{apply} writes them into the extension's service worker over
the launcher's private DevTools pipe (C{--remote-debugging-pipe}: fds 3 and 4 of the browser
process, which no other process holds).

Why that is safe (docs/browser.md, "Pre-pairing"):
 - the pinned key is read from the daemon's own key file (C{<state-dir>/identity.pem}, 0600 in a
   0700 directory), not from whatever answers on the port: a process squatting the port cannot
   make the launched browser pin its key. The key the port offers must match the file, else the
   launch stops (L{IdentityMismatch});
 - the extension still challenges the daemon on every connection (extension/lib/pairing.js): only
   the holder of the private key gets capture or may send commands;
 - the DevTools pipe is not a port: no other local process or web page can drive the browser.

The other way round, the daemon pins one extension key (the user's own browser's, trust on first
use) and refuses others; the launched browser has a new profile, hence a key of its own.
L{grant_extension} reads that PUBLIC key from the worker over the same pipe and writes a launch
grant in the daemon's state dir (L{gasoline.core.trust.pins.write_launch_grant}): the daemon opens
sessions for that key beside the pinned one, without pinning it, while this launcher runs; the
launcher removes the grant when it ends the browser (L{revoke_extension}).

What it does not cover: it trusts the user's account (anyone who can read the state dir or start
processes as the user can do all of this anyway); the launched profile is a fresh one unless
C{--profile} is given, in which case its existing pairing is overwritten with this daemon's.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gasoline.core.trust.keyfile import (
    PairingError,
    b64u,
    fingerprint_of,
    unb64u,
)
from gasoline.core.trust.pins import remove_launch_grant, write_launch_grant
from gasoline.daemon_dir import StateDirProblem, checked_state_dir, daemon_public_key

if TYPE_CHECKING:
    from gasoline.launch.chromium import BrowserProcess


#: The daemon on the port is not the one whose state dir the launcher read (the check every
#: command that names a daemon makes: L{gasoline.daemon_dir}).
IdentityMismatch = StateDirProblem


def pinned_identity(state_dir: Path, offered: dict[str, Any] | None, server_url: str) -> dict[str, Any]:
    """The identity to pin: the key in the state dir, checked against C{offered} (the C{GET
    /pairing} answer of the daemon on the port; L{checked_state_dir}). @raise IdentityMismatch:
    they differ, or either is missing."""
    checked_state_dir(server_url, None, offered, Path(state_dir))
    key = daemon_public_key(state_dir)
    assert key is not None  # just checked
    return {"key": b64u(key), "fingerprint": fingerprint_of(key),
            "paired_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "server_url": server_url, "paired_by": "gasoline browser"}


def prepaired_settings(server_url: str, identity: dict[str, Any], tab_id: int, tab_url: str,
                       *, pilot: bool, track_all: bool, headless: bool = False) -> dict[str, Any]:
    """Exactly what L{apply} writes to C{chrome.storage.local} (keys of extension/lib/settings.js):
    C{serverUrl}, C{gasolineDaemonIdentity} (the pinned identity), C{trackedTabId} /
    C{trackedTabUrl} (the opened tab), C{gasolineTrackAllTabs}, C{aiWebPilotEnabled} and
    C{gasolineLaunchedBy} (how the browser was started)."""
    return {
        "serverUrl": server_url,
        "gasolineDaemonIdentity": identity,
        "trackedTabId": int(tab_id),
        "trackedTabUrl": tab_url,
        "gasolineTrackAllTabs": bool(track_all),
        "aiWebPilotEnabled": bool(pilot),
        # The extension sends it with its settings: the daemon's hints then name this command's
        # options (--pilot) instead of a popup a headless browser does not have.
        "gasolineLaunchedBy": {"by": "gasoline browser", "headless": bool(headless)},
    }


async def apply(cdp: BrowserProcess, worker_session: str, settings: dict[str, Any]) -> None:
    """Write C{settings} into the extension's storage through its service worker."""
    await cdp.evaluate(worker_session,
                       f"chrome.storage.local.set({json.dumps(settings)}).then(() => true)")


async def extension_public_key(cdp: BrowserProcess, worker_session: str) -> bytes:
    """The launched extension's public key (raw P-256 point), read from its service worker over
    the pipe (C{globalThis.gasolineExtensionPublicKey} in extension/background.js).
    @raise IdentityMismatch: the worker answered no key, or one whose fingerprint does not match."""
    answer = await cdp.evaluate(worker_session, "globalThis.gasolineExtensionPublicKey()")
    try:
        key = unb64u((answer or {}).get("key"), "key")
    except (PairingError, AttributeError):
        raise IdentityMismatch(f"the launched extension did not give its key: {answer!r}") from None
    if len(key) != 65 or key[0] != 4 or answer.get("fingerprint") != fingerprint_of(key):
        raise IdentityMismatch(f"the launched extension gave a malformed key: {answer!r}")
    return key


async def grant_extension(cdp: BrowserProcess, worker_session: str, state_dir: Path, pid: int) -> Path:
    """Read the launched extension's key and grant it to the daemon of C{state_dir} while
    process C{pid} (this launcher) runs; the grant file (L{revoke_extension} removes it).
    @raise IdentityMismatch: no usable key, or too many launches hold a grant."""
    key = await extension_public_key(cdp, worker_session)
    try:
        return write_launch_grant(state_dir, key, pid)
    except PairingError as e:
        raise IdentityMismatch(str(e)) from None


def revoke_extension(grant: Path | None) -> None:
    """Remove a launch grant: the daemon drops that key's sessions within a second."""
    if grant is not None:
        remove_launch_grant(grant)

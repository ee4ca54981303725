"""
Which state dir belongs to the daemon a command names by C{--port} / C{--url}.

The connector reads its client key in the state dir the daemon's C{GET /health} names
(C{state_dir}); the commands a user runs against a daemon (C{gasoline browser}, C{pair},
C{client-proof}, C{identity}, C{doctor}, C{status}, C{stop}) find it the same way, and check it
as C{gasoline browser} always has: the key in C{<state-dir>/identity.pem} must be the one the
daemon on the port offers (C{GET /pairing}). A process squatting the port cannot make a command
act on a state dir of its choosing (pin its key, edit pins, print a proof for it): it would need
the daemon's private key's public half in that dir, which only the daemon's user can write.

L{checked_state_dir} is the check (no I/O but reading the identity file); L{state_dir_at} asks
the daemon with the standard library (short-lived commands; no reactor to block).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gasoline.core.trust.keyfile import (
    IDENTITY_FILE,
    b64u,
    fingerprint_of,
    public_key_from_pem,
)


class StateDirProblem(RuntimeError):
    """No state dir can be trusted for the daemon named: it does not answer, names none, or the
    identity in the dir is not the one the daemon offers."""


def daemon_public_key(state_dir: Path | str) -> bytes | None:
    """The raw P-256 public key in C{<state_dir>/identity.pem}, or C{None} (no such file, or a
    form the PEM reader does not know)."""
    try:
        data = (Path(state_dir) / IDENTITY_FILE).read_bytes()
    except OSError:
        return None
    return public_key_from_pem(data)


def reported_state_dir(health: dict[str, Any] | None) -> Path | None:
    """The absolute state dir a daemon's C{/health} names, else None."""
    path = health.get("state_dir") if isinstance(health, dict) else None
    if not isinstance(path, str) or not path or "\x00" in path or not os.path.isabs(path):
        return None
    return Path(path)


def checked_state_dir(url: str, health: dict[str, Any] | None, offered: dict[str, Any] | None,
                      explicit: Path | None = None) -> Path:
    """The state dir of the daemon at C{url}: C{explicit} (C{--state-dir}) when given, else the
    one its C{/health} names; either way its identity file must hold the key the daemon offers
    (C{offered}, its C{GET /pairing} answer).

    @raise StateDirProblem: no dir is named, or the identities differ (or either is missing)."""
    state_dir = explicit if explicit is not None else reported_state_dir(health)
    if state_dir is None:
        raise StateDirProblem(f"the daemon at {url} does not name its state dir (an older "
                              "daemon?): pass its --state-dir")
    key = daemon_public_key(state_dir)
    if key is None:
        raise StateDirProblem(
            f"no daemon identity in {state_dir} ({IDENTITY_FILE}); pass the running daemon's "
            "--state-dir (and run this as the user that runs the daemon)")
    if not offered or offered.get("key") != b64u(key):
        theirs = (offered or {}).get("fingerprint", "none")
        raise StateDirProblem(
            f"the daemon at {url} offers identity {theirs}, but {state_dir} holds "
            f"{fingerprint_of(key)}: pass that daemon's --state-dir (or stop the other daemon)")
    return Path(state_dir)


def _get(url: str, headers: dict[str, str], timeout: float) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # loopback
        return json.loads(response.read(1 << 20))


def ask_daemon(url: str, api_key: str | None = None,
               timeout: float = 3.0) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """C{(/health, /pairing)} of the Gasoline daemon at C{url} (the second None when it offers
    no pairing). @raise StateDirProblem: no Gasoline daemon answers there."""
    keyed = {"X-Gasoline-Key": api_key} if api_key else {}
    try:
        health = _get(url + "/health", keyed, timeout)
    except (OSError, ValueError) as e:
        raise StateDirProblem(f"no Gasoline daemon answers at {url} ({e})") from None
    if not isinstance(health, dict) or health.get("service-name") != "gasoline":
        raise StateDirProblem(f"what answers at {url} is not a Gasoline daemon")
    try:
        # The daemon's public identity: read as a local caller (with the key when there is one).
        offered = _get(url + "/pairing", keyed, timeout)
    except (OSError, ValueError):
        offered = None
    return health, offered if isinstance(offered, dict) else None


def state_dir_at(url: str, explicit: Path | None = None, api_key: str | None = None,
                 timeout: float = 3.0) -> Path:
    """L{checked_state_dir} of the daemon answering at C{url}, asked now.

    @raise StateDirProblem: see L{ask_daemon} and L{checked_state_dir}."""
    health, offered = ask_daemon(url.rstrip("/"), api_key, timeout)
    return checked_state_dir(url.rstrip("/"), health, offered, explicit)

"""
The connector's proof of its client id: the daemon's client key, read from the daemon's state dir.

A daemon serves a caller as client id X only when it sends C{X-Gasoline-Client-Proof}, an HMAC of
X under C{<state-dir>/client-key} (docs/security.md, "Who may act as a client id"). The connector
knows the state dir it starts daemons with (C{--state-dir}, else the default); a daemon it did
not start may use another, which its C{/health} says (C{state_dir}): that one wins. The key is
read when first needed (a daemon this connector starts makes it at its start) and read again
after the daemon refused a proof. When it cannot be read, the connector says so on stderr (once
per path and reason) and sends no proof: the daemon then answers 403, which the agent sees as an
error. Nothing is ever written to stdout here.
"""

from __future__ import annotations

import os
from pathlib import Path

from twisted.logger import Logger

from gasoline.common import CLIENT_PROOF_HEADER, client_key_path, client_proof, read_client_key

log = Logger()


class ClientKeyFile:
    """Where this connector finds the daemon's client key, and the key once read."""

    def __init__(self, state_dir: Path | str | None) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self._key: bytes | None = None
        self._told: set[tuple[str, str]] = set()

    def daemon_state_dir(self, path: object) -> None:
        """The daemon that answers says (C{/health}) its state dir is C{path}."""
        if not isinstance(path, str) or not path or "\x00" in path or not os.path.isabs(path):
            return
        if self.state_dir is None or Path(path) != self.state_dir:
            if self.state_dir is not None:
                log.info("the daemon's state dir is {new} (not {old}): its client key is read "
                         "there", new=path, old=str(self.state_dir))
            self.state_dir = Path(path)
            self._key = None

    def forget(self) -> None:
        """The daemon refused a proof: read the key again next time (it may be new)."""
        self._key = None

    def key(self) -> bytes | None:
        if self._key is None and self.state_dir is not None:
            try:
                self._key = read_client_key(self.state_dir)
            except (OSError, ValueError) as e:
                self._tell(str(client_key_path(self.state_dir)),
                           (e.strerror if isinstance(e, OSError) else None) or str(e))
        return self._key

    def _tell(self, path: str, why: str) -> None:
        if (path, why) in self._told:
            return
        self._told.add((path, why))
        log.error("gasoline connect: cannot read the daemon's client key {path} ({why}): the "
                  "daemon refuses this connector's client id without its proof (403). Run the "
                  "connector as the user that runs the daemon, and give it the daemon's "
                  "--state-dir (docs/security.md, \"Who may act as a client id\").",
                  path=path, why=why)

    def headers(self, client_id: str) -> dict[str, list[str]]:
        """C{X-Gasoline-Client} and, when the key can be read, C{X-Gasoline-Client-Proof}."""
        out = {"X-Gasoline-Client": [client_id]}
        key = self.key()
        if key is not None:
            out[CLIENT_PROOF_HEADER] = [client_proof(key, client_id)]
        return out

"""
C{/pairing}: the daemon proves its identity to the Gasoline extension (gasoline.core.trust.identity, gasoline.core.trust.pairing).

C{GET /pairing} answers the daemon's public key and fingerprint (what the extension pins once the
user has compared the fingerprint with C{gasoline identity}); C{POST /pairing/challenge} answers
a new connection's challenge (the extension's key is pinned on first use; another key gets 403
C{extension_not_pinned}, a challenge flood 429). Both are extension (EXT) routes of the policy
(L{gasoline.http.routes}); the challenge also needs the extension's C{X-Gasoline-Client}, while the
identity, which is public, is read without it by local callers the policy lets through (C{gasoline
identity}, the connector's state-dir check; with C{--api-key}, the key). Clients that never
call them (the published 0.7.9 extension) are served by every other route exactly as before until
an extension is pinned (L{gasoline.http.ingest.extension_session}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from klein import Klein

from gasoline.core import validate
from gasoline.core.trust.identity import PairingError
from gasoline.core.trust.pairing import ChallengeRefused, DaemonIdentity
from gasoline.http.ingest import extension_only
from gasoline.http.json import json_body, json_error

if TYPE_CHECKING:
    from twisted.web.server import Request

#: A challenge body is two short base64url strings; anything larger is refused unread.
MAX_CHALLENGE_BYTES = 4096


class PairingAPI:
    """The C{/pairing} routes of one daemon identity."""

    app = Klein()

    def __init__(self, identity: DaemonIdentity,
                 on_offer: Callable[[], object] | None = None) -> None:
        self.identity = identity
        #: Called when an extension (a request from an extension origin) asks for the identity:
        #: the extension link learns it is waiting for the user to pair it.
        self.on_offer = on_offer

    @app.route("/pairing", methods=["GET"])
    def describe(self, request: Request) -> bytes:
        origin = request.getHeader(b"origin") or b""
        if self.on_offer is not None and origin.startswith((b"chrome-extension://",
                                                            b"moz-extension://")):
            self.on_offer()
        request.setHeader(b"cache-control", b"no-store")
        return json_body(request, self.identity.describe())

    @app.route("/pairing/challenge", methods=["POST"])
    @extension_only
    def challenge(self, request: Request) -> bytes:
        content = request.content
        body = content.read(MAX_CHALLENGE_BYTES + 1) if content is not None else b""
        if len(body) > MAX_CHALLENGE_BYTES:
            return json_error(request, 413, f"a challenge is at most {MAX_CHALLENGE_BYTES} bytes")
        try:
            answer = self.identity.challenge(validate.parse_object(body))
        except ChallengeRefused as e:
            if "retry_after" in e.extra:
                request.setHeader(b"retry-after", str(e.extra["retry_after"]).encode())
            return json_error(request, e.status, str(e), code=e.code, **e.extra)
        except PairingError as e:
            return json_error(request, 400, str(e))
        request.setHeader(b"cache-control", b"no-store")
        return json_body(request, answer)

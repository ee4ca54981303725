"""
The CDP relay's two WebSocket endpoints on autobahn (L{gasoline.http.relay} mounts them and
imports this module at their first request: autobahn is not loaded by an idle daemon).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from autobahn.twisted.resource import WebSocketResource
from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.types import ConnectionDeny
from twisted.logger import Logger
from zope.interface import implementer

from gasoline.core.identity import DaemonIdentity, PairingError, b64u, unb64u
from gasoline.http.relay_wire import (
    CDP_PREFIX,
    EXTENSION_PATH,
    EXTENSION_PING_INTERVAL,
    EXTENSION_PING_TIMEOUT,
    MAX_CLIENT_MESSAGE,
    MAX_EXTENSION_MESSAGE,
)
from gasoline.relay.hub import CLIENT_ID, IRelayPeer, Relay, RelayRefused

log = Logger()


def _dumps(message: dict) -> bytes:
    try:
        return orjson.dumps(message)
    except TypeError:  # an integer beyond 64 bits, ... : the stdlib encoder takes anything JSON
        return json.dumps(message).encode()


@implementer(IRelayPeer)
class _Peer:
    """The relay's view of one autobahn connection."""

    def __init__(self, protocol: WebSocketServerProtocol) -> None:
        self.protocol = protocol

    def send(self, message: dict) -> None:
        if self.protocol.state == WebSocketServerProtocol.STATE_OPEN:
            self.protocol.sendMessage(_dumps(message), isBinary=False)

    def close(self, code: int, reason: str) -> None:
        self.protocol.sendClose(code, reason[:120])


class CDPClientProtocol(WebSocketServerProtocol):
    """One CDP client connection (C{/cdp/<client-id>})."""

    factory: _RelayFactory

    relay: Relay
    client = None
    client_id: str | None = None

    def onConnect(self, request):
        path = request.path.rstrip("/")
        if path == CDP_PREFIX:
            self.client_id = None
        elif path.startswith(CDP_PREFIX + "/"):
            # The browser-level path of a real Chrome is /devtools/browser/<id>; we accept
            # /cdp/<id> and /cdp/<id>/devtools/browser/... alike (only the id matters).
            self.client_id = path[len(CDP_PREFIX) + 1:].split("/", 1)[0]
            if not CLIENT_ID.fullmatch(self.client_id):
                raise ConnectionDeny(400, "invalid client id")
        else:
            raise ConnectionDeny(404, "not found")
        return None

    def onOpen(self):
        try:
            self.client = self.factory.relay.client_connected(self.client_id, _Peer(self))
        except RelayRefused as e:
            self.sendClose(e.close_code, e.reason)

    def onMessage(self, payload, isBinary):
        if self.client is None:
            return
        if isBinary:
            self.client.send({"id": None, "error": {"code": -32600,
                                                    "message": "Binary messages are not supported"}})
            return
        self.factory.relay.client_text(self.client, payload)

    def onClose(self, wasClean, code, reason):
        if self.client is not None:
            self.factory.relay.client_lost(self.client)
            self.client = None


class ExtensionLinkProtocol(WebSocketServerProtocol):
    """The extension's CDP link (C{/extension/cdp})."""

    factory: _RelayFactory

    #: The relay's side of this link (autobahn's own C{peer} is the address string).
    link: _Peer | None = None

    #: The daemon's proof of identity, sent as the link's first message (see L{onConnect}).
    proof: str | None = None

    def onConnect(self, request):
        if request.path.rstrip("/") != EXTENSION_PATH:
            raise ConnectionDeny(404, "not found")
        origin = request.headers.get("origin", "")
        if not (origin.startswith("chrome-extension://") or origin.startswith("moz-extension://")):
            raise ConnectionDeny(403, "forbidden: the CDP link is for the Gasoline extension")
        identity = self.factory.identity
        if identity is not None:
            # The extension opens the link with its pairing session and a fresh nonce; the
            # daemon's first message proves it holds that session's key (docs/extension.md,
            # "Pairing"), so an impostor on the port never receives CDP traffic or drives a tab.
            session = (request.params.get("session") or [""])[0]
            nonce = (request.params.get("nonce") or [""])[0].encode("ascii", "replace")
            # ... and proves it holds the session key (the session is bound to the pinned
            # extension key): a session of another key is refused.
            try:
                ext_proof = unb64u((request.params.get("proof") or [""])[0] or None, "proof")
            except PairingError:
                ext_proof = None
            proof = identity.link_proof(session, nonce, ext_proof)
            if proof is None:
                raise ConnectionDeny(403, "unknown pairing session, or a session not of the "
                                          "pinned extension: pair again")
            self.proof = b64u(proof)
        return None

    def onOpen(self):
        if self.proof is not None:
            self.sendMessage(orjson.dumps({"method": "Gasoline.proof",
                                           "params": {"proof": self.proof}}))
        self.link = _Peer(self)
        self.factory.relay.extension_attached(self.link)

    def onMessage(self, payload, isBinary):
        if self.link is None or isBinary:
            return
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            log.warn("relay: the extension sent a message that is not JSON")
            return
        self.factory.relay.extension_message(self.link, message)

    def onClose(self, wasClean, code, reason):
        if self.link is not None:
            self.factory.relay.extension_lost(self.link)
            self.link = None


class _RelayFactory(WebSocketServerFactory):
    """The relay, and for the extension link the daemon's identity, for the protocols."""

    def __init__(self, relay: Relay, identity: DaemonIdentity | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.relay = relay
        self.identity = identity


def _factory(protocol, relay: Relay, clock, max_message: int, ping: bool,
             identity: DaemonIdentity | None = None) -> _RelayFactory:
    factory = _RelayFactory(relay, identity, reactor=clock)
    factory.protocol = protocol
    options: dict[str, Any] = dict(
        maxMessagePayloadSize=max_message, maxFramePayloadSize=max_message,
        perMessageCompressionAccept=lambda offers: None,  # loopback: compression only costs
    )
    if ping:
        options.update(autoPingInterval=EXTENSION_PING_INTERVAL,
                       autoPingTimeout=EXTENSION_PING_TIMEOUT)
    factory.setProtocolOptions(**options)
    factory.server = "Gasoline"
    return factory


def cdp_client_resource(relay: Relay, clock) -> WebSocketResource:
    """The resource for C{/cdp/<client-id>} (mount it on the first segment C{cdp})."""
    return WebSocketResource(_factory(CDPClientProtocol, relay, clock, MAX_CLIENT_MESSAGE, False))


def extension_link_resource(relay: Relay, clock, identity: DaemonIdentity | None = None
                            ) -> WebSocketResource:
    """The resource for C{/extension/cdp} (mount it on the first segment C{extension}).

    @param identity: the daemon's identity: the link is then opened only with a known pairing
        session and starts with the daemon's proof (C{None}: no pairing, tests of the relay).
    """
    factory = _factory(ExtensionLinkProtocol, relay, clock, MAX_EXTENSION_MESSAGE, True, identity)
    return WebSocketResource(factory)

"""
The CDP relay's two WebSocket endpoints on autobahn (L{gasoline.http.relay} answers their routes
with them and imports this module at their first request: autobahn is not loaded by an idle
daemon).
"""

from __future__ import annotations

import json
from typing import Any, cast

import orjson
from autobahn.twisted.resource import WebSocketResource
from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.types import ConnectionDeny, ConnectionRequest
from twisted.internet.interfaces import IConsumer, IReactorTime
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gasoline.core.trust.identity import PairingError, b64u, unb64u
from gasoline.core.inflight import InFlight
from gasoline.core.trust.pairing import DaemonIdentity
from gasoline.core.validate import json_tokens
from gasoline.http.relay_wire import (
    CDP_PREFIX,
    EXTENSION_PATH,
    EXTENSION_PING_INTERVAL,
    EXTENSION_PING_TIMEOUT,
    EXTENSION_MAX_JSON_TOKENS,
    MAX_CLIENT_MESSAGE,
    MAX_EXTENSION_MESSAGE,
)
from gasoline.relay.hub import CLIENT_ID, Relay
from gasoline.relay.model import IRelayPeer, RelayRefused
from gasoline.stream import MESSAGE_LIMIT, STALL_SECONDS, BoundedWriter, abort_transport

log = Logger()


def _dumps(message: dict) -> bytes:
    try:
        return orjson.dumps(message)
    except TypeError:  # an integer beyond 64 bits, ... : the stdlib encoder takes anything JSON
        return json.dumps(message).encode()


def _notice(dropped: int) -> bytes:
    return orjson.dumps({"method": "Gasoline.streamingPaused", "params": {
        "dropped": dropped, "message": f"the reader was too slow: {dropped} messages were not "
        "sent (the connection was paused at its buffer limit)"}})


def stream_writer(protocol: WebSocketServerProtocol, limit: int = MESSAGE_LIMIT,
                  stall: float = STALL_SECONDS) -> BoundedWriter:
    """The connection's L{gasoline.stream.BoundedWriter}, registered as its transport's producer
    in place of the HTTP channel that served the upgrade (which twisted.web leaves there)."""
    transport = protocol.transport

    def write(payload: bytes) -> None:
        if protocol.state == WebSocketServerProtocol.STATE_OPEN:
            protocol.sendMessage(payload, isBinary=False)

    writer = BoundedWriter(protocol.factory.clock, write, lambda: abort_transport(transport),
                           limit=limit, stall=stall, notice=_notice)
    if getattr(transport, "producer", None) is not None:
        # The web server's TCP transport is a consumer (ITransport does not say so).
        cast(Any, transport).unregisterProducer()
    return writer.attach(IConsumer(transport))


@implementer(IRelayPeer)
class _Peer:
    """The relay's view of one autobahn connection: messages go through its bounded writer."""

    def __init__(self, protocol: WebSocketServerProtocol) -> None:
        self.protocol = protocol
        self.writer = stream_writer(protocol)

    def send(self, message: dict) -> None:
        if self.protocol.state == WebSocketServerProtocol.STATE_OPEN:
            self.writer.send(_dumps(message))

    def close(self, code: int, reason: str) -> None:
        self.writer.close()
        self.protocol.sendClose(code, reason[:120])


#: The close code of a connection cut at the in-flight budget: RFC 6455's 1013 ("try again
#: later") in the application range (autobahn sends only 1000 and 3000-4999), as the relay's own
#: refusals are (4029 too many clients, 4408 idle).
CLOSE_TRY_AGAIN = 4013


class _InFlightMessages(WebSocketServerProtocol):
    """Unfinished incoming messages count in the daemon's in-flight budget
    (L{gasoline.core.inflight}) from their first byte to their delivery; a connection the budget
    needs room from is closed with L{CLOSE_TRY_AGAIN} and its partial message freed."""

    factory: _RelayFactory
    inflight_exempt = False

    def onMessageFrameData(self, payload: bytes) -> None:
        budget = self.factory.inflight
        if payload and budget is not None and not self.failedByMe \
                and not budget.take(self, len(payload)):
            budget.refuse(self)
            return
        super().onMessageFrameData(payload)

    def onMessageEnd(self) -> None:
        try:
            super().onMessageEnd()
        finally:
            self._release()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._release()
        super().connectionLost(reason)

    def _release(self) -> None:
        budget = self.factory.inflight
        if budget is not None:
            budget.release(self)

    def inflight_drop(self, why: str) -> None:
        self.message_data = []
        self.frame_data = []
        log.info("WebSocket {peer} closed: {why}", peer=self.peer, why=why)
        self.failedByMe = True  # autobahn ignores what the peer still sends
        if self.state == WebSocketServerProtocol.STATE_OPEN:
            self.sendClose(CLOSE_TRY_AGAIN, why[:120])
        if self.transport is not None:
            self.transport.loseConnection()  # after the close frame; no closing handshake


class CDPClientProtocol(_InFlightMessages):
    """One CDP client connection (C{/cdp/<client-id>})."""

    factory: _RelayFactory

    relay: Relay
    client = None
    client_id: str | None = None

    def onConnect(self, request: ConnectionRequest) -> None:
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

    def onOpen(self) -> None:
        try:
            self.client = self.factory.relay.client_connected(self.client_id, _Peer(self))
        except RelayRefused as e:
            self.sendClose(e.close_code, e.reason)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if self.client is None:
            return
        if isBinary:
            self.client.send({"id": None, "error": {"code": -32600,
                                                    "message": "Binary messages are not supported"}})
            return
        self.factory.relay.client_text(self.client, payload)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        if self.client is not None:
            self.client.peer.writer.close()
            self.factory.relay.client_lost(self.client)
            self.client = None


class ExtensionLinkProtocol(_InFlightMessages):
    """The extension's CDP link (C{/extension/cdp})."""

    factory: _RelayFactory
    #: Counted in the in-flight budget but never cut for it: the link is the paired extension's,
    #: one at a time, its messages bounded by MAX_EXTENSION_MESSAGE.
    inflight_exempt = True

    #: The relay's side of this link (autobahn's own C{peer} is the address string).
    link: _Peer | None = None

    #: The daemon's proof of identity, sent as the link's first message (see L{onConnect}).
    proof: str | None = None

    def onConnect(self, request: ConnectionRequest) -> None:
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

    def onOpen(self) -> None:
        self.link = _Peer(self)
        if self.proof is not None:
            self.link.writer.send(orjson.dumps({"method": "Gasoline.proof",
                                                "params": {"proof": self.proof}}))
        self.factory.relay.extension_attached(self.link)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if self.link is None or isBinary:
            return
        if json_tokens(payload) > EXTENSION_MAX_JSON_TOKENS:
            # The same structural limit as HTTP bodies (scaled for Chrome's big answers): no
            # message costs the reactor more than a bounded time to decode.
            log.warn("relay: the extension sent a message of more than {n} JSON values; dropped",
                     n=EXTENSION_MAX_JSON_TOKENS)
            return
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            log.warn("relay: the extension sent a message that is not JSON")
            return
        self.factory.relay.extension_message(self.link, message)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        if self.link is not None:
            self.link.writer.close()
            self.factory.relay.extension_lost(self.link)
            self.link = None


class _RelayFactory(WebSocketServerFactory):
    """The relay, and for the extension link the daemon's identity, for the protocols."""

    def __init__(self, protocol: type[WebSocketServerProtocol], relay: Relay,
                 identity: DaemonIdentity | None, clock: IReactorTime,
                 inflight: InFlight | None = None) -> None:
        super().__init__(reactor=clock, server="Gasoline")
        #: The protocol each connection runs (autobahn builds it from this attribute).
        self.protocol = protocol
        self.relay = relay
        self.identity = identity
        #: The daemon's in-flight budget (unfinished messages count in it), or None.
        self.inflight = inflight
        #: The clock of the streams' bounded writers (gasoline.stream).
        self.clock = clock


def _factory(protocol: type[WebSocketServerProtocol], relay: Relay, clock: IReactorTime,
             max_message: int, ping: bool,
             identity: DaemonIdentity | None = None,
             inflight: InFlight | None = None) -> _RelayFactory:
    factory = _RelayFactory(protocol, relay, identity, clock, inflight)
    options: dict[str, Any] = dict(
        maxMessagePayloadSize=max_message, maxFramePayloadSize=max_message,
        perMessageCompressionAccept=lambda offers: None,  # loopback: compression only costs
    )
    if ping:
        options.update(autoPingInterval=EXTENSION_PING_INTERVAL,
                       autoPingTimeout=EXTENSION_PING_TIMEOUT)
    factory.setProtocolOptions(**options)
    return factory


def cdp_client_resource(relay: Relay, clock: IReactorTime, inflight: InFlight | None = None
                        ) -> WebSocketResource:
    """The resource for C{/cdp/<client-id>} (L{gasoline.http.relay.RelaySockets} answers with it)."""
    return WebSocketResource(_factory(CDPClientProtocol, relay, clock, MAX_CLIENT_MESSAGE, False,
                                      inflight=inflight))


def extension_link_resource(relay: Relay, clock: IReactorTime,
                            identity: DaemonIdentity | None = None,
                            inflight: InFlight | None = None) -> WebSocketResource:
    """The resource for C{/extension/cdp} (L{gasoline.http.relay.RelaySockets} answers with it).

    @param identity: the daemon's identity: the link is then opened only with a known pairing
        session and starts with the daemon's proof (C{None}: no pairing, tests of the relay).
    """
    factory = _factory(ExtensionLinkProtocol, relay, clock, MAX_EXTENSION_MESSAGE, True, identity,
                       inflight)
    return WebSocketResource(factory)

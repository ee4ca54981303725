"""
The CDP relay's HTTP surface (docs/relay.md): DevTools discovery routes and two WebSocket endpoints.

 - C{GET /json/version} and C{/json/version/} (Playwright adds the slash): Chrome's answer, with a
   C{webSocketDebuggerUrl} that names a fresh client id (C{ws://<host>/cdp/<client-id>}), so two
   clients that discover over HTTP never share a connection slot;
 - C{GET /json/list}, C{/json}: the targets a new client would see (the user's exposed tabs);
 - C{GET /status}: C{{running, isHub, port, extension_connected, clients}} (seed 002's discovery);
 - C{/cdp/<client-id>} (WebSocket): a CDP client (C{/cdp} alone gets a generated id);
 - C{/extension/cdp} (WebSocket): the extension's CDP link; only an extension origin may open it.

All of them sit behind the daemon's guards (L{gasoline.http.guards}): CDP clients send no
C{Origin}; a web page's C{Origin} is refused before the upgrade. The WebSockets are autobahn's,
mounted in the same twisted.web site (L{WebSocketResource}); the factories take the injected
clock as their reactor.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from autobahn.twisted.resource import WebSocketResource
from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.types import ConnectionDeny
from klein import Klein
from twisted.logger import Logger
from werkzeug.exceptions import MethodNotAllowed, NotFound
from zope.interface import implementer

from gasoline.core.identity import DaemonIdentity, b64u
from gasoline.http.json import json_body, json_error
from gasoline.relay.hub import CLIENT_ID, IRelayPeer, Relay, RelayRefused

log = Logger()

#: Largest message a CDP client may send (a big C{Runtime.evaluate} or file upload fits).
MAX_CLIENT_MESSAGE = 64 * 1024 * 1024
#: Largest message the extension may send (a full-page screenshot answer fits).
MAX_EXTENSION_MESSAGE = 128 * 1024 * 1024
#: Seconds between the daemon's WebSocket pings to the extension, and how long it waits for the
#: pong before it drops a vanished extension (its clients then get errors, not a hang).
EXTENSION_PING_INTERVAL = 20
EXTENSION_PING_TIMEOUT = 20
#: Path prefix of the CDP client endpoint and the extension's path.
CDP_PREFIX = "/cdp"
EXTENSION_PATH = "/extension/cdp"


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

    peer: _Peer | None = None

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
            proof = identity.link_proof(session, nonce)
            if proof is None:
                raise ConnectionDeny(403, "unknown pairing session: pair again")
            self.proof = b64u(proof)
        return None

    def onOpen(self):
        if self.proof is not None:
            self.sendMessage(orjson.dumps({"method": "Gasoline.proof",
                                           "params": {"proof": self.proof}}))
        self.peer = _Peer(self)
        self.factory.relay.extension_attached(self.peer)

    def onMessage(self, payload, isBinary):
        if self.peer is None or isBinary:
            return
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            log.warn("relay: the extension sent a message that is not JSON")
            return
        self.factory.relay.extension_message(self.peer, message)

    def onClose(self, wasClean, code, reason):
        if self.peer is not None:
            self.factory.relay.extension_lost(self.peer)
            self.peer = None


def _factory(protocol, relay: Relay, clock, max_message: int, ping: bool) -> WebSocketServerFactory:
    factory = WebSocketServerFactory(reactor=clock)
    factory.protocol = protocol
    factory.relay = relay
    factory.identity = None
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
    factory = _factory(ExtensionLinkProtocol, relay, clock, MAX_EXTENSION_MESSAGE, True)
    factory.identity = identity
    return WebSocketResource(factory)


class RelayDiscoveryAPI:
    """C{/json/version}, C{/json/list}, C{/json} and C{/status} for one L{Relay}."""

    app = Klein()

    def __init__(self, relay: Relay) -> None:
        self.relay = relay

    def resource(self):
        return self.app.resource()

    def _origin(self, request) -> str:
        host = request.getHeader(b"host")
        if host:
            return host.decode("ascii", "replace")
        return f"127.0.0.1:{request.getHost().port}"

    def _ws_url(self, request) -> str:
        return f"ws://{self._origin(request)}{CDP_PREFIX}/{self.relay.new_client_id()}"

    @app.route("/json/version", methods=["GET"])
    @app.route("/json/version/", methods=["GET"])
    def version(self, request):
        info = self.relay.version_info()
        return json_body(request, {
            "Browser": info["product"],
            "Protocol-Version": info["protocolVersion"],
            "User-Agent": info["userAgent"],
            "V8-Version": "",
            "WebKit-Version": "",
            "webSocketDebuggerUrl": self._ws_url(request),
        })

    @app.route("/json", methods=["GET"])
    @app.route("/json/", methods=["GET"])
    @app.route("/json/list", methods=["GET"])
    @app.route("/json/list/", methods=["GET"])
    def targets(self, request):
        return json_body(request, [{
            "description": "",
            "devtoolsFrontendUrl": "",
            "id": t.target_id,
            "title": t.title,
            "type": "page",
            "url": t.url,
        } for t in self.relay.visible_targets(None)])

    @app.route("/status", methods=["GET"])
    def status(self, request):
        return json_body(request, {
            "running": True,
            "isHub": True,
            "port": request.getHost().port,
            "extension_connected": self.relay.extension_connected,
            "clients": len(self.relay.clients),
        })

    @app.handle_errors(NotFound)
    def not_found(self, request, failure):
        return json_error(request, 404, "not found")

    @app.handle_errors(MethodNotAllowed)
    def method_not_allowed(self, request, failure):
        request.setHeader(b"allow", b"GET")
        return json_error(request, 405, f"method {request.method.decode()} not allowed here")

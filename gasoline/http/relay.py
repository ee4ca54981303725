"""
The CDP relay's HTTP surface (docs/relay.md): DevTools discovery routes and two WebSocket endpoints.

 - C{GET /json/version} and C{/json/version/} (Playwright adds the slash): Chrome's answer, with a
   C{webSocketDebuggerUrl} that names a fresh client id (C{ws://<host>/cdp/<client-id>}), so two
   clients that discover over HTTP never share a connection slot;
 - C{GET /json/list}, C{/json}: the targets a new client would see (the user's exposed tabs);
 - C{GET /status}: C{{running, isHub, port, extension_connected, clients}} (the hub's status);
 - C{/cdp/<client-id>} (WebSocket): a CDP client (C{/cdp} alone gets a generated id);
 - C{/extension/cdp} (WebSocket): the extension's CDP link; only an extension origin may open it.

All of them sit behind the daemon's guards (L{gasoline.http.guards}): CDP clients send no
C{Origin}; a web page's C{Origin} is refused before the upgrade. The WebSockets are autobahn's
(L{gasoline.http.relay_ws}, imported at the first WebSocket request): L{RelaySockets} answers
their routes with them, in the same twisted.web site; the factories take the injected clock as
their reactor.
"""

from __future__ import annotations

from klein import Klein

from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.server import Request
from twisted.web.resource import IResource, Resource

from gasoline.core.inflight import InFlight
from gasoline.core.trust.pairing import DaemonIdentity
from gasoline.http.json import json_body, json_error
from gasoline.http.relay_wire import CDP_PREFIX
from gasoline.relay.hub import Relay

log = Logger()


class _OnFirstUse(Resource):
    """A WebSocket resource built at its first request: autobahn (and the cryptography its WAMP
    modules import, ~10 MiB with it) loads when a CDP client or the extension first connects, not
    at daemon start (docs/operations.md, "Idle memory")."""

    isLeaf = True

    def __init__(self, build: Callable[[], IResource]) -> None:
        super().__init__()
        self._build = build
        self._real: IResource | None = None

    def render(self, request: Request) -> bytes | int:
        upgrade = request.getHeader(b"upgrade") or b""
        if upgrade.strip().lower() != b"websocket":
            # A plain HTTP request (a browser tab, curl) gets a clear answer, and does not load
            # autobahn for nothing (its own answer would be an HTML page with a 200).
            request.setHeader(b"upgrade", b"websocket")
            return json_error(request, 426, "upgrade required: this is a WebSocket endpoint "
                              "(connect with a WebSocket client)")
        if self._real is None:
            self._real = self._build()
        return self._real.render(request)


def cdp_client_resource(relay: Relay, clock: IReactorTime,
                        inflight: InFlight | None = None) -> Resource:
    """The resource for C{/cdp/<client-id>} (L{RelaySockets} answers it);
    C{inflight}: the daemon's in-flight budget, which unfinished messages count in."""
    def build() -> IResource:
        from gasoline.http import relay_ws  # autobahn: on first use

        return relay_ws.cdp_client_resource(relay, clock, inflight)

    return _OnFirstUse(build)


def extension_link_resource(relay: Relay, clock: IReactorTime,
                            identity: DaemonIdentity | None = None,
                            inflight: InFlight | None = None) -> Resource:
    """The resource for C{/extension/cdp} (L{RelaySockets} answers it).

    @param identity: the daemon's identity: the link is then opened only with a known pairing
        session and starts with the daemon's proof (C{None}: no pairing, tests of the relay).
    """
    def build() -> IResource:
        from gasoline.http import relay_ws  # autobahn: on first use

        return relay_ws.extension_link_resource(relay, clock, identity, inflight)

    return _OnFirstUse(build)


class RelaySockets:
    """C{/cdp}, C{/cdp/<client-id>[/...]} and C{/extension/cdp}: each answers with its WebSocket
    resource (built at first use), which the root renders for the request."""

    app = Klein()

    def __init__(self, relay: Relay, clock: IReactorTime, identity: DaemonIdentity | None = None,
                 inflight: InFlight | None = None) -> None:
        self.cdp = cdp_client_resource(relay, clock, inflight)
        self.link = extension_link_resource(relay, clock, identity, inflight)

    @app.route("/cdp", methods=["GET"])
    @app.route("/cdp/<client>", methods=["GET"])
    @app.route("/cdp/<client>/<path:rest>", methods=["GET"])
    def cdp_client(self, request: Request, client: str = "", rest: str = "") -> Resource:
        return self.cdp

    @app.route("/extension/cdp", methods=["GET"])
    def extension_link(self, request: Request) -> Resource:
        return self.link


class RelayDiscoveryAPI:
    """C{/json/version}, C{/json/list}, C{/json} and C{/status} for one L{Relay}."""

    app = Klein()

    def __init__(self, relay: Relay) -> None:
        self.relay = relay

    def _origin(self, request: Request) -> str:
        host = request.getHeader(b"host")
        if host:
            return host.decode("ascii", "replace")
        return f"127.0.0.1:{request.getHost().port}"

    def _ws_url(self, request: Request) -> str:
        return f"ws://{self._origin(request)}{CDP_PREFIX}/{self.relay.new_client_id()}"

    @app.route("/json/version", methods=["GET"])
    @app.route("/json/version/", methods=["GET"])
    def version(self, request: Request) -> bytes:
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
    def targets(self, request: Request) -> bytes:
        return json_body(request, [{
            "description": "",
            "devtoolsFrontendUrl": "",
            "id": t.target_id,
            "title": t.title,
            "type": "page",
            "url": t.url,
        } for t in self.relay.visible_targets(None)])

    @app.route("/status", methods=["GET"])
    def status(self, request: Request) -> bytes:
        return json_body(request, {
            "running": True,
            "isHub": True,
            "port": request.getHost().port,
            "extension_connected": self.relay.extension_connected,
            "clients": len(self.relay.clients),
        })



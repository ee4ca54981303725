"""
C{/clients}: register, list and unregister agents (the daemon's admin surface)::

  POST   /clients          body C{{"client_id"?: str, "cwd"?: str}} (both optional)
                           -> 200 C{{"client_id", "connected_at", "inherited"}}
                           -> 429 C{{"error": "too_many_clients", ...}} past C{--max-clients}
                           -> 400 C{{"error": "invalid_param" | "bad_json", ...}}; C{cwd},
                           when given, must be an existing absolute directory
  GET    /clients          -> 200 C{registry.summary()}
  GET    /clients/{id}     -> 200 one client's summary, or 404
  DELETE /clients/{id}     -> 200 C{{"client_id", "gone", "connections", "ttl"}}: the state is kept
                           for the TTL, which starts now, or when the last live connection
                           (another terminal with the same id) ends; 404 C{unknown_client}

The identity rule is the registry's: C{client_id} if given, else the hash of C{cwd}, else random.
Registering or unregistering a client id the caller chose (C{client_id}, the hash of C{cwd}, the
path's id) needs that id's proof (C{X-Gasoline-Client: <id>} and C{X-Gasoline-Client-Proof},
L{gasoline.http.client_proof}), else 403 C{client_proof}; a C{POST} with neither C{client_id} nor
C{cwd} takes the proven C{X-Gasoline-Client} when one is sent, else a fresh random id.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from klein import Klein
from twisted.logger import Logger

from gasoline.common import client_id_for_cwd
from gasoline.core.clients.registry import validate_client_id
from gasoline.core.interfaces import IClientRegistry
from gasoline.core.errors import (
    ClientProofRefused,
    GasolineError,
    InvalidParam,
    TooManyClients,
    UnknownClient,
)
from gasoline.http.client_proof import claimed_client, require_client
from gasoline.http.json import json_body, read_json_object

if TYPE_CHECKING:
    from twisted.web.server import Request

log = Logger()

#: A registration body is tiny; anything larger is refused without parsing.
MAX_BODY = 64 * 1024

_STATUS = {TooManyClients: 429, UnknownClient: 404, InvalidParam: 400, ClientProofRefused: 403}


def check_cwd(cwd: Any) -> None:
    """Refuse a C{cwd} that is not an existing absolute directory: it bounds where
    tools read and write files for this client, so a guess or a typo must not be accepted."""
    if not isinstance(cwd, str):
        raise InvalidParam("cwd must be a string", param="cwd")
    if not cwd or "\x00" in cwd or not os.path.isabs(cwd):
        raise InvalidParam(f"cwd must be an absolute path: {cwd!r}", param="cwd")
    if not os.path.isdir(cwd):
        raise InvalidParam(f"cwd is not an existing directory: {cwd!r}", param="cwd")


def _error(request: Request, err: GasolineError) -> bytes:
    status = next((s for cls, s in _STATUS.items() if isinstance(err, cls)), 400)
    return json_body(request, err.to_json(), status)


class ClientsAPI:
    """The C{/clients} routes over the client registry (L{IClientRegistry})."""

    app = Klein()

    def __init__(self, registry: IClientRegistry) -> None:
        self.registry = registry

    @app.route("/clients", methods=["POST"])
    def register(self, request: Request) -> bytes:
        try:
            body = read_json_object(request, MAX_BODY)
            client_id = body.get("client_id")
            cwd = body.get("cwd")
            if client_id is not None and not isinstance(client_id, str):
                raise InvalidParam("client_id must be a string")
            if cwd is not None:
                check_cwd(cwd)
            key = self.registry.client_key
            named = client_id or (client_id_for_cwd(cwd) if cwd else None)
            if named is not None:
                require_client(request, key, validate_client_id(named))
            else:
                named = claimed_client(request, key)
            state = self.registry.register(named, cwd=cwd or None)
        except GasolineError as e:
            return _error(request, e)
        log.info("client {client_id} registered (inherited={inherited})",
                 client_id=state.client_id, inherited=state.inherited)
        return json_body(
            request,
            {
                "client_id": state.client_id,
                "connected_at": state.connected_at,
                "inherited": bool(state.inherited),
            },
        )

    @app.route("/clients", methods=["GET"])
    def list_clients(self, request: Request) -> bytes:
        return json_body(request, self.registry.summary())

    @app.route("/clients/<client_id>", methods=["GET"])
    def get_client(self, request: Request, client_id: str) -> bytes:
        state = self.registry.get(client_id)
        if state is None:
            return _error(request, UnknownClient(f"no client {client_id!r}", client_id=client_id))
        return json_body(request, state.summary())

    @app.route("/clients/<client_id>", methods=["DELETE"])
    def unregister(self, request: Request, client_id: str) -> bytes:
        try:
            require_client(request, self.registry.client_key, client_id)
            state = self.registry.unregister(client_id)
        except GasolineError as e:
            return _error(request, e)
        log.info("client {client_id} unregistered", client_id=client_id)
        return json_body(
            request,
            {
                "client_id": client_id,
                "gone": not state.live,
                "connections": state.connections,
                "ttl": self.registry.ttl,
            },
        )

"""
Who the caller is, as a client id: the one place that reads C{X-Gasoline-Client} for an agent.

A caller that names a client id (C{X-Gasoline-Client: <id>}) must prove it with
C{X-Gasoline-Client-Proof: <base64url HMAC-SHA256(client key, "gasoline-client-v1\\0" + id)>}
(L{gasoline.core.trust.clientkey}); without a valid proof the request is refused (403
C{client_proof}), never served as another id. A caller that names none is served as today, with
an id the daemon gives it. Every route that acts as a client id the caller chose calls
L{claimed_client}: the MCP connector form and legacy C{GET /mcp/sse} (L{gasoline.http.mcp_http}),
C{POST /clients} and C{DELETE /clients/<id>} (L{gasoline.http.clients_api}), C{POST /session/init}
(L{gasoline.http.proxy_api}); every route that takes a session id checks that the caller is
the session's owner (L{require_owner}); C{tests/test_client_proof.py} fails when any other module of the
daemon reads the header. (The extension's header gate, C{gasoline-extension/...} on its own
routes, is not an agent id and is read by L{gasoline.http.ingest}.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gasoline.core.trust.clientkey import ClientKey
from gasoline.core.clients.registry import ANONYMOUS_PREFIX, CLIENT_ID_RE
from gasoline.core.errors import ClientProofRefused, InvalidParam, SessionOwnerRefused
from gasoline.core.clients.session_ids import session_label, session_owner

if TYPE_CHECKING:
    from twisted.web.server import Request

#: Client ids the daemon gives callers that name none; naming them is refused (400), so an id a
#: caller proves is never one of them: the shared C{stateless} client, and the C{anon-...} ids
#: of L{gasoline.core.clients.registry.ClientRegistry.anonymous_client_id}.
RESERVED_IDS = frozenset({"stateless"})
#: The extension names itself C{gasoline-extension[/...]} on its own routes; an agent id never
#: does (it would be an agent id all the same, but no one should read it as the extension).
RESERVED_PREFIX = "gasoline-extension"

#: What the refusal says (the error's C{retry} says how to get a proof).
_REFUSED = ("forbidden: client proof: X-Gasoline-Client names client id {id!r} without a valid "
            "X-Gasoline-Client-Proof (a client id is whoever holds the daemon's client key, "
            "<state-dir>/client-key)")


def claimed_client(request: Request, key: ClientKey) -> str | None:
    """The client id C{request} proves it may act as, or C{None} when it names none.

    @raise InvalidParam: the id is malformed (or reserved for callers that name none).
    @raise ClientProofRefused: it names an id without that id's valid proof.
    """
    raw = request.getHeader(b"x-gasoline-client")
    if raw is None:
        return None
    client_id = raw.decode("utf-8", "replace")
    if not CLIENT_ID_RE.match(client_id) or client_id in RESERVED_IDS \
            or client_id.startswith((RESERVED_PREFIX, ANONYMOUS_PREFIX)):
        raise InvalidParam(
            "X-Gasoline-Client must be a client id: 1-64 characters of letters, digits, '.', '_' "
            "or '-' (not starting with '.' or '-'), and not one the daemon reserves "
            f"({', '.join(sorted(RESERVED_IDS))}, {ANONYMOUS_PREFIX}..., {RESERVED_PREFIX}...)", param="X-Gasoline-Client")
    if not key.verify(client_id, request.getHeader(b"x-gasoline-client-proof")):
        raise ClientProofRefused(_REFUSED.format(id=client_id), client_id=client_id)
    return client_id


def require_client(request: Request, key: ClientKey, client_id: str) -> None:
    """Refuse (L{ClientProofRefused}) unless C{request} proves C{client_id} (routes whose client
    id comes from the path or the body: C{DELETE /clients/<id>}, C{POST /clients})."""
    claimed = claimed_client(request, key)
    if claimed != client_id:
        raise ClientProofRefused(
            _REFUSED.format(id=client_id) if claimed is None else
            f"forbidden: client proof: this request acts as client id {client_id!r} but proves "
            f"{claimed!r}", client_id=client_id)


def require_owner(request: Request, key: ClientKey, client_id: str, session_id: str) -> None:
    """Refuse (L{SessionOwnerRefused}, 403) unless C{request} may use the session C{session_id}
    that was opened for C{client_id} (L{gasoline.core.clients.session_ids}): it proves that client id, or,
    for a session opened without one, names none. A named id with a wrong proof is refused by
    L{claimed_client} itself."""
    owner = session_owner(client_id)
    claimed = claimed_client(request, key)
    if claimed == owner:
        return
    label = session_label(session_id)
    if owner is None:
        raise SessionOwnerRefused(
            f"forbidden: session {label} was opened without a client id; this request names "
            f"client id {claimed!r}", client_id=claimed)
    raise SessionOwnerRefused(
        f"forbidden: session {label} belongs to a client id this request does not prove "
        "(send the X-Gasoline-Client and X-Gasoline-Client-Proof that opened it)",
        client_id=claimed)

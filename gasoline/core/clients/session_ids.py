"""
Session ids are credentials: the label the daemon shows instead, and who owns a session.

An MCP session id (C{Mcp-Session-Id}, the legacy C{/mcp/messages/<id>} path) and a proxy session
id (C{/session/<id>}) are 128 random bits handed once to the caller that opened the session (a
response header, the legacy C{endpoint} event, the C{/session/init} body). They are secrets:
everything the daemon I{shows} (the status page, C{/health}, logs, metrics, the tools' own
answers) names a session by its L{session_label}, a hash that cannot be turned back into the id.

And an id alone is not enough (L{session_owner}): a session opened by a caller that proved a
client id (C{X-Gasoline-Client} + C{X-Gasoline-Client-Proof}) is usable only by a request that
proves the same id; a session opened by a caller that named none (an C{anon-...} client id) only
by requests that name none, i.e. by whoever holds the id the daemon gave that caller. The check is
L{gasoline.http.client_proof.require_owner}.
"""

from __future__ import annotations

from gasoline.common import session_label
from gasoline.core.clients.registry import ANONYMOUS_PREFIX

#: Client ids the daemon gives callers that name none (besides C{anon-...}).
_UNNAMED = frozenset({"stateless"})


__all__ = ["session_label", "session_owner"]


def session_owner(client_id: str) -> str | None:
    """The client id a request must prove to use a session of C{client_id}: that id, or C{None}
    (the request must name none) for the ids the daemon gives callers that name none."""
    if client_id.startswith(ANONYMOUS_PREFIX) or client_id in _UNNAMED:
        return None
    return client_id

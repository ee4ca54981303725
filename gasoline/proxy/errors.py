"""The proxy's errors: each a L{gasoline.core.errors.GasolineError} with its own code."""

from __future__ import annotations

from gasoline.core.errors import GasolineError


class ProxyError(GasolineError):
    code = "proxy_error"


class SessionLimit(ProxyError):
    code = "too_many_sessions"
    retry = "End an idle session (DELETE /session/<id>) or raise proxy.maxSessions."


class ChildLimit(ProxyError):
    code = "too_many_children"
    retry = "End an idle session or raise proxy.maxChildrenPerServer."


class ServerLimit(ProxyError):
    """A proxied server's own limit (C{callsPerMinute}, C{maxResultBytes}) was hit: the error
    names the server and the field of the servers file."""

    code = "server_limit"


class UnknownSession(ProxyError):
    code = "unknown_session"
    retry = "Open a new session with POST /session/init."


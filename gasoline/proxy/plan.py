"""
A proxy session's plan: the C{/session/init} body checked, and each configured server as that
session will see it.

L{SessionRequest.from_body} validates the body (L{ProxyError} with code C{invalid_param} on bad
input); L{plan_session} decides, for every server of the daemon's file and of the project's, its
execution context (the session's C{preferences.executionContext} where the server allows an
override), its working and allowed directories, and how many local instances the session would
start. Nothing here starts a process or touches the manager's state: L{gasoline.proxy.session}
checks the limits against the plan and builds the session from it whole.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import attrs

from gasoline.proxy.config import LOCAL, REMOTE, ProxyConfig, ServerConfig
from gasoline.proxy.errors import ProxyError
from gasoline.proxy.peer import ServerPeer
from gasoline.proxy.remote import RemoteServer


@attrs.define(eq=False)
class SessionServer:
    """One configured server as one session sees it."""

    config: ServerConfig
    context: str
    enabled: bool
    reason: str | None = None
    working_directory: str | None = None
    allowed_directories: tuple[str, ...] = ()
    child: ServerPeer | None = None

    def attach(self, child: ServerPeer) -> None:
        """C{child} serves this server for the session (made once the session exists: its
        callbacks route to it)."""
        self.child = child

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"executionContext": self.context, "enabled": self.enabled}
        if self.context == LOCAL and self.working_directory is not None:
            d["workingDirectory"] = self.working_directory
            d["allowedDirectories"] = list(self.allowed_directories)
        elif self.context == REMOTE:
            if self.config.command is not None:  # what this session's calls are checked against
                d["allowedDirectories"] = list(self.allowed_directories)
            child = self.child
            d["endpoint"] = child.endpoint if isinstance(child, RemoteServer) else "internal"
            if isinstance(child, RemoteServer):
                d["transport"] = child.transport
        child = self.child
        if child is not None:
            d["status"] = child.state
            if child.restarts:
                d["restarts"] = child.restarts
            if child.state != "ready" and child.last_error:
                d["error"] = child.last_error
        if self.reason:
            d["reason"] = self.reason
        return d



@attrs.frozen
class SessionRequest:
    """A valid C{/session/init} body."""

    #: Absolute and normalised; an existing directory.
    working_directory: str
    client_info: dict[str, Any]
    capabilities: dict[str, Any]
    preferences: dict[str, Any]
    #: Server name -> the execution context the agent asks for (C{local} or C{remote}).
    overrides: dict[str, str]

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> "SessionRequest":
        """Check a C{/session/init} body. Blocking only for one C{stat} of the directory.

        @raise ProxyError: code C{invalid_param}, naming the field.
        """
        wd = body.get("workingDirectory")
        if not isinstance(wd, str) or not wd or not os.path.isabs(wd) or "\0" in wd:
            raise ProxyError('"workingDirectory" must be an absolute path', code="invalid_param")
        wd = os.path.normpath(wd)
        if not os.path.isdir(wd):
            raise ProxyError(f'"workingDirectory" {wd!r} is not a directory',
                             code="invalid_param")
        info = body.get("clientInfo", {})
        caps = body.get("capabilities", {})
        prefs = body.get("preferences", {})
        for key, value in (("clientInfo", info), ("capabilities", caps), ("preferences", prefs)):
            if not isinstance(value, dict):
                raise ProxyError(f'"{key}" must be an object', code="invalid_param")
        overrides = prefs.get("executionContext", {})
        if not isinstance(overrides, dict) or not all(
                isinstance(v, str) and v in (LOCAL, REMOTE) for v in overrides.values()):
            raise ProxyError('"preferences.executionContext" maps server names to "local" or '
                             '"remote"', code="invalid_param")
        return cls(wd, info, caps, prefs, overrides)


@attrs.frozen
class SessionPlan:
    """What a session will be: its servers, and the local instances it would start."""

    request: SessionRequest
    #: Server name -> the server as this session sees it (no child yet).
    servers: dict[str, SessionServer]
    #: Server name -> local instances this session would start (checked against
    #: C{proxy.maxChildrenPerServer} before anything starts).
    local_instances: dict[str, int]


def shared_cwd(server: ServerConfig, environ: Mapping[str, str]) -> str:
    """The working directory of a shared (C{remote}) C{command} server's process."""
    return os.path.expanduser(server.cwd) if server.cwd else environ.get("HOME", "/")


def plan_server(server: ServerConfig, request: SessionRequest,
                environ: Mapping[str, str]) -> SessionServer:
    """C{server} as the session of C{request} sees it: context, reason, directories."""
    wd = request.working_directory
    context = server.execution_context
    reason = server.reason
    asked = request.overrides.get(server.name)
    if asked is not None and asked != context and server.allow_override \
            and server.command is not None:
        context = asked
    if asked is not None and asked != context:
        reason = (reason + "; " if reason else "") + \
            f"executionContext stays {context}: this server does not allow overrides"
    working_directory: str | None = None
    allowed: tuple[str, ...] = ()
    if server.enabled and context == LOCAL:
        resolved = server.resolve(wd)
        working_directory = resolved.cwd
        allowed = resolved.allowed_directories
    elif server.enabled and server.command is not None:
        # A shared process, one for every session: this session's calls are checked
        # against this session's directories, relative paths taken from the process's
        # own directory (L{shared_cwd}).
        working_directory = shared_cwd(server, environ)
        allowed = server.resolve(wd).allowed_directories
    elif server.enabled:
        allowed = tuple(d for d in server.allowed_directories if os.path.isabs(d))
    return SessionServer(config=server, context=context, enabled=server.enabled, reason=reason,
                         working_directory=working_directory, allowed_directories=allowed)


def plan_session(config: ProxyConfig, extra: tuple[ServerConfig, ...], request: SessionRequest,
                 environ: Mapping[str, str]) -> SessionPlan:
    """Plan every server of the daemon's file, then the project's (C{extra}), for C{request}."""
    servers: dict[str, SessionServer] = {}
    local: dict[str, int] = {}
    for server in (*config.servers, *extra):
        entry = plan_server(server, request, environ)
        if entry.enabled and entry.context == LOCAL:
            local[server.name] = local.get(server.name, 0) + 1
        servers[server.name] = entry
    return SessionPlan(request, servers, local)

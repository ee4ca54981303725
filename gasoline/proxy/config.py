"""
The proxy's servers file: loading, validation and placeholder substitution.

The format is the one users already keep for Claude (C{{"mcpServers": {name: {...}}}}) plus a few
per-server fields (C{executionContext}, C{allowedDirectories}, C{timeout}, C{allowOverride}, the
server's own limits C{callsPerMinute}, C{maxResultBytes}, C{cpuSeconds}, C{memoryMB}) and
an optional top-level C{"proxy"} object with the daemon-wide limits. Every field is documented in
C{docs/proxy.md}; an unknown field, a wrong type or a bad value is a L{ProxyConfigError} at start
(the daemon refuses to start rather than silently ignore what the user wrote).

Two kinds of placeholders:
  - C{${VAR}} is replaced from the daemon's environment when the file is loaded; a server that
    names an unset variable is kept, but disabled with the reason C{Missing VAR}.
  - C{{workingDirectory}} is replaced per session (L{ServerConfig.resolve}).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

import attrs

#: A server name: it becomes the prefix of every aggregated tool name.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
_TOKEN_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
WORKING_DIRECTORY = "{workingDirectory}"

LOCAL = "local"
REMOTE = "remote"
CONTEXTS = (LOCAL, REMOTE)

DEFAULT_TIMEOUT = 60.0
DEFAULT_IDLE_TIMEOUT = 900.0
DEFAULT_MAX_SESSIONS = 16
DEFAULT_MAX_CHILDREN = 16
DEFAULT_START_TIMEOUT = 30.0

_SERVER_FIELDS = frozenset({
    "command", "args", "env", "cwd", "url", "headers", "enabled", "type", "executionContext",
    "allowedDirectories", "timeout", "allowOverride", "callsPerMinute", "maxResultBytes",
    "cpuSeconds", "memoryMB", "network",
})
#: A C{command} server's outbound network (C{docs/proxy.md}, "Network policy").
NETWORK_POLICIES = ("any", "loopback", "none")
_PROXY_FIELDS = frozenset({
    "sessionIdleTimeout", "maxSessions", "maxChildrenPerServer", "startTimeout",
    "allowProjectServers",
})
_TOP_FIELDS = frozenset({"mcpServers", "proxy"})


class ProxyConfigError(ValueError):
    """The servers file is invalid; the message names the file, the server and the field."""


def _substitute_env(value: str, environ: Mapping[str, str], missing: list[str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in environ:
            if name not in missing:
                missing.append(name)
            return ""
        return environ[name]

    return _ENV_RE.sub(repl, value)


@attrs.frozen
class Resolved:
    """A server's launch parameters for one session (placeholders replaced)."""

    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    allowed_directories: tuple[str, ...]


@attrs.frozen
class ServerConfig:
    """One entry of C{mcpServers}."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    enabled: bool = True
    #: Why the server is disabled (None when enabled).
    reason: str | None = None
    execution_context: str = LOCAL
    allowed_directories: tuple[str, ...] = (WORKING_DIRECTORY,)
    #: Seconds one request to this server may take.
    timeout: float = DEFAULT_TIMEOUT
    #: A session's C{preferences.executionContext} may change this server's context.
    allow_override: bool = False
    #: How a C{url} server is reached: C{streamable-http}, C{sse} (the legacy transport) or
    #: C{auto} (no C{type}: streamable HTTP, else the legacy transport).
    transport: str | None = None
    #: The server's own limits (None: off, the default): calls per minute per session, bytes of
    #: one result (its JSON), and for a C{command} server's process C{RLIMIT_CPU} seconds and
    #: C{RLIMIT_DATA} megabytes.
    calls_per_minute: int | None = None
    max_result_bytes: int | None = None
    cpu_seconds: int | None = None
    memory_mb: int | None = None
    #: C{any} (the default), C{loopback} (only a loopback of its own) or C{none} (no network at
    #: all): enforced with a network namespace where the platform allows it
    #: (L{gasoline.proxy.netpolicy}); a servers file asking for one that cannot be is refused.
    network: str = "any"

    def resolve(self, working_directory: str) -> Resolved:
        """Launch parameters with C{{workingDirectory}} replaced by C{working_directory}."""
        assert self.command is not None

        def sub(s: str) -> str:
            return s.replace(WORKING_DIRECTORY, working_directory)

        cwd = sub(self.cwd) if self.cwd else working_directory
        cwd = os.path.join(working_directory, cwd) if not os.path.isabs(cwd) else cwd
        dirs = []
        for d in self.allowed_directories:
            d = sub(d)
            d = os.path.normpath(os.path.join(working_directory, os.path.expanduser(d)))
            if d not in dirs:
                dirs.append(d)
        return Resolved(
            command=sub(self.command),
            args=tuple(sub(a) for a in self.args),
            env={k: sub(v) for k, v in self.env},
            cwd=os.path.normpath(cwd),
            allowed_directories=tuple(dirs),
        )


@attrs.frozen
class ProxyConfig:
    """The whole servers file."""

    servers: tuple[ServerConfig, ...] = ()
    source: str = "<memory>"
    session_idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_sessions: int = DEFAULT_MAX_SESSIONS
    max_children_per_server: int = DEFAULT_MAX_CHILDREN
    #: Seconds a child may take to start and answer C{initialize} + C{tools/list}.
    start_timeout: float = DEFAULT_START_TIMEOUT
    #: Project directories allowed to add servers in C{<dir>/.gasoline/servers.json}.
    allow_project_servers: tuple[str, ...] = ()

    def server(self, name: str) -> ServerConfig | None:
        for s in self.servers:
            if s.name == name:
                return s
        return None

    @property
    def enabled(self) -> bool:
        """At least one server is configured (whether or not it is enabled)."""
        return bool(self.servers)

    def project_allowed(self, working_directory: str) -> bool:
        wd = os.path.normpath(working_directory)
        return any(wd == os.path.normpath(d) for d in self.allow_project_servers)


def _fail(source: str, where: str, message: str) -> ProxyConfigError:
    return ProxyConfigError(f"{source}: {where}: {message}")


def _str_list(source: str, where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(source, where, "must be a list of strings")
    return tuple(value)


def _str_map(source: str, where: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _fail(source, where, "must be an object of string values")
    return tuple(value.items())


def _positive(source: str, where: str, value: Any, integer: bool = False) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not value > 0 or value == float("inf"):
        kind = "a positive integer" if integer else "a positive number of seconds"
        raise _fail(source, where, f"must be {kind}")
    return value


def parse_server(name: str, raw: Any, source: str,
                 environ: Mapping[str, str] | None = None) -> ServerConfig:
    """Validate one C{mcpServers} entry; substitute C{${VAR}} from C{environ}."""
    environ = os.environ if environ is None else environ
    where = f"mcpServers.{name}"
    if not isinstance(name, str) or not NAME_RE.match(name) or "__" in name:
        raise _fail(source, where, "a server name is 1-32 characters of [A-Za-z0-9_-], starting "
                    "with a letter or digit, without '__' (it prefixes tool names)")
    if not isinstance(raw, dict):
        raise _fail(source, where, "must be an object")
    unknown = sorted(set(raw) - _SERVER_FIELDS)
    if unknown:
        raise _fail(source, where, f"unknown field(s) {', '.join(unknown)} (known: "
                    f"{', '.join(sorted(_SERVER_FIELDS))})")
    missing: list[str] = []
    kw: dict[str, Any] = {"name": name}
    command, url = raw.get("command"), raw.get("url")
    if command is None and url is None:
        raise _fail(source, where, 'needs "command" (a stdio server) or "url" (a remote one)')
    if command is not None and url is not None:
        raise _fail(source, where, '"command" and "url" are exclusive')
    if command is not None:
        if not isinstance(command, str) or not command:
            raise _fail(source, f"{where}.command", "must be a non-empty string")
        kw["command"] = _substitute_env(command, environ, missing)
    if url is not None:
        if not isinstance(url, str) or not re.match(r"^https?://", url):
            raise _fail(source, f"{where}.url", "must be an http(s) URL")
        kw["url"] = _substitute_env(url, environ, missing)
    if "type" in raw and raw["type"] not in ("stdio", "http", "sse", "streamable-http"):
        raise _fail(source, f"{where}.type", "must be stdio, http, streamable-http or sse")
    if raw.get("type") == "stdio" and command is None:
        raise _fail(source, f"{where}.type", 'type "stdio" needs "command"')
    if raw.get("type") in ("http", "streamable-http", "sse") and url is None:
        raise _fail(source, f"{where}.type", f'type "{raw["type"]}" needs "url"')
    for field in ("args", "env", "cwd"):
        if field in raw and url is not None:
            raise _fail(source, f"{where}.{field}", 'only for a server run by "command"')
    if "headers" in raw and url is None:
        raise _fail(source, f"{where}.headers", 'only for a server reached by "url"')
    if url is not None:
        # No type: streamable HTTP, falling back to the legacy SSE transport (auto).
        kw["transport"] = {"sse": "sse", "http": "streamable-http",
                           "streamable-http": "streamable-http"}.get(str(raw.get("type")), "auto")
    if "args" in raw:
        kw["args"] = tuple(_substitute_env(a, environ, missing)
                           for a in _str_list(source, f"{where}.args", raw["args"]))
    if "env" in raw:
        kw["env"] = tuple((k, _substitute_env(v, environ, missing))
                          for k, v in _str_map(source, f"{where}.env", raw["env"]))
    if "headers" in raw:
        kw["headers"] = tuple((k, _substitute_env(v, environ, missing))
                              for k, v in _str_map(source, f"{where}.headers", raw["headers"]))
        for k, v in kw["headers"]:
            if not _TOKEN_RE.match(k):
                raise _fail(source, f"{where}.headers", f"{k!r} is not a valid header name")
            if "\r" in v or "\n" in v or not v.isascii():
                raise _fail(source, f"{where}.headers.{k}", "must be printable ASCII on one line "
                            "(after ${VAR} substitution)")
    if "cwd" in raw:
        if not isinstance(raw["cwd"], str) or not raw["cwd"]:
            raise _fail(source, f"{where}.cwd", "must be a non-empty string")
        kw["cwd"] = _substitute_env(raw["cwd"], environ, missing)
    if "enabled" in raw:
        if not isinstance(raw["enabled"], bool):
            raise _fail(source, f"{where}.enabled", "must be true or false")
        kw["enabled"] = raw["enabled"]
        if not raw["enabled"]:
            kw["reason"] = "Disabled in the configuration"
    if "executionContext" in raw:
        if raw["executionContext"] not in CONTEXTS:
            raise _fail(source, f"{where}.executionContext", 'must be "local" or "remote"')
        kw["execution_context"] = raw["executionContext"]
    elif url is not None:
        kw["execution_context"] = REMOTE
    if url is not None and kw.get("execution_context") == LOCAL:
        raise _fail(source, f"{where}.executionContext", 'a "url" server is always "remote"')
    if "allowedDirectories" in raw:
        kw["allowed_directories"] = tuple(
            _substitute_env(d, environ, missing)
            for d in _str_list(source, f"{where}.allowedDirectories", raw["allowedDirectories"]))
    if "timeout" in raw:
        # Claude's own files give milliseconds for some clients; we take seconds (documented).
        kw["timeout"] = float(_positive(source, f"{where}.timeout", raw["timeout"]))
    if "allowOverride" in raw:
        if not isinstance(raw["allowOverride"], bool):
            raise _fail(source, f"{where}.allowOverride", "must be true or false")
        kw["allow_override"] = raw["allowOverride"]
    for field, attr in (("callsPerMinute", "calls_per_minute"),
                        ("maxResultBytes", "max_result_bytes"), ("cpuSeconds", "cpu_seconds"),
                        ("memoryMB", "memory_mb")):
        if field in raw:
            if field in ("cpuSeconds", "memoryMB") and url is not None:
                raise _fail(source, f"{where}.{field}", 'only for a server run by "command" '
                            "(a limit of its process)")
            kw[attr] = _positive(source, f"{where}.{field}", raw[field], True)
    if "network" in raw:
        if raw["network"] not in NETWORK_POLICIES:
            raise _fail(source, f"{where}.network", 'must be "any", "loopback" or "none"')
        if url is not None and raw["network"] != "any":
            raise _fail(source, f"{where}.network", 'only for a server run by "command" (the '
                        "daemon itself connects to a url server)")
        kw["network"] = raw["network"]
    server = ServerConfig(**kw)
    if missing and server.enabled:
        server = attrs.evolve(server, enabled=False, reason="Missing " + ", ".join(missing))
    return server


def parse(raw: Any, source: str = "<memory>",
          environ: Mapping[str, str] | None = None) -> ProxyConfig:
    """Validate a decoded servers file."""
    if not isinstance(raw, dict):
        raise _fail(source, "top level", "must be an object")
    unknown = sorted(set(raw) - _TOP_FIELDS)
    if unknown:
        raise _fail(source, "top level", f"unknown field(s) {', '.join(unknown)} "
                    "(known: mcpServers, proxy)")
    servers_raw = raw.get("mcpServers", {})
    if not isinstance(servers_raw, dict):
        raise _fail(source, "mcpServers", "must be an object")
    servers = tuple(parse_server(name, spec, source, environ) for name, spec in servers_raw.items())
    kw: dict[str, Any] = {"servers": servers, "source": source}
    proxy = raw.get("proxy", {})
    if not isinstance(proxy, dict):
        raise _fail(source, "proxy", "must be an object")
    unknown = sorted(set(proxy) - _PROXY_FIELDS)
    if unknown:
        raise _fail(source, "proxy", f"unknown field(s) {', '.join(unknown)} "
                    f"(known: {', '.join(sorted(_PROXY_FIELDS))})")
    if "sessionIdleTimeout" in proxy:
        kw["session_idle_timeout"] = float(
            _positive(source, "proxy.sessionIdleTimeout", proxy["sessionIdleTimeout"]))
    if "startTimeout" in proxy:
        kw["start_timeout"] = float(_positive(source, "proxy.startTimeout", proxy["startTimeout"]))
    if "maxSessions" in proxy:
        kw["max_sessions"] = _positive(source, "proxy.maxSessions", proxy["maxSessions"], True)
    if "maxChildrenPerServer" in proxy:
        kw["max_children_per_server"] = _positive(
            source, "proxy.maxChildrenPerServer", proxy["maxChildrenPerServer"], True)
    if "allowProjectServers" in proxy:
        dirs = _str_list(source, "proxy.allowProjectServers", proxy["allowProjectServers"])
        if not all(os.path.isabs(os.path.expanduser(d)) for d in dirs):
            raise _fail(source, "proxy.allowProjectServers", "must list absolute directories")
        kw["allow_project_servers"] = tuple(os.path.normpath(os.path.expanduser(d)) for d in dirs)
    return ProxyConfig(**kw)


def load(path: str | Path, environ: Mapping[str, str] | None = None) -> ProxyConfig:
    """Read and validate the servers file at C{path} (start-up only: a blocking read)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ProxyConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ProxyConfigError(f"{path}: not valid JSON: {e}") from None
    return parse(raw, str(path), environ)


#: Largest project servers file read.
MAX_PROJECT_FILE = 256 * 1024


def project_servers(config: ProxyConfig, working_directory: str,
                    environ: Mapping[str, str] | None = None) -> tuple[ServerConfig, ...]:
    """Servers a project adds in C{<working_directory>/.gasoline/servers.json}, if the user
    allowed that directory (C{proxy.allowProjectServers}); () otherwise.

    A project may only add servers: a name the daemon's file already uses is an error.
    """
    if not config.project_allowed(working_directory):
        return ()
    path = Path(working_directory) / ".gasoline" / "servers.json"
    try:
        with path.open("rb") as f:
            data = f.read(MAX_PROJECT_FILE + 1)
    except FileNotFoundError:
        return ()
    except OSError as e:
        raise ProxyConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(data) > MAX_PROJECT_FILE:
        raise ProxyConfigError(f"{path}: larger than {MAX_PROJECT_FILE} bytes")
    try:
        raw = json.loads(data)
    except ValueError as e:
        raise ProxyConfigError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(raw, dict) or set(raw) - {"mcpServers"}:
        raise ProxyConfigError(f'{path}: a project file holds only "mcpServers"')
    extra = parse(raw, str(path), environ).servers
    for s in extra:
        if config.server(s.name) is not None:
            raise ProxyConfigError(f"{path}: mcpServers.{s.name}: the daemon's file already "
                                   "defines this server")
    return extra

"""
The guards every request passes before any route runs (extension-protocol.md §1).

L{Guard.check} runs first for every request (the root resource calls it) and either returns
C{None} (go on; CORS headers are already set on the response) or the JSON body of a refusal:

 1. C{Host} must be C{localhost}, C{127.0.0.1} or C{[::1]} (any port) or absent, else 403
    (DNS-rebinding guard);
 2. C{Origin}, when present, is a browser page or extension calling us (SDK clients, the
    connector and curl send none and are not affected). It is accepted only
      - from C{chrome-extension://<id>} / C{moz-extension://<id>} (C{[a-z0-9_-]+}; only the
        pinned ids when C{extension_ids} is set) and only on the extension routes (the ingest API
        and C{/health}), or
      - from an origin opted in with C{--allow-origin} (C{allowed_origins}), or the daemon's own
        origin (C{http://} + the loopback C{Host}: only a page the daemon served could send it,
        and it serves none), on every route but C{/shutdown}.
    Everything else is 403 C{{"error":"forbidden: invalid origin"}} (a web page, including one
    served from C{http://localhost:<port>}, on any route; any browser origin on the MCP,
    C{/clients}, admin and C{/shutdown} routes), preflight included, and the refusal carries no
    CORS header, so the browser does not even let the page read it (docs/security.md);
 3. CORS: the accepted origin is echoed (never C{*}) with the allowed methods and headers, on
    every response;
 4. C{OPTIONS} (preflight) -> 204;
 5. body over the route's limit (C{/logs} 10 MB, everything else 5 MB) -> 413; a body with more
    than L{MAX_JSON_TOKENS} JSON separators (C{E{lb}}, C{[} and C{,}, counted without parsing)
    -> 413, so no request can hold the reactor for seconds of decoding;
 6. with an C{api_key}, MCP (C{/mcp...}, C{/session...}) and admin (C{/clients},
    C{/metrics}) routes need C{X-Gasoline-Key: <key>} (or C{Authorization: Bearer <key>}),
    else 401. The key never guards the extension routes, C{/health} or preflight (the extension never
    sends it).

The extension header gate (C{X-Gasoline-Client: gasoline-extension...}) is per route and lives in
L{gasoline.http.ingest}.
"""

from __future__ import annotations

import hmac
import re

import attrs

from gasoline.core.validate import MAX_JSON_TOKENS, json_tokens
from gasoline.http.json import json_error
from gasoline.http.request import body_length, body_limit_for

ALLOW_METHODS = b"GET, POST, DELETE, OPTIONS"
#: The extension's headers (extension-protocol.md §1), then the MCP streamable-HTTP headers a
#: browser-based MCP client must be allowed to send, and the connector's connection id.
ALLOW_HEADERS = (
    b"Content-Type, X-Gasoline-Client, X-Gasoline-Extension-Version, X-Gasoline-Key, "
    b"Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, X-Gasoline-Connection, Authorization"
)

_LOOPBACK_HOSTS = frozenset({b"localhost", b"127.0.0.1", b"[::1]"})
_PORT = re.compile(rb"\d{1,5}")
_EXTENSION_ORIGIN = re.compile(rb"(chrome-extension|moz-extension)://([a-z0-9_-]+)")
#: Bodies at most this long cannot hold more than MAX_JSON_TOKENS values: not counted.
_TOKEN_CHECK_FROM = MAX_JSON_TOKENS

#: First path segments that the optional API key guards (MCP transports and admin routes).
KEYED_SEGMENTS: tuple[bytes, ...] = (b"mcp", b"clients", b"metrics", b"events", b"session")
#: First path segments that no extension origin may use (MCP, client and admin routes).
AGENT_SEGMENTS: frozenset[bytes] = frozenset({b"mcp", b"clients", b"metrics", b"events",
                                         b"sse", b"messages", b"session"})
#: Paths no browser origin may use at all, not even one opted in with --allow-origin.
NO_BROWSER_PATHS: frozenset[bytes] = frozenset({b"/shutdown"})
_WEB_ORIGIN = re.compile(r"(https?)://([a-z0-9.-]+|\[[0-9a-f:.]+\])(?::(\d{1,5}))?", re.I)


def normalize_origin(value: str) -> str:
    """The canonical form of an C{--allow-origin} value (C{scheme://host[:port]}, lower case,
    default port dropped). @raise ValueError: not an C{http(s)://host[:port]} origin."""
    text = value.strip().rstrip("/")
    m = _WEB_ORIGIN.fullmatch(text)
    if m is None:
        raise ValueError(f"{value!r} is not an origin (expected http(s)://host[:port])")
    scheme, host, port = m.group(1).lower(), m.group(2).lower(), m.group(3)
    if port is not None:
        if int(port) > 65535:
            raise ValueError(f"{value!r}: port out of range")
        if int(port) == {"http": 80, "https": 443}[scheme]:
            port = None
    return f"{scheme}://{host}" + (f":{port}" if port else "")


def host_allowed(host: bytes | None) -> bool:
    """Is C{host} (a C{Host} header value) a loopback name with an optional port, or absent?"""
    if host is None:
        return True
    host = host.strip().lower()
    if host.startswith(b"["):
        end = host.find(b"]")
        if end < 0:
            return False
        name, rest = host[: end + 1], host[end + 1 :]
    else:
        name, sep, port = host.partition(b":")
        rest = sep + port
    if rest and not (rest[:1] == b":" and _PORT.fullmatch(rest[1:]) and int(rest[1:]) <= 65535):
        return False
    return name in _LOOPBACK_HOSTS


def _first_segment(path: bytes) -> bytes:
    return path[1:].split(b"/", 1)[0] if path.startswith(b"/") else path.split(b"/", 1)[0]


@attrs.define
class Guard:
    """See the module docstring. Build it with L{Guard.from_config}."""

    #: Pinned extension ids (empty: any well-formed id).
    extension_ids: frozenset[str] = attrs.field(factory=frozenset, converter=frozenset)
    api_key: str | None = None
    keyed_segments: tuple[bytes, ...] = KEYED_SEGMENTS
    #: Web origins opted in with C{--allow-origin} (normalized, see L{normalize_origin}).
    allowed_origins: frozenset[str] = attrs.field(factory=frozenset, converter=frozenset)

    @classmethod
    def from_config(cls, config) -> "Guard":
        return cls(extension_ids=config.extension_ids, api_key=config.api_key or None,
                   allowed_origins=getattr(config, "allowed_origins", ()))

    def origin_allowed(self, origin: bytes, path: bytes = b"/health",
                       host: bytes | None = None) -> bool:
        """May a browser at C{origin} use the route at C{path}? (see the module docstring)"""
        if path in NO_BROWSER_PATHS:
            return False
        if host is not None and origin.lower() == b"http://" + host.strip().lower():
            # Same origin as the daemon itself (the Host already passed the loopback check): only
            # a page the daemon served could send it, and the daemon serves none.
            return True
        if self.allowed_origins:
            try:
                if normalize_origin(origin.decode("ascii")) in self.allowed_origins:
                    return True
            except (UnicodeDecodeError, ValueError):
                pass
        m = _EXTENSION_ORIGIN.fullmatch(origin)
        if m is None or _first_segment(path) in AGENT_SEGMENTS:
            return False
        return not self.extension_ids or m.group(2).decode() in self.extension_ids

    def check(self, request) -> bytes | None:
        """C{None} to go on, else the body of the refusal (status and headers already set)."""
        if not host_allowed(request.getHeader(b"host")):
            return json_error(request, 403, "forbidden: invalid host")
        origin = request.getHeader(b"origin")
        if origin is not None:
            if not self.origin_allowed(origin, request.path, request.getHeader(b"host")):
                return json_error(request, 403, "forbidden: invalid origin")
            request.setHeader(b"access-control-allow-origin", origin)
            request.setHeader(b"vary", b"Origin")
        request.setHeader(b"access-control-allow-methods", ALLOW_METHODS)
        request.setHeader(b"access-control-allow-headers", ALLOW_HEADERS)
        if request.method == b"OPTIONS":
            request.setHeader(b"access-control-max-age", b"600")
            if request.getHeader(b"access-control-request-private-network") == b"true":
                request.setHeader(b"access-control-allow-private-network", b"true")
            request.setResponseCode(204)
            return b""
        path = request.path
        limit = body_limit_for(path)
        length = body_length(request)
        if length > limit:
            return json_error(
                request, 413, f"request body too large (limit {limit} bytes)", limit=limit
            )
        if length > _TOKEN_CHECK_FROM and request.content is not None:
            tokens = json_tokens(request.content.getvalue())
            if tokens > MAX_JSON_TOKENS:
                return json_error(
                    request, 413,
                    f"request body has too many JSON values ({tokens:,} separators; limit "
                    f"{MAX_JSON_TOKENS:,} per request)", limit=MAX_JSON_TOKENS)
        if self.api_key is not None and _first_segment(path) in self.keyed_segments:
            if not self._key_ok(request):
                request.setHeader(b"www-authenticate", b'Bearer realm="gasoline"')
                return json_error(request, 401, "unauthorized: missing or invalid X-Gasoline-Key")
        return None

    def _key_ok(self, request) -> bool:
        assert self.api_key is not None  # called only when a key is set
        expected = self.api_key.encode()
        given = request.getHeader(b"x-gasoline-key")
        if given is None:
            auth = request.getHeader(b"authorization") or b""
            if auth[:7].lower() == b"bearer ":
                given = auth[7:].strip()
        return given is not None and hmac.compare_digest(given, expected)

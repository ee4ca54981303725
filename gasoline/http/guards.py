"""
The guards every request passes before any route runs (extension-protocol.md §1), read from the
route policy of L{gasoline.http.routes}.

The root resource canonicalises the path and finds the request's L{Route} first (a path that is
not canonical is 400, one that names no route 404, both before any route runs), then
L{Guard.check} either returns C{None} (go on; CORS headers are already set on the response) or
the JSON body of a refusal:

 1. C{Host} must be C{localhost}, C{127.0.0.1} or C{[::1]} (any port) or absent, else 403
    (DNS-rebinding guard);
 2. C{Origin}, when present, is a browser page or extension calling us (SDK clients, the
    connector, CDP clients and curl send none). It is classified once: the extension
    (C{chrome-extension://<id>} / C{moz-extension://<id>}, C{[a-z0-9_-]+}, only the pinned ids
    when C{extension_ids} is set), an opted-in origin (C{--allow-origin}, or the daemon's own
    origin C{http://} + the loopback C{Host}), or anything else (a web page, another extension).
    The route's L{Origins} says which classes it accepts; every other origin is 403
    C{{"error":"forbidden: invalid origin"}}, preflight included, without CORS headers;
 3. a request without C{Origin} that carries C{Sec-Fetch-*} headers is a browser's navigation,
    iframe, C{<img>}, form POST or C{no-cors} fetch: 403 C{forbidden: browser request} on every
    route but those the table marks C{browser} (C{/health}, a public page) -- except an
    extension's own origin-less GET (L{is_extension_fetch}: C{Sec-Fetch-Site: none}, which no
    web page can send), on the routes that accept the extension;
 4. CORS: the accepted origin is echoed (never C{*}) with the allowed methods and headers, on
    every response; C{OPTIONS} (preflight) -> 204;
 5. body over the route's limit (C{/logs} 10 MB, everything else 5 MB) -> 413; a body with more
    than L{MAX_JSON_TOKENS} JSON separators (C{E{lb}}, C{[} and C{,}, counted without parsing)
    -> 413, so no request can hold the reactor for seconds of decoding (on a route that opens
    sealed bodies the handler counts the plaintext instead: L{json_values_refusal});
 6. with an C{api_key}, a route whose L{Key} is C{ALWAYS} (every route but C{/health} and the
    extension's own) needs C{X-Gasoline-Key: <key>} (or C{Authorization: Bearer <key>}), else
    401; a C{UNLESS_EXTENSION} route (pairing, the extension's CDP link) needs it unless the
    request carries an accepted extension C{Origin}. Preflight never needs it. Whether the
    caller proved the key is noted in the request's facts (L{gasoline.core.trust.request_facts};
    C{/health} lists client ids only then).

The extension header gate (C{X-Gasoline-Client: gasoline-extension...}) is per route and lives in
L{gasoline.http.ingest}.
"""

from __future__ import annotations

import hmac
import re
from io import BytesIO
from typing import TYPE_CHECKING, Iterable

import attrs

from gasoline.core.trust.request_facts import note_key
from gasoline.core.validate import MAX_JSON_TOKENS, json_tokens
from gasoline.http.json import json_error
from gasoline.http.request import GasolineRequest, body_length, body_limit_for
from gasoline.http.routes import Key, Origins, Route

if TYPE_CHECKING:
    from twisted.web.server import Request

    from gasoline.config import Config

ALLOW_METHODS = b"GET, POST, DELETE, OPTIONS"
#: The extension's headers (extension-protocol.md §1), then the MCP streamable-HTTP headers a
#: browser-based MCP client must be allowed to send, and the connector's connection id and
#: client id proof (gasoline.http.client_proof).
ALLOW_HEADERS = (
    b"Content-Type, X-Gasoline-Client, X-Gasoline-Extension-Version, X-Gasoline-Key, "
    b"Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, X-Gasoline-Connection, Authorization, "
    b"X-Gasoline-Client-Proof"
)

_LOOPBACK_HOSTS = frozenset({b"localhost", b"127.0.0.1", b"[::1]"})
_PORT = re.compile(rb"\d{1,5}")
_EXTENSION_ORIGIN = re.compile(rb"(chrome-extension|moz-extension)://([a-z0-9_-]+)")
#: Bodies at most this long cannot hold more than MAX_JSON_TOKENS values: not counted.
_TOKEN_CHECK_FROM = MAX_JSON_TOKENS
#: (The same, for the sealed routes' handlers: a body received this short is not counted.)
JSON_VALUES_COUNTED_FROM = _TOKEN_CHECK_FROM

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


#: What a browser's own requests (navigations, iframes, images, forms, scripts, no-cors fetches,
#: which carry no C{Origin} when they are GETs) are recognised by: a browser sends
#: C{Sec-Fetch-Site} on every request to a loopback or https URL, with C{Sec-Fetch-Mode} and
#: C{Sec-Fetch-Dest}. Node's C{fetch} (undici: the MCP SDK, Puppeteer, Playwright) sends
#: C{Sec-Fetch-Mode: cors} alone, and is not a browser.
_BROWSER_MODES = frozenset({b"navigate", b"no-cors", b"nested-navigate", b"websocket"})


def is_browser_request(request: Request) -> bool:
    """Did a browser send C{request}? (an C{Origin}, C{Sec-Fetch-Site} or C{Sec-Fetch-User}, a
    navigation or C{no-cors} C{Sec-Fetch-Mode}, or a C{Sec-Fetch-Dest} other than C{empty})"""
    header = request.getHeader
    if header(b"origin") is not None or header(b"sec-fetch-site") is not None \
            or header(b"sec-fetch-user") is not None:
        return True
    if header(b"sec-fetch-mode") in _BROWSER_MODES:
        return True
    dest = header(b"sec-fetch-dest")
    return dest is not None and dest != b"empty"


def is_extension_fetch(request: Request) -> bool:
    """Is C{request} an origin-less C{fetch} from an extension with host permissions?

    Chromium sends no C{Origin} on an extension's GET, and marks it C{Sec-Fetch-Site: none},
    C{Sec-Fetch-Mode: cors}, C{Sec-Fetch-Dest: empty} (seen in tests/e2e). A web page can never
    send C{Sec-Fetch-Site: none} (it is for requests the user or an extension starts), and a
    navigation the user types is C{Sec-Fetch-Mode: navigate}. Which extension it is cannot be
    told: C{--extension-id} holds only for requests with an C{Origin}.
    """
    return (request.getHeader(b"origin") is None
            and request.getHeader(b"sec-fetch-site") == b"none"
            and request.getHeader(b"sec-fetch-mode") in (b"cors", b"same-origin")
            and request.getHeader(b"sec-fetch-dest") in (b"empty", None))


def json_values_refusal(request: Request) -> bytes | None:
    """The 413 of a body with more than L{MAX_JSON_TOKENS} JSON separators, counted on
    C{request.content} as it will be parsed (without parsing it), else C{None}. The guard calls
    it for every route but the sealed ones (L{Route.sealed}), whose handler counts the opened
    body instead (L{body_values_refusal}, in L{gasoline.http.ingest.extension_session}): a
    sealed body's ciphertext is capped by bytes only, its plaintext by values."""
    content = request.content
    if content is None:
        return None
    if isinstance(request, GasolineRequest) and request.body_length <= _TOKEN_CHECK_FROM:
        return None  # a body (or a sealed body's plaintext, shorter) this short is under it
    if isinstance(content, BytesIO):
        with content.getbuffer() as view:
            if view.nbytes <= _TOKEN_CHECK_FROM:
                return None
        body = content.getvalue()
    else:
        position = content.tell()
        content.seek(0)
        body = content.read()
        content.seek(position)
    return body_values_refusal(request, body)


def body_values_refusal(request: Request, body: bytes) -> bytes | None:
    """The 413 of C{request} when C{body} (what its route parses) has more than
    L{MAX_JSON_TOKENS} JSON separators, else C{None}."""
    if len(body) <= _TOKEN_CHECK_FROM:
        return None
    tokens = json_tokens(body)
    if tokens <= MAX_JSON_TOKENS:
        return None
    return json_error(
        request, 413,
        f"request body has too many JSON values ({tokens:,} separators; limit "
        f"{MAX_JSON_TOKENS:,} per request)", limit=MAX_JSON_TOKENS)


class OriginKind:
    """What an C{Origin} value is (see L{Guard.origin_kind})."""

    EXTENSION = "extension"
    OPTED_IN = "opted-in"
    OTHER = "other"


_ACCEPTS: dict[Origins, frozenset[str]] = {
    Origins.NONE: frozenset(),
    Origins.EXTENSION: frozenset({OriginKind.EXTENSION}),
    Origins.OPTED_IN: frozenset({OriginKind.OPTED_IN}),
    Origins.EXTENSION_OR_OPTED_IN: frozenset({OriginKind.EXTENSION, OriginKind.OPTED_IN}),
}


def _frozen(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


@attrs.define
class Guard:
    """See the module docstring. Build it with L{Guard.from_config}."""

    #: Pinned extension ids (empty: any well-formed id).
    extension_ids: frozenset[str] = attrs.field(factory=frozenset, converter=_frozen)
    api_key: str | None = None
    #: Web origins opted in with C{--allow-origin} (normalized, see L{normalize_origin}).
    allowed_origins: frozenset[str] = attrs.field(factory=frozenset, converter=_frozen)

    @classmethod
    def from_config(cls, config: Config) -> "Guard":
        return cls(extension_ids=config.extension_ids, api_key=config.api_key or None,
                   allowed_origins=config.allowed_origins)

    def origin_kind(self, origin: bytes, host: bytes | None = None) -> str:
        """The class of C{origin}: the (pinned) extension, an opted-in web origin, or other."""
        if host is not None and origin.lower() == b"http://" + host.strip().lower():
            # Same origin as the daemon itself (the Host already passed the loopback check).
            return OriginKind.OPTED_IN
        if self.allowed_origins:
            try:
                if normalize_origin(origin.decode("ascii")) in self.allowed_origins:
                    return OriginKind.OPTED_IN
            except (UnicodeDecodeError, ValueError):
                pass
        m = _EXTENSION_ORIGIN.fullmatch(origin)
        if m is not None and (not self.extension_ids
                              or m.group(2).decode() in self.extension_ids):
            return OriginKind.EXTENSION
        return OriginKind.OTHER

    def check(self, request: Request, route: Route) -> bytes | None:
        """C{None} to go on, else the body of the refusal (status and headers already set)."""
        host = request.getHeader(b"host")
        if not host_allowed(host):
            return json_error(request, 403, "forbidden: invalid host")
        origin = request.getHeader(b"origin")
        kind = None
        if origin is not None:
            kind = self.origin_kind(origin, host)
            if kind not in _ACCEPTS[route.origins]:
                return json_error(request, 403, "forbidden: invalid origin")
            request.setHeader(b"access-control-allow-origin", origin)
            request.setHeader(b"vary", b"Origin")
        elif route.browser or not is_browser_request(request):
            pass
        elif is_extension_fetch(request) and OriginKind.EXTENSION in _ACCEPTS[route.origins]:
            kind = OriginKind.EXTENSION
        else:
            return json_error(request, 403, "forbidden: browser request (Sec-Fetch-*) on a "
                              "route that is not for browsers")
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
        if length <= _TOKEN_CHECK_FROM:
            pass  # too short to hold too many values (most bodies): nothing to count
        elif route.sealed and request.method.decode("ascii", "replace") in route.sealed:
            pass  # counted by the handler on what it parses (a sealed body's plaintext)
        else:
            refused = json_values_refusal(request)
            if refused is not None:
                return refused
        if self.api_key is None:
            key_ok = True  # nothing to note: the default facts say no key is needed
        else:
            key_ok = self._key_ok(request)
            note_key(request, key_ok)
        if not key_ok and (route.key is Key.ALWAYS or (
                route.key is Key.UNLESS_EXTENSION and kind != OriginKind.EXTENSION)):
            request.setHeader(b"www-authenticate", b'Bearer realm="gasoline"')
            return json_error(request, 401, "unauthorized: missing or invalid X-Gasoline-Key")
        return None

    def _key_ok(self, request: Request) -> bool:
        assert self.api_key is not None  # called only when a key is set
        expected = self.api_key.encode()
        given = request.getHeader(b"x-gasoline-key")
        if given is None:
            auth = request.getHeader(b"authorization") or b""
            if auth[:7].lower() == b"bearer ":
                given = auth[7:].strip()
        return given is not None and hmac.compare_digest(given, expected)

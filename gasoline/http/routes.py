"""
The route policy: every route of the daemon's HTTP surface, declared once, with who may call it.

The root resource (L{gasoline.http.site.GasolineRoot}) decides everything about a request from
this table and nothing else, on the path that is dispatched:

 1. the raw request path must be in I{canonical form} (L{canonical_segments}): no
    percent-encoding at all, no empty segment (C{//}; one trailing C{/} is a spelling of its own
    that only the routes listed with it have), no C{.} or C{..} segment, nothing outside the
    unreserved and sub-delimiter characters of RFC 3986. Anything else is 400 and never reaches a
    route: Twisted and Klein dispatch on the I{decoded} segments, so with the raw path canonical
    the path the guards read is the path that is dispatched (C{/%73hutdown} used to reach
    C{/shutdown} past every guard);
 2. the canonical path must match one L{Route} of L{ROUTES} exactly (case included: C{/MCP} is
    not C{/mcp}), else 404; its method must be one of the route's (C{HEAD} goes with C{GET}),
    else 405;
 3. the route's L{Caller} class says which C{Origin}s it accepts (L{Origins}), whether a browser
    request without an C{Origin} (navigation, iframe, C{<img>}, form POST, C{no-cors} fetch: the
    browser marks them with C{Sec-Fetch-*}) may reach it, and whether C{--api-key} applies
    (L{Key}).

A route that is not in this table cannot be served at all: the root reads every API's Klein
route declarations when it is built and refuses one without an entry here
(L{gasoline.http.dispatch.Handlers.of}); a path that names no entry is 404 before any handler
runs.
"""

from __future__ import annotations

import enum
import functools
import re

import attrs


class Caller(enum.Enum):
    """Who a route is for."""

    #: MCP agents and their connector, SDK clients of C{/clients}, C{/events}, C{/session}.
    AGENT = "agent"
    #: The Gasoline browser extension (the ingest API, pairing, its CDP link).
    EXTENSION = "extension"
    #: CDP clients of the relay (Puppeteer, Playwright, chrome-devtools-mcp).
    CDP = "cdp"
    #: The operator and CI (C{/metrics}, C{/snapshot}, C{/clear}, C{/shutdown}, ...).
    ADMIN = "admin"
    #: Anyone, a browser included (C{/health}).
    PUBLIC = "public"
    #: A page meant to be opened in a browser tab (a status page at C{/}): browser navigations
    #: reach it; it must not show what C{--api-key} protects.
    PUBLIC_PAGE = "public page"


class Origins(enum.Enum):
    """Which C{Origin} header values a route accepts (no C{Origin} at all is always accepted,
    unless C{Sec-Fetch-*} says the request is a browser's; see L{Route.browser})."""

    #: No browser origin.
    NONE = "none"
    #: The extension: C{chrome-extension://<id>} / C{moz-extension://<id>}, only the pinned ids
    #: when C{--extension-id} is given.
    EXTENSION = "extension"
    #: Web origins the operator opted in (C{--allow-origin}) and the daemon's own origin: a
    #: browser-based MCP client. Never an extension, never any other web page.
    OPTED_IN = "opted-in"
    #: Either of the two above (C{/health}).
    EXTENSION_OR_OPTED_IN = "extension or opted-in"


class Key(enum.Enum):
    """Whether C{--api-key}, when set, applies."""

    ALWAYS = "always"
    #: Not for the extension's own traffic: the published 0.7.9 extension never sends the key.
    NEVER = "never"
    #: Only a request that carries an accepted extension C{Origin} goes without it.
    UNLESS_EXTENSION = "unless extension"


#: A parameter segment of a pattern, C{{name}}; C{{*}} (last only) matches one or more segments.
_PARAM = re.compile(r"\{([a-z_]+|\*)\}")
#: One segment of a canonical path: RFC 3986 unreserved and sub-delimiters, C{:} and C{@}
#: (C{pchar} without C{pct-encoded}).
_SEGMENT = re.compile(rb"[A-Za-z0-9._~!$&'()*+,;=:@-]+")
#: What a C{{name}} parameter matches (client ids, session ids, relay client ids).
_PARAM_VALUE = re.compile(rb"[A-Za-z0-9._~:-]{1,128}")


@attrs.frozen
class Route:
    """One route: a path pattern, its methods and its caller class."""

    #: C{/clients/{id}}: literal segments match exactly (case included), C{{name}} one segment,
    #: a last C{{*}} the rest of the path; a trailing C{/} is part of the pattern.
    pattern: str
    methods: tuple[str, ...]
    caller: Caller
    #: Defaults from L{caller} (see L{_DEFAULTS}).
    origins: Origins = attrs.field(default=None)
    key: Key = attrs.field(default=None)
    #: May a browser request without an C{Origin} (C{Sec-Fetch-*} present) reach it?
    browser: bool = attrs.field(default=None)
    #: The methods whose handler opens a sealed body (L{gasoline.http.ingest.extension_session}):
    #: the structural JSON limits are counted by the handler on what it parses (the plaintext
    #: of a sealed body), not by the guard on the ciphertext.
    sealed: tuple[str, ...] = ()
    #: Does a method other than C{DELETE} destroy something (C{POST /clear}, C{/shutdown})? Every
    #: C{DELETE} does. See L{destructive}.
    destroys: bool = False

    def __attrs_post_init__(self) -> None:
        origins, key, browser = _DEFAULTS[self.caller]
        if self.origins is None:
            object.__setattr__(self, "origins", origins)
        if self.key is None:
            object.__setattr__(self, "key", key)
        if self.browser is None:
            object.__setattr__(self, "browser", browser)
        object.__setattr__(self, "_parts", tuple(
            part if _PARAM.fullmatch(part) else part.encode() for part in self.segments))

    #: The pattern's segments, literal ones as bytes (computed once).
    _parts: tuple[str | bytes, ...] = attrs.field(init=False, repr=False, eq=False)

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(self.pattern[1:].split("/")) if self.pattern != "/" else ()

    def allows_method(self, method: bytes) -> bool:
        name = method.decode("ascii", "replace")
        return name in self.methods or (name == "HEAD" and "GET" in self.methods)

    def match(self, segments: tuple[bytes, ...]) -> bool:
        pattern = self._parts
        for i, want in enumerate(pattern):
            if want == "{*}":
                return len(segments) > i and all(_PARAM_VALUE.fullmatch(s) for s in segments[i:])
            if i >= len(segments):
                return False
            if isinstance(want, str):
                if not _PARAM_VALUE.fullmatch(segments[i]):
                    return False
            elif segments[i] != want:
                return False
        return len(segments) == len(pattern)


#: caller -> (origins, key, browser) unless the route says otherwise.
_DEFAULTS: dict[Caller, tuple[Origins, Key, bool]] = {
    Caller.AGENT: (Origins.OPTED_IN, Key.ALWAYS, False),
    Caller.EXTENSION: (Origins.EXTENSION, Key.NEVER, False),
    Caller.CDP: (Origins.NONE, Key.ALWAYS, False),
    Caller.ADMIN: (Origins.NONE, Key.ALWAYS, False),
    Caller.PUBLIC: (Origins.EXTENSION_OR_OPTED_IN, Key.NEVER, True),
    Caller.PUBLIC_PAGE: (Origins.NONE, Key.NEVER, True),
}

_A, _E, _C, _D, _P = Caller.AGENT, Caller.EXTENSION, Caller.CDP, Caller.ADMIN, Caller.PUBLIC
GET, POST, DELETE = ("GET",), ("POST",), ("DELETE",)

#: Every route of the daemon (docs/security.md, "Route policy").
ROUTES: tuple[Route, ...] = (
    # -- public
    Route("/health", ("GET", "HEAD"), _P),
    # The status page (gasoline.http.status_page, docs/status-page.md): the page and its own
    # script and style are public; the state it shows needs the key when one is set. Its fetches
    # are same-origin GETs (no Origin header); the page object also refuses framing and every
    # Sec-Fetch-Site but same-origin/none.
    Route("/", ("GET", "HEAD"), Caller.PUBLIC_PAGE),
    Route("/ui/status.css", GET, Caller.PUBLIC_PAGE, origins=Origins.OPTED_IN),
    Route("/ui/status.js", GET, Caller.PUBLIC_PAGE, origins=Origins.OPTED_IN),
    Route("/ui/state", GET, Caller.PUBLIC_PAGE, origins=Origins.OPTED_IN, key=Key.ALWAYS),
    Route("/ui/stream", GET, Caller.PUBLIC_PAGE, origins=Origins.OPTED_IN, key=Key.ALWAYS),
    # -- agents: MCP (streamable HTTP, legacy SSE), client registration, events, session proxy
    Route("/mcp", ("GET", "POST", "DELETE"), _A),
    Route("/mcp/sse", GET, _A),
    Route("/mcp/messages/{session}", POST, _A),
    Route("/clients", ("GET", "POST"), _A),
    Route("/clients/{client}", ("GET", "DELETE"), _A),
    Route("/events", GET, _A),
    # A cursor read of the console log (gasoline.http.reads); POST/DELETE /logs are the extension's.
    Route("/logs", GET, _A),
    Route("/session/init", POST, _A),
    Route("/session/{session}", ("GET", "DELETE"), _A),
    Route("/session/{session}/destroy", ("POST", "DELETE"), _A, destroys=True),
    # -- admin and CI (extension-protocol.md lists them as EXT routes; the extension never calls
    #    them: CI and the operator do)
    Route("/metrics", GET, _D),
    # `gasoline doctor`: the checks of configure doctor without registering a client
    Route("/health/doctor", GET, _D),
    Route("/snapshot", GET, _D),
    Route("/clear", ("POST", "DELETE"), _D, destroys=True),
    Route("/shutdown", POST, _D, destroys=True),
    Route("/test-boundary", POST, _D),
    # -- the extension: the ingest API, pairing, the CDP link
    Route("/logs", POST, _E, sealed=POST),
    # Clears the console buffer, as /clear clears them all: an admin route, never the extension's
    # (which never calls it), with the key when one is set. (A preflight is judged by the route
    # of the method it asks for: gasoline.http.site.)
    Route("/logs", DELETE, _D),
    Route("/network-bodies", POST, _E, sealed=POST),
    Route("/enhanced-actions", POST, _E, sealed=POST),
    Route("/network-waterfall", POST, _E, sealed=POST),
    Route("/websocket-events", POST, _E, sealed=POST),
    Route("/dom-changes", POST, _E, sealed=POST),
    Route("/performance-snapshots", POST, _E, sealed=POST),
    Route("/extension-logs", POST, _E, sealed=POST),
    Route("/api/extension-status", POST, _E, sealed=POST),
    Route("/sync", POST, _E, sealed=POST),
    Route("/pending-queries", GET, _E, sealed=GET),
    Route("/query-result", POST, _E, sealed=POST),
    Route("/dom-result", POST, _E, sealed=POST),
    Route("/screenshots", POST, _E, sealed=POST),
    # The daemon's public identity: the extension, and local callers as themselves (gasoline
    # identity, the connector's state-dir check; with the key when one is set).
    Route("/pairing", GET, _E, key=Key.UNLESS_EXTENSION),
    Route("/pairing/challenge", POST, _E, key=Key.UNLESS_EXTENSION),
    Route("/extension/cdp", GET, _E, key=Key.UNLESS_EXTENSION),
    # -- CDP clients of the relay: discovery (Playwright adds the trailing slash) and WebSocket
    Route("/json", GET, _C),
    Route("/json/", GET, _C),
    Route("/json/list", GET, _C),
    Route("/json/list/", GET, _C),
    Route("/json/version", GET, _C),
    Route("/json/version/", GET, _C),
    Route("/status", GET, _C),
    Route("/cdp", GET, _C),
    Route("/cdp/{client}", GET, _C),
    Route("/cdp/{client}/{*}", GET, _C),
)


class NotCanonical(ValueError):
    """The raw path is not in canonical form (see L{canonical_segments})."""


def canonical_segments(path: bytes) -> tuple[bytes, ...]:
    """The segments of the raw request path C{path} (no query), refusing every other spelling.

    C{b"/"} is C{()}; C{b"/json/"} is C{(b"json", b"")} (a trailing slash is kept: it is part of
    the route). @raise NotCanonical: percent-encoding, an empty or dot segment, a character
    outside the canonical set, or a path that does not start with C{/}.
    """
    if not path.startswith(b"/"):
        raise NotCanonical("the path must start with /")
    if path == b"/":
        return ()
    if b"%" in path:
        raise NotCanonical("percent-encoding is not accepted in the path")
    segments = tuple(path[1:].split(b"/"))
    for i, segment in enumerate(segments):
        if segment == b"":
            if i == len(segments) - 1 and i > 0:
                continue  # one trailing slash
            raise NotCanonical("empty path segment")
        if segment in (b".", b".."):
            raise NotCanonical("dot segment in the path")
        if not _SEGMENT.fullmatch(segment):
            raise NotCanonical("character not accepted in the path")
    return segments


class RouteTable:
    """A table of routes, indexed by first segment (it is read once per request)."""

    def __init__(self, routes: tuple[Route, ...]) -> None:
        self.routes = routes
        index: dict[bytes, list[Route]] = {}
        for route in routes:
            head = route._parts[0] if route._parts else b""
            if not isinstance(head, bytes):
                raise ValueError(f"route {route.pattern}: the first segment must be literal")
            index.setdefault(head, []).append(route)
        self._index = {k: tuple(v) for k, v in index.items()}
        #: L{_resolve}, remembered for the last 1,024 (path, method) pairs: the extension
        #: sends the same few paths hundreds of times a second.
        self.resolve = functools.lru_cache(maxsize=1024)(self._resolve)

    def _resolve(self, path: bytes, method: bytes) -> Route | NotCanonical | None:
        """The route of the raw path C{path} for C{method}; a L{NotCanonical} (returned, not
        raised) when the path is not canonical; C{None} when it names no route."""
        try:
            segments = canonical_segments(path)
        except NotCanonical as e:
            return e
        return self.find(segments, method)

    def find(self, segments: tuple[bytes, ...], method: bytes = b"GET") -> Route | None:
        """The route that C{segments} (canonical) names for C{method} (else the first route of
        that path, whose method check then answers 405), or C{None}."""
        first = None
        for route in self._index.get(segments[0] if segments else b"", ()):
            if route.match(segments):
                if route.allows_method(method):
                    return route
                first = first or route
        return first


#: The daemon's table.
TABLE = RouteTable(ROUTES)


def destructive(routes: tuple[Route, ...] = ROUTES) -> list[tuple[Route, str]]:
    """Every (route, method) that destroys something: each C{DELETE}, and each method of a route
    marked C{destroys}. Those that act on the daemon's shared data or life (the buffers, the
    process) are admin routes with the key, like C{/clear}; the agent ones end only the caller's
    own session or registration (their owner's proof, docs/security.md)."""
    return [(route, method) for route in routes for method in route.methods
            if method == "DELETE" or route.destroys]


def find_route(segments: tuple[bytes, ...], method: bytes = b"GET") -> Route | None:
    """L{RouteTable.find} in the daemon's table."""
    return TABLE.find(segments, method)


#: The policy of a path that names no route: refused after the guards (404), answered with the
#: extension's CORS headers as every other path was before the table.
UNKNOWN = Route("/{*}", ("GET", "POST", "DELETE"), _E)

"""
A remote MCP server reached by URL: streamable HTTP (MCP 2025-03-26 and later) or the legacy
HTTP+SSE transport (2024-11-05), over treq.

One L{RemoteServer} is shared by every session that uses the server (C{executionContext}
C{remote}); the protocol side (the daemon's own request ids, cancellation, requests from the
server, restarts with back-off) is L{gasoline.proxy.peer.ServerPeer}'s. This module adds:

  - B{streamable HTTP}: every message is a C{POST} to the URL (C{Accept: application/json,
    text/event-stream}); a request's answer is a JSON body or an SSE stream carrying the server's
    notifications and requests for it, then the response. The C{Mcp-Session-Id} the server gives
    in its C{initialize} answer and the negotiated C{MCP-Protocol-Version} go on every later
    request; a C{GET} stream (if the server offers one: 405 means it does not) carries messages
    not tied to a request (C{tools/list_changed}). A 404 on a request that named the session
    means the server forgot it: the run ends and a new C{initialize} follows (a restart).
    Stopping sends C{DELETE} with the session id.
  - B{legacy SSE} (C{"type": "sse"}): a C{GET} stream whose first event (C{endpoint}) names the
    URL to C{POST} messages to; every answer comes back on that stream.
  - the server's C{headers} (C{${VAR}} already substituted) on every request; HTTP errors map to
    L{ChildDown} with the status and the start of the body (C{server_http_error}); a connection
    that cannot be made or breaks ends the run (restart with back-off, the tools fail fast
    meanwhile, as a crashed child's do).
"""

from __future__ import annotations

from typing import Any, Callable, cast
from urllib.parse import urljoin, urlsplit, urlunsplit

import orjson
from treq.client import HTTPClient
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool, ResponseDone
from twisted.web.http_headers import Headers

from gasoline.proxy.peer import ChildDown, ServerPeer
from gasoline.sse import SSEParser

log = Logger()

STREAMABLE = "streamable-http"
LEGACY_SSE = "sse"
#: Streamable HTTP, falling back to the legacy transport when C{initialize} gets a 400, 404 or
#: 405 (what the MCP specification asks of clients that support older servers).
AUTO = "auto"
#: Largest body (JSON) or single SSE event accepted from a remote server.
MAX_MESSAGE = 16 * 1024 * 1024
#: Bytes of an HTTP error body quoted in errors.
ERROR_BODY_KEEP = 500
#: Seconds a notification or a response we send may take to be accepted (a 202).
SEND_TIMEOUT = 30.0
#: Seconds the C{DELETE} that ends the server's session may take when stopping.
STOP_TIMEOUT = 5.0
#: Delay before the C{GET} stream of a ready server is opened again after it ended.
STREAM_RETRY = 1.0


def display_url(url: str) -> str:
    """C{url} without credentials, query or fragment (those may hold secrets), for humans."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _content_type(response: Any) -> str:
    values = response.headers.getRawHeaders(b"content-type") or [b""]
    return values[0].split(b";")[0].strip().lower().decode("latin-1")


class _Body(Protocol):
    """Delivers a response body chunk by chunk; L{abort} drops the connection."""

    def __init__(self, on_data: Callable[[bytes], None], done: Deferred) -> None:
        self._on_data = on_data
        self.done = done
        self.aborted = False

    def connectionMade(self) -> None:
        if self.aborted:
            cast(IPushProducer, self.transport).stopProducing()  # a response body's producer

    def dataReceived(self, data: bytes) -> None:
        if not self.aborted:
            self._on_data(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.done.called:
            return
        if reason.check(ResponseDone) or self.aborted:
            self.done.callback(None)
        else:
            self.done.errback(reason)

    def abort(self) -> None:
        self.aborted = True
        if self.transport is not None:
            cast(IPushProducer, self.transport).stopProducing()


class _Stream:
    """Reads one response body as JSON or as SSE, handing every JSON-RPC message to
    C{on_message}; C{done} fires when the body ended (fails if the connection broke)."""

    def __init__(self, response: Any, on_message: Callable[[Any], None],
                 on_event: Callable[[Any], None] | None = None) -> None:
        self.done: Deferred = Deferred()
        self.sse = _content_type(response) == "text/event-stream"
        self._on_message = on_message
        self._on_event = on_event
        self._parser = SSEParser()
        self._json = bytearray()
        self.too_large = False
        self._body = _Body(self._chunk, self.done)
        response.deliverBody(self._body)
        self.done.addCallback(self._finish)

    def abort(self) -> None:
        self._body.abort()

    def _chunk(self, data: bytes) -> None:
        if not self.sse:
            self._json += data
            if len(self._json) > MAX_MESSAGE:
                self.too_large = True
                self.abort()
            return
        for event in self._parser.feed(data):
            if self._on_event is not None and event.event != "message":
                self._on_event(event)
            elif event.event == "message" and event.data.strip():
                self._deliver(event.data)
        if self._parser.pending > MAX_MESSAGE:
            self.too_large = True
            self.abort()

    def _finish(self, _: Any) -> None:
        if not self.sse and self._json.strip() and not self.too_large:
            self._deliver(bytes(self._json))

    def _deliver(self, raw: bytes) -> None:
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            log.warn("remote MCP server sent something that is not JSON: {raw!r}", raw=raw[:200])
            return
        for message in parsed if isinstance(parsed, list) else [parsed]:
            self._on_message(message)


class RemoteServer(ServerPeer):
    """A remote MCP server by C{url}, shared by the sessions that use it.

    @param reactor: C{IReactorTime} and C{IReactorTCP} (for the default HTTP client).
    @param transport: L{STREAMABLE}, L{LEGACY_SSE} or L{AUTO} (detected at each start).
    @param headers: sent on every request (authorization, API keys, ...).
    @param http: a treq C{HTTPClient}-like object (C{request(method, url, ...)}); by default one
        of its own, with a persistent connection pool that L{stop} closes.
    """

    diagnostics = "httpError"

    def __init__(self, reactor: Any, name: str, url: str, headers: dict[str, str], *,
                 transport: str = STREAMABLE, timeout: float, start_timeout: float,
                 capabilities: dict[str, Any], on_request: Callable[..., Any],
                 on_notification: Callable[..., None],
                 on_state: Callable[[Any], None] | None = None, restart: bool = True,
                 http: Any = None, on_restart: Callable[[Any], None] | None = None) -> None:
        super().__init__(reactor, name, timeout=timeout, start_timeout=start_timeout,
                         capabilities=capabilities, on_request=on_request,
                         on_notification=on_notification, on_state=on_state, restart=restart,
                         on_restart=on_restart)
        if transport not in (STREAMABLE, LEGACY_SSE, AUTO):
            raise ValueError(f"unknown transport {transport!r}")
        self.url = url
        self._auto = transport == AUTO
        #: The transport in use (L{AUTO} starts as L{STREAMABLE}).
        self.transport = STREAMABLE if self._auto else transport
        self.headers = dict(headers)
        self._pool: Any = None
        if http is None:
            class _Pool(HTTPConnectionPool):
                maxPersistentPerHost = 8  # (Twisted's documented knob is this class attribute)

            self._pool = _Pool(reactor, persistent=True)
            http = HTTPClient(Agent(reactor, pool=self._pool))
        self.http = http
        #: The server's C{Mcp-Session-Id} (streamable HTTP), once given.
        self.session_id: str | None = None
        #: Where messages are POSTed: the URL, or the legacy transport's C{endpoint}.
        self._post_url: str | None = None
        self._live = False
        #: The long-lived GET stream (legacy: the only way back; streamable: optional).
        self._get: _Stream | None = None
        self._get_d: Deferred | None = None
        self._get_retry: Any = None
        #: Response streams of requests in flight: our request id -> stream.
        self._streams: dict[int, _Stream] = {}
        #: Sends wait for this (C{notifications/initialized} must arrive before the next
        #: request, as the official clients ensure).
        self._gate: Deferred | None = None
        self._endpoint_d: Deferred | None = None

    @property
    def endpoint(self) -> str:
        return display_url(self.url)

    @property
    def connected(self) -> bool:
        return self._live

    # -- HTTP ------------------------------------------------------------------------------------

    def _headers(self, accept: str, json_body: bool = False) -> Headers:
        h = Headers({k.encode("latin-1"): [v.encode("latin-1")] for k, v in self.headers.items()})
        h.setRawHeaders(b"accept", [accept.encode()])
        if json_body:
            h.setRawHeaders(b"content-type", [b"application/json"])
        if self.session_id is not None:
            h.setRawHeaders(b"mcp-session-id", [self.session_id.encode("latin-1")])
        if self.protocol_version is not None and self.transport == STREAMABLE:
            h.setRawHeaders(b"mcp-protocol-version", [self.protocol_version.encode("latin-1")])
        return h

    def _http_error(self, code: int, body: bytes, what: str) -> ChildDown:
        text = body[:ERROR_BODY_KEEP].decode("utf-8", "replace").strip()
        self._stderr(f"HTTP {code} to {what}: {text}\n".encode())
        hint = ""
        if code in (401, 403):
            hint = " (check the server's \"headers\" in the servers file)"
        return ChildDown(f"server {self.name} answered {what} with HTTP {code}{hint}",
                         code="server_http_error", retry="", server=self.name, status=code,
                         httpError=text)

    def _unreachable(self, f: Failure, run: object | None) -> None:
        """A connection failed: the run ends (restart with back-off) unless already over."""
        if run is self._run and self._live and self.state in ("starting", "ready"):
            self._end_run(f"cannot reach {self.endpoint}: {f.getErrorMessage()}")

    # -- opening ---------------------------------------------------------------------------------

    def _open(self) -> Any:
        self.session_id = None
        self.protocol_version = None
        self._gate = None
        self._live = True
        if self._auto:
            self.transport = STREAMABLE
        if self.transport == STREAMABLE:
            self._post_url = self.url
            return None
        # Legacy SSE: the GET stream first; its C{endpoint} event says where to POST.
        self._post_url = None
        d = self._endpoint_d = Deferred()
        self._open_get()
        return d.addTimeout(self.start_timeout, self.reactor)

    def _open_get(self) -> None:
        run = self._run
        d = self.http.request("GET", self.url, headers=self._headers("text/event-stream"))
        self._get_d = d

        def got(response: Any) -> None:
            if run is not self._run or not self._live:
                response.deliverBody(_Body(lambda _: None, Deferred()))
                return
            if response.code != 200 or _content_type(response) != "text/event-stream":
                # Streamable HTTP: 405 means "no GET stream here", which is fine.
                if self.transport == LEGACY_SSE:
                    self._read_error(response, "GET (the SSE stream)").addCallback(
                        lambda err: self._end_run(err.message))
                else:
                    response.deliverBody(_Body(lambda _: None, Deferred()))
                return
            stream = self._get = _Stream(response, self._message, self._event)
            stream.done.addBoth(lambda r: self._get_ended(stream, run, r))

        def failed(f: Failure) -> None:
            if self._get_d is d:
                self._get_d = None
            if run is self._run and self._live:
                self._end_run(f"cannot reach {self.endpoint}: {f.getErrorMessage()}")

        d.addCallbacks(got, failed)

    def _event(self, event: Any) -> None:
        if event.event != "endpoint" or self._post_url is not None:
            return
        target = urljoin(self.url, event.data.decode("utf-8", "replace").strip())
        if urlsplit(target)[:2] != urlsplit(self.url)[:2]:
            self._end_run(f"the SSE endpoint {display_url(target)} is not on "
                          f"{display_url(self.url)}'s origin")
            return
        self._post_url = target
        d, self._endpoint_d = self._endpoint_d, None
        if d is not None and not d.called:
            d.callback(None)

    def _get_ended(self, stream: _Stream, run: object, result: Any) -> None:
        if self._get is stream:
            self._get = None
        if run is not self._run or not self._live:
            return None
        if stream.too_large:
            self._end_run(f"sent an SSE event larger than {MAX_MESSAGE} bytes")
        elif self.transport == LEGACY_SSE:
            why = result.getErrorMessage() if isinstance(result, Failure) else \
                "closed by the server"
            self._end_run(f"the SSE stream ended ({why})")
        elif self.state == "ready":
            # The optional stream of a streamable-HTTP server: open it again shortly.
            self._get_retry = self.reactor.callLater(STREAM_RETRY, self._reopen_get, run)
        return None

    def _reopen_get(self, run: object) -> None:
        self._get_retry = None
        if run is self._run and self._live and self.state == "ready":
            self._open_get()

    def _ready(self) -> None:
        if self.transport == STREAMABLE and self._get is None:
            self._open_get()

    # -- sending ---------------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        if not self._live:
            return
        gate = self._gate
        if gate is not None and not gate.called:
            gate.addBoth(lambda _: self._post(message))
            return
        self._post(message)

    def _post(self, message: dict[str, Any]) -> None:
        if not self._live or self._post_url is None:
            return
        run = self._run
        rid = message.get("id") if "method" in message else None
        is_request = isinstance(rid, int) and rid in self._pending
        what = str(message.get("method") or "a response")
        d = self.http.request("POST", self._post_url, data=orjson.dumps(message),
                              headers=self._headers("application/json, text/event-stream", True))
        if not is_request:
            d.addTimeout(SEND_TIMEOUT, self.reactor)
        if message.get("method") == "notifications/initialized":
            gate = self._gate = Deferred()

            def open_gate(result: object) -> object:
                if not gate.called:
                    gate.callback(None)
                return result

            d.addBoth(open_gate)

        def answered(response: Any) -> Any:
            if run is not self._run:
                return self._discard(response)
            if (self._auto and self.transport == STREAMABLE and response.code in (400, 404, 405)
                    and message.get("method") == "initialize"):
                # An older server: its URL is the SSE stream. The initialize request stays
                # pending and goes to the endpoint the stream names.
                self._discard(response)
                log.info("proxy server {name}: HTTP {code} to initialize; trying the legacy SSE "
                         "transport", name=self.name, code=response.code)
                self.transport = LEGACY_SSE
                self._post_url = None
                endpoint = self._endpoint_d = Deferred()
                endpoint.addCallback(lambda _: self._post(message))
                self._open_get()
                return None
            if response.code == 404 and self.session_id is not None:
                self._discard(response)
                self._end_run(f"the server no longer knows its MCP session (HTTP 404 to {what}); "
                              "starting a new one")
                return None
            if response.code >= 400:
                return self._read_error(response, what).addCallback(self._fail_request, rid)
            if self.transport == STREAMABLE and message.get("method") == "initialize":
                sid = response.headers.getRawHeaders(b"mcp-session-id")
                if sid:
                    self.session_id = sid[0].decode("latin-1")
            if not is_request or self.transport == LEGACY_SSE or response.code == 202:
                return self._discard(response)
            # The server's requests on this answer stream are about this request.
            stream = _Stream(response, lambda msg: self._message(msg, related=rid))
            self._streams[rid] = stream  # type: ignore[index]

            def ended(result: Any) -> None:
                self._streams.pop(rid, None)  # type: ignore[arg-type]
                if stream.too_large:
                    self._fail_request(ChildDown(
                        f"server {self.name} sent a message larger than {MAX_MESSAGE} bytes",
                        code="server_http_error", retry="", server=self.name), rid)
                elif isinstance(result, Failure) and not stream._body.aborted:
                    self._fail_request(ChildDown(
                        f"server {self.name}: the answer to {what} broke off "
                        f"({result.getErrorMessage()})", server=self.name), rid)
                elif rid in self._pending and not stream.sse:
                    # A JSON answer that is not the response (a JSON-RPC error without an id,
                    # say): nothing else will come for this request.
                    self._fail_request(ChildDown(
                        f"server {self.name} answered {what} without a response to it",
                        code="server_http_error", retry="", server=self.name), rid)
                # An SSE answer that ended without the response: the server may still send it
                # on the GET stream; the request's timeout decides.

            stream.done.addBoth(ended)
            return None

        def failed(f: Failure) -> None:
            if run is not self._run:
                return
            self._unreachable(f, run)  # fails what is pending, this request included
            self._fail_request(ChildDown(f"server {self.name}: cannot send {what} to "
                                         f"{self.endpoint} ({f.getErrorMessage()})",
                                         server=self.name), rid)

        d.addCallbacks(answered, failed)

    def _discard(self, response: Any) -> None:
        response.deliverBody(_Body(lambda _: None, Deferred()))

    def _read_error(self, response: Any, what: str) -> Deferred:
        chunks: list[bytes] = []
        size = [0]

        def chunk(data: bytes) -> None:
            if size[0] < ERROR_BODY_KEEP:
                chunks.append(data)
                size[0] += len(data)

        done: Deferred = Deferred()
        response.deliverBody(_Body(chunk, done))
        done.addErrback(lambda _: None)
        return done.addCallback(lambda _: self._http_error(response.code, b"".join(chunks), what))

    def _fail_request(self, error: ChildDown, rid: Any) -> None:
        d = self._pending.pop(rid, None) if isinstance(rid, int) else None
        if d is not None and not d.called:
            d.errback(error)

    def _cancelled(self, rid: int) -> None:
        stream = self._streams.pop(rid, None)
        if stream is not None:
            stream.abort()

    # -- ending ----------------------------------------------------------------------------------

    def _close_streams(self) -> None:
        call, self._get_retry = self._get_retry, None
        if call is not None and call.active():
            call.cancel()
        if self._get is not None:
            self._get.abort()
            self._get = None
        get_d, self._get_d = self._get_d, None
        if get_d is not None and not get_d.called:
            get_d.cancel()
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.abort()
        # A start still waiting for the legacy endpoint is over: L{_ended} tells its waiters.
        self._endpoint_d = None

    def _end_run(self, why: str) -> None:
        """This run is over (unreachable, stream gone, session forgotten): fail what is
        pending, then restart with back-off."""
        if not self._live:
            return
        self._live = False
        self._run_error = why
        log.warn("proxy server {name} ({url}): {why}", name=self.name, url=self.endpoint, why=why)
        self._close_streams()
        self._ended(why)

    def _opening_failed(self, why: str) -> None:
        self._live = False
        self._close_streams()
        super()._opening_failed(why)

    def _abort(self) -> None:
        self._end_run(self._run_error or "aborted")

    def _delete_session(self) -> Deferred:
        if self.transport != STREAMABLE or self.session_id is None:
            return succeed(None)
        d = self.http.request("DELETE", self.url, headers=self._headers("application/json"))
        d.addTimeout(STOP_TIMEOUT, self.reactor)
        d.addCallback(self._discard)
        d.addErrback(lambda f: log.info("proxy server {name}: ending its MCP session failed: "
                                        "{err}", name=self.name, err=f.getErrorMessage()))
        return d

    def stop(self) -> Deferred:
        """Stop for good: end the server's MCP session (C{DELETE}), close every stream and the
        connection pool; fire once done."""
        self.restart_enabled = False
        self._cancel_restart()
        was = self.state
        self.state = "closed"
        if was == "closed":
            return succeed(None)
        d = self._delete_session() if self._live else succeed(None)
        self._live = False
        self._close_streams()
        self._ended(None)
        if self.on_state is not None:
            self.on_state(self)

        def close_pool(_: Any) -> Any:
            if self._pool is not None:
                return self._pool.closeCachedConnections()
            return None

        return d.addBoth(close_pool).addBoth(lambda _: None)

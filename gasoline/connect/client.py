"""
The connector's HTTP side: talking to one daemon with treq.

L{DaemonHTTP} wraps a treq C{HTTPClient} (C{treq.testing.StubTreq} in tests) and knows the daemon's
routes: C{GET /health}, C{POST /clients}, C{DELETE /clients/<id>}, the MCP connector form
C{POST /mcp} and the C{GET /mcp} server->client SSE stream (both with C{X-Gasoline-Client} and
C{X-Gasoline-Connection}). Every request that acts as the client id carries its proof
(C{X-Gasoline-Client-Proof}, L{gasoline.connect.proof}): the MCP requests, C{POST /clients},
C{DELETE /clients/<id>} and C{POST /session/init}. Connection-level failures (refused, reset, timed out) fail the returned
Deferreds; HTTP-level answers, whatever their status, succeed with a L{Reply}.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Callable, cast

import attrs
import orjson
import treq
from treq.client import HTTPClient
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.error import ConnectError, ConnectionRefusedError, DNSLookupError
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone
from twisted.web.iweb import IResponse

from gasoline.common import session_label
from gasoline.connect.errors import RegistrationRefused
from gasoline.connect.proof import ClientKeyFile
from gasoline.sse import SSEEvent, SSEParser

__all__ = ["DaemonHTTP", "RegistrationRefused", "Reply", "SSEEvent", "SSEParser", "Stream"]

log = Logger()

HEALTH_TIMEOUT = 2.0
ADMIN_TIMEOUT = 5.0
#: C{POST /session/init} answers once the session's servers started.
PROXY_INIT_TIMEOUT = 60.0


#: The MCP revision of requests sent without a session (gasoline.mcp.server.STATELESS_VERSION;
#: the connector imports nothing of the daemon).
STATELESS_VERSION = "2026-07-28"


#: Request headers as treq takes them: each name with its values.
RequestHeaders = dict[bytes | str, list[bytes | str]]


@attrs.frozen
class Reply:
    """An HTTP answer from the daemon."""

    status: int
    content_type: str
    #: The raw body when it was not JSON-RPC (for error messages); empty otherwise.
    text: bytes = b""


def _content_type(response: IResponse) -> str:
    values = response.headers.getRawHeaders(b"content-type") or [b""]
    return values[0].split(b";")[0].strip().lower().decode("latin-1")


class DaemonHTTP:
    """One daemon at C{base_url}, seen by one connector process."""

    def __init__(
        self,
        http: HTTPClient,
        base_url: str,
        clock: IReactorTime,
        client_id: str,
        connection_id: str,
        api_key: str | None = None,
        key_file: ClientKeyFile | None = None,
    ) -> None:
        self.http = http
        #: The daemon's client key (its proofs of C{client_id}); one that finds no key (no
        #: state dir known) until the daemon's C{/health} names its state dir.
        self.key_file = key_file if key_file is not None else ClientKeyFile(None)
        self.api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.clock = clock
        self.client_id = client_id
        self.connection_id = connection_id
        #: The daemon's proxy session for this connector's directory (docs/proxy.md), if any;
        #: sent as C{X-Gasoline-Proxy-Session} so the agent also sees that session's tools.
        self.proxy_session: str | None = None

    def _url(self, path: str) -> str:
        return self.base_url + path

    def _headers(self, **extra: str) -> RequestHeaders:
        headers: RequestHeaders = {k.replace("_", "-"): [v] for k, v in extra.items()}
        if self.api_key:
            headers["X-Gasoline-Key"] = [self.api_key]
        return headers

    def _client_headers(self, **extra: str) -> RequestHeaders:
        """L{_headers} plus C{X-Gasoline-Client} and its proof: the request acts as this
        connector's client id."""
        headers = self._headers(**extra)
        for name, values in self.key_file.headers(self.client_id).items():
            headers[name] = [*values]
        return headers

    def _refused(self, response: IResponse) -> None:
        """A 403 may be a refused proof: read the key again before the next request."""
        if response.code == 403:
            self.key_file.forget()

    def _mcp_headers(self, accept: str) -> RequestHeaders:
        headers = self._client_headers(Accept=accept)
        headers["X-Gasoline-Connection"] = [self.connection_id]
        if self.proxy_session:
            headers["X-Gasoline-Proxy-Session"] = [self.proxy_session]
        return headers

    # -- the session proxy ----------------------------------------------------------------------

    @inlineCallbacks
    def ensure_proxy_session(
        self, cwd: str | None, capabilities: dict[str, Any] | None = None
    ) -> Generator[Deferred[Any], Any, str | None]:
        """Open (or keep) a proxy session for C{cwd} when the daemon has proxy servers.

        Never fails: a daemon without servers (404 C{proxy_disabled}) or a refusal leaves the
        connector with Gasoline's own tools only. Return the session id or None.

        @param capabilities: what the agent declared in its C{initialize}, when the connector
            has seen it: its children are then offered C{sampling} / C{elicitation} as for a
            session opened over HTTP (docs/proxy.md).
        """
        if not cwd:
            return None
        try:
            if self.proxy_session:
                d = self.http.request("GET", self._url(f"/session/{self.proxy_session}"),
                                      headers=self._client_headers())
                d.addTimeout(ADMIN_TIMEOUT, self.clock)
                response = yield d
                yield treq.content(response)
                if response.code == 200:
                    return self.proxy_session
                self.proxy_session = None
            body: dict[str, Any] = {"workingDirectory": cwd,
                                    "clientInfo": {"name": "gasoline-connect", "version": "1"}}
            if capabilities:
                body["capabilities"] = capabilities
            d = self.http.request("POST", self._url("/session/init"), data=orjson.dumps(body),
                                  headers=self._client_headers(Content_Type="application/json"))
            # Children start before the answer: allow for slow servers.
            d.addTimeout(PROXY_INIT_TIMEOUT, self.clock)
            response = yield d
            raw = yield treq.content(response)
            data = orjson.loads(raw) if raw else {}
        except Exception as e:
            log.info("no proxy session: {e}", e=e)
            return None
        if response.code == 200 and isinstance(data, dict) and \
                isinstance(data.get("sessionId"), str):
            self.proxy_session = data["sessionId"]
            log.info("proxy session {sid}: {n} tool(s) from {servers}",
                     sid=session_label(self.proxy_session),
                     n=len(data.get("tools") or []), servers=", ".join(data.get("servers") or {}))
        elif not (isinstance(data, dict) and data.get("error") == "proxy_disabled"):
            log.warn("the daemon refused a proxy session (HTTP {code}): {data}",
                     code=response.code, data=data)
        return self.proxy_session

    @inlineCallbacks
    def close_proxy_session(self) -> Generator[Deferred[Any], Any, None]:
        sid, self.proxy_session = self.proxy_session, None
        if sid is None:
            return None
        yield self._delete_quietly(f"/session/{sid}", self._client_headers(), "the proxy session")
        return None

    @inlineCallbacks
    def _delete_quietly(self, path: str, headers: RequestHeaders,
                        what: str) -> Generator[Deferred[Any], Any, None]:
        """C{DELETE path}; a failure is logged, not raised (the connector is going away)."""
        d = self.http.request("DELETE", self._url(path), headers=headers)
        d.addTimeout(ADMIN_TIMEOUT, self.clock)
        try:
            response = yield d
            yield treq.content(response)
        except Exception as e:
            log.info("ending {what} failed: {e}", what=what, e=e)

    # -- discovery and registration ------------------------------------------------------------

    @inlineCallbacks
    def health(self) -> Generator[Deferred[Any], Any, dict[str, Any] | None]:
        """The C{/health} body if a Gasoline daemon answers; C{None} if nothing listens there;
        C{{"_not_gasoline": True, "status": ...}} if something else holds the port (it refused
        nothing but did not answer as Gasoline: another HTTP server, a non-HTTP service, one that
        never answers). Never fails."""
        response = None
        try:
            d = self.http.request("GET", self._url("/health"))
            d.addTimeout(HEALTH_TIMEOUT, self.clock)
            response = yield d
            body = yield treq.content(response)
            data = orjson.loads(body)
        except (ConnectionRefusedError, ConnectError, DNSLookupError):
            return None  # nothing listens: a daemon may be started there
        except Exception:
            data = None  # something holds the port but does not speak Gasoline's /health
        if isinstance(data, dict) and data.get("service-name") == "gasoline":
            self.key_file.daemon_state_dir(data.get("state_dir"))
            return data
        return {"_not_gasoline": True, "status": None if response is None else response.code}

    @inlineCallbacks
    def register(self, cwd: str | None = None) -> Generator[Deferred[Any], Any, Any]:
        body: dict[str, Any] = {"client_id": self.client_id}
        if cwd:
            body["cwd"] = cwd
        d = self.http.request(
            "POST",
            self._url("/clients"),
            data=orjson.dumps(body),
            headers=self._client_headers(Content_Type="application/json"),
        )
        d.addTimeout(ADMIN_TIMEOUT, self.clock)
        response = yield d
        self._refused(response)
        raw = yield treq.content(response)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = {"message": raw[:200].decode("utf-8", "replace")}
        if response.code != 200:
            raise RegistrationRefused(response.code, data)
        return data

    @inlineCallbacks
    def unregister(self) -> Generator[Deferred[Any], Any, int]:
        """End this connection's MCP session (C{DELETE /mcp}), its proxy session if any, then
        C{DELETE /clients/<id>}."""
        yield self._delete_quietly("/mcp", self._mcp_headers("*/*"), "the MCP session")
        yield self.close_proxy_session()
        d = self.http.request("DELETE", self._url(f"/clients/{self.client_id}"),
                              headers=self._client_headers())
        d.addTimeout(ADMIN_TIMEOUT, self.clock)
        response = yield d
        yield treq.content(response)
        return response.code

    # -- MCP ------------------------------------------------------------------------------------

    @inlineCallbacks
    def post_mcp(self, body: bytes, on_message: Callable[[Any], None],
                 stateless: bool = False) -> Generator[Deferred[Any], Any, Reply]:
        """POST one JSON-RPC message (or batch) in the connector form.

        Every JSON-RPC message in the answer (a JSON body, or the events of an SSE body as they
        arrive) is passed to C{on_message}. Fires with a L{Reply}; fails only on connection errors.
        C{stateless}: the agent has not initialized, so the request stands alone (MCP 2026-07-28,
        C{MCP-Protocol-Version: 2026-07-28}; docs/mcp.md).
        """
        headers = self._mcp_headers("application/json, text/event-stream")
        headers["Content-Type"] = ["application/json"]
        if stateless:
            headers["MCP-Protocol-Version"] = [STATELESS_VERSION]
        response = yield self.http.request("POST", self._url("/mcp"), data=body, headers=headers)
        self._refused(response)
        ctype = _content_type(response)
        if ctype == "text/event-stream":
            parser = SSEParser()

            def chunk(data: bytes) -> None:
                for event in parser.feed(data):
                    _deliver_event(event, on_message)

            yield treq.collect(response, chunk)
            return Reply(response.code, ctype)
        raw = yield treq.content(response)
        if raw.strip() and ctype in ("application/json", ""):
            try:
                parsed = orjson.loads(raw)
            except orjson.JSONDecodeError:
                parsed = None
            # A transport-level refusal (4xx/5xx) carries a JSON-RPC error with a null id: it
            # answers no particular request, so the caller decides what to do with it.
            unattached = (response.code >= 400 and isinstance(parsed, dict)
                          and parsed.get("id") is None)
            if _is_jsonrpc(parsed) and not unattached:
                on_message(parsed)
                return Reply(response.code, ctype)
        return Reply(response.code, ctype, raw)

    def open_stream(
        self, on_message: Callable[[Any], None], last_event_id: str | None = None
    ) -> "Stream":
        """Open the C{GET /mcp} server->client stream; see L{Stream}."""
        headers = self._mcp_headers("text/event-stream")
        if last_event_id:
            headers["Last-Event-ID"] = [last_event_id]
        return Stream(self.http.request("GET", self._url("/mcp"), headers=headers), on_message)


class Stream:
    """A running C{GET /mcp} SSE stream.

    @ivar opened: fires with the HTTP status once headers arrive (200 means streaming).
    @ivar done: fires when the stream ends (with the status), fails on connection loss.
    @ivar last_event_id: the id of the last event seen (for C{Last-Event-ID} on reopen).
    """

    def __init__(self, request_d: Deferred, on_message: Callable[[Any], None]) -> None:
        self._request_d = request_d
        self._on_message = on_message
        self._parser = SSEParser()
        self.opened: Deferred = Deferred()
        self.done: Deferred = Deferred()
        self.status: int | None = None
        self._response: IResponse | None = None
        self._body_transport: IPushProducer | None = None
        self._closed = False
        #: True once a 200 C{text/event-stream} answer arrived.
        self.streaming = False
        request_d.addCallbacks(self._got_response, self._failed)

    @property
    def last_event_id(self) -> str | None:
        return self._parser.last_id

    def _got_response(self, response: IResponse) -> None:
        self._response = response
        self.status = response.code
        self.streaming = response.code == 200 and _content_type(response) == "text/event-stream"
        self.opened.callback(response.code)
        if not self.streaming:
            d = treq.content(response)

            def finished(_: object) -> None:
                if not self.done.called:
                    self.done.callback(response.code)

            d.addBoth(finished)
            return
        response.deliverBody(_StreamBody(self._body_started, self._chunk, self._ended))

    def _body_started(self, producer: IPushProducer) -> None:
        self._body_transport = producer
        if self._closed:
            producer.stopProducing()

    def _chunk(self, data: bytes) -> None:
        if self._closed:
            return
        for event in self._parser.feed(data):
            _deliver_event(event, self._on_message)

    def _failed(self, failure: Failure) -> None:
        if not self.opened.called:
            self.opened.errback(failure)
        self._failed_done(failure)

    def _failed_done(self, failure: Failure) -> None:
        if not self.done.called:
            self.done.errback(failure)

    def _ended(self, reason: Failure) -> None:
        if self.done.called:
            return
        if reason.check(ResponseDone):
            self.done.callback(self.status)
        else:
            self.done.errback(reason)

    def close(self) -> None:
        """Stop reading (the daemon sees the connection close)."""
        self._closed = True
        if not self._request_d.called:
            self._request_d.cancel()
        elif self._body_transport is not None:
            self._body_transport.stopProducing()
        if not self.done.called:
            self.done.callback(None)
        # Anything that fails from here on was wanted: swallow it.
        self.done.addErrback(lambda _: None)
        self.opened.addErrback(lambda _: None)


class _StreamBody(Protocol):
    """Receives a streamed response body for its L{Stream}, through the three hooks it is
    built with."""

    def __init__(self, started: Callable[[IPushProducer], None], chunk: Callable[[bytes], None],
                 ended: Callable[[Failure], None]) -> None:
        self._started = started
        self._chunk = chunk
        self._ended = ended

    def connectionMade(self) -> None:
        # A response body's transport is its producer.
        self._started(cast(IPushProducer, self.transport))

    def dataReceived(self, data: bytes) -> None:
        self._chunk(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._ended(reason)


def _is_jsonrpc(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get("jsonrpc") == "2.0"
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, dict) and v.get("jsonrpc") == "2.0" for v in value)
    return False


def _deliver_event(event: SSEEvent, on_message: Callable[[Any], None]) -> None:
    if event.event != "message" or not event.data.strip():
        return
    try:
        parsed = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        log.warn("ignoring an SSE event that is not JSON: {data!r}", data=event.data[:200])
        return
    if _is_jsonrpc(parsed):
        on_message(parsed)

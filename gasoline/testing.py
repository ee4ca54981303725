"""
In-memory doubles that ship with the package (house style: fakes live beside the code), for tests
and benchmarks: L{FakeSessionTools} (the second implementation of
L{gasoline.interfaces.ISessionTools}, beside the session proxy's), L{FakeExtension} (the browser
extension's /sync loop over any HTTP client),
L{stub_request} (one request and its whole answer through C{treq.testing.StubTreq}), the headers
the published extension sends, L{client_headers} (what a
caller sends to act as a client id), and L{PairedExtensionKeys} (the extension's side of pairing).
The real daemon as a subprocess (L{gasoline.testing_process.DaemonProcess}) lives in
L{gasoline.testing_process}. Helpers that bind
sockets in this process, skip tests or read CI variables live in the test suite
(C{tests/support.py}).
"""

from __future__ import annotations

import base64
import json
import os
from itertools import count as _count
from typing import Any, Callable, Sequence

import attrs
import treq
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, utils
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from treq.client import HTTPClient
from twisted.internet.defer import CancelledError, Deferred, maybeDeferred, succeed
from twisted.internet.task import deferLater
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool
from zope.interface import implementer

from gasoline.app import Gasoline
from gasoline.common import CLIENT_PROOF_HEADER, client_proof, read_client_key
from gasoline.connect.fast import dechunk, parse_head
from gasoline.core.daemon import Daemon
from gasoline.core.interfaces import IClientRegistry
from gasoline.core.trust.clientkey import ClientKey
from gasoline.core.trust.identity import (
    b64u,
    challenge_proof,
    derive_session_key,
    fingerprint_of,
)
from gasoline.core.trust.pins import extension_transcript
from gasoline.core.trust.seal import request_aad, request_iv, response_aad, seal_key_of
from gasoline.interfaces import ISessionTools
from gasoline.mcp.tools import Tool
from gasoline.testing_process import DaemonProcess


@implementer(ISessionTools)
class FakeSessionTools:
    """Extra tools for one MCP session without the session proxy: each tool answers its
    arguments back as text (C{"<name> <arguments as JSON>"}); C{progress_seen} keeps the
    C{notifications/progress} params the session passed on.

    Set it as a session's C{extra_tools} to see what the MCP layer does with a session's own
    tools (listing after the server's, calls through the registry's processing) without child
    servers.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.progress_seen: list[dict[str, Any]] = []
        self._tools = {
            name: Tool(name=name, description=f"fake session tool {name}",
                       input_schema={"type": "object"}, handler=self._answer(name), proxied=True)
            for name in names
        }

    def _answer(self, name: str) -> Callable[[Any, dict[str, Any]], Any]:
        def handler(ctx: Any, arguments: dict[str, Any]) -> dict[str, Any]:
            self.calls.append((name, arguments))
            text = f"{name} {json.dumps(arguments, sort_keys=True)}"
            return {"content": [{"type": "text", "text": text}]}

        return handler

    def definitions(self) -> list[dict[str, Any]]:
        return [tool.definition() for tool in self._tools.values()]

    def get(self, name: str) -> Any:
        return self._tools.get(name)

    def progress(self, params: dict[str, Any]) -> None:
        self.progress_seen.append(params)


def client_headers(source: Any, client_id: str) -> dict[str, str]:
    """C{X-Gasoline-Client: client_id} and its C{X-Gasoline-Client-Proof}: what a caller sends to
    act as C{client_id} (gasoline.http.client_proof).

    C{source} holds the daemon's client key: a built daemon (L{gasoline.app.Gasoline}, its
    L{gasoline.core.daemon.Daemon}), a L{gasoline.core.clients.registry.ClientRegistry}, a
    L{gasoline.core.trust.clientkey.ClientKey}, a L{DaemonProcess}, or a state dir (its
    C{client-key} file)."""
    if isinstance(source, Gasoline):
        source = source.daemon
    if isinstance(source, Daemon):
        source = source.registry
    if IClientRegistry.providedBy(source):
        source = source.client_key
    if isinstance(source, ClientKey):
        proof = source.proof(client_id)
    else:
        state_dir = source.state_dir if isinstance(source, DaemonProcess) else source
        proof = client_proof(read_client_key(state_dir), client_id)
    return {"X-Gasoline-Client": client_id, CLIENT_PROOF_HEADER: proof}


#: Headers the published 0.7.9 extension sends on its routes.
EXTENSION_HEADERS = {
    "Content-Type": "application/json",
    "X-Gasoline-Client": "gasoline-extension/0.7.9",
    "X-Gasoline-Extension-Version": "0.7.9",
}


def stub_answer(treq: Any, d: Deferred, clock: Any = None,
                wait: float = 0.0) -> tuple[Any, bytes] | None:
    """C{(response, body)} of the request C{d} made on C{treq} (a C{treq.testing.StubTreq}), once
    the bytes are flushed; with
    a C{clock}, advance it a second at a time, at most C{wait} seconds, while no answer came (a
    long poll). C{None} when there is still no answer."""
    out: list = []
    d.addCallback(lambda r: treq.content(r).addCallback(lambda body: out.append((r, body))))
    treq.flush()
    for _ in range(int(wait)):
        if out or clock is None:
            break
        clock.advance(1)
        treq.flush()
    return out[0] if out else None


def stub_request(treq: Any, method: str, url: str, *, clock: Any = None, wait: float = 0.0,
                 **kwargs: Any) -> tuple[Any, bytes]:
    """Issue a request on C{treq} and return C{(response, body)} (L{stub_answer}); an
    C{AssertionError} when nothing answered."""
    answer = stub_answer(treq, treq.request(method, url, **kwargs), clock, wait)
    assert answer is not None, f"no response to {method} {url}"
    return answer


def response_body(raw: bytes) -> bytes:
    """The body of one whole HTTP/1.1 response C{raw} (what a C{StringTransport} holds): as is
    after a C{Content-Length}, reassembled from its chunks when chunked."""
    head, _, body = raw.partition(b"\r\n\r\n")
    _, fields = parse_head(head)
    return dechunk(body) if fields.get(b"transfer-encoding", b"").lower() == b"chunked" else body


# -- a fake browser extension that runs the real /sync loop over HTTP ------------------------------


#: A 1x1 transparent PNG: what the fake extension uploads for a C{screenshot} command.
TINY_PNG_DATA_URL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhf"
    "DwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

DEFAULT_FAKE_SETTINGS: dict[str, Any] = {
    "pilot_enabled": True,
    "tracking_enabled": True,
    "tracked_tab_id": 1,
    "tracked_tab_url": "http://localhost:3000/",
    "tracked_tab_title": "Fake page",
    "capture_logs": True,
    "capture_network": True,
    "capture_websocket": True,
    "capture_actions": True,
    "csp_restricted": False,
    "csp_level": "none",
}

_ext_sessions = _count(1)


class FakeExtensionError(Exception):
    """Raise from a L{FakeExtension} handler to report an error result for the command.

    C{status} is the result's C{status} (C{error}, C{timeout} or C{cancelled}).
    """

    def __init__(self, error: str, status: str = "error") -> None:
        super().__init__(error)
        self.error = error
        self.status = status


@attrs.define(eq=False)
class FakeExtension:
    """A stand-in for the MV3 extension's service worker, talking to a daemon over real HTTP.

    It loops C{POST /sync} (extension headers, the SyncRequest shape of extension-protocol.md §3):
    each new command (de-duplicated by id) runs through C{handlers[type](params)}, which returns
    the result or a Deferred of it (raise L{FakeExtensionError} to report an error); results go
    out in a sync at once (C{command_results}), and every sync acknowledges the newest command
    received (C{last_command_ack}). C{screenshot} commands are answered, as the real extension
    does, by C{POST /screenshots} with C{query_id} (unless C{handlers} has a C{screenshot}
    entry). Unknown types get C{{"error": "unknown_query_type"}}.

    C{reactor} must provide C{IReactorTime} and C{IReactorTCPCore} (the real reactor in tests and
    benchmarks). C{start()} begins the loop; C{stop()} cancels the in-flight requests and closes
    the connections (returns a Deferred).
    """

    url: str
    reactor: Any
    handlers: dict[str, Callable[[dict[str, Any]], Any]] = attrs.field(factory=dict)
    settings: dict[str, Any] = attrs.field(factory=dict)
    #: Seconds between syncs; C{None} honours the daemon's C{next_poll_ms}.
    poll_interval: float | None = None
    #: Per-request timeout (the extension aborts a sync after 8 s).
    request_timeout: float = 8.0
    retry_delay: float = 0.5
    #: Run one tab's commands one after another, as the real extension does (default: all at
    #: once, which makes the daemon see every result of a burst in one sync).
    sequential: bool = False
    extension_version: str = "0.7.9"
    ext_session_id: str = attrs.field(factory=lambda: f"ext_fake_{next(_ext_sessions)}")
    #: Every command received (first delivery only), in order.
    received: list[dict[str, Any]] = attrs.field(factory=list, init=False)
    #: Every result put in a sync request, in order (one re-sent after a failed sync repeats).
    sent_results: list[dict[str, Any]] = attrs.field(factory=list, init=False)
    syncs: int = attrs.field(default=0, init=False)
    errors: list[Any] = attrs.field(factory=list, init=False)
    running: bool = attrs.field(default=False, init=False)
    _http: Any = attrs.field(default=None, init=False)
    _pool: Any = attrs.field(default=None, init=False)
    _seen: set[str] = attrs.field(factory=set, init=False)
    _ack: str | None = attrs.field(default=None, init=False)
    _ack_n: int = attrs.field(default=0, init=False)
    _outbox: list[dict[str, Any]] = attrs.field(factory=list, init=False)
    _running_cmds: dict[str, tuple[dict[str, Any], int]] = attrs.field(factory=dict, init=False)
    _tab_queues: dict[str, list[dict[str, Any]]] = attrs.field(factory=dict, init=False)
    _inflight: set[Any] = attrs.field(factory=set, init=False)
    _flush_d: Any = attrs.field(default=None, init=False)
    _flush_call: Any = attrs.field(default=None, init=False)
    _next_poll_ms: int = attrs.field(default=1000, init=False)
    _loop: Any = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.settings = {**DEFAULT_FAKE_SETTINGS, **self.settings}
        self.url = self.url.rstrip("/")

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "FakeExtension":
        if self.running:
            return self
        self.running = True
        class _Pool(HTTPConnectionPool):
            maxPersistentPerHost = 4  # (Twisted's documented knob is this class attribute)

        self._pool = _Pool(self.reactor, persistent=True)
        self._http = HTTPClient(Agent(self.reactor, pool=self._pool))
        self._loop = Deferred.fromCoroutine(self._poll_loop())
        self._loop.addErrback(self._log_failure, "poll loop")
        return self

    def stop(self) -> Deferred:
        """Stop syncing: cancel every in-flight request and timer; a Deferred that fires when the
        connections are closed."""

        self.running = False
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None
        self._flush_d = None
        for d in list(self._inflight):
            d.cancel()
        self._inflight.clear()
        if self._pool is None:
            return succeed(None)
        pool, self._pool = self._pool, None
        return pool.closeCachedConnections()

    def set_settings(self, **settings: Any) -> None:
        """Change what the next sync reports (C{pilot_enabled}, C{tracked_tab_id}, ...)."""
        self.settings.update(settings)

    def connected(self, timeout: float = 10.0) -> Deferred:
        """A Deferred firing once the daemon's C{GET /health} says the extension is connected."""
        async def poll() -> None:
            deadline = self.reactor.seconds() + timeout
            problem: Any = None
            while True:
                try:
                    body = await self._request("GET", "/health", None)
                    if body.get("capture", {}).get("extension_connected"):
                        return
                except Exception as e:  # not up yet; say why if it never comes up
                    problem = e
                if self.reactor.seconds() > deadline:
                    raise TimeoutError(
                        "the daemon never saw the fake extension connected "
                        f"(last /health error: {problem!r}; sync errors: {self.errors[-3:]!r})"
                    )
                await self._track(deferLater(self.reactor, 0.02, lambda: None))

        return Deferred.fromCoroutine(poll())

    # -- HTTP --------------------------------------------------------------------------------------

    def _track(self, d: Deferred) -> Deferred:
        self._inflight.add(d)

        def untrack(result: object) -> object:
            self._inflight.discard(d)
            return result

        d.addBoth(untrack)
        return d

    async def _request(self, method: str, path: str, body: Any) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        response = await self._track(self._http.request(
            method, self.url + path, data=data, headers=EXTENSION_HEADERS,
            reactor=self.reactor, timeout=self.request_timeout,
        ))
        content = await self._track(treq.content(response))
        if response.code != 200:
            raise RuntimeError(f"{method} {path} answered {response.code}: {content[:200]!r}")
        return json.loads(content)

    # -- /sync -------------------------------------------------------------------------------------

    def _sync_request(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        now_ms = int(self.reactor.seconds() * 1000)
        body: dict[str, Any] = {
            "ext_session_id": self.ext_session_id,
            "extension_version": self.extension_version,
            "settings": dict(self.settings),
            "in_progress": [
                {"id": c["id"], "type": c.get("type"), "status": "running",
                 "started_at": started, "updated_at": now_ms,
                 **({"correlation_id": c["correlation_id"]} if c.get("correlation_id") else {})}
                for c, started in self._running_cmds.values()
            ],
        }
        if self._ack is not None:
            body["last_command_ack"] = self._ack
        if results:
            body["command_results"] = results
        return body

    async def _sync_once(self) -> None:
        results, self._outbox = self._outbox, []
        self.sent_results.extend(results)
        try:
            response = await self._request("POST", "/sync", self._sync_request(results))
        except BaseException:
            self._outbox[:0] = results  # no answer: send them again (the daemon ignores repeats)
            raise
        self.syncs += 1
        next_poll = response.get("next_poll_ms")
        if isinstance(next_poll, int):
            self._next_poll_ms = next_poll
        for command in response.get("commands") or ():
            self._received(command)
        if self._outbox:
            self._schedule_flush()

    async def _poll_loop(self) -> None:
        while self.running:
            try:
                await self._sync_once()
                delay = (self.poll_interval if self.poll_interval is not None
                         else self._next_poll_ms / 1000.0)
            except CancelledError:
                if not self.running:
                    return
                delay = self.retry_delay
            except Exception as e:
                if not self.running:
                    return
                self.errors.append(e)
                delay = self.retry_delay
            if not self.running:
                return
            if delay > 0:
                try:
                    await self._track(deferLater(self.reactor, delay, lambda: None))
                except CancelledError:
                    return

    def _schedule_flush(self, delay: float = 0) -> None:
        if not self.running or self._flush_call is not None:
            return
        self._flush_call = self.reactor.callLater(delay, self._flush)

    def _flush(self) -> None:
        """Send every finished result now, one result sync at a time (the daemon answers a sync
        that reports results at once, so one in flight is enough; results finished meanwhile go
        in the next one)."""
        self._flush_call = None
        if not self.running or not self._outbox or self._flush_d is not None:
            return  # a flush in flight schedules the next one when it returns
        d = self._flush_d = Deferred.fromCoroutine(self._sync_once())

        def done(result: object) -> None:
            if self._flush_d is d:
                self._flush_d = None
            if isinstance(result, Failure):
                if result.check(CancelledError) or not self.running:
                    return
                self.errors.append(result.value)
                self._schedule_flush(self.retry_delay)
            elif self._outbox:
                self._schedule_flush()

        d.addBoth(done)

    def _swallow(self, failure: Failure) -> None:
        if not failure.check(CancelledError) and self.running:
            self.errors.append(failure.value)

    def _log_failure(self, failure: Failure, what: str) -> None:
        self.errors.append(failure.value)

    # -- commands ----------------------------------------------------------------------------------

    def _received(self, command: Any) -> None:
        if not isinstance(command, dict) or not isinstance(command.get("id"), str):
            return
        command_id = command["id"]
        n = int(command_id[2:]) if command_id[2:].isdecimal() and len(command_id) < 20 else 0
        if n > self._ack_n:
            self._ack_n, self._ack = n, command_id
        if command_id in self._seen:
            return  # re-sent before our ack reached the daemon
        self._seen.add(command_id)
        self.received.append(command)
        self._run(command)

    def _run(self, command: dict[str, Any]) -> None:
        if not self.sequential:
            self._run_command(command)
            return
        # As the real extension does: one tab's commands run one after another, in queue order.
        params = raw_params if isinstance(raw_params := command.get("params"), dict) else {}
        key = str(command.get("tab_id") or params.get("tab_id") or "tracked")
        queue = self._tab_queues.setdefault(key, [])
        queue.append(command)
        if len(queue) == 1:
            self._drain(key)

    def _drain(self, key: str) -> None:
        queue = self._tab_queues[key]
        while queue:
            d = self._run_command(queue[0])
            if not d.called:
                def next_one(_: object, queue: list[dict[str, Any]] = queue) -> None:
                    queue.pop(0)
                    self._drain(key)

                d.addBoth(next_one)
                return
            queue.pop(0)
        del self._tab_queues[key]

    def _run_command(self, command: dict[str, Any]) -> Deferred:
        """Run one command; a Deferred that fires (with None) once its result is reported."""
        kind = str(command.get("type"))
        params = raw_params if isinstance(raw_params := command.get("params"), dict) else {}
        self._running_cmds[command["id"]] = (command, int(self.reactor.seconds() * 1000))
        if kind == "screenshot" and "screenshot" not in self.handlers:
            d = self._track(Deferred.fromCoroutine(self._screenshot(command)))
            d.addBoth(lambda _: self._running_cmds.pop(command["id"], None))
            d.addErrback(self._swallow)
            return d
        handler = self.handlers.get(kind) or self._default_handlers().get(kind)
        if handler is None:
            self._report(command, {"status": "error", "error": "unknown_query_type"})
            return succeed(None)
        d = maybeDeferred(handler, params)
        d.addCallbacks(
            lambda result: self._report(command, {"status": "complete", "result": result}),
            lambda failure: self._report(command, self._error_result(failure)),
        )
        return d

    @staticmethod
    def _error_result(failure: Failure) -> dict[str, Any]:
        value = failure.value
        if isinstance(value, FakeExtensionError):
            return {"status": value.status, "error": value.error}
        return {"status": "error", "error": str(value) or type(value).__name__}

    def _report(self, command: dict[str, Any], outcome: dict[str, Any]) -> None:
        self._running_cmds.pop(command["id"], None)
        result = {"id": command["id"], **outcome}
        if command.get("correlation_id"):
            result["correlation_id"] = command["correlation_id"]
        self._outbox.append(result)
        self._schedule_flush()

    async def _screenshot(self, command: dict[str, Any]) -> None:
        body = {
            "data_url": TINY_PNG_DATA_URL,
            "url": self.settings.get("tracked_tab_url"),
            "query_id": command["id"],
        }
        if command.get("correlation_id"):
            body["correlation_id"] = command["correlation_id"]
        await self._request("POST", "/screenshots", body)
        self.sent_results.append({"id": command["id"], "status": "complete", "via": "/screenshots"})

    # -- default answers ---------------------------------------------------------------------------

    def _default_handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "dom": self._dom,
            "a11y": self._a11y,
            "execute": self._execute,
            "page_info": self._page_info,
            "tabs": self._tabs,
            "browser_action": self._ok,
            "dom_action": self._ok,
            "highlight": self._ok,
            "subtitle": self._ok,
        }

    def _dom(self, params: dict[str, Any]) -> dict[str, Any]:
        selector = params.get("selector")
        return {
            "selector": selector,
            "url": self.settings.get("tracked_tab_url"),
            "match_count": 1,
            "matches": [{"tag": "div", "text": f"fake match for {selector}", "visible": True,
                         "attributes": {"class": "fake"}}],
        }

    def _a11y(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": self.settings.get("tracked_tab_url"),
            "violations": [{
                "id": "image-alt", "impact": "critical",
                "description": "Ensures <img> elements have alternate text",
                "help": "Images must have alternate text",
                "helpUrl": "https://dequeuniversity.com/rules/axe/4.8/image-alt",
                "tags": ["wcag2a", "wcag111"],
                "nodes": [{"target": ["img.logo"], "html": "<img class=\"logo\" src=\"/logo.png\">"}],
            }],
            "passes": 12, "incomplete": 0, "inapplicable": 30,
        }

    def _execute(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"success": True, "result": None, "script": params.get("script")}

    def _page_info(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": self.settings.get("tracked_tab_url"),
            "title": self.settings.get("tracked_tab_title"),
            "tab_id": self.settings.get("tracked_tab_id"),
            "ready_state": "complete",
            "viewport": {"width": 1280, "height": 800},
        }

    def _tabs(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"tabs": [{
            "id": self.settings.get("tracked_tab_id"),
            "url": self.settings.get("tracked_tab_url"),
            "title": self.settings.get("tracked_tab_title"),
            "active": True,
        }]}

    def _ok(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"success": True, "action": params.get("action"), "params": params}


class PairedExtensionKeys:
    """What the Gasoline extension's C{lib/pairing.js} does, in Python, transport-free: its own
    long-term key, the challenge of a daemon key it pinned, sealing requests and opening answers
    (tests, C{bench/ingest.py}). Needs C{cryptography}."""

    def __init__(self, daemon_key: bytes, extension_key: Any = None) -> None:
        self.daemon_key = daemon_key
        self.private = extension_key or ec.generate_private_key(ec.SECP256R1())
        self.public = _raw_point(self.private.public_key())
        self.session: str | None = None
        self.key: bytes | None = None
        self.seq = 0
        self._aead: Any = None
        self._pending: Any = None

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.public)

    def challenge(self, with_key: bool = True) -> dict[str, str]:
        """The body of C{POST /pairing/challenge}."""
        eph = ec.generate_private_key(ec.SECP256R1())
        eph_raw = _raw_point(eph.public_key())
        nonce = os.urandom(32)
        self._pending = (eph, eph_raw, nonce)
        body = {"key": b64u(eph_raw), "nonce": b64u(nonce)}
        if with_key:
            der = self.private.sign(extension_transcript(eph_raw, nonce),
                                    ec.ECDSA(hashes.SHA256()))
            r, s = utils.decode_dss_signature(der)
            body["ext_key"] = b64u(self.public)
            body["ext_sig"] = b64u(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
        return body

    def finish(self, answer: dict[str, Any]) -> bool:
        """Check the daemon's proof (an answer to L{challenge}); keep the session if it holds."""
        eph, eph_raw, nonce = self._pending
        peer = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), self.daemon_key)
        key = derive_session_key(eph.exchange(ec.ECDH(), peer), nonce, self.daemon_key, eph_raw)
        proof = str(answer.get("proof", ""))
        if base64.urlsafe_b64decode(proof + "=" * (-len(proof) % 4)) != challenge_proof(key, nonce):
            return False
        self.session, self.key = answer["session"], key
        self.seq = 0  # the session's request numbers start at 1
        self._aead = AESGCM(seal_key_of(key))
        return True

    def seal(self, method: str, path: str, body: bytes) -> tuple[dict[str, str], bytes, bytes]:
        """C{(headers, sealed body, iv)} of a request of this session (its next request number)."""
        assert self.session is not None, "pair first"
        self.seq += 1
        iv = request_iv(self.seq)
        sealed = iv + self._aead.encrypt(iv, body, request_aad(method.encode(), path.encode(),
                                                                self.session.encode(), self.seq))
        headers = {**EXTENSION_HEADERS, "Content-Type": "application/x-gasoline-sealed",
                   "X-Gasoline-Session": self.session, "X-Gasoline-Sealed": "1"}
        return headers, sealed, iv

    def open_answer(self, request_iv: bytes, body: bytes) -> bytes:
        """The plaintext of a sealed answer to the request sealed with C{request_iv}."""
        return self._aead.decrypt(body[:12], body[12:], response_aad(request_iv))


def _raw_point(public: Any) -> bytes:
    return public.public_bytes(serialization.Encoding.X962,
                               serialization.PublicFormat.UncompressedPoint)

"""
Test-suite helpers that start processes, bind sockets or decide how a missing tool is reported:
not part of the package (the daemon never imports pytest or reads CI variables).

L{DaemonProcess} (from L{gasoline.testing}, shared with the benchmarks) runs the real
``twistd -n gasoline`` on port 0 in a temporary state dir and learns its port from
``daemon.json``; L{InProcessDaemon} runs the components on the real reactor in this
process; L{require_tool} fails a test under C{CI=true} when a tool it needs is missing.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import attrs
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.pages import notFound

# The real daemon as a subprocess is shared with the benchmarks: it lives in the package.
from gasoline.http.request import GasolineSite
from gasoline.testing import response_body
from gasoline.testing_process import DaemonProcess, reap, twistd_path  # noqa: F401 (re-exported)

#: True when running under CI (``CI=true``): tests that need an external tool fail without it.
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_tool(name: str, path: str | None = None, why: str = "") -> str:
    """Return the path of an external tool (Chromium, Node, ...) a test needs.

    Without it the test fails under C{CI=true} and is skipped, with a loud reason, locally.
    """
    import pytest  # test-only helper; the daemon never imports pytest

    found = path if path and os.path.exists(path) else shutil.which(name)
    if found:
        return found
    message = f"{name} is required for this test but was not found{': ' + why if why else ''}"
    if IN_CI:
        pytest.fail(f"CI=true: {message}")
    pytest.skip(f"SKIPPED LOUDLY — {message}")


@attrs.define(eq=False)
class InProcessDaemon:
    """The daemon's components (L{gasoline.app.build}) listening on 127.0.0.1:0 in this process,
    on C{reactor} (the real one in integration tests and benchmarks). Services are not started:
    this is for exercising HTTP paths (e.g. L{FakeExtension} against the query router) when no
    subprocess is needed."""

    reactor: Any
    state_dir: Path
    app: Any = attrs.field(default=None, init=False)
    listening: Any = attrs.field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listening.getHost().port}"

    def start(self) -> "InProcessDaemon":
        from gasoline.app import Config, build
        from gasoline.http.request import GasolineSite

        Path(self.state_dir).mkdir(parents=True, exist_ok=True)
        self.app = build(Config(state_dir=self.state_dir, persist=False), self.reactor)
        site = GasolineSite(self.app.resource, reactor=self.reactor)
        self.listening = self.reactor.listenTCP(0, site, interface="127.0.0.1")
        return self

    def stop(self):
        """Stop listening and cancel the components' timers; a Deferred."""
        from twisted.internet.defer import maybeDeferred

        if self.app.router is not None:
            self.app.router.close()
        self.app.extension.stop()
        self.app.store.notifier.stop()
        return maybeDeferred(self.listening.stopListening)


# -- the extension's side of pairing (lib/pairing.js, lib/cdp.js), in Python ------------------------


def pair(port: int, origin: str = "chrome-extension://abcdefghijklmnop") -> tuple[str, bytes]:
    """What the extension does before it opens the CDP link (lib/pairing.js): pin the daemon's key,
    challenge it, keep the session and its key."""
    import os
    import urllib.request

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from gasoline.core.trust.identity import b64u, challenge_proof, derive_session_key

    def call(path, body=None):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "X-Gasoline-Client": "gasoline-extension/test",
                     "Origin": origin},
            method="GET" if body is None else "POST")
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())

    pinned = unb64u(call("/pairing")["key"])
    eph = ec.generate_private_key(ec.SECP256R1())
    eph_raw = eph.public_key().public_bytes(serialization.Encoding.X962,
                                            serialization.PublicFormat.UncompressedPoint)
    nonce = os.urandom(32)
    answer = call("/pairing/challenge", {"key": b64u(eph_raw), "nonce": b64u(nonce)})
    peer = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), pinned)
    key = derive_session_key(eph.exchange(ec.ECDH(), peer), nonce, pinned, eph_raw)
    assert unb64u(answer["proof"]) == challenge_proof(key, nonce)
    return answer["session"], key


def unb64u(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def open_link(port: int, session: str, key: bytes,
              origin: str = "chrome-extension://abcdefghijklmnop"):
    """Open the extension's CDP link and check the daemon's opening proof, as lib/cdp.js does."""
    import os

    import websocket  # websocket-client

    from gasoline.core.trust.identity import b64u, response_proof
    from gasoline.core.trust.pairing import LINK_BODY

    nonce = b64u(os.urandom(24))
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/extension/cdp?session={session}&nonce={nonce}",
        origin=origin, timeout=10)
    first = json.loads(ws.recv())
    assert first["method"] == "Gasoline.proof"
    assert unb64u(first["params"]["proof"]) == response_proof(key, nonce.encode(), LINK_BODY)
    return ws


# -- the user's daemon on the default port is none of the suite's business --------------------------

#: The port a user's own daemon listens on (``make run``, an agent's connector): the suite must
#: never bind it, stop what listens there or talk to it.
USER_PORT = 7890


def listening_sockets(port: int) -> set[str] | None:
    """The inodes of the TCP sockets listening on C{port} (any address, IPv4 or IPv6), read from
    C{/proc/net/tcp*}: no connection is made, so whatever listens there never sees the suite.
    C{None} where there is no C{/proc} (the check is then not made)."""
    found: set[str] = set()
    seen_any = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        seen_any = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A: LISTEN
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found if seen_any else None


def site_on_clock(**kwargs):
    """A L{GasolineSite} over a resource that answers 404 to every path (twisted.web's
    C{pages.notFound}) on a L{Clock} (its timers advance by hand), and that clock."""
    clock = Clock()
    return GasolineSite(notFound(), reactor=clock, **kwargs), clock


def connect(site):
    """One accepted connection of C{site} over a C{StringTransport}: C{(channel, transport)}, or
    C{None} when the site refuses it (the connection cap)."""
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
    if channel is None:
        return None
    transport = StringTransport()
    channel.makeConnection(transport)
    return channel, transport


class _BodyCollector(Protocol):
    """A response body handed to C{collect} as it arrives; C{finished} fires when it ends."""

    def __init__(self, collect, finished: Deferred) -> None:
        self.collect = collect
        self.finished = finished

    def dataReceived(self, data: bytes) -> None:
        self.collect(data)

    def connectionLost(self, reason=connectionDone) -> None:
        if reason.check(ResponseDone, PotentialDataLoss):
            self.finished.callback(None)
        else:
            self.finished.errback(reason)


class Streams:
    """Streaming response bodies (SSE) read as they arrive, as C{treq.collect} reads them, that the
    test can close as a client that goes away does: L{drop} stops each body's producer, which
    closes its connection (C{IResponse.deliverBody}'s transport; with C{treq.testing.StubTreq} the
    server sees the connection lost at the next C{flush})."""

    def __init__(self) -> None:
        self._open: list[_BodyCollector] = []

    def collect(self, response, collect) -> Deferred:
        finished: Deferred = Deferred()
        body = _BodyCollector(collect, finished)
        response.deliverBody(body)
        self._open.append(body)
        return finished

    def drop(self) -> None:
        """Every collected body's connection closes (the client closed its streams)."""
        for body in self._open:
            if body.transport is not None:
                body.transport.stopProducing()
        self._open.clear()


def site_answer(site, clock, method: str, path: str, body: bytes = b"",
                headers: dict[str, str] | None = None, wait: int = 30) -> tuple[int, bytes] | None:
    """C{(status, body)} of one HTTP/1.1 request sent as raw bytes to a new connection of C{site}
    (the daemon's own L{GasolineSite}: its body limits, no form parsing), advancing C{clock} a
    second at a time, at most C{wait} seconds, while nothing is answered (a long poll); C{None}
    when nothing was."""
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
    transport = StringTransport()
    channel.makeConnection(transport)
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1:7890",
             b"Content-Length: %d" % len(body)]
    lines += [f"{k}: {v}".encode() for k, v in (headers or {}).items()]
    channel.dataReceived(b"\r\n".join(lines) + b"\r\n\r\n" + body)
    for _ in range(wait):
        if transport.value():
            break
        clock.advance(1)
    raw = transport.value()
    channel.connectionLost(Failure(ConnectionDone()))
    if not raw:
        return None
    assert raw.startswith(b"HTTP/1.1 "), raw[:200]
    return int(raw.split(b" ", 2)[1]), response_body(raw)

"""
Server-side link validation (C{analyze {what:"link_validation"}}) with an SSRF guard.

For each URL: resolve its host (off the reactor thread), refuse it unless every address is public
(L{gasoline.analysis.is_public_http_url}; C{allow_private} lifts the loopback/private refusal),
then send C{HEAD} (C{GET} when the server answers 405/501) **to one of the checked addresses**:
the HTTP client is built per URL with the host pinned to that address, so a DNS answer that
changes between the check and the fetch cannot redirect the request to a private host. Redirects
are not followed (a 3xx is reported as C{redirect} with its C{location}). At most
C{concurrency} requests run at once, each bounded by C{timeout} seconds on the injected clock.

The resolver and the HTTP client factory are injected: tests pass a dict-backed resolver and a
C{treq.testing.StubTreq}; L{default_validator} builds the real ones on the reactor.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any, Callable
from urllib.parse import urlsplit

import attrs
import treq
from treq.client import HTTPClient
from twisted.internet.defer import (
    Deferred,
    DeferredSemaphore,
    gatherResults,
    maybeDeferred,
)
from twisted.internet.endpoints import (
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
    wrapClientTLS,
)
from twisted.internet.interfaces import IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.web.client import Agent, BrowserLikePolicyForHTTPS, HTTPConnectionPool
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer

from gasoline.analysis import is_public_http_url, summarize_link_results

log = Logger()

DEFAULT_CONCURRENCY = 6
DEFAULT_TIMEOUT = 8.0
MAX_LINKS = 200

#: host -> Deferred firing with the host's addresses.
Resolver = Callable[[str], Deferred]
#: C{{host: pinned address}} -> a treq-like client (C{.request(method, url, **kw)}).
ClientFactory = Callable[[dict[str, str]], Any]


class _Enough(Exception):
    """Raised from a body collector to stop reading a GET response after its status."""


@attrs.define(eq=False)
class LinkValidator:
    clock: IReactorTime
    resolve: Resolver
    client_for: ClientFactory
    concurrency: int = DEFAULT_CONCURRENCY
    timeout: float = DEFAULT_TIMEOUT

    def validate(self, urls: list[str], allow_private: bool = False,
                 on_progress: Callable[[int, int, str], None] | None = None) -> Deferred:
        """Check every URL; a Deferred firing with the summary (never failing).

        C{on_progress(done, total, url)} is called as each check finishes."""
        semaphore = DeferredSemaphore(max(1, self.concurrency))
        picked = urls[:MAX_LINKS]
        ds = [semaphore.run(self._guarded, url, allow_private) for url in picked]
        if on_progress is not None:
            finished = [0]

            def one_done(result: Any, url: str) -> Any:
                finished[0] += 1
                on_progress(finished[0], len(picked), url)
                return result

            for d_, url in zip(ds, picked):
                d_.addCallback(one_done, url)
        d = gatherResults(ds, consumeErrors=True)

        def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
            summary = summarize_link_results(results)
            refused = [r for r in results if r.get("refused")]
            by_url = {r["url"]: r for r in results}
            for item in summary["results"]:
                extra = by_url.get(item.get("url"), {})
                for key in ("refused", "location", "method", "duration_ms", "addresses"):
                    if key in extra:
                        item[key] = extra[key]
            summary["refused"] = len(refused)
            summary["allow_private"] = allow_private
            return summary

        return d.addCallback(summarize)

    def _guarded(self, url: str, allow_private: bool) -> Deferred:
        d = Deferred.fromCoroutine(self._one(url, allow_private))

        def failed(failure: Any) -> dict[str, Any]:
            log.failure("link check of {url} failed", failure, url=url)
            return {"url": url, "error": failure.getErrorMessage()[:300] or "check failed"}

        return d.addErrback(failed)

    async def _one(self, url: str, allow_private: bool) -> dict[str, Any]:
        started = self.clock.seconds()
        try:
            host = urlsplit(url).hostname
        except ValueError:
            host = None
        addresses: list[str] = []
        literal = False
        if host:
            try:
                ipaddress.ip_address(host)
                literal = True
            except ValueError:
                literal = False
        loopback_name = host is not None and (host == "localhost" or host.endswith(".localhost"))
        if host and not literal and (allow_private or not loopback_name):
            try:
                resolving = maybeDeferred(self.resolve, host)
                resolving.addTimeout(self.timeout, self.clock)
                addresses = [str(a) for a in await resolving]
            except Exception as e:  # the failure is the answer
                return {"url": url, "error": f"host did not resolve: {str(e)[:200] or type(e).__name__}"}
        check = is_public_http_url(url, allow_private, resolver=lambda _h: addresses)
        if not check.ok:
            return {"url": url, "error": f"refused: {check.reason}", "refused": check.reason}
        # Connect to a checked address; IPv4 first (a dev server often listens on 127.0.0.1 only
        # while ``localhost`` may resolve to ::1 first).
        ordered = sorted(check.addresses, key=lambda a: ":" in a)
        pins = {check.host: ordered[0]} if check.host and ordered else {}
        client = self.client_for(pins)
        method = "HEAD"
        response = await self._request(client, method, url)
        if response.code in (405, 501):
            method = "GET"
            response = await self._request(client, method, url)
        await self._discard(response)
        out: dict[str, Any] = {
            "url": url, "status": response.code, "method": method,
            "duration_ms": round((self.clock.seconds() - started) * 1000.0, 1),
            "addresses": list(check.addresses),
        }
        if 300 <= response.code < 400:
            location = response.headers.getRawHeaders(b"location") or []
            if location:
                out["location"] = location[0].decode("latin-1")[:2000]
        return out

    def _request(self, client: Any, method: str, url: str) -> Deferred:
        d = client.request(method, url, allow_redirects=False,
                           headers={b"User-Agent": [b"Gasoline link validation"]})
        return d.addTimeout(self.timeout, self.clock)

    async def _discard(self, response: Any) -> None:
        """Stop reading the body after the status line (the status is all we want)."""
        def stop(_data: bytes) -> None:
            raise _Enough()

        d = treq.collect(response, stop)
        d.addTimeout(self.timeout, self.clock)
        try:
            await d
        except Exception:  # _Enough, a dropped connection or a timeout: the status is known
            pass


# -- the real resolver and pinned HTTP client ----------------------------------------------------


def thread_resolver(reactor: Any) -> Resolver:
    """Resolve with C{socket.getaddrinfo} in the reactor's thread pool (never on the reactor)."""
    def lookup(host: str) -> list[str]:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        seen: list[str] = []
        for info in infos:
            address = str(info[4][0])
            if address not in seen:
                seen.append(address)
        return seen

    def resolve(host: str) -> Deferred:
        return deferToThreadPool(reactor, reactor.getThreadPool(), lookup, host)

    return resolve


def pinned_client_factory(reactor: Any) -> ClientFactory:
    """Clients whose connections go to the pinned address of each host (TLS still verifies and
    sends SNI for the host name)."""
    policy = BrowserLikePolicyForHTTPS()

    class _Quiet:
        # No "Starting factory _HTTP11ClientFactory ..." line per checked link in the daemon log
        # (Factory.noisy is public; the pool's factory class is not).
        def __init__(self, endpoint: Any) -> None:
            self._endpoint = endpoint

        def connect(self, factory: Any) -> Any:
            factory.noisy = False
            return self._endpoint.connect(factory)

    @implementer(IAgentEndpointFactory)
    class _Pinned:
        def __init__(self, pins: dict[str, str]) -> None:
            self.pins = pins

        def endpointForURI(self, uri: Any) -> Any:
            host = uri.host.decode("ascii", "replace")
            address = self.pins.get(host)
            if address is None:
                raise ValueError(f"refused: {host} was not checked")
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            endpoint_type = TCP6ClientEndpoint if ip.version == 6 else TCP4ClientEndpoint
            endpoint = endpoint_type(reactor, address, uri.port, timeout=DEFAULT_TIMEOUT)
            if uri.scheme == b"https":
                return _Quiet(wrapClientTLS(policy.creatorForNetloc(uri.host, uri.port),
                                            endpoint))
            return _Quiet(endpoint)

    def client_for(pins: dict[str, str]) -> Any:
        pool = HTTPConnectionPool(reactor, persistent=False)
        return HTTPClient(Agent.usingEndpointFactory(reactor, _Pinned(dict(pins)), pool=pool))

    return client_for


def default_validator(reactor: Any) -> LinkValidator:
    return LinkValidator(reactor, thread_resolver(reactor), pinned_client_factory(reactor))

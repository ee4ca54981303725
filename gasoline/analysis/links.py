"""
Link validation helpers: an SSRF guard and the pure parts of checking links server-side.

L{is_public_http_url} answers whether the daemon may fetch a URL on an agent's behalf: only
C{http}/C{https}, and every address the host resolves to must be public (not loopback, private,
link-local, multicast, reserved, unspecified, shared CGNAT space or an IPv4-mapped form of those),
unless C{allow_private}. Resolution goes through an injected resolver (host → addresses), so
tests never touch DNS and the daemon can resolve off the reactor thread. Checking *all* addresses
closes the "one public, one private A record" trick; the fetcher should then connect to one of the
checked addresses (DNS can change between check and fetch).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Callable, Iterable
from urllib.parse import urljoin, urlsplit, urlunsplit

import attrs

from gasoline.analysis._util import dicts, text

Resolver = Callable[[str], Iterable[str]]
MAX_URL_LENGTH = 4096
_CGNAT = ipaddress.ip_network("100.64.0.0/10")


@attrs.frozen
class UrlCheck:
    ok: bool
    reason: str
    host: str | None = None
    addresses: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "reason": self.reason, "host": self.host,
                "addresses": list(self.addresses)}


def address_problem(address: str, allow_private: bool = False) -> str | None:
    """Why the daemon must not connect to C{address}, or None when it may."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"not an IP address: {text(address, 60)}"
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped or ip.sixtofour
        if mapped is not None:
            ip = mapped
    if ip.is_multicast:
        return "multicast address"
    if ip.is_unspecified:
        return "unspecified address"
    if ip.is_reserved:
        return "reserved address"
    if allow_private:
        return None
    if ip.is_loopback:
        return "loopback address"
    if ip.is_link_local:
        return "link-local address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "shared (CGNAT) address"
    if ip.is_private or not ip.is_global:
        return "private address"
    return None


def is_public_http_url(url: Any, allow_private: bool = False,
                       resolver: Resolver | None = None) -> UrlCheck:
    """Whether C{url} is an http(s) URL whose host resolves only to allowed addresses."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        return UrlCheck(False, "not a URL")
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        parts.port  # raises ValueError on a bad port
    except ValueError:
        return UrlCheck(False, "malformed URL")
    if parts.scheme.lower() not in ("http", "https"):
        return UrlCheck(False, f"scheme '{text(parts.scheme, 20)}' is not http or https")
    if not host:
        return UrlCheck(False, "no host", None)
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses: list[str] = [str(literal)]
    else:
        if host == "localhost" or host.endswith(".localhost"):
            if not allow_private:
                return UrlCheck(False, "loopback host", host)
        if resolver is None:
            return UrlCheck(False, "no resolver to check the host with", host)
        try:
            addresses = [str(a) for a in resolver(host)]
        except Exception as e:  # the resolver's failure is the answer, not a crash
            return UrlCheck(False, f"host did not resolve: {text(e, 200)}", host)
        if not addresses:
            return UrlCheck(False, "host did not resolve", host)
    for address in addresses:
        problem = address_problem(address, allow_private)
        if problem is not None:
            return UrlCheck(False, f"{host} resolves to a {problem}" if literal is None else problem,
                            host, tuple(addresses))
    return UrlCheck(True, "ok", host, tuple(addresses))


def normalize_link(href: Any, base_url: str | None = None) -> str | None:
    """An absolute http(s) URL without its fragment, or None for mailto:, javascript:, etc."""
    if not isinstance(href, str) or not href.strip() or len(href) > MAX_URL_LENGTH:
        return None
    absolute = urljoin(base_url, href.strip()) if base_url else href.strip()
    try:
        parts = urlsplit(absolute)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return urlunsplit((parts.scheme.lower(), parts.netloc, parts.path or "/", parts.query, ""))


def select_links(hrefs: Iterable[Any], base_url: str | None = None,
                 limit: int = 100) -> dict[str, Any]:
    """Deduplicated absolute links to check (at most C{limit}), and what was skipped."""
    seen: list[str] = []
    skipped = 0
    for href in hrefs:
        link = normalize_link(href, base_url)
        if link is None:
            skipped += 1
        elif link not in seen:
            if len(seen) >= limit:
                skipped += 1
                continue
            seen.append(link)
    return {"links": seen, "skipped": skipped}


def classify_status(status: Any, error: str | None = None) -> str:
    """C{ok}, C{redirect}, C{broken} (4xx), C{server_error} (5xx), C{blocked} or C{error}."""
    if error:
        return "error"
    if isinstance(status, bool) or not isinstance(status, int):
        return "error"
    if 200 <= status < 300:
        return "ok"
    if 300 <= status < 400:
        return "redirect"
    if status in (401, 403, 429):
        return "blocked"
    if 400 <= status < 500:
        return "broken"
    if status >= 500:
        return "server_error"
    return "error"


def summarize_link_results(results: Any) -> dict[str, Any]:
    """Counts by class for C{[{url, status?, error?}]}, with the broken ones listed first."""
    out: dict[str, int] = {}
    items: list[dict[str, Any]] = []
    for result in dicts(results):
        kind = classify_status(result.get("status"), result.get("error"))
        out[kind] = out.get(kind, 0) + 1
        items.append({**{k: result.get(k) for k in ("url", "status", "error") if k in result},
                      "class": kind})
    order = {"broken": 0, "server_error": 1, "error": 2, "blocked": 3, "redirect": 4, "ok": 5}
    items.sort(key=lambda r: order.get(r["class"], 9))
    return {"checked": len(items), "by_class": out, "results": items}

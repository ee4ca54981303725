"""The SSRF guard and link-validation helpers (gasoline.analysis.links)."""

from __future__ import annotations

import pytest

from gasoline.analysis import (
    address_problem,
    classify_status,
    is_public_http_url,
    select_links,
    summarize_link_results,
)


def resolver_for(mapping):
    calls = []

    def resolve(host):
        calls.append(host)
        if host not in mapping:
            raise OSError(f"NXDOMAIN {host}")
        return mapping[host]
    resolve.calls = calls
    return resolve


def test_public_host_is_allowed_through_the_injected_resolver():
    resolve = resolver_for({"example.com": ["93.184.216.34", "2606:2800:220:1::248"]})
    check = is_public_http_url("https://example.com/a?b=1", resolver=resolve)
    assert check.ok and check.addresses == ("93.184.216.34", "2606:2800:220:1::248")
    assert resolve.calls == ["example.com"]


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/", "http://[::1]/", "http://10.1.2.3/", "http://192.168.0.1/",
    "http://172.16.5.4/", "http://169.254.169.254/latest/meta-data", "http://[fe80::1]/",
    "http://224.0.0.1/", "http://0.0.0.0/", "http://240.0.0.1/", "http://100.64.0.1/",
    "http://[::ffff:10.0.0.1]/", "http://[2002:7f00:1::]/", "http://localhost:8080/",
])
def test_private_loopback_link_local_multicast_and_reserved_targets_are_refused(url):
    check = is_public_http_url(url, resolver=resolver_for({"localhost": ["127.0.0.1"]}))
    assert not check.ok, check


def test_a_host_with_any_private_address_is_refused():
    resolve = resolver_for({"rebind.test": ["93.184.216.34", "10.0.0.7"]})
    check = is_public_http_url("http://rebind.test/", resolver=resolve)
    assert not check.ok and "private" in check.reason


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://example.com/", "ftp://example.com/",
                                 "javascript:alert(1)", "http://", "http://exa mple.com:99999/",
                                 "", None, 42, "x" * 5000])
def test_non_http_and_malformed_urls_are_refused(url):
    assert not is_public_http_url(url, resolver=resolver_for({})).ok


def test_allow_private_permits_local_targets_but_never_multicast():
    resolve = resolver_for({"localhost": ["127.0.0.1"]})
    assert is_public_http_url("http://localhost:3000/", allow_private=True, resolver=resolve).ok
    assert is_public_http_url("http://10.0.0.1/", allow_private=True).ok
    assert not is_public_http_url("http://224.0.0.1/", allow_private=True).ok


def test_resolution_failure_or_no_resolver_is_a_refusal_not_a_crash():
    assert "did not resolve" in is_public_http_url("http://nx.test/", resolver=resolver_for({})).reason
    assert not is_public_http_url("http://example.com/").ok
    assert not is_public_http_url("http://empty.test/", resolver=resolver_for({"empty.test": []})).ok


def test_address_problem_names_the_reason():
    assert address_problem("127.0.0.1") == "loopback address"
    assert address_problem("8.8.8.8") is None
    assert address_problem("nonsense").startswith("not an IP")


def test_select_links_makes_absolute_dedupes_and_skips_non_http():
    out = select_links(["/a", "https://x.test/a#frag", "mailto:x@y", "javascript:void(0)",
                        "b?q=1", "/a", None], base_url="https://x.test/dir/", limit=10)
    assert out == {"links": ["https://x.test/a", "https://x.test/dir/b?q=1"], "skipped": 3}


def test_classify_and_summarize_link_results():
    assert [classify_status(s) for s in (200, 301, 404, 403, 503, None)] == [
        "ok", "redirect", "broken", "blocked", "server_error", "error"]
    out = summarize_link_results([{"url": "a", "status": 200}, {"url": "b", "status": 404},
                                  {"url": "c", "error": "timeout"}])
    assert out["by_class"] == {"ok": 1, "broken": 1, "error": 1}
    assert [r["url"] for r in out["results"]] == ["b", "c", "a"]

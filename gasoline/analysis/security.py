"""
Security and third-party audits over captured traffic (pure; evidence is always redacted).

Each finding is C{{check, severity, title, detail, url?, where?, evidence?, count}}; identical
findings (same check, URL without query, where) are merged with a count. Severities: critical,
high, medium, low, info.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gasoline.analysis._util import dicts, host_of, origin_of, site_of, text
from gasoline.core.redaction.redactor import redact_text, redact_value, secret_kinds
from gasoline.core.redaction.keys import is_sensitive_key

SEVERITY_ORDER = {"critical": 0, "high": 1, "medium": 2, "low": 3, "info": 4}
_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,200}\.[A-Za-z]{2,24}\b")
_PII_KINDS = {"ssn", "card_number"}
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"}
_SESSIONISH = re.compile(r"sess|sid|auth|token|jwt|login", re.I)
#: Query parameter names that carry credentials.
_AUTH_PARAMS = {"access_token", "token", "id_token", "auth", "auth_token", "api_key", "apikey",
                "key", "password", "passwd", "secret", "client_secret", "session", "sessionid",
                "sid", "jwt", "code_verifier", "refresh_token", "signature", "sig"}
SECURITY_HEADERS = {
    "content-security-policy": ("medium", "No Content-Security-Policy on an HTML document."),
    "x-content-type-options": ("low", "No X-Content-Type-Options: nosniff."),
    "referrer-policy": ("low", "No Referrer-Policy."),
}
MAX_BODY_SCAN = 200_000


class _Findings:
    def __init__(self) -> None:
        self.items: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(self, check: str, severity: str, title: str, detail: str = "", url: Any = None,
            where: str = "", evidence: Any = None) -> None:
        url_text = text(url, 500) if url else ""
        key = (check, url_text.split("?", 1)[0], where)
        found = self.items.get(key)
        if found is not None:
            found["count"] += 1
            return
        item: dict[str, Any] = {"check": check, "severity": severity, "title": title,
                                "detail": detail, "count": 1}
        if url_text:
            item["url"] = redact_text(url_text)
        if where:
            item["where"] = where
        if evidence is not None:
            item["evidence"] = redact_value(evidence)
        self.items[key] = item

    def result(self) -> dict[str, Any]:
        findings = sorted(self.items.values(), key=lambda f: SEVERITY_ORDER.get(f["severity"], 9))
        by_severity: dict[str, int] = {}
        for f in findings:
            by_severity[f["severity"]] = by_severity.get(f["severity"], 0) + 1
        return {"finding_count": len(findings), "by_severity": by_severity, "findings": findings}


def headers_of(entry: dict[str, Any], which: str = "response") -> dict[str, list[str]]:
    """Captured headers (dict or list of C{{name, value}}) as lower-case name → values."""
    out: dict[str, list[str]] = {}
    for key in (f"{which}_headers", f"{which}Headers") + (("headers",) if which == "response" else ()):
        raw = entry.get(key)
        if isinstance(raw, dict):
            pairs = list(raw.items())
        elif isinstance(raw, list):
            pairs = [(h.get("name"), h.get("value")) for h in raw if isinstance(h, dict)]
        else:
            continue
        for name, value in pairs:
            if not isinstance(name, str):
                continue
            values = value if isinstance(value, list) else [value]
            out.setdefault(name.lower(), []).extend(text(v, 4000) for v in values)
        if out:
            break
    return out


def _is_local(url: str) -> bool:
    host = (host_of(url) or "").lower()
    return host in _LOCAL_HOSTS or host.endswith(".localhost") or host.startswith("127.")


def _check_url(f: _Findings, url: str, page_https: bool) -> None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    if parts.password:
        f.add("credentials_in_url", "high", "Credentials in a URL",
              "The URL carries a user name and password.", url)
    auth_param = False
    for name, _value in parse_qsl(parts.query, keep_blank_values=False)[:100]:
        if name.lower() in _AUTH_PARAMS or is_sensitive_key(name):
            f.add("auth_in_query", "high", "Auth token in a query string",
                  f"Query parameter '{text(name, 50)}' carries a credential; URLs end up in logs, "
                  "history and Referer headers.", url, where="url")
            auth_param = True
            break
    kinds = [k for k in secret_kinds(url) if k not in ("url_credentials",)]
    if kinds and not auth_param:
        f.add("secret_in_url", "high", "Secret in a URL", f"Found: {', '.join(sorted(set(kinds)))}.",
              url, where="url")
    if parts.scheme == "http" and not _is_local(url):
        if page_https:
            f.add("mixed_content", "high", "Mixed content",
                  "An HTTPS page loads this resource over plain HTTP.", url)
        else:
            f.add("insecure_transport", "medium", "Plain HTTP transport",
                  "Traffic to a non-local host is not encrypted.", url)


#: How bad a secret is, by where it was seen: a login request carrying a password is normal,
#: a token in a response is readable by every script on the page, a logged secret is a leak.
_SECRET_SEVERITY = {"request body": "info", "response body": "medium", "console log": "high",
                    "recorded input": "medium"}


def _scan_text(f: _Findings, value: Any, url: Any, where: str) -> None:
    if not isinstance(value, str) or not value:
        return
    sample = value[:MAX_BODY_SCAN]
    kinds = secret_kinds(sample)
    secrets = sorted({k for k in kinds if k not in _PII_KINDS})
    pii = sorted({k for k in kinds if k in _PII_KINDS})
    if secrets:
        f.add("secret_exposed", _SECRET_SEVERITY.get(where, "high"), f"Credential or secret in {where}",
              f"Found: {', '.join(secrets)}.", url, where=where)
    if _EMAIL.search(sample):
        pii.append("email")
    if pii:
        f.add("pii_exposed", "medium", f"Personal data in {where}",
              f"Found: {', '.join(pii)}.", url, where=where)


def _check_cookies(f: _Findings, url: str, cookies: list[str]) -> None:
    https = url.startswith("https:")
    for cookie in cookies:
        name = cookie.split("=", 1)[0].strip()
        attrs = {part.strip().split("=", 1)[0].lower() for part in cookie.split(";")[1:]}
        label = text(name, 60)
        if https and "secure" not in attrs:
            f.add("cookie_not_secure", "medium", "Cookie without Secure",
                  f"Cookie '{label}' can be sent over plain HTTP.", url, where=f"cookie:{label}")
        if _SESSIONISH.search(name) and "httponly" not in attrs:
            f.add("cookie_not_httponly", "medium", "Session cookie readable by scripts",
                  f"Cookie '{label}' looks like a session cookie and lacks HttpOnly.", url,
                  where=f"cookie:{label}")
        if "samesite" not in attrs:
            f.add("cookie_no_samesite", "low", "Cookie without SameSite",
                  f"Cookie '{label}' does not set SameSite.", url, where=f"cookie:{label}")


def security_audit(network_bodies: Any, logs: Any = (), actions: Any = (),
                   page_url: str | None = None) -> dict[str, Any]:
    """Credentials and PII in URLs, bodies and logs; headers, cookies and transport."""
    f = _Findings()
    page_https = isinstance(page_url, str) and page_url.startswith("https:")
    headers_seen = 0
    for body in dicts(network_bodies):
        url = text(body.get("url"), 4000)
        _check_url(f, url, page_https)
        _scan_text(f, body.get("request_body"), url, "request body")
        _scan_text(f, body.get("response_body"), url, "response body")
        if isinstance(body.get("request_body"), str) and url.startswith("http:") and not _is_local(url):
            if secret_kinds(body["request_body"][:MAX_BODY_SCAN]):
                f.add("credentials_over_http", "critical", "Credentials sent over plain HTTP",
                      "A request body with credentials went to a non-local host without TLS.", url)
        headers = headers_of(body, "response")
        if headers:
            headers_seen += 1
            _check_headers(f, url, body, headers)
            _check_cookies(f, url, headers.get("set-cookie", []))
    for entry in dicts(logs):
        message = entry.get("message")
        _scan_text(f, message, entry.get("url"), "console log")
        args = entry.get("args")
        if isinstance(args, list):
            for arg in args[:20]:
                _scan_text(f, arg if isinstance(arg, str) else None, entry.get("url"), "console log")
    for action in dicts(actions):
        value = action.get("value")
        if action.get("input_type") == "password" and isinstance(value, str) and value and \
                value.lower() not in ("[redacted]",) and not value.startswith("[REDACTED"):
            f.add("password_recorded", "high", "Password value recorded",
                  "A password input's value was captured in an action.", action.get("url"))
        elif isinstance(value, str):
            _scan_text(f, value, action.get("url"), "recorded input")
    out = f.result()
    out["scanned"] = {
        "network_bodies": len(dicts(network_bodies)),
        "logs": len(dicts(logs)),
        "actions": len(dicts(actions)),
        "responses_with_headers": headers_seen,
    }
    if not headers_seen:
        out["notes"] = ["No response headers were captured, so header and cookie checks did not run."]
    return out


def _check_headers(f: _Findings, url: str, body: dict[str, Any],
                   headers: dict[str, list[str]]) -> None:
    content_type = " ".join(headers.get("content-type", [])) or text(body.get("content_type"), 200)
    if "html" in content_type.lower():
        for name, (severity, detail) in SECURITY_HEADERS.items():
            if name not in headers:
                f.add(f"missing_{name}", severity, f"Missing {name}", detail, url)
        frame_ok = "x-frame-options" in headers or any(
            "frame-ancestors" in v for v in headers.get("content-security-policy", []))
        if not frame_ok:
            f.add("missing_frame_protection", "medium", "Page can be framed",
                  "Neither X-Frame-Options nor CSP frame-ancestors is set (clickjacking).", url)
    if url.startswith("https:") and "strict-transport-security" not in headers and not _is_local(url):
        f.add("missing_hsts", "low", "Missing Strict-Transport-Security",
              "HTTPS responses should set HSTS.", url)
    acao = headers.get("access-control-allow-origin", [])
    if "*" in acao and headers.get("access-control-allow-credentials", [""])[0].lower() == "true":
        f.add("cors_wildcard_credentials", "high", "CORS allows any origin with credentials",
              "Access-Control-Allow-Origin: * together with Allow-Credentials: true.", url)


# -- third parties ----------------------------------------------------------------------------

_CATEGORIES = [
    ("analytics", ("google-analytics.com", "googletagmanager.com", "segment.io", "segment.com",
                   "mixpanel.com", "hotjar.com", "amplitude.com", "plausible.io", "heap.io",
                   "fullstory.com", "clarity.ms", "posthog.com")),
    ("advertising", ("doubleclick.net", "googlesyndication.com", "adnxs.com", "facebook.net",
                     "criteo.com", "taboola.com")),
    ("cdn", ("cdnjs.cloudflare.com", "jsdelivr.net", "unpkg.com", "cloudfront.net",
             "akamaihd.net", "fastly.net", "googleapis.com", "gstatic.com", "bootstrapcdn.com")),
    ("monitoring", ("sentry.io", "datadoghq.com", "newrelic.com", "nr-data.net", "bugsnag.com",
                    "logrocket.com")),
    ("payments", ("stripe.com", "paypal.com", "braintreegateway.com")),
    ("social", ("facebook.com", "twitter.com", "x.com", "linkedin.com")),
]


def _category(host: str) -> str:
    for name, domains in _CATEGORIES:
        if any(host == d or host.endswith("." + d) for d in domains):
            return name
    return "other"


def third_party_audit(bodies: Any, waterfall: Any, page_origin: str | None) -> dict[str, Any]:
    """Every origin other than the page's site: what it served, what was sent to it, the risks."""
    first_site = site_of(host_of(page_origin)) if page_origin else None
    parties: dict[str, dict[str, Any]] = {}

    def party(url: str) -> dict[str, Any] | None:
        origin = origin_of(url)
        host = host_of(url)
        if origin is None or host is None:
            return None
        if first_site is not None and site_of(host) == first_site:
            return None
        p = parties.get(origin)
        if p is None:
            p = parties[origin] = {
                "origin": origin, "category": _category(host.lower()), "requests": 0,
                "by_type": {}, "transfer_size": 0, "scripts": [], "sends_data": False,
                "data_kinds": [], "insecure": origin.startswith(("http:", "ws:")),
            }
        return p

    for entry in dicts(waterfall):
        url = text(entry.get("url") or entry.get("name"), 4000)
        p = party(url)
        if p is None:
            continue
        p["requests"] += 1
        kind = text(entry.get("initiator_type"), 30) or "other"
        p["by_type"][kind] = p["by_type"].get(kind, 0) + 1
        size = entry.get("transfer_size")
        if isinstance(size, (int, float)) and not isinstance(size, bool):
            p["transfer_size"] += int(size)
        if kind == "script" and len(p["scripts"]) < 20:
            p["scripts"].append(redact_text(url.split("?", 1)[0][:500]))
    waterfall_urls = {text(e.get("url") or e.get("name"), 4000) for e in dicts(waterfall)}
    for body in dicts(bodies):
        url = text(body.get("url"), 4000)
        p = party(url)
        if p is None:
            continue
        if url not in waterfall_urls:
            p["requests"] += 1
        request_body = body.get("request_body")
        if isinstance(request_body, str) and request_body:
            p["sends_data"] = True
            kinds = set(secret_kinds(request_body[:MAX_BODY_SCAN]))
            if _EMAIL.search(request_body[:MAX_BODY_SCAN]):
                kinds.add("email")
            p["data_kinds"] = sorted(set(p["data_kinds"]) | kinds)
    risks = []
    for p in parties.values():
        if p["scripts"]:
            risks.append({"origin": p["origin"], "severity": "medium",
                          "risk": "third-party script runs with the page's privileges",
                          "advice": "Pin it with Subresource Integrity (generate sri) or self-host it."})
        if p["data_kinds"]:
            risks.append({"origin": p["origin"], "severity": "high",
                          "risk": f"sensitive data sent to a third party: {', '.join(p['data_kinds'])}"})
        if p["insecure"]:
            risks.append({"origin": p["origin"], "severity": "high",
                          "risk": "third party reached over plain HTTP"})
    ordered = sorted(parties.values(), key=lambda p: (-p["requests"], p["origin"]))
    return {
        "page_origin": page_origin,
        "third_party_count": len(ordered),
        "third_parties": ordered,
        "risks": sorted(risks, key=lambda r: SEVERITY_ORDER.get(r["severity"], 9)),
    }

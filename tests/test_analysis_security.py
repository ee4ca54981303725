"""Security and third-party audits (gasoline.analysis.security)."""

from __future__ import annotations

import json

from gasoline.analysis import security_audit, third_party_audit


def checks(result):
    return {f["check"]: f for f in result["findings"]}


def test_credentials_and_tokens_in_urls_are_reported_and_redacted_in_evidence():
    out = security_audit([
        {"method": "GET", "url": "https://api.test/data?access_token=SECRETVALUE123&x=1", "status": 200},
        {"method": "GET", "url": "https://bob:pw123456@api.test/", "status": 200},
    ])
    found = checks(out)
    assert found["auth_in_query"]["severity"] == "high"
    assert found["credentials_in_url"]["severity"] == "high"
    assert "SECRETVALUE123" not in json.dumps(out) and "pw123456" not in json.dumps(out)


def test_plain_http_mixed_content_and_credentials_over_http():
    body = {"method": "POST", "url": "http://api.test/login", "status": 200,
            "request_body": json.dumps({"password": "hunter2"})}
    found = checks(security_audit([body]))
    assert found["insecure_transport"]["severity"] == "medium"
    assert found["credentials_over_http"]["severity"] == "critical"
    found = checks(security_audit([body], page_url="https://app.test/"))
    assert found["mixed_content"]["severity"] == "high"
    local = {"method": "GET", "url": "http://localhost:3000/api", "status": 200}
    assert security_audit([local])["finding_count"] == 0, "local development over HTTP is fine"


def test_secrets_and_pii_in_bodies_and_logs():
    out = security_audit(
        [{"method": "GET", "url": "https://api.test/me", "status": 200,
          "response_body": json.dumps({"email": "bob@example.com", "api_key": "sk_live_abcdefghijkl"})}],
        logs=[{"level": "log", "message": "debug token ghp_" + "a" * 36},
              {"level": "log", "message": "card", "args": ["4111 1111 1111 1111"]}],
    )
    by = {(f["check"], f.get("where")): f for f in out["findings"]}
    assert by[("secret_exposed", "response body")]["severity"] == "medium"
    assert by[("pii_exposed", "response body")]["detail"] == "Found: email."
    assert by[("secret_exposed", "console log")]["severity"] == "high"
    assert "card_number" in by[("pii_exposed", "console log")]["detail"]
    assert "ghp_" + "a" * 36 not in json.dumps(out)


def test_missing_security_headers_and_insecure_cookies_when_headers_are_captured():
    html = {"method": "GET", "url": "https://app.test/", "status": 200,
            "response_headers": [{"name": "Content-Type", "value": "text/html"},
                                 {"name": "Set-Cookie", "value": "sessionid=abc; Path=/"},
                                 {"name": "Set-Cookie", "value": "theme=dark; Secure; SameSite=Lax"}]}
    out = security_audit([html])
    found = checks(out)
    for check in ("missing_content-security-policy", "missing_x-content-type-options",
                  "missing_frame_protection", "missing_hsts", "cookie_not_secure",
                  "cookie_not_httponly", "cookie_no_samesite"):
        assert check in found, check
    assert all(f.get("where") != "cookie:theme" for f in out["findings"])
    assert out["scanned"]["responses_with_headers"] == 1


def test_a_well_configured_response_has_no_header_findings():
    good = {"method": "GET", "url": "https://app.test/", "status": 200, "response_headers": {
        "content-type": "text/html", "content-security-policy": "default-src 'self'; frame-ancestors 'none'",
        "x-content-type-options": "nosniff", "referrer-policy": "no-referrer",
        "strict-transport-security": "max-age=63072000",
        "set-cookie": ["sid=1; Secure; HttpOnly; SameSite=Strict"]}}
    assert security_audit([good])["finding_count"] == 0


def test_without_captured_headers_the_audit_says_header_checks_did_not_run():
    out = security_audit([{"url": "https://app.test/", "status": 200}])
    assert out["notes"] and "headers" in out["notes"][0]


def test_recorded_password_values_are_flagged_but_redacted_ones_are_not():
    out = security_audit([], actions=[
        {"type": "input", "input_type": "password", "value": "hunter2", "url": "https://a.test/"},
        {"type": "input", "input_type": "password", "value": "[redacted]", "url": "https://a.test/b"},
    ])
    assert [f["check"] for f in out["findings"]] == ["password_recorded"]


def test_repeated_findings_are_merged_with_a_count():
    bodies = [{"url": f"https://api.test/x?token=T{i}ZZZZ", "status": 200} for i in range(5)]
    out = security_audit(bodies)
    assert checks(out)["auth_in_query"]["count"] == 5 and out["finding_count"] == 1


def test_third_party_audit_groups_other_sites_and_flags_risks():
    waterfall = [
        {"url": "https://app.example.com/main.js", "initiator_type": "script"},
        {"url": "https://static.example.com/a.css", "initiator_type": "link"},
        {"url": "https://cdn.jsdelivr.net/npm/lib.js", "initiator_type": "script", "transfer_size": 900},
        {"url": "http://ads.tracker.test/pixel.gif", "initiator_type": "img"},
    ]
    bodies = [{"method": "POST", "url": "https://www.google-analytics.com/collect",
               "request_body": "uid=1&email=bob@example.com"}]
    out = third_party_audit(bodies, waterfall, "https://app.example.com")
    origins = {p["origin"]: p for p in out["third_parties"]}
    assert set(origins) == {"https://cdn.jsdelivr.net", "http://ads.tracker.test",
                            "https://www.google-analytics.com"}, "same-site origins are first party"
    assert origins["https://cdn.jsdelivr.net"]["category"] == "cdn"
    assert origins["https://cdn.jsdelivr.net"]["transfer_size"] == 900
    assert origins["https://www.google-analytics.com"]["category"] == "analytics"
    assert origins["https://www.google-analytics.com"]["requests"] == 1
    assert origins["https://www.google-analytics.com"]["data_kinds"] == ["email"]
    risks = {(r["origin"], r["severity"]) for r in out["risks"]}
    assert ("https://www.google-analytics.com", "high") in risks
    assert ("http://ads.tracker.test", "high") in risks
    assert ("https://cdn.jsdelivr.net", "medium") in risks

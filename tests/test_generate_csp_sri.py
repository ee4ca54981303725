"""CSP and SRI generators (gasoline.generate.csp, gasoline.generate.sri)."""

from __future__ import annotations

import base64
import hashlib

import pytest

from gasoline.core.errors import InvalidParam
from gasoline.generate import csp, origins_by_type, sri


def directives(policy):
    return {part.split(" ", 1)[0]: part.split(" ")[1:] for part in policy.split("; ")}


def test_csp_allows_exactly_the_observed_origins_per_directive():
    out = csp({
        "script": ["https://app.test/main.js", "https://cdn.jsdelivr.net/npm/x.js", "https://cdn.jsdelivr.net/y.js"],
        "style": ["https://fonts.googleapis.com/css2?family=Inter"],
        "font": ["https://fonts.gstatic.com/s/inter.woff2", "data:font/woff2;base64,AA"],
        "img": ["https://app.test/logo.png", "blob:https://app.test/1"],
        "fetch": ["https://api.app.test/v1/items"],
        "websocket": ["wss://rt.app.test/socket"],
        "iframe": ["https://www.youtube.com/embed/x"],
    }, page_origin="https://app.test/")
    d = directives(out["policy"])
    assert d["default-src"] == ["'self'"]
    assert d["script-src"] == ["'self'", "https://cdn.jsdelivr.net"]
    assert d["style-src"] == ["'self'", "https://fonts.googleapis.com"]
    assert d["font-src"] == ["'self'", "https://fonts.gstatic.com", "data:"]
    assert d["img-src"] == ["'self'", "blob:"]
    assert d["connect-src"] == ["'self'", "https://api.app.test", "wss://rt.app.test"]
    assert d["frame-src"] == ["'self'", "https://www.youtube.com"]
    assert d["object-src"] == ["'none'"] and d["base-uri"] == ["'self'"]
    assert out["header"] == "Content-Security-Policy"
    assert any("Report-Only" in n for n in out["notes"])


def test_csp_ignores_junk_and_reports_unknown_types():
    out = csp({"script": ["javascript:alert(1)", 42, None, "not a url"], "weird": ["https://w.test/"]},
              page_origin="https://app.test")
    d = directives(out["policy"])
    assert "script-src" not in d, "nothing usable: scripts fall back to default-src 'self'"
    assert "javascript" not in out["policy"] and "42" not in out["policy"]
    assert "https://w.test" in d["default-src"]
    assert any("weird" in n for n in out["notes"])
    assert csp("garbage")["policy"].startswith("default-src 'self'")


def test_origins_by_type_from_waterfall_and_bodies():
    out = origins_by_type(
        [{"url": "https://cdn.test/a.js", "initiator_type": "script"},
         {"url": "https://cdn.test/b.js", "initiator_type": "script"},
         {"name": "https://img.test/x.png", "initiator_type": "img"}],
        [{"url": "https://api.test/v1"}])
    assert out == {"script": ["https://cdn.test"], "img": ["https://img.test"], "fetch": ["https://api.test"]}


def expected_integrity(body, algorithm="sha384"):
    return f"{algorithm}-" + base64.b64encode(hashlib.new(algorithm, body.encode()).digest()).decode()


def test_sri_hashes_complete_script_and_style_bodies():
    js = "console.log('hi');\n"
    css = "body{color:red}"
    out = sri([
        {"url": "https://cdn.test/a.js", "content_type": "application/javascript", "response_body": js},
        {"url": "https://cdn.test/s.css", "type": "stylesheet", "response_body": css},
        {"url": "https://cdn.test/pic.png", "content_type": "image/png", "response_body": "PNG"},
    ])
    by_url = {r["url"]: r for r in out["resources"]}
    assert set(by_url) == {"https://cdn.test/a.js", "https://cdn.test/s.css"}
    assert by_url["https://cdn.test/a.js"]["integrity"] == expected_integrity(js)
    assert by_url["https://cdn.test/a.js"]["tag"] == (
        f'<script src="https://cdn.test/a.js" integrity="{expected_integrity(js)}" crossorigin="anonymous"></script>')
    assert by_url["https://cdn.test/s.css"]["tag"].startswith('<link rel="stylesheet" href="https://cdn.test/s.css"')
    assert out["unhashable"] == []


def test_sri_reports_what_cannot_be_hashed_and_why():
    out = sri([
        {"url": "https://cdn.test/missing.js", "type": "script"},
        {"url": "https://cdn.test/cut.js", "type": "script", "response_body": "x", "response_truncated": True},
        {"url": "https://cdn.test/limit.js", "type": "script", "response_body": "y" * 16384},
        {"url": "/relative.js", "type": "script", "response_body": "z"},
    ])
    reasons = {r["url"]: r["reason"] for r in out["unhashable"]}
    assert reasons == {
        "https://cdn.test/missing.js": "body not captured",
        "https://cdn.test/cut.js": "body was truncated by the extension",
        "https://cdn.test/limit.js": "body is exactly the capture limit and may be truncated",
        "/relative.js": "not an http(s) URL",
    }
    assert out["resources"] == []


def test_sri_algorithm_is_selectable_and_validated():
    out = sri([{"url": "https://c.test/a.js", "response_body": "a"}], algorithm="sha256")
    assert out["resources"][0]["integrity"] == expected_integrity("a", "sha256")
    with pytest.raises(InvalidParam):
        sri([], algorithm="md5")


def test_sri_tag_escapes_the_url():
    out = sri([{"url": 'https://c.test/a.js?x="><script>', "response_body": "a"}])
    assert '"><script>' not in out["resources"][0]["tag"]

"""
Redaction that holds on real payloads.

Secrets of every known shape, in every position a page can put them (after any whitespace or
control character, in console arguments, headers, cookies, query strings, form and JSON bodies,
JSON nested in JSON strings, GraphQL arguments, typed values of secret inputs), never reach a tool
result: checked on the central result processing (L{ToolRegistry.finish}, which every tool's
result goes through) by a property test, and end to end through the daemon's tools.
"""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from treq.testing import StubTreq

from gasoline.app import Config, build
from gasoline.core.redaction.redactor import Redactor
from gasoline.core.storage.store import ACTIONS, CONSOLE, NETWORK_BODIES
from gasoline.mcp import jsonrpc
from gasoline.mcp.tools import ToolRegistry
from gasoline.testing import EXTENSION_HEADERS
from gasoline.tools.context import text_result

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
UPPER_NUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _s(alphabet: str, n: int, m: int | None = None):
    return st.text(alphabet, min_size=n, max_size=m or n)


#: Secrets recognised by their shape alone, wherever they appear.
SHAPED = st.one_of(
    _s(UPPER_NUM, 16).map(lambda t: "AKIA" + t),
    _s(ALNUM, 36).map(lambda t: "ghp_" + t),
    _s(ALNUM + "_", 22, 40).map(lambda t: "github_pat_" + t),
    _s(ALNUM, 10, 30).map(lambda t: "xoxb-12345-" + t),
    _s(ALNUM, 20, 40).map(lambda t: "sk-" + t),
    _s(ALNUM, 16, 30).map(lambda t: "sk_live_" + t),
    _s(ALNUM, 20, 30).map(lambda t: "glpat-" + t),
    _s(ALNUM, 36).map(lambda t: "npm_" + t),
    _s(ALNUM + "_-", 35).map(lambda t: "AIza" + t),
    st.tuples(_s(ALNUM, 8, 20), _s(ALNUM, 8, 20), _s(ALNUM, 10, 30)).map(
        lambda p: f"eyJ{p[0]}.eyJ{p[1]}.{p[2]}"),
)
#: Secrets that only their position marks as secret (a password, an OTP, a session id).
PLAIN = _s(ALNUM + "!*", 8, 24).map(lambda t: "Pw" + t)
#: What may follow a secret (a separator: a secret glued to more letters is another word).
AFTER = st.sampled_from(["", " ", "\n", "\t", "\r", ".", ",", ";", ")", "\x00"])
#: What may sit right before a secret in a string.
BEFORE = st.sampled_from(["", " ", "\n", "\t", "\r", "\r\n", "\x0b", "\x0c", "\x00", "\x1b",
                          "\u2028", "error: ", "x\n\n\t "])

QUERY_PARAMS = ["token", "access_token", "refresh_token", "id_token", "code", "client_secret",
                "password", "key", "api_key", "sig", "signature", "X-Amz-Signature",
                "X-Amz-Security-Token", "session_id", "auth"]
HEADER_NAMES = ["Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key",
                "X-Auth-Token", "X-Access-Token", "X-CSRF-Token", "X-Amz-Security-Token",
                "X-Goog-Api-Key", "Authentication", "X-Session-Token", "X-Vault-Token"]
JSON_KEYS = ["password", "passwd", "secret", "token", "accessToken", "refresh_token",
             "client_secret", "apiKey", "api-key", "sessionId", "otp", "pin", "passcode",
             "db_password", "privateKey", "credentials"]
SECRET_INPUTS = [{"input_type": "password"}, {"selector": "#password"},
                 {"name": "otp_code"}, {"selector": "input[name=pin]"},
                 {"autocomplete": "one-time-code"}, {"type": "password"},
                 {"selector": "#api-token"}, {"name": "card-cvc"}]


@st.composite
def placed(draw):
    """(data structure, secret): one secret in one position."""
    shaped = draw(SHAPED)
    plain = draw(PLAIN)
    before = draw(BEFORE)
    after = draw(AFTER)
    kind = draw(st.sampled_from([
        "message", "args", "nested_json", "query", "form", "header_pair", "header_dict",
        "cookie", "graphql", "graphql_vars", "action", "json_key", "deep_nested", "curl",
        "url_in_message", "bearer"]))
    if kind == "message":
        return {"level": "error", "message": before + shaped + after}, shaped
    if kind == "args":
        return {"message": "m", "args": ["label", {"v": before + shaped}, before + shaped]}, shaped
    if kind == "nested_json":
        inner = json.dumps({"data": json.dumps({"x": before + shaped})})
        return {"response_body": inner}, shaped
    if kind == "deep_nested":
        key = draw(st.sampled_from(JSON_KEYS))
        inner = json.dumps({"outer": json.dumps({"mid": json.dumps({key: plain})})})
        return {"request_body": inner}, plain
    if kind == "query":
        param = draw(st.sampled_from(QUERY_PARAMS))
        url = f"http://localhost:3000/cb?state=abc&{param}={quote(plain)}&x=1"
        return {"url": url, "method": "GET"}, plain
    if kind == "url_in_message":
        param = draw(st.sampled_from(QUERY_PARAMS))
        return {"message": f"GET /api?{param}={quote(plain)}&page=2"}, plain
    if kind == "form":
        key = draw(st.sampled_from(JSON_KEYS + QUERY_PARAMS))
        return {"request_body": f"user=alice&{quote_plus(key)}={quote_plus(plain)}&remember=1"}, plain
    if kind == "header_pair":
        name = draw(st.sampled_from(HEADER_NAMES))
        return {"request_headers": [{"name": "Accept", "value": "*/*"},
                                    {"name": name, "value": plain}]}, plain
    if kind == "header_dict":
        name = draw(st.sampled_from(HEADER_NAMES))
        return {"headers": {"accept": "*/*", name: plain}}, plain
    if kind == "cookie":
        return {"cookies": [{"name": draw(st.sampled_from(["theme_id", "x", "prefs"])),
                             "value": plain}]}, plain
    if kind == "graphql":
        key = draw(st.sampled_from(["password", "token", "secret", "apiKey", "newPassword"]))
        query = f'mutation {{ login(user: "a", {key}: "{plain}") {{ ok }} }}'
        return {"request_body": json.dumps({"query": query})}, plain
    if kind == "graphql_vars":
        key = draw(st.sampled_from(JSON_KEYS))
        body = {"query": "mutation L($i: In!) { login(input: $i) { ok } }",
                "variables": {"i": {"user": "a", key: plain}}}
        return {"request_body": json.dumps(body)}, plain
    if kind == "action":
        field = draw(st.sampled_from(SECRET_INPUTS))
        return {"type": "input", "timestamp": 1, **field, "value": plain}, plain
    if kind == "json_key":
        key = draw(st.sampled_from(JSON_KEYS))
        return {"data": {"form": {key: before + plain}}}, plain
    if kind == "curl":
        name = draw(st.sampled_from(HEADER_NAMES[:2] + ["X-Api-Key"]))
        return {"script": f"curl -H '{name}: {plain}' http://localhost:3000/api"}, plain
    return {"message": f"sending Authorization:{before or ' '}Bearer {shaped}"}, shaped


def _leaks(text: str, secret: str) -> bool:
    return any(form in text for form in {secret, quote(secret), quote_plus(secret),
                                         json.dumps(secret)[1:-1]})


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(placed(), min_size=1, max_size=4), wrap=st.sampled_from(["list", "str"]))
def test_no_secret_of_any_shape_in_any_position_reaches_a_result(items, wrap):
    registry = ToolRegistry()
    entries = [data for data, _ in items]
    # A result carries entries as JSON values, or (an artifact, a body) as one JSON string.
    data = {"entries": entries} if wrap == "list" else {"artifact": json.dumps(entries)}
    result = registry.finish(text_result("3 entries", data))
    text = result["content"][0]["text"]
    for _, secret in items:
        assert not _leaks(text, secret), (secret, text)
    # Still a summary line and valid JSON.
    json.loads(text.partition("\n")[2])


@settings(max_examples=300, deadline=None)
@given(item=placed())
def test_redact_value_alone_holds_too(item):
    data, secret = item
    assert not _leaks(json.dumps(Redactor().redact_value(data)), secret)


def test_a_secret_right_after_an_escaped_newline_is_redacted():
    registry = ToolRegistry()
    for sep in ("\n", "\t", "\r"):
        key = "AKIA" + "ABCDEFGHIJKLMNOP"
        text = registry.finish(text_result("s", {"message": sep + key}))["content"][0]["text"]
        assert key not in text and "[REDACTED:aws_access_key]" in text


def test_unrelated_query_strings_and_values_are_left_alone():
    red = Redactor().redact_value({"url": "http://x/search?q=hello%20world&page=2",
                                   "code": 404, "error": {"code": "E_NOT_FOUND"},
                                   "body": "a=1&b=two", "type": "input", "selector": "#search",
                                   "value": "shoes"})
    assert red == {"url": "http://x/search?q=hello%20world&page=2", "code": 404,
                   "error": {"code": "E_NOT_FOUND"}, "body": "a=1&b=two", "type": "input",
                   "selector": "#search", "value": "shoes"}


# -- end to end: the daemon's tools ------------------------------------------------------------------


def _call(app, session, tool, args):
    out = []
    app.mcp.handle(session, jsonrpc.request(5, "tools/call", {"name": tool, "arguments": args})
                   ).addCallback(out.append)
    assert out, (tool, args)
    return json.dumps(out[0])


def test_every_generator_and_reader_keeps_secrets_out(tmp_path):
    clock = Clock()
    clock.advance(1_700_000_000)
    app = build(Config(state_dir=tmp_path, persist=False, tool_rate_limit=0), clock)
    pw, otp, tok, sess = "PwHunter2xyz!", "PwOtp99887766", "ghp_" + "a1B2" * 9, "PwSess0011223344"
    app.store.add(CONSOLE, [
        {"level": "error", "message": "login failed\n" + tok, "ts": "2023-11-14T22:13:20.000Z",
         "args": ["payload", json.dumps({"auth": {"password": pw}})], "url": "http://localhost/"}])
    app.store.add(NETWORK_BODIES, [{
        "method": "POST", "url": f"http://localhost:3000/oauth/cb?code={otp}&state=1",
        "status": 500, "ts": "2023-11-14T22:13:20.000Z",
        "request_headers": {"Authorization": f"Bearer {tok}", "Cookie": f"sid={sess}",
                            "X-Auth-Token": sess},
        "request_body": json.dumps({"query": f'mutation {{ login(password: "{pw}") }}',
                                    "variables": {"otp": otp}}),
        "response_body": json.dumps({"session": json.dumps({"password": pw})})}])
    # Actions arrive through the extension route (their secret values are redacted there).
    treq = StubTreq(app.resource)
    d = treq.post("http://127.0.0.1:7890/enhanced-actions", headers=EXTENSION_HEADERS,
                  data=json.dumps({"actions": [
                      {"type": "navigate", "timestamp": 1_700_000_000_000,
                       "to_url": "http://localhost:3000/"},
                      {"type": "input", "timestamp": 1_700_000_000_100, "selector": "#otp",
                       "value": otp},
                      {"type": "input", "timestamp": 1_700_000_000_200, "selector": "#pass",
                       "input_type": "password", "value": pw}]}).encode())
    treq.flush()
    assert d.result.code == 200 and len(app.store.buffers[ACTIONS]) == 3
    session = app.mcp.open_session("agent", "streamable")
    app.mcp.handle(session, jsonrpc.request(0, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}))
    calls = [("observe", {"what": w}) for w in ("logs", "errors", "network_bodies", "actions",
                                                "timeline", "error_bundles")]
    calls += [("generate", {"format": f}) for f in ("har", "reproduction", "test", "pr_summary")]
    calls += [("generate", {"format": "reproduction", "output_format": "curl"})]
    for tool, args in calls:
        text = _call(app, session, tool, args)
        for secret in (pw, otp, tok, sess):
            assert not _leaks(text, secret), (tool, args, secret)
    app.extension.stop()
    app.router.close()

"""
The redaction fast path (it bounds the added latency of a proxied call) agrees with the full path.

L{Redactor.unchanged} may only say C{True} where L{Redactor.redact_value} (and
L{Redactor.redact_text} for the extra texts) would give the input back unchanged;
L{ToolRegistry.finish} and the audit record take the fast path on that proof, and must give
exactly what the full path gives. Property tests draw values from an alphabet rich in what the
full path reacts to (secret shapes, sensitive keys, name/value pairs, typed fields, cookies,
query strings, JSON in strings, escapes, deep nesting) and compare both paths; example tests
check each reason to fall back, and that the fast path is really taken on ordinary results.
"""

from __future__ import annotations

import copy
import os

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from gasoline.core.paths import inside, real
from gasoline.core.redaction.redactor import Redactor
from gasoline.core.redaction.keys import SENSITIVE_KEYS
from gasoline.mcp.tools import ToolRegistry
from gasoline.proxy.paths import within

R = Redactor()

#: Pieces of text: plain words, and everything the full path looks at twice.
FRAGMENTS = st.sampled_from([
    "hello", "proxy", "Echo: hi", " ", "\n", "\t", "\\n", "\\", '"', "é", "\u2028", "/tmp/x",
    "../y", "{", "[", "{}", '{"password": "hunter22"}', '[{"name":"Authorization","value":"x"}]',
    "=", "a=1&b=2", "?token=abc", "https://u:pw@host/p", "https://x/?code=12345",
    "ghp_" + "a1" * 18, "AKIA" + "ABCDEFGHIJKLMNOP", "Bearer abcDEF123456xyz", "sk-" + "x" * 24,
    "eyJhbGciOi.eyJzdWIiOi.sig", "4111 1111 1111 1111", "123-45-6789", "password: hunter2",
    "api_key=XYZ", "Authorization: Basic dXNlcjpwYXNz", "-----BEGIN PRIVATE KEY-----",
    "[REDACTED:token]", "npm_" + "b" * 36, "xoxb-1234567890-abc",
])
TEXT = st.lists(FRAGMENTS, max_size=6).map("".join) | st.text(max_size=30)
KEYS = st.sampled_from([
    "path", "content", "text", "type", "message", "items", "data", "name", "value", "cookies",
    "selector", "input_type", "label", "newValue", "typed", "id", "x-api-key", "Token", "ssn",
    "db.password", "csrfToken", "session", "code", "key", "count",
]) | st.sampled_from(sorted(SENSITIVE_KEYS)) | st.text(max_size=8)
SCALARS = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(
    allow_nan=False, allow_infinity=False) | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)


def _deep(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES, st.lists(TEXT, max_size=3))
def test_unchanged_is_a_proof(value, texts):
    if R.unchanged(value, tuple(texts)):
        assert R.redact_value(value) == value
        for text in texts:
            assert R.redact_text(text) == text


def test_unchanged_on_ordinary_results():
    """The fast path is taken where it matters: file contents, echoes, paths, plain JSON."""
    text = "hello proxy\n" * 8
    assert R.unchanged({"content": text}, (text,))
    assert R.unchanged([{"path": "/tmp/project/small.txt"}, {"message": "hi"}])
    assert R.unchanged({"items": [{"line": 1, "text": "def main():\n\treturn 0"}], "n": 2.5})
    assert R.unchanged("C:\\notes\\new.txt")
    assert R.unchanged(None) and R.unchanged(42) and R.unchanged([])


def test_unchanged_falls_back_where_the_full_path_looks_closer():
    fallbacks = [
        {"password": "hunter2"},  # a sensitive key
        {"db-Password": ""},  # normalised name, even with an empty value
        {"name": "Authorization", "value": "x"},  # a name/value pair
        {"name": "code", "value": "x"},  # a sensitive query/form parameter as a pair
        {"selector": "#pin", "value": "1234"},  # a typed secret field
        {"cookies": [{"name": "a", "value": "b"}]},
        "a=1&b=2",  # a form body / query string
        "see https://x/?q=1",
        '{"a": 1}',  # JSON in a string
        '  [1]',
        ("a", "b"),  # a tuple becomes a list
        float("nan"),  # not JSON
        {"when": object()},
        _deep(70),  # deeper than max_depth
        "token ghp_" + "a1" * 18,  # a secret's shape
        ["ok", {"k": "AKIAABCDEFGHIJKLMNOP"}],
        "Bearer\nabcDEF123456xyz",
    ]
    for value in fallbacks:
        assert not R.unchanged(value), value
    assert not R.unchanged("fine", ("password: hunter2",))  # the texts are scanned too
    # Split across two strings, a secret is not in either: the fast path may still refuse
    # (the strings are scanned joined), but it must never call a real one clean.
    assert not R.unchanged(["x", "sk-" + "y" * 24])


# -- ToolRegistry.finish and the audit record: fast path == full path ------------------------


def _registry(fast: bool, cap: int = 100_000) -> ToolRegistry:
    registry = ToolRegistry(clock=Clock(), result_cap=cap)
    if not fast:
        registry.redactor.unchanged = lambda value, texts=(): False  # type: ignore[method-assign]
    return registry


TEXT_BLOCKS = st.one_of(
    TEXT,
    st.tuples(TEXT.map(lambda t: t.replace("\n", " ")), VALUES).map(
        lambda p: p[0] + "\n" + orjson.dumps(p[1]).decode()),
    st.tuples(TEXT.map(lambda t: t.replace("\n", " ")), st.sampled_from(["{", "[1,", "{bad"])).map(
        lambda p: p[0] + "\n" + p[1]),
)
RESULTS = st.builds(
    lambda texts, sc, extra: {
        "content": [{"type": "text", "text": t} for t in texts] + extra,
        **({"structuredContent": sc} if sc is not None else {}),
    },
    st.lists(TEXT_BLOCKS, max_size=3),
    st.none() | VALUES,
    st.lists(st.sampled_from([{"type": "image", "data": "AKIAABCDEFGHIJKLMNOP"},
                              {"type": "text", "text": 7}, "not a block"]), max_size=2),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RESULTS, st.sampled_from([100_000, 400]))
def test_finish_fast_and_full_paths_agree(result, cap):
    fast = _registry(True, cap).finish(copy.deepcopy(result))
    full = _registry(False, cap).finish(copy.deepcopy(result))
    assert orjson.dumps(fast) == orjson.dumps(full)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(KEYS, VALUES, max_size=5))
def test_audit_params_fast_and_full_paths_agree(arguments):
    fast = _registry(True)._audit_params(arguments)
    full = _registry(False)._audit_params(arguments)
    assert fast == full


def test_fast_paths_are_taken_and_keep_their_own_copies():
    registry = _registry(True)
    calls = []
    unchanged = registry.redactor.unchanged
    registry.redactor.unchanged = lambda v, t=(): calls.append(unchanged(v, t)) or calls[-1]
    arguments = {"path": "/tmp/p/small.txt", "opts": {"head": 3}}
    params = registry._audit_params(arguments)
    assert params == arguments and params is not arguments and params["opts"] is not \
        arguments["opts"]
    text = "hello proxy\n" * 8
    result = {"content": [{"type": "text", "text": text}], "structuredContent": {"content": text}}
    assert registry.finish(copy.deepcopy(result)) == result
    assert calls == [True, True]


def test_fast_path_still_caps():
    registry = _registry(True, cap=400)
    text = "line of plain text\n" * 200
    out = registry.finish({"content": [{"type": "text", "text": text}]})["content"][0]["text"]
    assert len(out.encode()) <= 400 and "[truncated: showing" in out


# -- the proxy's path check on strings == the sandbox's comparison --------------------------

COMPONENTS = st.lists(st.sampled_from(["qa", "qb", "qab", "qa.b", "..", ".", "", "q a"]),
                      max_size=5).map(lambda parts: "/" + "/".join(parts))


@settings(max_examples=500, deadline=None)
@given(COMPONENTS, COMPONENTS)
def test_within_is_inside_for_realpaths(path, root):
    assert within(os.path.realpath(path), os.path.realpath(root)) == inside(real(path), real(root))


def test_within_compares_components():
    assert within("/a/b/c", "/a/b") and within("/a/b", "/a/b") and within("/x", "/")
    assert not within("/a/bc", "/a/b") and not within("/a", "/a/b")

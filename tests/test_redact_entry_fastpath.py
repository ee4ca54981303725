"""
The proof on a stored entry's bytes (L{gasoline.core.redaction.once.proves_clean}) agrees with the walk.

The first read of a stored entry redacts it (L{redact_entry}); most entries have nothing to redact,
and one search over their JSON bytes proves it without decoding them. C{proves_clean} may only say
C{True} where the redactor's walk (at the entry's depth) gives back an equal value, and
L{redact_entry} must give exactly what the walk alone gives (L{walk_entry}). Property tests draw
entries from an alphabet rich in what the walk reacts to (secret shapes, sensitive keys in every
spelling the key rules read, name/value pairs, typed fields, cookies, query strings, JSON in
strings, escapes, non-ASCII case and whitespace, deep nesting) and compare, both as the store
writes entries (compact) and with whitespace between the tokens; example tests check each reason
to fall back, the secret corpus, and that the proof really holds for ordinary console entries.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secret_corpus import corpus

from gasoline.core.redaction.keys import SENSITIVE_KEYS, SENSITIVE_SUFFIXES
from gasoline.core.redaction.once import (
    ENTRY_DEPTH,
    REDACTOR,
    ReadCache,
    proves_clean,
    redact_entry,
    walk_entry,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from _workload import console_entry

TEXT_FRAGMENTS = st.sampled_from([
    "hello", "widget 5 refreshed", " ", "\n", "\t", "\\n", "\\", '"', "é", "\u00a0", "\u2028",
    "/tmp/x", "{", "[", "]", "}", "{}", "[vite] connected", " [1] ", '{"password": "hunter22"}',
    '[{"name":"Authorization","value":"x"}]', "=", "a=1&b=2", "?token=abc",
    "https://u:pw@host/p", "https://x/?code=12345", "ghp_" + "a1" * 18,
    "AKIA" + "ABCDEFGHIJKLMNOP", "Bearer abcDEF123456xyz", "sk-" + "x" * 24,
    "eyJhbGciOi.eyJzdWIiOi.sig", "4111 1111 1111 1111", "123-45-6789", "password: hunter2",
    "Authorization: Basic dXNlcjpwYXNz", "-----BEGIN PRIVATE KEY-----", "[REDACTED:token]",
    "npm_" + "b" * 36, "xoxb-1234567890-abc", "mysql -u root -phunter2", "--password s3cret!",
    '<input type="password" value="x">',
])
TEXT = st.lists(TEXT_FRAGMENTS, max_size=5).map("".join) | st.text(max_size=24)


def _spellings(name: str) -> list[str]:
    """A sensitive name as the key rules read it: camelCase, separators, case, padding."""
    parts = name.split("_")
    camel = parts[0] + "".join(p.title() for p in parts[1:])
    return [name, name.upper(), camel, name.replace("_", "-"), name.replace("_", "."),
            name.replace("_", " "), f" {name} ", f"my_{name}", f"{camel}Hint", name + "s",
            name.replace("k", "\u212a"), name.replace("i", "\u0130"),
            name.replace("_", "\u00a0")]


SENSITIVE_SPELLINGS = sorted({s for n in (*SENSITIVE_KEYS, *SENSITIVE_SUFFIXES)
                              for s in _spellings(n)})
KEYS = st.sampled_from([
    "ts", "url", "message", "source", "level", "args", "data", "name", "value", "cookies",
    "selector", "type", "input_type", "text", "newValue", "typed", "id", "spinner", "design",
    "passive", "toke", "code", "key", "count", "", " ", ":x", "[a]", "é",
]) | st.sampled_from(SENSITIVE_SPELLINGS) | st.text(max_size=8)
SCALARS = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(
    allow_nan=False, allow_infinity=False) | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=24,
)
ENTRIES = st.dictionaries(KEYS, VALUES, max_size=6)


def _check(raw: bytes) -> bool:
    clean = proves_clean(REDACTOR, raw)
    if clean:
        entry = orjson.loads(raw)
        assert REDACTOR._walk(entry, ENTRY_DEPTH) == entry, raw
    assert redact_entry(REDACTOR, raw) == walk_entry(REDACTOR, raw), raw
    return clean


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ENTRIES)
def test_proof_on_the_bytes_agrees_with_the_walk(entry):
    _check(orjson.dumps(entry))
    # Not only as the store writes entries: whitespace between the tokens, text not escaped.
    _check(json.dumps(entry, indent=1, ensure_ascii=False).encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SENSITIVE_SPELLINGS), SCALARS)
def test_every_spelling_of_a_sensitive_key(key, value):
    _check(orjson.dumps({"message": "ok", "args": [{key: value}]}))
    _check(orjson.dumps({key: value}))


def _deep(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_falls_back_where_the_walk_looks_closer():
    fallbacks = [
        {"password": "hunter2"},
        {"message": "x", "args": [{"db-Password": ""}]},
        {"apiKey": 1}, {"x.API.key": 1}, {"Session": 1}, {"api_\u212aey": 1},
        {"name": "Authorization", "value": "x"},
        {"selector": "#pin", "value": "1234"},
        {"cookies": [{"name": "a", "value": "b"}]},
        {"url": "http://x/?q=1"},
        {"body": '{"a": 1}'}, {"body": " [1] "}, {"body": "a\\nb"},
        {"deep": _deep(ENTRY_DEPTH + 60)},
        {"message": "token ghp_" + "a1" * 18},
        {"args": ["ok", {"k": "AKIAABCDEFGHIJKLMNOP"}]},
    ]
    for entry in fallbacks:
        raw = orjson.dumps(entry)
        assert not _check(raw), entry


def test_the_depth_bound_is_the_walks():
    # At the entry's depth, the walk replaces what sits past max_depth: the proof's bracket
    # count must refuse exactly there or earlier, and accept what the walk keeps.
    for n in range(REDACTOR.max_depth - ENTRY_DEPTH - 3, REDACTOR.max_depth - ENTRY_DEPTH + 3):
        raw = orjson.dumps({"deep": _deep(n)})
        entry = orjson.loads(raw)
        kept = REDACTOR._walk(entry, ENTRY_DEPTH) == entry
        assert _check(raw) == kept, n


def test_the_secret_corpus_is_never_proved_clean():
    shapes = 0
    for secret in corpus():
        for entry in ({"level": "error", "message": secret.text, "ts": 1},
                      {"level": "log", "args": [secret.text, {"nested": secret.text}]},
                      {"url": "http://localhost/app", "message": secret.text.replace("\n", " ")}):
            raw = orjson.dumps(entry)
            assert walk_entry(REDACTOR, raw) != raw, secret.name
            assert not _check(raw), secret.name
            shapes += 1
    assert shapes >= 3 * 20


def test_ordinary_console_entries_take_the_proof():
    """The point of the proof: a typical console entry (the benchmarks' workload, messages that
    start like JSON included) is proved clean and kept as the very stored bytes."""
    cache = ReadCache(64)
    entries = [console_entry(i) for i in range(40)] + [
        {"level": "log", "message": "[vite] connected.", "url": "http://localhost:5173/"},
        {"level": "warn", "message": "Slow network", "args": [1, 2.5, None, True, [], {}]},
    ]
    for seq, entry in enumerate(entries):
        raw = orjson.dumps(entry)
        assert proves_clean(REDACTOR, raw), raw
        assert cache.redacted(seq, raw) is raw


def test_read_cache_keeps_one_verdict_per_entry_and_rule_set():
    """The verdicts are bit masks per slot: each (entry, rule set) is tested once, a slot taken
    by a newer entry starts with none, and past MAX_VERDICTS rule sets every verdict is found
    again (never one rule set's verdict read for another's)."""
    from gasoline.core.redaction.once import MAX_VERDICTS

    cache = ReadCache(4)
    calls: list[tuple[int, int]] = []

    def hides(k: int, i: int) -> bool:
        return (7 * k + i) % 3 == 0

    def tester(k: int):
        def test(entry: dict, data: bytes) -> bool:
            calls.append((entry["i"], k))
            assert orjson.loads(data) == entry
            return hides(k, entry["i"])
        return test

    def read(i: int, k: int) -> bool:
        return cache.hidden(i, raws[i], ("rules", k), tester(k), {"i": i})

    raws = [orjson.dumps({"i": i}) for i in range(8)]
    for _ in range(2):
        for k in range(3):
            for i in range(4):
                assert read(i, k) == hides(k, i)
    assert len(calls) == 12  # the second round took every verdict from the cache
    # A newer entry in slot 0 has no verdicts yet.
    calls.clear()
    assert read(4, 0) == hides(0, 4) and calls == [(4, 0)]
    # More rule sets than bits: the verdicts are forgotten and found again, each right, and
    # then kept (a bit reused by another rule set never answers with the old one's verdict).
    for k in range(MAX_VERDICTS + 5):
        for i in range(4, 8):
            assert read(i, k) == hides(k, i), (k, i)
    for k in range(MAX_VERDICTS + 5, 2 * MAX_VERDICTS + 5):
        for i in range(4, 8):
            assert read(i, k) == hides(k, i), (k, i)
        calls.clear()
        for i in range(4, 8):
            assert read(i, k) == hides(k, i), (k, i)
        assert calls == []
    # A worker's redaction is kept for an empty or older slot only.
    assert cache.put(9, raws[1], b'{"i":1}') is True
    assert cache.put(5, raws[5], b"{}") is False
    assert cache.redacted(9, raws[1]) == b'{"i":1}'

"""
The built-in noise rules' one-search clearing agrees with the rules themselves.

L{NoiseRules.matches} clears most entries with one search for all the built-ins: over the
entry's texts joined, or, given the entry's JSON bytes (a stored entry, as the buffer reader
passes them), over those bytes. Either may only clear an entry no built-in hides: the property
test draws entries rich in what the built-ins look for (at a text's start, after a newline, at
its end, in every field, escaped in the JSON) and compares the first hiding rule with the rules
tried one by one, field by field, without any prefilter.
"""

from __future__ import annotations

import json

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gasoline.core.clients.noise import BUILTIN_RULES, FIELDS, NoiseRules, _match_builtins

PIECES = st.sampled_from([
    "", " ", "\n", '"', "\\", "x", "GET ", "/favicon.ico", "/favicon.ico?v=2", "app.js.map",
    ".map#x", "[Violation] 'click' handler took 200ms", "[violation]", "[HMR] connected",
    "[vite] connected.", "[vite] connecting...", "webpack compiled", "DevTools failed to load "
    "source map", "sourcemap 404", "chrome-extension://abc/x.js", "moz-extension://",
    "Download the React DevTools", "You are running Vue in development mode",
    "hot-update.json", "/@vite/client", "widget 5 refreshed", "é",
])
TEXT = st.lists(PIECES, max_size=4).map("".join)
FIELD_KEYS = ["message", "statusText", "error", "data", "url", "name", "page_url", "source",
              "filename", "stack", "other", "level"]
ENTRIES = st.dictionaries(
    st.sampled_from(FIELD_KEYS),
    TEXT | st.integers(-10**9, 10**9) | st.none(),
    max_size=6,
).flatmap(lambda e: st.lists(TEXT | st.integers(-9, 9), max_size=12).map(
    lambda args: {**e, "args": args} if args else e))
DISABLED = st.sets(st.sampled_from([r.id for r in BUILTIN_RULES]), max_size=3)


def _reference(entry: dict, disabled: set[str]):
    for field in FIELDS:
        for rule in BUILTIN_RULES:
            if rule.field == field and rule.id not in disabled and rule.matches(entry):
                return rule
    return None


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ENTRIES, DISABLED)
def test_one_search_clears_only_what_no_builtin_hides(entry, disabled):
    expected = _reference(entry, disabled)
    assert _match_builtins(entry, disabled) is expected
    assert _match_builtins(entry, disabled, orjson.dumps(entry)) is expected
    pretty = json.dumps(entry, indent=1, ensure_ascii=False).encode("utf-8", "surrogatepass")
    assert _match_builtins(entry, disabled, pretty) is expected
    rules = NoiseRules(disabled_builtins=set(disabled))
    assert rules.matches(entry, orjson.dumps(entry)) is rules.matches(entry)


def test_the_search_over_the_bytes_is_the_one_taken():
    """An ordinary entry is cleared on its bytes; a hidden one is found on them too."""
    rules = NoiseRules()
    plain = {"level": "log", "message": "[dashboard] widget 5 refreshed", "url": "http://x/a"}
    assert rules.matches(plain, orjson.dumps(plain)) is None
    entry = {"level": "warn", "message": "[Violation] 'click' handler took 200ms"}
    found = rules.matches(entry, orjson.dumps(entry))
    assert found is not None and found.id == "builtin:violation"
    # The rule's "^" is the text's start, not a line's.
    entry = {"level": "warn", "message": "x\n[Violation] y"}
    assert rules.matches(entry, orjson.dumps(entry)) is None
    entry = {"level": "error", "url": "http://x/favicon.ico"}
    found = rules.matches(entry, orjson.dumps(entry))
    assert found is not None and found.id == "builtin:favicon"

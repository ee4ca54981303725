"""Context streaming's bucket path: console classification to keys, key predicates, literal
patterns, the shared tally and exact throttled counts (the reference is per-event matching)."""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE, WATERFALL
from gasoline.streaming.events import (
    ConsoleCounts,
    classify,
    console_keys,
)
from gasoline.streaming.subscription import (
    MAX_MATCH_URL,
    Matcher,
    literal_alternatives,
    literal_search,
    parse,
    search_set,
)
from gasoline.streaming.tally import KeySpec, Tally

# -- strategies -----------------------------------------------------------------------------------

_WORDS = ["TypeError", "favicon", "ResizeObserver", "healthz", "Content Security Policy",
          "content-security-policy", "MIXED CONTENT", "mixed  content", "widget", "→", "İ",
          "cdn", "x"]
_URLS = ["https://api.example.com/items", "https://cdn.example.net/a.js", "http://localhost:3000/",
         "https://api.example.com/healthz", "", "ftp://x/→"]

messages = st.one_of(
    st.lists(st.sampled_from(_WORDS), max_size=4).map(" ".join),
    st.text(max_size=30),
    st.text(alphabet="ab", min_size=1995, max_size=2010),  # around the 2,000-character cap
    st.integers(-2**63, 2**63 - 1), st.none(), st.lists(st.integers(0, 9), max_size=2),
)
entries = st.fixed_dictionaries({
    "level": st.sampled_from(["error", "error", "warn", "log", "info", 3, None]),
}, optional={
    "type": st.sampled_from(["console", "exception", "network", "csp_violation", "security",
                             None, 7, "Network"]),
    "message": messages,
    "url": st.sampled_from(_URLS + [None, 5]),
    "page_url": st.sampled_from(_URLS),
    "status": st.sampled_from([0, 404, 500, 503, 200, None, "500", float("nan"), True]),
    "error": st.sampled_from([None, "", "net::ERR_FAILED", 0, 1]),
    "stack": st.sampled_from(["at f (a.js:1:1)", None]),
})
batches = st.lists(st.one_of(entries, st.sampled_from(["junk", None, 5])), max_size=30)

_TYPES = ["error", "network_failure", "security_violation", "network_slow", "websocket_close"]
subscriptions = st.builds(
    lambda types, severity, include, exclude, slow: parse({
        "subscribe": types, "filters": {"severity": severity, "url_pattern": include,
                                        "exclude_pattern": exclude, "slow_ms": slow,
                                        "rate_limit": 100}}),
    st.one_of(st.just(["all"]), st.lists(st.sampled_from(_TYPES), min_size=1, max_size=3,
                                         unique=True)),
    st.sampled_from(["low", "medium", "high", "critical"]),
    st.sampled_from([None, "api", r"^https://api\.", "example\\.(com|net)", "3000/$", "cdn|x"]),
    st.sampled_from([None, "favicon|ResizeObserver", "healthz", r"Type\w+", "^widget",
                     "→", "x$"]),
    st.sampled_from([100, 500, 1000]),
)


def _spec(subs: list[Any]) -> tuple[KeySpec, list[Matcher]]:
    matchers = [Matcher(s) for s in subs]
    return KeySpec(matchers), matchers


def _counts(spec: KeySpec) -> ConsoleCounts:
    return ConsoleCounts(spec.types, spec.excl)


# -- classification to keys --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(batch=batches, subs=st.lists(subscriptions, min_size=1, max_size=4))
def test_console_keys_are_the_keys_of_the_classified_events(batch, subs):
    spec, _ = _spec(subs)
    expected_events = [e for e in classify(CONSOLE, batch, 0.0, spec.types)
                       if spec.types is None or e.event_type in spec.types]
    expected = [spec.key(e) for e in expected_events]
    keys, where = console_keys(batch, spec.types, spec.excl)
    assert keys == expected
    # Each key's index names the entry its event comes from.
    assert [classify(CONSOLE, [batch[i]], 0.0)[0].message for i in where] == \
        [e.message for e in expected_events]


#: Entries as the extension sends them (every field there, URLs not empty).
usual_entries = st.fixed_dictionaries({
    "level": st.sampled_from(["error", "error", "warn", "log", "info", "debug"]),
    "type": st.sampled_from(["console", "console", "exception", "network"]),
    "message": st.one_of(st.lists(st.sampled_from(_WORDS), max_size=3).map(" ".join),
                         st.text(alphabet="abcé→ ", max_size=20)),
    "url": st.sampled_from([u for u in _URLS if u]),
    "status": st.sampled_from([0, 404, 500, 503, None]),
}, optional={"error": st.sampled_from([None, "", "net::ERR_FAILED"])})
usual_batches = st.lists(usual_entries, max_size=30)


@settings(max_examples=300, deadline=None)
@given(writes=st.lists(st.one_of(usual_batches, usual_batches, batches), max_size=6),
       subs=st.lists(subscriptions, min_size=1, max_size=4))
def test_deferred_console_counts_are_the_counted_keys(writes, subs):
    """ConsoleCounts (the tally's deferred writes) counts the keys of the events the console
    rule finds in every entry added, write after write."""
    spec, _ = _spec(subs)
    expected = Counter(spec.key(e) for w in writes for e in classify(CONSOLE, w, 0.0, spec.types))
    counts = _counts(spec)
    for write in writes:
        counts.add(write)
    assert len(counts) == sum(map(len, writes))
    assert counts.take() == expected
    assert len(counts) == 0 and counts.take() == Counter()


def test_the_security_wording_is_found_in_any_case_within_500_characters():
    from gasoline.streaming.events import SECURITY_PHRASES, console_kind

    for phrase in SECURITY_PHRASES:
        for text in (phrase, phrase.upper(), "Refused: " + phrase.title() + " directive"):
            entry = {"level": "warn", "type": "console", "message": text}
            assert console_kind(entry) == ("security_violation", 2)
            assert console_kind(entry, security=False) is None  # nobody wants them: not read
        assert console_kind({"level": "warn", "message": "x" * 500 + phrase}) is None
    assert console_kind({"level": "error", "message": "mixed  content"}) == ("error", 1)


def test_a_status_of_true_is_not_counted_as_1():
    """True == 1 in Python, but a status of True is no status (high) and 1 a status (medium)."""
    spec, _ = _spec([parse({"subscribe": ["network_failure"]})])
    counts = _counts(spec)
    write = [{"level": "error", "type": "network", "message": "m", "url": "https://a/",
              "status": status} for status in (1, True, 1.0, 0, False, 500)]
    counts.add(write)
    assert counts.take() == Counter(console_keys(write, spec.types, spec.excl)[0]) == {
        ("network_failure", 1, "https://a/", 0, None): 2,
        ("network_failure", 2, "https://a/", 0, None): 4}


@settings(max_examples=300, deadline=None)
@given(batch=batches, subs=st.lists(subscriptions, min_size=1, max_size=4))
def test_a_key_predicate_decides_what_matching_the_event_decides(batch, subs):
    spec, matchers = _spec(subs)
    waterfall = [{"url": u, "duration": d, "method": "GET"}
                 for u, d in zip(_URLS, (50, 100, 101, 700, 1000, 1500))]
    events = classify(CONSOLE, batch, 0.0) + classify(WATERFALL, waterfall, 0.0)
    for m in matchers:
        test = spec.predicate(m)
        assert [test(spec.key(e)) for e in events] == [m.matches(e) for e in events]


# -- literal patterns ------------------------------------------------------------------------------

_PATTERN_PIECES = ["a", "b", "ab", "\\.", ".", "/", "-", "|", "^", "$", "\\$", "\\^", "\\|",
                   "→", " ", "x*", "(a)", "\\d", "[a]"]


@settings(max_examples=500, deadline=None)
@given(pattern=st.lists(st.sampled_from(_PATTERN_PIECES), min_size=1, max_size=6).map("".join),
       text=st.text(alphabet="ab./-$^|→ x\n", max_size=12))
def test_literal_patterns_give_re2s_verdict(pattern, text):
    try:
        compiled = search_set(pattern)
    except Exception:
        return
    search = literal_search(pattern)
    if search is None:
        return
    assert search(text) == bool(compiled.Match(text))


def test_literal_patterns_recognised_and_refused():
    assert literal_alternatives("ResizeObserver|favicon") == (
        (False, "ResizeObserver", False), (False, "favicon", False))
    assert literal_alternatives(r"^https://api\.|/healthz$") == (
        (True, "https://api.", False), (False, "/healthz", True))
    for pattern in (r"example\.(com|net)", r"\d+", "a.b", "a*", "(?i)x", "a\tb", r"\x41"):
        assert literal_alternatives(pattern) is None
    long = "a" * (MAX_MATCH_URL + 10)
    assert literal_search("a$")(long) is True  # searched in the first MAX_MATCH_URL chars
    assert literal_search("^" + "a" * 50 + "$")("a" * 50) is True


# -- the tally -------------------------------------------------------------------------------------


class _Deferred:
    """The tally's deferred writes, for tests: each entry is the URL of one error key."""

    def __init__(self) -> None:
        self.held: list[str] = []

    def add(self, entries: list[str]) -> None:
        self.held += entries

    def take(self) -> Counter:
        taken = Counter(("error", 1, e, 0, None) for e in self.held)
        self.held = []
        return taken

    @property
    def entries(self) -> int:
        return len(self.held)


def test_tally_counts_per_bucket_for_the_members_present():
    counted: dict[str, int] = {}
    tally = Tally(lambda member, n: counted.__setitem__(member, counted.get(member, 0) + n),
                  _Deferred())
    tally.add([("error", 1, "u", 0, None)])  # no member: nothing kept
    assert not tally.pending
    tally.join("all", lambda key: True)
    tally.add([("error", 1, "u", 0, None)] * 3 + [("error", 2, "v", 0, None)])
    tally.join("high", lambda key: key[1] >= 2)  # folds first: "all" got the 4 before
    assert counted == {"all": 4}
    tally.defer(["u", "v"])
    tally.add([("error", 2, "v", 0, None)])
    tally.leave("all")
    assert counted == {"all": 7, "high": 1}
    tally.fold()
    assert counted == {"all": 7, "high": 1}


def test_tally_memory_is_bounded():
    counted: list[int] = []
    tally = Tally(lambda member, n: counted.append(n), _Deferred())
    tally.join("m", lambda key: True)
    for i in range(Tally.MAX_BUCKETS + 10):
        tally.add([("error", 1, f"https://x/{i}", 0, None)])  # ever-new URLs
    assert len(tally.pending) < Tally.MAX_BUCKETS
    for i in range(Tally.MAX_DEFERRED // 10 + 5):
        tally.defer([f"e{i}-{k}" for k in range(10)])
    assert tally.deferred_entries < Tally.MAX_DEFERRED
    tally.fold()
    assert sum(counted) == Tally.MAX_BUCKETS + 10 + (Tally.MAX_DEFERRED // 10 + 5) * 10


# -- exact counts through the hub --------------------------------------------------------------------


def _agent(app: Any, client_id: str, sub: dict[str, Any]) -> list[dict[str, Any]]:
    session = app.mcp.open_session(client_id, "connector")
    app.mcp.handle(session, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}})
    app.mcp.handle(session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    pushed: list[dict[str, Any]] = []
    session.standalone.attach(lambda eid, payload: pushed.append(orjson.loads(payload)))
    d = app.mcp.handle(session, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "configure", "arguments": {"what": "streaming", **sub}}})
    assert d.result["result"]["isError"] is False, d.result
    return pushed


_SUBS = [
    {"subscribe": ["error"], "filters": {"rate_limit": 2}},
    {"subscribe": ["error", "network_failure"], "filters": {"rate_limit": 3, "severity": "high",
                                                            "exclude_pattern": "favicon|x"}},
    {"subscribe": ["all"], "filters": {"rate_limit": 1, "url_pattern": r"^https://api\."}},
    {"subscribe": ["network_failure"], "filters": {"rate_limit": 5,
                                                   "exclude_pattern": r"Type\w+"}},
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(writes=st.lists(st.tuples(st.one_of(st.lists(entries, max_size=12),
                                           st.lists(usual_entries, max_size=12)),
                                 st.sampled_from([0.0, 0.0, 0.1, 0.4, 1.0])), max_size=12))
def test_throttled_counts_are_exact(writes):
    """Per agent: every event its filters match is either delivered (pushed, in order) or
    counted as throttled, and the rate_limit_exceeded notices add up to the count."""
    _throttled_counts_are_exact(writes)


def _throttled_counts_are_exact(writes: list[Any]) -> None:
    clock = Clock()
    clock.advance(1_700_000_000)
    tmp = tempfile.mkdtemp()
    app = build(Config(state_dir=Path(tmp), persist=False), clock)
    try:
        pushed = [_agent(app, f"agent-{i}", sub) for i, sub in enumerate(_SUBS)]
        matchers = [Matcher(parse(sub)) for sub in _SUBS]
        matched = [0] * len(_SUBS)
        for batch, advance in writes:
            app.store.add(CONSOLE, [dict(e) for e in batch])
            for i, m in enumerate(matchers):
                matched[i] += sum(map(m.matches, classify(CONSOLE, batch, 0.0)))
            clock.advance(advance)
        clock.advance(0)
        clock.advance(2.0)  # every window ended: every notice is out
        for i, agent_id in enumerate(f"agent-{i}" for i in range(len(_SUBS))):
            agent = app.streaming.agents[agent_id]
            data = [m["params"]["data"] for m in pushed[i]
                    if m.get("method") == "notifications/message"]
            events = [d for d in data if d["event_type"] not in ("rate_limit_exceeded",
                                                                 "buffer_full")]
            notices = sum(d["throttled"] for d in data if d["event_type"] == "rate_limit_exceeded")
            assert len(events) + agent.throttled_total == matched[i]
            assert notices == agent.throttled_total
            assert [d["seq"] for d in data] == sorted({d["seq"] for d in data})
    finally:
        app.mcp.close_all()
        app.streaming.stop()
        app.store.notifier.stop()
        app.extension.stop()
        app.router.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_timer_left(clock):
    yield
    assert clock.getDelayedCalls() == []


def test_one_rate_limit_notice_per_window_even_with_a_full_inbox(app, clock):
    pushed = _agent(app, "A", {"subscribe": ["error"], "filters": {"rate_limit": 100}})
    err = {"level": "error", "type": "console", "url": "https://x/", "tabId": 1}
    for burst in range(3):
        for k in range(30):  # 30 writes of 10: 100 delivered, 200 throttled, the inbox overflows
            app.store.add(CONSOLE, [dict(err, message=f"{burst}-{k}-{i}") for i in range(10)])
            clock.advance(0.01)
        clock.advance(1.0)
    data = [m["params"]["data"] for m in pushed if m.get("method") == "notifications/message"]
    notices = [d for d in data if d["event_type"] == "rate_limit_exceeded"]
    assert [n["throttled"] for n in notices] == [200, 200, 200]
    # One buffer_full notice at a time (a new one only once the last was pushed out itself).
    full = [d for d in data if d["event_type"] == "buffer_full"]
    assert 1 <= len(full) <= 3
    assert app.streaming.throttled == 600


def test_writes_only_counted_are_counted_at_the_fold(app, clock):
    _agent(app, "A", {"subscribe": ["error"], "filters": {"rate_limit": 1}})
    err = {"level": "error", "type": "console", "url": "https://x/", "message": "m"}
    app.store.add(CONSOLE, [dict(err)] * 2)
    clock.advance(0)
    assert app.streaming.agents["A"] in app.streaming.dispatcher.tally
    for _ in range(5):
        app.store.add(CONSOLE, [dict(err)] * 3)
        clock.advance(0)
    assert app.streaming.dispatcher.tally.deferred_entries == 15  # their URLs kept, not counted yet
    assert app.streaming.events_classified == 2
    assert app.streaming.agents["A"].throttled_total == 16  # reading folds: exact
    assert app.streaming.dispatcher.tally.deferred_entries == 0
    clock.advance(1.0)


def test_a_notice_timer_of_an_earlier_window_leaves_the_new_window_its_notice(app, clock):
    """The agent's window fills, the next write comes exactly at the window's end (its notice
    timer still pending): it starts and fills a new window and rejoins the tally; the old timer
    then fires with nothing to say, and the new window's count still gets its notice."""
    pushed = _agent(app, "A", {"subscribe": ["error"], "filters": {"rate_limit": 2}})
    _agent(app, "B", {"subscribe": ["error"], "filters": {"url_pattern": "never"}})  # stays open
    err = {"level": "error", "message": "m"}
    app.store.add(CONSOLE, [dict(err)] * 2)
    clock.advance(0)
    app.store.add(CONSOLE, [dict(err)] * 2)
    clock.advance(1.0)  # the write is handled at the window's end, before the old timer
    app.store.add(CONSOLE, [dict(err)])
    clock.advance(0)
    clock.advance(1.0)
    data = [m["params"]["data"] for m in pushed if m.get("method") == "notifications/message"]
    assert [d["event_type"] for d in data] == ["error"] * 4 + ["rate_limit_exceeded"]
    assert data[-1]["throttled"] == 1 == app.streaming.agents["A"].throttled_total

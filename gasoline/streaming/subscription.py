"""
One agent's streaming subscription: validation, persistence form, and the compiled matcher.

L{parse} validates C{configure {what:"streaming"}} arguments (clear L{InvalidParam} errors for
unknown event types, more than 10 types, patterns over 100 characters or not RE2-compatible,
C{rate_limit} outside 1-100, ...) into a L{Subscription}. L{Subscription.to_json} is what the agent's
client state keeps (C{state.subscriptions["streaming"]}), so the subscription is persisted with the
state and restored when the client comes back within the TTL; L{Subscription.from_json} reads it
back (anything malformed is ignored, never raised). L{Matcher} holds the compiled patterns (compiled
once per subscription) and applies the seed's order: type -> severity -> url_pattern ->
exclude_pattern; the rate limit is the inbox's last step.
"""

from __future__ import annotations

import string
from typing import Any, Callable

import attrs
import re2

from gasoline.core.errors import InvalidParam
from gasoline.streaming.events import (
    ALL_TYPES,
    EVENT_TYPES,
    SEVERITIES,
    SEVERITY_RANK,
    StreamEvent,
)

ALL = "all"
MAX_TYPES = 10
MAX_PATTERN = 100
MIN_RATE, MAX_RATE = 1, 100
#: 5 events per second by default, 10 for an C{all} subscription.
DEFAULT_RATE = 5
DEFAULT_RATE_ALL = 10
DEFAULT_SEVERITY = "low"
#: C{network_slow}: a request slower than this (ms) is an event, unless the filter says otherwise.
DEFAULT_SLOW_MS = 1000
MAX_SLOW_MS = 600_000
#: Longest URL a pattern is matched against.
MAX_MATCH_URL = 4096
ALL_WARNING = ("subscribed to 'all': every event type is streamed, which can be many events per "
               "second; prefer the types you need (rate limit {rate}/s)")
FILTER_KEYS = ("severity", "url_pattern", "exclude_pattern", "rate_limit", "slow_ms",
               "over_limit")
#: C{dom_change} watches: at most this many per agent; selector and text lengths.
MAX_WATCHES = 10
MAX_SELECTOR = 300
MAX_WATCH_TEXT = 200
CONDITIONS = ("appears", "disappears", "text_matches")
#: What happens to matched events over the rate limit: counted and dropped (the default), or
#: queued (bounded, L{gasoline.streaming.inbox.QUEUE_CAPACITY}) and delivered after the window.
OVER_LIMIT = ("drop", "queue")


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 1 << 20
    return options


_OPTIONS = _re2_options()
#: Compiled patterns by source: validating a subscription and building its matcher compile a
#: pattern once, and agents with the same pattern share it (a compiled set is read-only).
_COMPILED: dict[str, Any] = {}
MAX_COMPILED = 256


def compile_pattern(name: str, pattern: Any) -> Any:
    """Compile a filter's RE2 pattern as a one-pattern search set (see L{search_set}), or raise
    L{InvalidParam} naming C{name}."""
    if not isinstance(pattern, str) or not pattern:
        raise InvalidParam(f"filters.{name} must be a non-empty string", param=f"filters.{name}")
    if len(pattern) > MAX_PATTERN:
        raise InvalidParam(f"filters.{name} is longer than {MAX_PATTERN} characters "
                           f"({len(pattern)})", param=f"filters.{name}")
    hit = _COMPILED.get(pattern)
    if hit is not None:
        return hit
    try:
        re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        detail = e.args[0] if e.args else "invalid"
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise InvalidParam(f"filters.{name} is not a valid RE2 pattern: {detail}",
                           param=f"filters.{name}",
                           retry="Use RE2 syntax: no look-around, no back-references.") from None
    try:
        compiled = search_set(pattern)
    except re2.error:
        raise InvalidParam(f"filters.{name} is too complex (over RE2's 1 MiB program limit)",
                           param=f"filters.{name}",
                           retry="Use a simpler pattern (fewer or smaller repetitions).") from None
    if len(_COMPILED) >= MAX_COMPILED:
        _COMPILED.clear()
    _COMPILED[pattern] = compiled
    return compiled


@attrs.frozen
class Subscription:
    """What one agent subscribed to (validated)."""

    types: tuple[str, ...]
    severity: str = DEFAULT_SEVERITY
    url_pattern: str | None = None
    exclude_pattern: str | None = None
    rate_limit: int = DEFAULT_RATE
    slow_ms: int = DEFAULT_SLOW_MS
    over_limit: str = "drop"
    #: C{dom_change}: C{(selector, condition, text)} watched in the tracked tab.
    watches: tuple[tuple[str, str, str | None], ...] = ()

    @property
    def all(self) -> bool:
        return ALL in self.types

    @property
    def queues(self) -> bool:
        """Over-limit events are queued and delivered after the window (C{over_limit: queue})."""
        return self.over_limit == "queue"

    def filters(self) -> dict[str, Any]:
        return {"severity": self.severity, "url_pattern": self.url_pattern,
                "exclude_pattern": self.exclude_pattern, "rate_limit": self.rate_limit,
                "slow_ms": self.slow_ms, "over_limit": self.over_limit}

    def watch_json(self) -> list[dict[str, Any]]:
        return [{"selector": sel, "condition": cond, **({"text": text} if text else {})}
                for sel, cond, text in self.watches]

    def to_json(self) -> dict[str, Any]:
        """The saved form (the client state keeps it): the filters that differ from their
        defaults only (L{from_json} reads the rest as defaults), so an agent with the usual
        filters keeps a small dict."""
        defaults = {"severity": DEFAULT_SEVERITY, "url_pattern": None, "exclude_pattern": None,
                    "rate_limit": DEFAULT_RATE_ALL if self.all else DEFAULT_RATE,
                    "slow_ms": DEFAULT_SLOW_MS, "over_limit": "drop"}
        filters = {k: v for k, v in self.filters().items() if v != defaults[k]}
        out: dict[str, Any] = {"enabled": True, "subscribe": list(self.types)}
        if filters:
            out["filters"] = filters
        if self.watches:
            out["watch"] = self.watch_json()
        return out

    @classmethod
    def from_json(cls, data: Any) -> "Subscription | None":
        """The subscription L{to_json} saved, or None (disabled, absent or malformed)."""
        if not isinstance(data, dict) or data.get("enabled") is not True:
            return None
        try:
            return parse({"enabled": True, "subscribe": data.get("subscribe"),
                          "filters": data.get("filters") or {}, "watch": data.get("watch")})
        except InvalidParam:
            return None


def _int(filters: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = filters.get(name, default)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParam(f"filters.{name} must be an integer", param=f"filters.{name}")
    if not lo <= value <= hi:
        raise InvalidParam(f"filters.{name} must be between {lo} and {hi} (got {value})",
                           param=f"filters.{name}", value=value)
    return value


def parse(args: dict[str, Any]) -> Subscription | None:
    """Validate C{enabled}, C{subscribe} and C{filters}; None when C{enabled} is false.

    @raise InvalidParam: with a message that names the offending argument.
    """
    enabled = args.get("enabled", True)
    if not isinstance(enabled, bool):
        raise InvalidParam("enabled must be a boolean", param="enabled")
    if not enabled:
        return None
    subscribe = args.get("subscribe")
    if subscribe is None:
        raise InvalidParam("subscribe is required when enabling streaming: a list of event types "
                           f"({', '.join(EVENT_TYPES)}, or all)", param="subscribe",
                           valid=[*EVENT_TYPES, ALL])
    if isinstance(subscribe, str):
        subscribe = [subscribe]
    if not isinstance(subscribe, list) or not subscribe:
        raise InvalidParam("subscribe must be a non-empty list of event types", param="subscribe")
    if len(subscribe) > MAX_TYPES:
        raise InvalidParam(f"subscribe lists {len(subscribe)} event types; at most {MAX_TYPES}",
                           param="subscribe")
    types: list[str] = []
    for t in subscribe:
        if t not in EVENT_TYPES and t != ALL:
            raise InvalidParam(f"unknown event type {str(t)[:80]!r}", param="subscribe",
                               valid=[*EVENT_TYPES, ALL])
        if t not in types:
            types.append(t)
    filters = args.get("filters")
    if filters is None:
        filters = {}
    if not isinstance(filters, dict):
        raise InvalidParam("filters must be an object", param="filters")
    unknown = [k for k in filters if k not in FILTER_KEYS]
    if unknown:
        raise InvalidParam(f"unknown filter {str(unknown[0])[:80]!r}", param="filters",
                           valid=list(FILTER_KEYS))
    severity = filters.get("severity")
    if severity is None:
        severity = DEFAULT_SEVERITY
    if severity not in SEVERITIES:
        raise InvalidParam(f"filters.severity must be one of {', '.join(SEVERITIES)}",
                           param="filters.severity", valid=list(SEVERITIES))
    patterns = {}
    for name in ("url_pattern", "exclude_pattern"):
        value = filters.get(name)
        if value is not None:
            compile_pattern(name, value)
        patterns[name] = value
    rate = _int(filters, "rate_limit", DEFAULT_RATE_ALL if ALL in types else DEFAULT_RATE,
                MIN_RATE, MAX_RATE)
    slow = _int(filters, "slow_ms", DEFAULT_SLOW_MS, 1, MAX_SLOW_MS)
    over_limit = filters.get("over_limit")
    if over_limit is None:
        over_limit = "drop"
    if over_limit not in OVER_LIMIT:
        raise InvalidParam(f"filters.over_limit must be one of {', '.join(OVER_LIMIT)}",
                           param="filters.over_limit", valid=list(OVER_LIMIT))
    watches = _watches(args.get("watch"), "dom_change" in types)
    return Subscription(tuple(types), severity, patterns["url_pattern"],
                        patterns["exclude_pattern"], rate, slow, over_limit, watches)


def _watches(raw: Any, wanted: bool) -> tuple[tuple[str, str, str | None], ...]:
    """Validate C{watch}: what C{dom_change} watches (required with it, refused without it)."""
    if raw is None or raw == []:
        if wanted:
            raise InvalidParam("dom_change needs watch: a list of {selector, condition: appears | "
                               "disappears | text_matches, text?}", param="watch")
        return ()
    if not wanted:
        raise InvalidParam("watch is for dom_change: add it to subscribe", param="watch")
    if not isinstance(raw, list):
        raise InvalidParam("watch must be a list of {selector, condition, text?}", param="watch")
    if len(raw) > MAX_WATCHES:
        raise InvalidParam(f"watch lists {len(raw)} selectors; at most {MAX_WATCHES}",
                           param="watch")
    out: list[tuple[str, str, str | None]] = []
    for i, item in enumerate(raw):
        where = f"watch[{i}]"
        if not isinstance(item, dict):
            raise InvalidParam(f"{where} must be an object {{selector, condition, text?}}",
                               param=where)
        unknown = [k for k in item if k not in ("selector", "condition", "text")]
        if unknown:
            raise InvalidParam(f"{where}: unknown field {str(unknown[0])[:40]!r}", param=where)
        selector = item.get("selector")
        if not isinstance(selector, str) or not selector.strip() \
                or len(selector) > MAX_SELECTOR:
            raise InvalidParam(f"{where}.selector must be a CSS or semantic selector (text=, "
                               f"role=, label=, ...) of 1-{MAX_SELECTOR} characters",
                               param=f"{where}.selector")
        condition = item.get("condition", "appears")
        if condition not in CONDITIONS:
            raise InvalidParam(f"{where}.condition must be one of {', '.join(CONDITIONS)}",
                               param=f"{where}.condition", valid=list(CONDITIONS))
        text = item.get("text")
        if condition == "text_matches":
            if not isinstance(text, str) or not text or len(text) > MAX_WATCH_TEXT:
                raise InvalidParam(f"{where}.text (1-{MAX_WATCH_TEXT} characters, matched as a "
                                   "substring of the element's text) is required with "
                                   "text_matches", param=f"{where}.text")
        elif text is not None:
            raise InvalidParam(f"{where}.text is only for text_matches", param=f"{where}.text")
        watch = (selector, condition, text if condition == "text_matches" else None)
        if watch not in out:
            out.append(watch)
    return tuple(out)


def search_set(pattern: str) -> Any:
    """C{pattern} as a one-pattern RE2 search set: one native call per search (C{Set.Match}),
    about 3.5 times cheaper than C{re2.compile(p).search}, whose offset bookkeeping runs in
    Python. Raises C{re2.error} when RE2 refuses it."""
    patterns = re2.Set.SearchSet(_OPTIONS)
    patterns.Add(pattern)
    patterns.Compile()
    return patterns


#: Characters with a meaning in RE2's syntax outside a character class.
_META = frozenset("\\.+*?()|[]{}^$")
#: An escaped ASCII punctuation character is that character (RE2: C{\\*} is a literal C{*}).
_PUNCTUATION = frozenset(string.punctuation)


def literal_alternatives(pattern: str) -> tuple[tuple[bool, str, bool], ...] | None:
    """C{pattern} as literal alternatives C{(anchored at the start, text, anchored at the end)}
    when it is nothing else (C{ResizeObserver|favicon}, C{^https://api\\.}, C{/healthz$}), or
    None when it uses any other syntax (classes, repetition, groups, flags, escapes other than
    punctuation, non-printable characters)."""
    out = []
    i, n = 0, len(pattern)
    while True:
        start = end = False
        chars: list[str] = []
        if i < n and pattern[i] == "^":
            start = True
            i += 1
        while i < n and pattern[i] != "|":
            c = pattern[i]
            if c == "\\":
                if i + 1 < n and pattern[i + 1] in _PUNCTUATION:
                    chars.append(pattern[i + 1])
                    i += 2
                    continue
                return None
            if c == "$" and (i + 1 == n or pattern[i + 1] == "|"):
                end = True
                i += 1
                break
            if c in _META or not c.isprintable():
                return None
            chars.append(c)
            i += 1
        out.append((start, "".join(chars), end))
        if i >= n:
            return tuple(out)
        i += 1  # the "|"


def literal_search(pattern: str) -> Callable[[str], bool] | None:
    """RE2's verdict (a search in at most L{MAX_MATCH_URL} characters) for a pattern made of
    literal alternatives (L{literal_alternatives}), as plain string operations: RE2's C{$} is
    the end of the text (not before a final newline), so C{^a} is C{startswith}, C{a$}
    C{endswith}, C{^a$} equality and C{a} containment. None for any other pattern."""
    alternatives = literal_alternatives(pattern)
    if alternatives is None:
        return None
    contains = tuple(text for start, text, end in alternatives if not start and not end)
    prefixes = tuple(text for start, text, end in alternatives if start and not end)
    suffixes = tuple(text for start, text, end in alternatives if end and not start)
    exact = frozenset(text for start, text, end in alternatives if start and end)
    if len(contains) == 1 and not (prefixes or suffixes or exact):
        word = contains[0]
        return lambda text: word in text[:MAX_MATCH_URL]
    if len(prefixes) == 1 and not (contains or suffixes or exact):
        return lambda text: text[:MAX_MATCH_URL].startswith(prefixes)

    def search(text: str) -> bool:
        text = text[:MAX_MATCH_URL]
        if prefixes and text.startswith(prefixes):
            return True
        if suffixes and text.endswith(suffixes):
            return True
        if exact and text in exact:
            return True
        for word in contains:
            if word in text:
                return True
        return False

    return search


class _Search:
    """One compiled pattern: C{url(text)} and C{text(text)} give RE2's search verdict. A pattern
    made only of literal alternatives is searched with string operations (L{literal_search}: no
    native call); any other goes to RE2, with the verdicts for recent URLs remembered (pages
    repeat their URLs; messages are not remembered, they rarely repeat)."""

    __slots__ = ("_set", "_urls", "url", "text", "words")

    #: URLs remembered per pattern (the memory is dropped whole when full).
    MAX_URLS = 4096

    def __init__(self, name: str, pattern: str) -> None:
        self._set = compile_pattern(name, pattern)
        self._urls: dict[str, bool] = {}
        literal = literal_search(pattern)
        self.url: Callable[[str], bool] = literal if literal is not None else self._url
        self.text: Callable[[str], bool] = literal if literal is not None else self._text
        alternatives = literal_alternatives(pattern) if literal is not None else None
        #: For a pattern of unanchored literal alternatives, those literals: the pattern
        #: matches a text (of at most MAX_MATCH_URL characters) that contains one of them.
        self.words: tuple[str, ...] | None = None
        if alternatives is not None and not any(start or end for start, _, end in alternatives):
            self.words = tuple(text for _, text, _ in alternatives)

    def _url(self, url: str) -> bool:
        hit = self._urls.get(url)
        if hit is None:
            hit = bool(self._set.Match(url[:MAX_MATCH_URL]))
            if len(self._urls) >= self.MAX_URLS:
                self._urls.clear()
            self._urls[url] = hit
        return hit

    def _text(self, text: str) -> bool:
        return bool(self._set.Match(text[:MAX_MATCH_URL]))

    def re2(self, text: str) -> bool:
        """RE2's own verdict (what the literal path must agree with; tests)."""
        return bool(self._set.Match(text[:MAX_MATCH_URL]))


#: Read-only parts many agents' matchers have alike (type sets, predicates without patterns),
#: made once and shared: a subscription without patterns holds references, not copies
#: (docs/streaming.md, "Memory per subscription"). Bounded: cleared when full.
_SHARED: dict[Any, Any] = {}
_MAX_SHARED = 512


def _shared(key: Any, value: Any = None) -> Any:
    """C{_SHARED[key]}, set to C{value} (or, for C{("types", set)}, to C{key}) the first time."""
    hit = _SHARED.get(key)
    if hit is None:
        if len(_SHARED) >= _MAX_SHARED:
            _SHARED.clear()
        hit = _SHARED[key] = key if value is None else value
    return hit


class Matcher:
    """A subscription with its patterns compiled once: L{matches} runs the seed's order."""

    __slots__ = ("subscription", "types", "min_rank", "include", "exclude", "slow_ms", "simple",
                 "_after_type")

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        #: The types matched: C{all} is every type but the opt-in ones (L{OPT_IN_TYPES}), which
        #: an agent names itself (C{["all", "websocket_message"]}).
        named = frozenset(t for t in subscription.types if t != ALL)
        self.types: frozenset[str] | None = _shared(
            ("types", (ALL_TYPES | named) if subscription.all else named))[1]
        self.min_rank = SEVERITY_RANK[subscription.severity]
        self.include = (_Search("url_pattern", subscription.url_pattern)
                        if subscription.url_pattern else None)
        self.exclude = (_Search("exclude_pattern", subscription.exclude_pattern)
                        if subscription.exclude_pattern else None)
        self.slow_ms = subscription.slow_ms
        #: No severity floor and no pattern: past the type (and a C{network_slow} event's
        #: budget) every event matches, so throttled events can be counted without matching.
        self.simple = self.min_rank == 0 and self.include is None and self.exclude is None
        self._after_type = (self._predicate(True), self._predicate(False))

    def after_type(self, budgets: bool) -> Callable[[StreamEvent], bool]:
        """L{matches} for events already known to be of this subscription's types: only the
        checks this subscription has, in the seed's order. With C{budgets} false the events are
        known to carry no duration (no C{network_slow} among them)."""
        return self._after_type[0 if budgets else 1]

    def _predicate(self, budgets: bool) -> Callable[[StreamEvent], bool]:
        min_rank, slow_ms = self.min_rank, self.slow_ms
        include = self.include.url if self.include is not None else None
        exclude = self.exclude
        if include is None and exclude is None:
            # The same few predicates for every agent without patterns (shared, not per agent).
            key = ("predicate", budgets, min_rank, slow_ms if budgets else None)
            hit = _SHARED.get(key)
            if hit is not None:
                return hit
            if not budgets:
                made = (lambda e: True) if min_rank == 0 else (lambda e: e.rank >= min_rank)
            else:
                made = lambda e: (e.duration_ms is None or e.duration_ms > slow_ms) \
                    and e.rank >= min_rank  # noqa: E731
            return _shared(key, made)
        exclude_url = exclude.url if exclude is not None else None
        exclude_text = exclude.text if exclude is not None else None

        def predicate(e: StreamEvent) -> bool:
            if budgets and e.duration_ms is not None and e.duration_ms <= slow_ms:
                return False
            if e.rank < min_rank:
                return False
            if include is not None and not include(e.url):
                return False
            return exclude_url is None or exclude_text is None \
                or not (exclude_url(e.url) or exclude_text(e.message))

        return predicate

    def key_test(self, xbit: int, bpos: int) -> Callable[[tuple], bool]:
        """L{matches} for an event's bucket key instead of the event (see
        L{gasoline.streaming.tally}): C{(event_type, rank, url, xmask, didx)}, where C{xmask & xbit}
        says whether the event's message matched this subscription's exclude pattern and C{didx}
        (None for events without a duration) how many of the distinct budgets in play the
        duration exceeds, this subscription's being the C{bpos}-th smallest. Same order: type,
        budget, severity, url_pattern, exclude_pattern."""
        types, min_rank = self.types, self.min_rank
        include = self.include.url if self.include is not None else None
        exclude = self.exclude.url if self.exclude is not None else None
        if include is None and exclude is None:
            cache_key = ("key_test", types, min_rank, bpos)
            hit = _SHARED.get(cache_key)
            if hit is not None:
                return hit
            if types is None:
                made = lambda key: (key[4] is None or key[4] > bpos) \
                    and key[1] >= min_rank  # noqa: E731
            else:
                made = lambda key: key[0] in types and (key[4] is None or key[4] > bpos) \
                    and key[1] >= min_rank  # noqa: E731
            return _shared(cache_key, made)

        def test(key: tuple) -> bool:
            kind, rank, url, xmask, didx = key
            if types is not None and kind not in types:
                return False
            if didx is not None and didx <= bpos:
                return False
            if rank < min_rank:
                return False
            if include is not None and not include(url):
                return False
            return exclude is None or not (xmask & xbit or exclude(url))

        return test

    def matches(self, event: StreamEvent) -> bool:
        # 1. type
        types = self.types
        if types is not None and event.event_type not in types:
            return False
        if event.duration_ms is not None and event.duration_ms <= self.slow_ms:
            return False  # network_slow: not over this subscriber's budget
        # 2. severity
        if event.rank < self.min_rank:
            return False
        # 3. url_pattern (the event's URL), 4. exclude_pattern (its URL or its message: noise)
        if self.include is not None and not self.include.url(event.url):
            return False
        exclude = self.exclude
        if exclude is not None and (exclude.url(event.url) or exclude.text(event.message)):
            return False
        return True

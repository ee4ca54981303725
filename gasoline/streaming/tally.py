"""
Bucket keys: matching an event by what the filters read of it, and counting throttled events
per bucket instead of per event.

An event's bucket key is C{(event_type, rank, url, xmask, didx)}: its type, severity rank and URL,
C{xmask} the bits of the exclude patterns its message matches, and C{didx} (C{network_slow} only,
else None) how many of the distinct C{slow_ms} budgets in play its duration exceeds. That is
everything a subscription's filters read (L{gasoline.streaming.subscription.Matcher.key_test}
decides on a key exactly what C{Matcher.matches} decides on the event), and nothing that makes an
event unique: a busy page's events fall into few buckets (a type, a severity, a handful of URLs).

L{KeySpec} says, for the current set of subscriptions, which exclude pattern owns which bit and
which budgets are told apart; L{Batch} is one write's events as keys, each event built only when
some agent is about to receive it; L{Tally} counts the events of agents whose one-second window is
full: while an agent's window is full it needs only a count (for its C{rate_limit_exceeded}
notice), so every write adds its keys once to one shared tally, whatever the number of such
agents, and each agent sums the buckets it matches when the tally is folded (when an agent
starts or stops counting, when a notice or a reader needs the count, when the tally holds
L{Tally.MAX_BUCKETS} buckets). The counts stay exact: a fold gives every counting agent the
number of tallied events its filters match, which is what matching them one by one would count.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from typing import Any, Callable, Iterable

from gasoline.streaming.events import (
    EVENT_TYPES,
    MAX_MESSAGE,
    ConsoleCounts,
    StreamEvent,
    console_keys,
    entry_event,
)
from gasoline.streaming.subscription import MAX_MATCH_URL, Matcher

Key = tuple
#: Exclude pattern tests per event type: C{(bit, words, search)} (see L{console_keys}).
Exclusions = dict[str, tuple[tuple[int, tuple[str, ...] | None, Callable[[str], bool]], ...]]

# console_keys tests literal words on the capped message without cutting it to the searched length.
assert MAX_MESSAGE < MAX_MATCH_URL


class KeySpec:
    """How events become keys for a set of matchers: one bit per distinct exclude pattern, the
    sorted distinct C{network_slow} budgets, and the types anyone wants. Keys made under one
    spec are only read with predicates made by the same spec (L{predicate})."""

    __slots__ = ("types", "excl", "bits", "budgets")

    def __init__(self, matchers: Iterable[Matcher]) -> None:
        matchers = list(matchers)
        types = None if any(m.types is None for m in matchers) else \
            {t for m in matchers for t in m.types or ()}
        #: None: every type.
        self.types: frozenset[str] | None = None if types is None else frozenset(types)
        self.bits: dict[str, int] = {}
        excl: dict[str, list[tuple[int, tuple[str, ...] | None, Callable[[str], bool]]]] = {}
        for m in matchers:
            if m.exclude is None:
                continue
            pattern = m.subscription.exclude_pattern
            assert pattern is not None  # an exclusion has its pattern
            bit = self.bits.get(pattern)
            if bit is None:
                bit = self.bits[pattern] = 1 << len(self.bits)
            for kind in EVENT_TYPES if m.types is None else m.types:
                tests = excl.setdefault(kind, [])
                if all(b != bit for b, _, _ in tests):
                    tests.append((bit, m.exclude.words, m.exclude.text))
        self.excl: Exclusions = {kind: tuple(tests) for kind, tests in excl.items()}
        self.budgets: tuple[int, ...] = tuple(sorted({
            m.slow_ms for m in matchers if m.types is None or "network_slow" in m.types}))

    def counts(self) -> ConsoleCounts:
        """An empty L{ConsoleCounts} making keys under this spec (the tally's deferred
        writes)."""
        return ConsoleCounts(self.types, self.excl)

    def predicate(self, matcher: Matcher) -> Callable[[Key], bool]:
        """C{matcher}'s verdict on keys made under this spec."""
        pattern = matcher.subscription.exclude_pattern
        xbit = self.bits.get(pattern, 0) if pattern is not None and matcher.exclude is not None else 0
        budgets = self.budgets
        bpos = budgets.index(matcher.slow_ms) if matcher.slow_ms in budgets else len(budgets)
        return matcher.key_test(xbit, bpos)

    def key(self, event: StreamEvent) -> Key:
        """The key of a classified event."""
        xmask = 0
        tests = self.excl.get(event.event_type)
        if tests:
            for bit, _, search in tests:
                if search(event.message):
                    xmask |= bit
        duration = event.duration_ms
        didx = None if duration is None else bisect_left(self.budgets, duration)
        return (event.event_type, event.rank, event.url, xmask, didx)

    def batch(self, buffer: str, entries: Iterable[Any], at: float,
              classify: Callable[..., list[StreamEvent]]) -> "Batch":
        """One write's events of the wanted types as a L{Batch}. Console writes (the busy
        buffer) go through L{console_keys}, with no event built; others through C{classify}."""
        if buffer == "console":
            entries = entries if isinstance(entries, (list, tuple)) else list(entries)
            keys, where = console_keys(entries, self.types, self.excl)
            return Batch(keys, lambda pos: entry_event(buffer, entries[where[pos]], at))
        return self.events(classify(buffer, entries, at, self.types))

    def events(self, events: list[StreamEvent]) -> "Batch":
        """Already classified events (audits, non-console buffers) as a L{Batch}."""
        types = self.types
        if types is not None:
            events = [e for e in events if e.event_type in types]
        return Batch([self.key(e) for e in events], events.__getitem__)


class Batch:
    """One write's events as keys, in order; C{event(pos)} builds (once) the L{StreamEvent} of
    the event at C{pos}, for agents that receive it."""

    __slots__ = ("keys", "_build", "_events")

    def __init__(self, keys: list[Key], build: Callable[[int], StreamEvent | None]) -> None:
        self.keys = keys
        self._build = build
        self._events: dict[int, StreamEvent | None] = {}

    def event(self, pos: int) -> StreamEvent | None:
        events = self._events
        if pos in events:
            return events[pos]
        event = events[pos] = self._build(pos)
        return event


class Tally:
    """Events counted per bucket for the agents whose window is full (members), folded into
    their counts on demand. Members join and leave only at a fold, so every tallied event was
    seen by exactly the members present when it is folded."""

    #: Buckets kept before a fold (a page with ever-new URLs cannot grow the tally).
    MAX_BUCKETS = 4096
    #: Console entries deferred before a fold (their URLs are kept until it).
    MAX_DEFERRED = 5000

    __slots__ = ("pending", "members", "on_count", "deferred", "classified")

    def __init__(self, on_count: Callable[[Any, int], None], deferred: Any) -> None:
        self.pending: Counter[Key] = Counter()
        #: member -> its key predicate (insertion-ordered).
        self.members: dict[Any, Callable[[Key], bool]] = {}
        #: Called with (member, n) for every member whose fold counted n > 0 events.
        self.on_count = on_count
        #: Where L{defer}red console writes go until the fold: C{add(entries)}, C{take()} (their
        #: keys, counted) and C{entries} (how many were added since the last C{take}); a
        #: L{gasoline.streaming.events.ConsoleCounts} for the current key spec (replaced,
        #: after a fold, when the spec changes).
        self.deferred = deferred
        #: Events the deferred writes held, in all (counted at the folds).
        self.classified = 0

    def add(self, keys: list[Key]) -> None:
        """One write's keys, seen by every member (none: nothing is kept)."""
        if self.members:
            pending = self.pending
            pending.update(keys)
            if len(pending) >= self.MAX_BUCKETS:
                self.fold()

    def defer(self, entries: Any) -> None:
        """One console write seen by every member and by no other agent: nobody needs its
        events one by one, so only what their keys are made of is kept (not the write), and
        counted at the fold with the other deferred writes (none: nothing is kept)."""
        if self.members:
            deferred = self.deferred
            deferred.add(entries)
            if deferred.entries >= self.MAX_DEFERRED:
                self.fold()

    @property
    def deferred_entries(self) -> int:
        """Console entries deferred since the last fold."""
        return self.deferred.entries

    def fold(self) -> None:
        """Give every member the number of tallied events its predicate matches; empty the
        tally."""
        pending = self.pending
        deferred = self.deferred
        if deferred.entries:
            taken = deferred.take()
            self.classified += sum(taken.values())
            pending.update(taken)
        if not pending:
            return
        buckets = list(pending.items())
        pending.clear()
        for member, test in self.members.items():
            n = 0
            for key, count in buckets:
                if test(key):
                    n += count
            if n:
                self.on_count(member, n)

    def respec(self, deferred: Any, tests: dict[Any, Callable[[Key], bool]]) -> None:
        """A new key spec (after a fold: the tallied keys were made under the old one):
        console writes are deferred into C{deferred} from now on, and each member's key
        predicate is its own in C{tests}."""
        self.deferred = deferred
        members = self.members
        for member, test in members.items():
            members[member] = tests.get(member, test)

    def join(self, member: Any, test: Callable[[Key], bool]) -> None:
        self.fold()
        self.members[member] = test

    def leave(self, member: Any) -> None:
        if member in self.members:
            self.fold()
            del self.members[member]

    def __contains__(self, member: Any) -> bool:
        return member in self.members

    def __len__(self) -> int:
        return len(self.members)

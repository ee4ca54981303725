"""
CI test boundaries (C{POST /test-boundary}, C{configure test_boundary_start/_end}).

While a test is active, console entries ingested are tagged with the set of active test ids, so
C{GET /snapshot?test_id=} and agents can pick out what one test produced.

Bounded and by reference, so that no client can grow the daemon's memory: a test id is at most
L{MAX_TEST_ID_LENGTH} characters, at
most L{MAX_ACTIVE_TESTS} tests are active (starting one more forgets the oldest), and an entry
carries only C{test_set}, a small integer naming the set of tests active when it arrived; the
sets themselves live here, once each (the newest L{MAX_SETS}; an entry whose set was forgotten is
no longer attributed to a test). C{/snapshot} expands C{test_set} back into C{test_ids}.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict

import attrs

MAX_ACTIVE_TESTS = 100
MAX_TEST_ID_LENGTH = 256
#: Distinct sets of active tests remembered for tagged entries.
MAX_SETS = 1024


def check_test_id(test_id: object) -> str | None:
    """Why C{test_id} is refused, or C{None} when it is a usable test id."""
    if not isinstance(test_id, str) or not test_id:
        return "field 'test_id' must be a non-empty string"
    if len(test_id) > MAX_TEST_ID_LENGTH:
        return f"field 'test_id' is longer than {MAX_TEST_ID_LENGTH} characters"
    return None


@attrs.define
class TestBoundaries:
    __test__ = False  # not a pytest test class, despite the name

    max_active: int = MAX_ACTIVE_TESTS
    max_sets: int = MAX_SETS
    #: test id -> clock seconds it started
    active: dict[str, float] = attrs.field(factory=dict)
    #: set number -> the test ids active in it (the newest C{max_sets})
    sets: OrderedDict[int, tuple[str, ...]] = attrs.field(factory=OrderedDict)
    _current: int | None = None
    #: Set numbers start at a random point per process: entries journaled before a restart keep
    #: their old numbers, which must not name the new process's sets.
    _next: int = attrs.field(factory=lambda: 1 + secrets.randbelow(2**40) * 2**12)

    def start(self, test_id: str, now: float) -> None:
        """@raise ValueError: C{test_id} is empty or too long (see L{check_test_id})."""
        problem = check_test_id(test_id)
        if problem is not None:
            raise ValueError(problem)
        if test_id not in self.active and len(self.active) >= self.max_active:
            del self.active[min(self.active, key=self.active.__getitem__)]
        if test_id not in self.active:
            self._current = None
        self.active[test_id] = now

    def end(self, test_id: str) -> None:
        if self.active.pop(test_id, None) is not None:
            self._current = None

    def ids(self) -> list[str]:
        """The active test ids (empty when no test runs)."""
        return list(self.active)

    def current_set(self) -> int | None:
        """The number to tag new entries with (C{None} when no test runs)."""
        if not self.active:
            return None
        if self._current is None:
            self._current = self._next
            self._next += 1
            self.sets[self._current] = tuple(self.active)
            while len(self.sets) > self.max_sets:
                self.sets.popitem(last=False)
        return self._current

    def ids_of(self, test_set: object) -> tuple[str, ...]:
        """The test ids of set C{test_set} (an entry's C{test_set}), empty if unknown."""
        if isinstance(test_set, int) and not isinstance(test_set, bool):
            return self.sets.get(test_set, ())
        return ()

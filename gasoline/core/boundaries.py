"""
CI test boundaries (``POST /test-boundary``, ``configure test_boundary_start/_end``).

While a test is active, console entries ingested are tagged with the active test ids
(``test_ids``), so ``GET /snapshot?test_id=`` and agents can pick out what one test produced. The
table is bounded: starting one test too many forgets the oldest.
"""

from __future__ import annotations

import attrs

MAX_ACTIVE_TESTS = 100


@attrs.define
class TestBoundaries:
    __test__ = False  # not a pytest test class, despite the name

    max_active: int = MAX_ACTIVE_TESTS
    #: test id -> clock seconds it started
    active: dict[str, float] = attrs.field(factory=dict)

    def start(self, test_id: str, now: float) -> None:
        if test_id not in self.active and len(self.active) >= self.max_active:
            del self.active[min(self.active, key=self.active.__getitem__)]
        self.active[test_id] = now

    def end(self, test_id: str) -> None:
        self.active.pop(test_id, None)

    def ids(self) -> list[str]:
        """The ids to tag new entries with (empty when no test runs)."""
        return list(self.active)

"""RingBuffer: invariants checked against a simple model (the list of every write ever made)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gasoline.core.storage.ring import RingBuffer


def model_tail(writes: list[bytes], cleared_at: int, capacity: int, max_bytes: int) -> int:
    """Oldest retained sequence number: the longest suffix of the writes since the last clear
    that fits both budgets, but never less than the newest write (an oversized item stays alone)."""
    head = len(writes)
    tail = head
    total = 0
    while tail > cleared_at:
        size = len(writes[tail - 1])
        if head - (tail - 1) > capacity:
            break
        if max_bytes and total + size > max_bytes and tail != head:
            break
        total += size
        tail -= 1
    return tail


class RingMachine(RuleBasedStateMachine):
    ring: RingBuffer[bytes]

    @initialize(capacity=st.integers(1, 8), max_bytes=st.sampled_from([0, 1, 6, 13, 40]))
    def setup(self, capacity: int, max_bytes: int) -> None:
        self.ring = RingBuffer(capacity, max_bytes)
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.writes: list[bytes] = []
        self.cleared_at = 0
        self.last_seq = -1

    @property
    def tail(self) -> int:
        return model_tail(self.writes, self.cleared_at, self.capacity, self.max_bytes)

    @rule(item=st.binary(max_size=16))
    def append(self, item: bytes) -> None:
        seq = self.ring.append(item)
        assert seq == len(self.writes)
        assert seq > self.last_seq  # strictly increasing
        self.last_seq = seq
        self.writes.append(item)

    @rule(items=st.lists(st.binary(max_size=8), max_size=6))
    def extend(self, items: list[bytes]) -> None:
        first, head = self.ring.extend(items)
        assert first == len(self.writes)
        self.writes.extend(items)
        assert head == len(self.writes)
        if items:
            assert first > self.last_seq
            self.last_seq = head - 1

    @rule()
    def clear(self) -> None:
        head = self.ring.head
        retained = len(self.writes) - self.tail
        assert self.ring.clear() == retained
        assert self.ring.head == head  # clear keeps counting
        self.cleared_at = len(self.writes)

    @rule(cursor=st.integers(-3, 80), limit=st.none() | st.integers(0, 10))
    def read_from_any_cursor(self, cursor: int, limit: int | None) -> None:
        head, tail = len(self.writes), self.tail
        res = self.ring.read(cursor, limit)
        c = max(cursor, 0)
        start = min(max(c, tail), head)
        stop = head if limit is None else min(head, start + limit)
        assert res.first_seq == start
        assert res.items == self.writes[start:stop]
        assert res.next_cursor == stop
        assert res.has_more == (stop < head)
        # Evicted (or cleared) entries at or after the cursor, which the reader never saw.
        assert res.missed == len([s for s in range(c, head) if s < tail])

    @rule(cursor=st.integers(0, 80), limit=st.integers(1, 4))
    def continuation_reads_every_retained_entry_once(self, cursor: int, limit: int) -> None:
        seen: list[bytes] = []
        c = cursor
        for _ in range(100):
            res = self.ring.read(c, limit)
            seen.extend(res.items)
            assert res.next_cursor == res.first_seq + len(res.items)
            c = res.next_cursor
            if not res.has_more:
                break
        head, tail = len(self.writes), self.tail
        assert seen == self.writes[min(max(cursor, tail), head):]
        assert c == head

    @precondition(lambda self: self.writes)
    @rule(data=st.data())
    def get_by_sequence_number(self, data: st.DataObject) -> None:
        seq = data.draw(st.integers(-1, len(self.writes)))
        expected = self.writes[seq] if self.tail <= seq < len(self.writes) else None
        assert self.ring.get(seq) == expected

    @rule(n=st.integers(0, 10))
    def read_last(self, n: int) -> None:
        retained = self.writes[self.tail :]
        res = self.ring.read_last(n)
        assert res.items == (retained[-n:] if n else [])
        assert res.next_cursor == len(self.writes)

    @invariant()
    def matches_the_model(self) -> None:
        tail = self.tail
        assert self.ring.head == len(self.writes)
        assert self.ring.tail == tail
        assert list(self.ring) == self.writes[tail:]
        assert len(self.ring) == len(self.writes) - tail

    @invariant()
    def within_budgets(self) -> None:
        assert len(self.ring) <= self.capacity
        assert self.ring.bytes_used == sum(len(w) for w in self.writes[self.tail :])
        if self.max_bytes and self.ring.bytes_used > self.max_bytes:
            # Only a single item larger than the whole budget may exceed it, and only alone.
            assert len(self.ring) == 1
            assert len(self.writes[-1]) > self.max_bytes

    @invariant()
    def stats_agree(self) -> None:
        stats = self.ring.stats()
        assert stats["used"] == len(self.ring)
        assert stats["head"] == self.ring.head
        assert stats["capacity"] == self.capacity
        assert stats["bytes"] == self.ring.bytes_used


TestRingMachine = RingMachine.TestCase
TestRingMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


@given(
    capacity=st.integers(1, 20),
    items=st.lists(st.binary(max_size=5), max_size=60),
)
def test_sequence_numbers_strictly_increase_and_len_is_bounded(capacity, items):
    ring: RingBuffer[bytes] = RingBuffer(capacity)
    seqs = [ring.append(i) for i in items]
    assert seqs == list(range(len(items)))
    assert len(ring) == min(capacity, len(items))
    assert list(ring) == items[len(items) - len(ring) :]


def test_cursor_before_oldest_reports_missed_entries():
    ring: RingBuffer[bytes] = RingBuffer(3)
    for i in range(10):
        ring.append(b"%d" % i)
    res = ring.read(2)
    assert res.missed == 5
    assert res.items == [b"7", b"8", b"9"]
    assert res.first_seq == 7 and res.next_cursor == 10


def test_clear_keeps_head_and_old_cursors_report_what_was_cleared():
    ring: RingBuffer[bytes] = RingBuffer(10)
    ring.extend([b"a", b"b", b"c"])
    assert ring.clear() == 3
    assert ring.head == 3 and len(ring) == 0 and ring.bytes_used == 0
    assert ring.append(b"d") == 3
    res = ring.read(1)
    assert res.items == [b"d"] and res.missed == 2


def test_cursor_beyond_head_reads_nothing_and_resumes_at_head():
    ring: RingBuffer[bytes] = RingBuffer(4)
    ring.extend([b"a", b"b"])
    res = ring.read(50)
    assert res.items == [] and res.next_cursor == 2 and res.missed == 0
    ring.append(b"c")
    assert ring.read(res.next_cursor).items == [b"c"]


def test_oversized_item_is_kept_alone():
    ring: RingBuffer[bytes] = RingBuffer(10, max_bytes=10)
    ring.extend([b"abc", b"def"])
    ring.append(b"x" * 25)
    assert list(ring) == [b"x" * 25]
    assert ring.bytes_used == 25
    ring.append(b"y")
    assert list(ring) == [b"y"]


def test_custom_sizeof_is_used_for_the_byte_budget():
    ring: RingBuffer[str] = RingBuffer(10, max_bytes=10, sizeof=lambda s: 4)
    ring.extend(["a", "b", "c"])
    assert list(ring) == ["b", "c"]
    assert ring.bytes_used == 8


@pytest.mark.parametrize("capacity,max_bytes", [(0, 0), (-1, 0), (1, -1)])
def test_invalid_sizes_are_rejected(capacity, max_bytes):
    with pytest.raises(ValueError):
        RingBuffer(capacity, max_bytes)


def test_start_at_numbers_the_next_write_and_needs_an_empty_buffer():
    ring = RingBuffer(capacity=4)
    ring.start_at(1000)
    assert ring.append("a") == 1000 and (ring.tail, ring.head) == (1000, 1001)
    assert ring.read(999).items == ["a"] and ring.get(1000) == "a"
    with pytest.raises(ValueError):
        ring.start_at(5)


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.integers(1, 12),
    max_bytes=st.sampled_from([0, 1, 5, 9, 30, 100]),
    batches=st.lists(st.lists(st.binary(max_size=10), max_size=30), max_size=8),
)
def test_extend_leaves_the_ring_exactly_as_appending_one_by_one(capacity, max_bytes, batches):
    """The batched L{RingBuffer.extend} (the ingest path) against L{RingBuffer.append} in turn:
    same head, tail, bytes, contents, and no reference kept to an evicted item."""
    fast: RingBuffer[bytes] = RingBuffer(capacity, max_bytes)
    slow: RingBuffer[bytes] = RingBuffer(capacity, max_bytes)
    for batch in batches:
        first = slow.head
        for item in batch:
            slow.append(item)
        assert fast.extend(batch) == (first, slow.head)
        assert (fast.head, fast.tail, fast.bytes_used) == (slow.head, slow.tail, slow.bytes_used)
        assert list(fast) == list(slow)
        assert fast._slots == slow._slots and list(fast._sizes) == list(slow._sizes)

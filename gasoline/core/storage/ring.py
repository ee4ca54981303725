"""
A fixed-capacity ring buffer with sequence numbers and reader cursors.

Every write gets the next sequence number (C{head} is the sequence number the *next* write will
get, so C{head} also counts every write ever made). A reader holds a cursor, the first sequence
number it has not seen, and reads C{[cursor, head)}. Entries leave from the oldest end when either
the entry capacity or the byte capacity is exceeded; a cursor that points before the oldest retained
entry is answered with what is left plus the count of entries it missed, never with an error.

Memory is fixed: slots are a preallocated list indexed by C{seq % capacity}. Items are opaque to
the buffer; their size is C{len(item)} unless a C{sizeof} is given (the telemetry store keeps
compact JSON C{bytes}, so C{len} is the honest size).
"""

from __future__ import annotations

from array import array
from typing import Any, Callable, Generic, Iterator, TypeVar

import attrs

T = TypeVar("T")


@attrs.frozen
class ReadResult(Generic[T]):
    """What a read returns: the items, the cursor to read from next time, and what was missed."""

    items: list[T]
    #: Sequence number of C{items[0]} (meaningful when C{items} is not empty).
    first_seq: int
    #: The cursor a reader should keep to continue after this read.
    next_cursor: int
    #: Entries between the reader's cursor and the oldest retained entry that were evicted.
    missed: int
    #: True when C{limit} cut the read short and more entries are already waiting.
    has_more: bool


class RingBuffer(Generic[T]):
    """
    Fixed capacity in entries and bytes; monotonically increasing sequence numbers.

    @ivar head: the sequence number the next write gets (= number of writes ever made).
    @ivar tail: the sequence number of the oldest retained entry (C{== head} when empty).
    @ivar bytes_used: sum of the sizes of the retained entries.
    """

    __slots__ = ("capacity", "max_bytes", "head", "tail", "bytes_used", "_slots", "_sizes", "_sizeof")

    def __init__(
        self, capacity: int, max_bytes: int = 0, sizeof: Callable[[Any], int] = len
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0 (0 means unbounded)")
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.head = 0
        self.tail = 0
        self.bytes_used = 0
        self._slots: list[T | None] = [None] * capacity
        # Sizes are remembered so eviction need not call sizeof again (a flat array: 8 bytes per
        # slot instead of a pointer plus an int object).
        self._sizes = array("q", bytes(8 * capacity))
        self._sizeof = sizeof

    def __len__(self) -> int:
        return self.head - self.tail

    def start_at(self, seq: int) -> None:
        """Number the next write C{seq} (an empty buffer only: a restart continuing the sequence
        numbers of the daemon before it, so readers' saved cursors keep their meaning)."""
        if self.head != self.tail:
            raise ValueError("start_at needs an empty buffer")
        self.head = self.tail = max(0, int(seq))

    def append(self, item: T) -> int:
        """Store C{item}; return its sequence number. Never blocks, never fails on size.

        An item larger than the whole byte budget is still stored (alone): dropping it silently
        would be worse than briefly exceeding the budget by one entry.
        """
        size = self._sizeof(item)
        if self.head - self.tail == self.capacity:
            self._evict_one()
        if self.max_bytes:
            while self.bytes_used + size > self.max_bytes and self.tail < self.head:
                self._evict_one()
        seq = self.head
        i = seq % self.capacity
        self._slots[i] = item
        self._sizes[i] = size
        self.bytes_used += size
        self.head = seq + 1
        return seq

    def extend(self, items: list[T]) -> tuple[int, int]:
        """Append each item; return C{(first_seq, head)} (C{first_seq == head} for no items).

        The same result as L{append} for each item in turn (the longest suffix of everything
        written that fits both budgets stays), in a few slice operations instead of a Python
        call per item: this is the ingest path, one call per request.
        """
        first = self.head
        n = len(items)
        if n == 0:
            return first, first
        cap = self.capacity
        sizes = list(map(self._sizeof, items))
        keep = n if n <= cap else cap  # only the newest C{cap} items can stay
        skip = n - keep
        new_bytes = sum(sizes[skip:]) if skip else sum(sizes)
        if self.max_bytes and new_bytes > self.max_bytes:
            # The batch alone is over the byte budget (rare): the item-by-item rules decide.
            for item in items:
                self.append(item)
            return first, self.head
        if skip:
            items, sizes = items[skip:], sizes[skip:]
        # Evict the oldest entries that cannot stay: by count, then by bytes.
        excess = (self.head - self.tail) - (cap - keep)
        if excess > 0:
            self._evict(excess)
        if self.max_bytes:
            while self.bytes_used + new_bytes > self.max_bytes and self.tail < self.head:
                self._evict_one()
        if skip:
            # Every older entry is gone (C{keep == cap}); the first C{skip} items never stay.
            self.head = self.tail = first + skip
        start = self.head % cap
        end = start + keep
        if end <= cap:
            self._slots[start:end] = items
            self._sizes[start:end] = array("q", sizes)
        else:
            split = cap - start
            self._slots[start:] = items[:split]
            self._slots[: end - cap] = items[split:]
            self._sizes[start:] = array("q", sizes[:split])
            self._sizes[: end - cap] = array("q", sizes[split:])
        self.bytes_used += new_bytes
        self.head += keep
        return first, self.head

    def _evict_one(self) -> None:
        i = self.tail % self.capacity
        self.bytes_used -= self._sizes[i]
        self._slots[i] = None
        self._sizes[i] = 0
        self.tail += 1

    def _evict(self, k: int) -> None:
        """Evict the C{k} oldest entries (C{k <= len(self)}) in slice operations."""
        cap = self.capacity
        a = self.tail % cap
        b = a + k
        parts = [(a, b)] if b <= cap else [(a, cap), (0, b - cap)]
        for lo, hi in parts:
            self.bytes_used -= sum(self._sizes[lo:hi])
            self._slots[lo:hi] = [None] * (hi - lo)
            self._sizes[lo:hi] = array("q", bytes(8 * (hi - lo)))
        self.tail += k

    def read(self, cursor: int = 0, limit: int | None = None) -> ReadResult[T]:
        """Read entries with sequence numbers in C{[max(cursor, tail), head)}, oldest first.

        A cursor beyond C{head} (say, from before a restart or a clear) is treated as C{head}.
        """
        if cursor < 0:
            cursor = 0
        missed = max(0, self.tail - cursor)
        start = min(max(cursor, self.tail), self.head)
        stop = self.head
        has_more = False
        if limit is not None and stop - start > limit:
            stop = start + max(0, limit)
            has_more = True
        return ReadResult(
            items=self._slice(start, stop),
            first_seq=start,
            next_cursor=stop,
            missed=missed,
            has_more=has_more,
        )

    def read_last(self, n: int) -> ReadResult[T]:
        """The newest C{n} entries (no cursor involved)."""
        start = max(self.tail, self.head - max(0, n))
        return ReadResult(self._slice(start, self.head), start, self.head, 0, False)

    def _slice(self, start: int, stop: int) -> list[T]:
        if start >= stop:
            return []
        cap = self.capacity
        a, b = start % cap, stop % cap
        if a < b:
            return self._slots[a:b]  # type: ignore[return-value]
        return self._slots[a:] + self._slots[:b]  # type: ignore[return-value]

    def get(self, seq: int) -> T | None:
        """The entry with sequence number C{seq}, or C{None} if evicted or not yet written."""
        if self.tail <= seq < self.head:
            return self._slots[seq % self.capacity]
        return None

    def __iter__(self) -> Iterator[T]:
        return iter(self._slice(self.tail, self.head))

    def clear(self) -> int:
        """Drop every entry; sequence numbers keep counting. Return how many were dropped."""
        dropped = self.head - self.tail
        self._slots = [None] * self.capacity
        self._sizes = array("q", bytes(8 * self.capacity))
        self.tail = self.head
        self.bytes_used = 0
        return dropped

    def stats(self) -> dict[str, int]:
        """C{{capacity, used, head}} as C{/health} reports it, plus bytes."""
        return {
            "capacity": self.capacity,
            "used": self.head - self.tail,
            "head": self.head,
            "oldest": self.tail,
            "bytes": self.bytes_used,
            "max_bytes": self.max_bytes,
        }

"""
One subscribed agent's state: its bounded inbox and everything that waits on it.

L{Inbox} is the source of truth of context streaming (bounded, drop-oldest, monotonic sequence
numbers starting at 1). L{AgentStream} is one subscribed agent: its subscription and compiled
matcher, its inbox, its one-second rate window and the notices pending for it, and who is waiting
for its next item (C{observe events} long-polls, C{GET /events} listeners). It holds state only:
the hub (L{gasoline.streaming.hub}) keeps the table of agents, the dispatcher
(L{gasoline.streaming.dispatch}) fills the inboxes and L{gasoline.streaming.delivery} lets their
items out.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from gasoline.streaming.subscription import Matcher, Subscription
from gasoline.streaming.tally import Key

log = Logger()

#: Items an agent's inbox holds (the oldest leave first).
DEFAULT_INBOX = 100
#: Matched events over the rate limit an C{over_limit: "queue"} agent keeps for the next windows
#: (the oldest leave first, counted as throttled).
QUEUE_CAPACITY = 100

#: A C{GET /events} listener: called with each new inbox item.
Listener = Callable[[dict[str, Any]], None]
#: The window start of an agent that has had no event yet (one float for every agent).
_NEVER = float("-inf")


class Inbox:
    """Bounded, drop-oldest, with monotonic sequence numbers (starting at 1)."""

    __slots__ = ("capacity", "items", "last_seq", "acked", "dropped")

    def __init__(self, capacity: int = DEFAULT_INBOX) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        #: (seq, data) oldest first; C{data} already carries C{seq}. An empty tuple until the
        #: first item (an empty deque takes a 64-slot block, ~760 bytes, per subscribed agent).
        self.items: Sequence[tuple[int, dict[str, Any]]] = ()
        self.last_seq = 0
        #: Newest acknowledged sequence number.
        self.acked = 0
        #: Items dropped by overflow, in all.
        self.dropped = 0

    def append(self, data: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """Add C{data} (a copy with C{seq}); return it and how many old items left to make room."""
        self.last_seq += 1
        item = dict(data)
        item["seq"] = self.last_seq
        items = self.items
        if not isinstance(items, deque):
            items = self.items = deque()
        items.append((self.last_seq, item))
        dropped = 0
        while len(items) > self.capacity:
            items.popleft()
            dropped += 1
        self.dropped += dropped
        return item, dropped

    def after(self, seq: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """Up to C{limit} items newer than C{seq}, oldest first, and whether more remain."""
        out = [item for s, item in self.items if s > seq]
        return out[:limit], len(out) > limit

    def ack(self, seq: int) -> int:
        """Forget every item up to C{seq}; return how many left."""
        n = 0
        items = self.items
        while isinstance(items, deque) and items and items[0][0] <= seq:
            items.popleft()
            n += 1
        self.acked = max(self.acked, min(seq, self.last_seq))
        return n

    def unread(self) -> list[dict[str, Any]]:
        """The items not yet acknowledged, oldest first."""
        return [item for _, item in self.items]

    def __len__(self) -> int:
        return len(self.items)


class AgentStream:
    """One subscribed agent: its matcher, inbox, rate window, waiters and listeners."""

    # Slots: one per subscribed agent, kept small (docs/streaming.md, "Memory per subscription").
    __slots__ = ("client_id", "subscription", "matcher", "test", "_settle", "raw", "inbox",
                 "window_start", "window_count", "throttled", "overflowed", "_throttled_total",
                 "notice_call", "full_call", "full_notice", "waiters", "listeners", "enders",
                 "pushed", "resource_told", "queue", "queued_total", "drain_call")

    def __init__(self, client_id: str, subscription: Subscription, raw: Any,
                 inbox_size: int, settle: Callable[[], None] = lambda: None,
                 matcher: Matcher | None = None) -> None:
        """
        @param matcher: an equal subscription's matcher (another agent's), shared instead of
            compiling another: a matcher and its subscription are immutable (a pattern's
            remembered verdicts are the same for every agent). None: compile one.
        """
        self.client_id = client_id
        self.matcher = matcher = _matcher(subscription, matcher)
        self.subscription = matcher.subscription
        #: The matcher's verdict on bucket keys (L{gasoline.streaming.tally}), made by the hub's
        #: current L{KeySpec<gasoline.streaming.tally.KeySpec>} (None until the hub next reads
        #: its agent table).
        self.test: Callable[[Key], bool] | None = None
        #: Brings the throttled counts up to date (the dispatcher's tally fold).
        self._settle = settle
        #: The saved form the matcher was built from (a change rebuilds it).
        self.raw = raw
        self.inbox = Inbox(inbox_size)
        self.window_start = _NEVER
        self.window_count = 0
        #: Throttled / overflowed since the last notice.
        self.throttled = 0
        self.overflowed = 0
        self._throttled_total = 0
        #: The C{rate_limit_exceeded} notice, due at the end of the window; the C{buffer_full}
        #: notice, due on the next reactor turn.
        self.notice_call: IDelayedCall | None = None
        self.full_call: IDelayedCall | None = None
        #: The unread C{buffer_full} notice (its count grows while it is unread).
        self.full_notice: dict[str, Any] | None = None
        #: Long-polls waiting for the next item, and C{GET /events} listeners: an empty tuple
        #: until the first one (most subscribed agents have neither, and an empty list is 56
        #: bytes); a list from then on (L{add_waiter}, L{listen}).
        self.waiters: Sequence[Deferred[None]] = ()
        self.listeners: Sequence[Listener] = ()
        #: listener -> what ends its stream when the subscription ends (GET /events); None
        #: until a listener gives one.
        self.enders: dict[Any, Callable[[], None]] | None = None
        self.pushed = 0
        #: C{notifications/resources/updated} sent and not yet followed by a read.
        self.resource_told = False
        #: C{over_limit: "queue"}: matched events over the rate limit, C{(data, level)} oldest
        #: first, let out by the rate at the next windows (None: C{drop}).
        self.queue: deque[tuple[dict[str, Any], str]] | None = \
            deque() if subscription.queues else None
        #: Events that went through the queue (delivered late), and the call that lets the
        #: next window's share out.
        self.queued_total = 0
        self.drain_call: IDelayedCall | None = None

    @property
    def throttled_total(self) -> int:
        """Events throttled by the rate limit, in all (exact: tallied events are counted
        first)."""
        self._settle()
        return self._throttled_total

    def counted(self, n: int) -> None:
        """C{n} more of this agent's matched events were over its rate limit."""
        self.throttled += n
        self._throttled_total += n

    def take_throttled(self) -> int:
        """The events throttled since the last C{rate_limit_exceeded} notice (now told)."""
        n, self.throttled = self.throttled, 0
        return n

    def set_test(self, test: Callable[[Key], bool]) -> None:
        """The matcher's verdict on bucket keys under the hub's current key spec."""
        self.test = test

    def open_window(self, now: float) -> None:
        """A new one-second rate window starts at C{now}, empty."""
        self.window_start = now
        self.window_count = 0

    def took(self, n: int, queued: int = 0) -> None:
        """C{n} more matched events entered the inbox in this window (C{queued} of them from
        the over-limit queue)."""
        self.window_count += n
        self.queued_total += queued

    def overflow(self, n: int) -> None:
        """C{n} older items were pushed out of the full inbox (for the C{buffer_full}
        notice)."""
        self.overflowed += n

    def take_overflowed(self) -> int:
        """The items pushed out since the last C{buffer_full} notice (now told)."""
        n, self.overflowed = self.overflowed, 0
        return n

    def set_full_notice(self, item: dict[str, Any] | None) -> None:
        """The unread C{buffer_full} notice (C{None}: read, or pushed out itself)."""
        self.full_notice = item

    def arm_notice(self, call: IDelayedCall | None) -> None:
        """C{call} sends the C{rate_limit_exceeded} notice (C{None}: it ran)."""
        self.notice_call = call

    def arm_full_notice(self, call: IDelayedCall | None) -> None:
        """C{call} sends the C{buffer_full} notice (C{None}: it ran)."""
        self.full_call = call

    def arm_drain(self, call: IDelayedCall | None) -> None:
        """C{call} lets the next window's share of the over-limit queue out."""
        self.drain_call = call

    def take_drain(self) -> IDelayedCall | None:
        """The pending drain call, no longer the agent's."""
        call, self.drain_call = self.drain_call, None
        return call

    def pushed_one(self) -> None:
        """An item was pushed to the agent's MCP session."""
        self.pushed += 1

    def tell_resource(self, told: bool) -> None:
        """C{notifications/resources/updated} was sent (C{True}) or the resource was read
        since (C{False})."""
        self.resource_told = told

    def reconfigure(self, subscription: Subscription, raw: Any,
                    matcher: Matcher | None = None) -> None:
        """A new subscription (its matcher compiled now, or C{matcher}, an equal subscription's;
        its key predicate comes with the hub's next key spec). The inbox and its sequence
        numbers are kept."""
        self.matcher = matcher = _matcher(subscription, matcher)
        self.subscription = subscription = matcher.subscription
        self.test = None
        self.raw = raw
        if subscription.queues and self.queue is None:
            self.queue = deque()
        elif not subscription.queues and self.queue is not None:
            # Back to C{drop}: what waited is dropped and counted as throttled.
            self.counted(len(self.queue))
            self.queue = None

    @property
    def queued(self) -> int:
        """Events waiting in the over-limit queue now."""
        return len(self.queue) if self.queue is not None else 0

    def add_waiter(self, d: Deferred[None]) -> None:
        """C{d} waits for the next item (L{wake} fires it)."""
        waiters = self.waiters
        if not isinstance(waiters, list):
            waiters = self.waiters = []
        waiters.append(d)

    def wake(self) -> None:
        """Fire (with None) every long-poll waiting for an item."""
        if self.waiters:
            waiters, self.waiters = self.waiters, ()
            for d in waiters:
                if not d.called:
                    d.callback(None)

    def unwait(self, d: Deferred[None]) -> None:
        """C{d} no longer waits (it fired, timed out or was cancelled)."""
        _discard(self.waiters, d)

    def listen(self, listener: Listener, end: Callable[[], None] | None = None) -> None:
        """Call C{listener(item)} for each new item; C{end()} when the subscription ends."""
        listeners = self.listeners
        if not isinstance(listeners, list):
            listeners = self.listeners = []
        listeners.append(listener)
        if end is not None:
            if self.enders is None:
                self.enders = {}
            self.enders[listener] = end

    def unlisten(self, listener: Listener) -> None:
        """C{listener} hears no more (its stream is gone)."""
        _discard(self.listeners, listener)
        if self.enders is not None:
            self.enders.pop(listener, None)

    def end(self) -> None:
        """The subscription ended (unsubscribed, expired, daemon stopping): cancel the pending
        notices, release the long-polls and end every listener's stream."""
        for call in (self.notice_call, self.full_call, self.drain_call):
            if call is not None and call.active():
                call.cancel()
        self.notice_call = self.full_call = self.drain_call = None
        if self.queue is not None:
            self.queue.clear()
        self.wake()
        enders, self.enders = self.enders or {}, None
        self.listeners = ()
        for end in enders.values():
            try:
                end()
            except Exception:
                log.failure("ending an events stream failed")


def _matcher(subscription: Subscription, shared: Matcher | None) -> Matcher:
    """C{shared} when it is C{subscription}'s (an equal one's), else a new matcher."""
    if shared is not None and shared.subscription == subscription:
        return shared
    return Matcher(subscription)


def _discard(items: Sequence[Any], value: Any) -> None:
    if isinstance(items, list):
        try:
            items.remove(value)
        except ValueError:
            pass

"""
Matching writes into the agents' inboxes: the seed's filters by bucket key, each agent's
one-second rate limit, the shared tally of agents whose window is full, and the two notices.

L{Dispatcher.write} takes one buffer write (off the ingest path) and the active agents. The
write's entries become bucket keys once (L{gasoline.streaming.tally.KeySpec}); each agent visits
the events of its types in order through its key predicate (type -> severity -> url_pattern ->
exclude_pattern, L{gasoline.streaming.subscription.Matcher.key_test}), and its rate limit comes
last: what passes is redacted (once per event, shared by every agent,
L{gasoline.streaming.redaction}), appended to the agent's inbox and delivered
(L{gasoline.streaming.delivery}). When an agent's window is full, the rest of the write is counted
and the agent joins the L{Tally<gasoline.streaming.tally.Tally>}: until its window ends its events
are only counted, per bucket, once for all such agents.

Rate limiting and overflow are summarised, not reported per event: at the end of the one-second
window in which events were throttled, one C{rate_limit_exceeded} notice C{{throttled: n}} enters
the inbox; inbox overflow produces one C{buffer_full} notice, whose count grows (instead of a new
notice) while it is still unread.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Callable, Iterable

from twisted.internet.interfaces import IReactorTime

from gasoline.streaming.delivery import Delivery
from gasoline.streaming.events import CONSOLE, StreamEvent, classify, iso_time
from gasoline.streaming.inbox import QUEUE_CAPACITY, AgentStream
from gasoline.streaming.redaction import EventRedactor
from gasoline.streaming.subscription import Matcher
from gasoline.streaming.tally import Batch, Key, KeySpec, Tally


class Dispatcher:
    """Fills the active agents' inboxes from writes, within their rate limits. All methods run on
    the reactor thread."""

    def __init__(self, clock: IReactorTime, delivery: Delivery, redactor: EventRedactor,
                 on_latency: Callable[[float], None] | None = None) -> None:
        self.clock = clock
        self._delivery = delivery
        self._redactor = redactor
        #: Called with the seconds from a write (C{BufferWrite.at}) to its first notification
        #: being written, once per write that produced any (C{/metrics}'s histogram).
        self._on_latency = on_latency
        #: How events become bucket keys for the active agents' matchers (L{respec}).
        self.spec = KeySpec(())
        #: The agents whose window is full: their events are only counted, per bucket.
        self.tally = Tally(self._counted, self.spec.counts())
        #: The active agents when the spec was made.
        self._active: tuple[AgentStream, ...] = ()
        #: The active agents that are not members of the tally (their events are matched one by
        #: one); recomputed when an agent joins or leaves it, or the agent table changes.
        self._open: tuple[AgentStream, ...] = ()
        #: The earliest window start among the tally's members (when to look for one to release).
        self._counting_start = float("inf")
        #: Counters (configure streaming status, /metrics).
        self._classified = 0
        self.matched = 0
        #: Matched events that did not stay in an inbox, by reason (C{/metrics}): over an
        #: agent's rate limit (never entered), pushed out of a full inbox (drop-oldest).
        self._throttled = 0
        self.overflowed = 0

    @property
    def events_classified(self) -> int:
        """Events made from writes, in all (C{/metrics})."""
        return self._classified + self.tally.classified

    @property
    def throttled(self) -> int:
        """Matched events over an agent's rate limit, all agents together (exact: tallied
        events are counted first)."""
        self.tally.fold()
        return self._throttled

    def respec(self, active: tuple[AgentStream, ...]) -> None:
        """A new L{KeySpec} for the C{active} agents' matchers, and their key predicates. The
        tally is folded first: its keys were made under the old spec."""
        self._active = active
        self.tally.fold()
        self.spec = spec = KeySpec(agent.matcher for agent in active)
        tests = {agent: spec.predicate(agent.matcher) for agent in active}
        for agent, test in tests.items():
            agent.set_test(test)
        # Every member is active (a dropped agent leaves the tally).
        self.tally.respec(spec.counts(), tests)
        self._reopen()

    def leave(self, agent: AgentStream) -> None:
        """C{agent}'s filters change or it leaves: what the tally counted for it is its own."""
        self.tally.leave(agent)

    # -- writes ----------------------------------------------------------------------------------

    def write(self, write: Any, agents: tuple[AgentStream, ...]) -> None:
        """One buffer write of a source buffer some active agent wants."""
        now = self.clock.seconds()
        if self.tally.members and now - self._counting_start >= 1.0:
            self._release(now)
        if not self._open and write.buffer == CONSOLE:
            # Every agent's window is full: the write is only counted (at the next fold).
            self.tally.defer(write.entries)
            return
        batch = self.spec.batch(write.buffer, write.entries, write.at, classify)
        if batch.keys:
            self._classified += len(batch.keys)
            self._dispatch(batch, agents, write.at)

    def dispatch(self, events: list[StreamEvent], agents: Iterable[AgentStream],
                 at: float | None = None) -> None:
        """Match C{events} (one write's, in order) for every agent and fill the inboxes.

        @param at: clock time of the write (for the notification latency series)."""
        batch = self.spec.events(events)
        if batch.keys:
            self._dispatch(batch, tuple(agents), at)

    def _dispatch(self, batch: Batch, agents: tuple[AgentStream, ...],
                  at: float | None) -> None:
        """One write's events, as keys (the seed's order per agent, the rate limit last).

        An agent whose one-second window is full is a member of the tally: the write's keys
        are added to the tally once for all such agents, and nothing else is done for them.
        Every other agent visits the events of its types in order through its key predicate;
        what matches enters its inbox until its window is full, then the rest of the write is
        counted and the agent joins the tally. A member leaves the tally at the first write
        after its window ended."""
        now = self.clock.seconds()
        tally = self.tally
        if tally.members:
            if now - self._counting_start >= 1.0:
                self._release(now)
            tally.add(batch.keys)
            agents = self._open
            if not agents:
                return
        keys = batch.keys
        delivery = self._delivery
        # Shared by every agent: each event's redacted data, and its JSON (encoded once).
        redacted: dict[int, dict[str, Any]] = {}
        encoded: dict[int, bytes] = {}
        pushed = delivery.notifications
        # 1. type, once per write: each agent then visits only the events of its types.
        by_type: dict[str, list[int]] = {}
        for pos, key in enumerate(keys):
            bucket = by_type.get(key[0])
            if bucket is None:
                by_type[key[0]] = [pos]
            else:
                bucket.append(pos)
        everything = range(len(keys))
        # network_slow events also compare their duration with each agent's budget.
        budgets = "network_slow" in by_type
        full: list[AgentStream] = []
        for agent in agents:
            test = agent.test
            if test is None:  # added since the agent table was read: from the next write
                continue
            matcher = agent.matcher
            types = matcher.types
            if types is None:
                positions: Any = everything
            else:
                lists = [by_type[t] for t in types if t in by_type]
                if not lists:
                    continue
                positions = lists[0] if len(lists) == 1 else sorted(chain.from_iterable(lists))
            if agent.queue is not None:
                # over_limit "queue": every matched event is kept (never only counted).
                self._queue_agent(agent, batch, keys, positions, test, redacted, encoded, now)
                continue
            # 5. rate: a one-second window per agent (the clock does not move within a write)
            if now - agent.window_start >= 1.0:
                agent.open_window(now)
            limit = agent.subscription.rate_limit
            throttled = 0
            if agent.window_count >= limit:
                # The window is full: only count what would have matched (for the notice).
                throttled = _count(matcher, test, keys, positions, budgets)
            else:
                targets = None
                for n, pos in enumerate(positions):
                    # 2. severity, 3. url_pattern, 4. exclude_pattern (see Matcher.key_test)
                    if not test(keys[pos]):
                        continue
                    event = batch.event(pos)
                    if event is None:  # not an event after all (cannot happen: same classifier)
                        continue
                    agent.took(1)
                    data = redacted.get(pos)
                    if data is None:
                        data = redacted[pos] = self._redactor.redacted(event)
                    if targets is None:
                        targets = delivery.targets(agent.client_id)
                    self.matched += 1
                    self.add(agent, data, event.level, targets, encoded, pos)
                    if agent.window_count >= limit:
                        throttled = _count(matcher, test, keys, positions[n + 1:], budgets)
                        break
            if throttled:
                self._counted(agent, throttled)
                self._schedule_notice(agent, now)
            if agent.window_count >= limit:
                full.append(agent)
        for agent in full:
            self._count_from(agent, now)
        if delivery.notifications != pushed and self._on_latency is not None and at is not None:
            self._on_latency(max(0.0, self.clock.seconds() - at))

    # -- over_limit "queue" ----------------------------------------------------------------------

    def _queue_agent(self, agent: AgentStream, batch: Batch, keys: list[Key], positions: Any,
                     test: Callable[[Key], bool], redacted: dict[int, dict[str, Any]],
                     encoded: dict[int, bytes], now: float) -> None:
        """A queueing agent's share of one write: matched events enter its inbox while its
        window has room and nothing waits before them; the rest join its queue (bounded: the
        oldest leave first, counted as throttled, with the usual notice) and go out at the next
        windows, C{rate_limit} per window, in order (L{_drain})."""
        queue = agent.queue
        assert queue is not None
        if queue and now - agent.window_start >= 1.0:
            self._drain(agent)  # what waited goes before this write's events
        if now - agent.window_start >= 1.0:
            agent.open_window(now)
        limit = agent.subscription.rate_limit
        targets = None
        dropped = 0
        for pos in positions:
            if not test(keys[pos]):
                continue
            event = batch.event(pos)
            if event is None:
                continue
            data = redacted.get(pos)
            if data is None:
                data = redacted[pos] = self._redactor.redacted(event)
            self.matched += 1
            if not queue and agent.window_count < limit:
                agent.took(1)
                if targets is None:
                    targets = self._delivery.targets(agent.client_id)
                self.add(agent, data, event.level, targets, encoded, pos)
                continue
            queue.append((data, event.level))
            if len(queue) > QUEUE_CAPACITY:
                queue.popleft()
                dropped += 1
        if dropped:
            self._counted(agent, dropped)
            self._schedule_notice(agent, now)
        if queue and agent.drain_call is None:
            agent.arm_drain(self.clock.callLater(
                max(0.0, agent.window_start + 1.0 - now), self._drain, agent))

    def _drain(self, agent: AgentStream) -> None:
        """A new window for a queueing agent: up to C{rate_limit} queued events enter its
        inbox, oldest first; the rest wait for the window after."""
        call = agent.take_drain()
        if call is not None and call.active():
            call.cancel()
        queue = agent.queue
        if not queue:
            return
        agent.open_window(self.clock.seconds())
        limit = agent.subscription.rate_limit
        targets = self._delivery.targets(agent.client_id)
        while queue and agent.window_count < limit:
            data, level = queue.popleft()
            agent.took(1, queued=1)
            self.add(agent, data, level, targets)
        if queue:
            agent.arm_drain(self.clock.callLater(1.0, self._drain, agent))

    # -- the tally of agents whose window is full ------------------------------------------------

    def _counted(self, agent: AgentStream, n: int) -> None:
        """C{n} more of C{agent}'s matched events were over its rate limit."""
        agent.counted(n)
        self._throttled += n

    def _count_from(self, agent: AgentStream, now: float) -> None:
        """C{agent}'s window is full: from the next write its events are only tallied, and its
        C{rate_limit_exceeded} notice comes at the end of the window."""
        assert agent.test is not None  # set with the agent's matcher (respec)
        self.tally.join(agent, agent.test)
        self._counting_start = min(self._counting_start, agent.window_start)
        self._reopen()
        self._schedule_notice(agent, now)

    def _reopen(self) -> None:
        members = self.tally.members
        self._open = tuple(agent for agent in self._active if agent not in members)

    def _release(self, now: float) -> None:
        """The tally's members whose window ended leave it (after a fold: what they counted is
        theirs); the next write with their types starts a new window."""
        members = self.tally.members
        ended = [agent for agent in members if now - agent.window_start >= 1.0]
        self.tally.fold()
        for agent in ended:
            self.tally.leave(agent)
            if agent.throttled:
                self._schedule_notice(agent, now)
        self._counting_start = min((agent.window_start for agent in members),
                                   default=float("inf"))
        self._reopen()

    # -- the inbox and its notices ---------------------------------------------------------------

    def add(self, agent: AgentStream, data: dict[str, Any], level: str,
            targets: tuple[Any, Any] | None = None, encoded: dict[int, bytes] | None = None,
            key: int = -1) -> None:
        """Append C{data} to the inbox and deliver it. C{targets}: the agent's
        L{Delivery.targets}, if known; C{encoded}/C{key}: where C{data}'s shared JSON is (or
        goes) for the push."""
        item, dropped = agent.inbox.append(data)
        if dropped:
            agent.overflow(dropped)
            self.overflowed += dropped
            notice = agent.full_notice
            if notice is not None and notice["seq"] < agent.inbox.items[0][0]:
                agent.set_full_notice(None)  # it was itself pushed out
            if agent.full_call is None:
                agent.arm_full_notice(self.clock.callLater(0, self._full_notice, agent))
        self._delivery.deliver(agent, item, level, targets, encoded, key, data)

    def _schedule_notice(self, agent: AgentStream, now: float) -> None:
        """The C{rate_limit_exceeded} notice, at the end of C{agent}'s window (at once if it
        already ended)."""
        if agent.notice_call is None:
            agent.arm_notice(self.clock.callLater(
                max(0.0, agent.window_start + 1.0 - now), self._notice, agent))

    def _notice(self, agent: AgentStream) -> None:
        """One C{rate_limit_exceeded} notice for what the window throttled. (A member of the
        tally whose window ended is released by the next write, which schedules another notice
        if anything was counted after this one.)"""
        agent.arm_notice(None)
        counting = agent in self.tally
        if counting:
            self.tally.fold()
        now = self.clock.seconds()
        if agent.throttled:
            n = agent.take_throttled()
            self.add(agent, {
                "event_type": "rate_limit_exceeded", "timestamp": iso_time(now),
                "message": f"{n} event{'s' if n != 1 else ''} over the rate limit of "
                           f"{agent.subscription.rate_limit}/s were not streamed",
                "severity": "medium", "throttled": n,
            }, "warning")
        # A notice of an earlier window can fire after the agent rejoined the tally in a new one
        # (its timer was still pending then): the member's own window end gets its notice.
        due = agent.window_start + 1.0
        if counting and agent.notice_call is None and due > now:
            agent.arm_notice(self.clock.callLater(due - now, self._notice, agent))

    def _full_notice(self, agent: AgentStream) -> None:
        """The C{buffer_full} notice: a new one, or the unread one's count grows."""
        agent.arm_full_notice(None)
        if not agent.overflowed:
            return
        n = agent.take_overflowed()
        notice = agent.full_notice
        if notice is not None:
            notice["throttled"] += n
            notice["message"] = _full_message(notice["throttled"], agent.inbox.capacity)
            return
        item, _ = agent.inbox.append({
            "event_type": "buffer_full", "timestamp": iso_time(self.clock.seconds()),
            "message": _full_message(n, agent.inbox.capacity),
            "severity": "medium", "throttled": n,
        })
        agent.set_full_notice(item)
        self._delivery.deliver(agent, item, "warning")


def _full_message(n: int, capacity: int) -> str:
    return (f"the event inbox ({capacity}) was full: {n} older event{'s' if n != 1 else ''} "
            "dropped; read with observe {what:\"events\"} to acknowledge")


def _count(matcher: Matcher, test: Callable[[Key], bool], keys: list[Key], positions: Any,
           budgets: bool) -> int:
    """How many of C{keys[p] for p in positions} (already of the matcher's types) match."""
    if matcher.simple and not budgets:
        return len(positions)
    return sum(map(test, map(keys.__getitem__, positions)))

"""
The streaming hub: L{Streaming}, the component the tools and routes use, and its table of
subscribed agents.

Flow, for every buffer write (a L{gasoline.core.storage.store.BufferWrite} the store publishes to the
L{gasoline.core.storage.notify.Notifier}): the notifier asks L{Streaming.wants} on the ingest path (a few
attribute reads) and calls L{Streaming.on_write} on a later reactor turn (C{callLater(0)},
batched), never inside the ingest request, so ingest never waits for matching. The hub re-reads
its agent table (L{Streaming.active}) and hands the write to its
L{Dispatcher<gasoline.streaming.dispatch.Dispatcher>}, which matches it against each agent's
subscription within its rate limit and fills the agents' inboxes
(L{gasoline.streaming.inbox}); L{Delivery<gasoline.streaming.delivery.Delivery>} lets each new
item out to the agent's own MCP stream, C{gasoline://events} subscribers, long-polls and
C{GET /events} listeners.

The inbox is the source of truth; what the hub answers from it:

 - L{Streaming.read} (C{observe {what:"events"}}): returns and acknowledges; L{Streaming.wait}
   long-polls;
 - L{Streaming.unread_note}: the short note other tool results carry;
 - L{Streaming.resource}: what C{gasoline://events} shows; L{Streaming.status}: the
   subscription and its figures;
 - L{Streaming.listen}: C{GET /events?client=<id>} listeners, opened with the proof only the
   subscribing agent learns (L{Streaming.events_token}).

Each agent's subscription is part of its client state (C{state.subscriptions["streaming"]}), so
the registry persists it and restores it when the client comes back within the TTL; the hub
rebuilds its matcher from that state whenever the state's saved form changes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from gasoline.core.lifecycle import StopHook
from gasoline.streaming.delivery import Delivery
from gasoline.streaming.dispatch import Dispatcher
from gasoline.streaming.domwatch import DomWatches
from gasoline.streaming.events import SOURCE_BUFFERS, audit_events, buffers_for
from gasoline.streaming.inbox import DEFAULT_INBOX, AgentStream, Listener
from gasoline.streaming.redaction import UNTRUSTED, EventRedactor
from gasoline.streaming.subscription import Matcher, Subscription

if TYPE_CHECKING:
    from gasoline.core.interfaces import IClientRegistry, IClientState
    from gasoline.core.storage.notify import Notifier

#: The key of the streaming subscription in C{ClientState.subscriptions}.
STATE_KEY = "streaming"
#: Longest C{observe events} long-poll (the client's request timeout is usually 60 s).
MAX_WAIT_MS = 50_000
#: Progress notifications during a long-poll come this often (seconds).
PROGRESS_EVERY = 5.0
#: How often the agent table is re-read from the registry (restored subscriptions appear).
REFRESH_SECONDS = 1.0
#: The note appended to other tool results is at most this long.
MAX_NOTE = 240


class DomWatchLink(Protocol):
    """What streaming needs of the extension link for C{dom_change} events
    (L{gasoline.core.extension.link.ExtensionLink} is one)."""

    def set_dom_watches(self, watches: list[dict[str, Any]]) -> None: ...

    def on_dom_changes(self, hook: Callable[[dict[str, Any]], int]) -> Callable[[], None]: ...


class Streaming:
    """Every agent's streaming state. All methods run on the reactor thread."""

    def __init__(self, clock: IReactorTime, notifier: Notifier, registry: IClientRegistry,
                 sessions: Mapping[str, Any],
                 redact_text: Callable[[str], str] | None = None,
                 inbox_size: int = DEFAULT_INBOX,
                 on_latency: Callable[[float], None] | None = None,
                 extension: DomWatchLink | None = None) -> None:
        """
        @param sessions: the MCP server's session table (session id ->
            L{gasoline.mcp.session.McpSession}): the agents' streams.
        @param redact_text: redacts one text of an event (the daemon's
            L{Redactor.redact_value<gasoline.core.redaction.redactor.Redactor>}, on decoded values).
        @param on_latency: called with the seconds from a write (C{BufferWrite.at}) to its
            first notification being written, once per write that produced any (C{/metrics}'s
            histogram).
        @param extension: the extension link (L{gasoline.core.extension.link.ExtensionLink}): it
            carries the agents' DOM watches to the extension and hands back what it reports
            (C{dom_change}); None: no DOM watches.
        """
        self.clock = clock
        self.registry = registry
        self.inbox_size = inbox_size
        #: Lets inbox items out to the agents' sessions.
        self.delivery = Delivery(sessions)
        #: Fills the inboxes from writes, within the agents' rate limits.
        self.dispatcher = Dispatcher(clock, self.delivery, EventRedactor(redact_text), on_latency)
        #: What brings an agent's throttled count up to date: one bound method for all agents.
        self._fold = self.dispatcher.tally.fold
        #: Keys the C{GET /events} proofs (L{events_token}); new each run of the daemon.
        self.events_secret = os.urandom(32)
        self.agents: dict[str, AgentStream] = {}
        self._active: tuple[AgentStream, ...] = ()
        #: The buffers whose writes can carry a type some active agent subscribed to, and those
        #: types (None: someone subscribed to C{all}); recomputed with L{_active}.
        self._wanted_buffers: frozenset[str] = frozenset()
        self._wanted_types: frozenset[str] | None = frozenset()
        self._refreshed = float("-inf")
        self._stale = True
        #: The agents' DOM watches (C{dom_change}), published to the extension link.
        self.watches = DomWatches(extension.set_dom_watches if extension is not None else None)
        if extension is not None:
            extension.on_dom_changes(self.publish_dom)
        #: Set when an agent was added, removed or reconfigured: L{active} has the dispatcher
        #: make a new key spec.
        self._spec_stale = True
        #: Writes of a wanted buffer seen while agents were subscribed (configure status).
        self.writes_seen = 0
        self._unsubscribe = notifier.subscribe(self.on_write, wants=self.wants)

    # -- counters (C{/metrics}) ------------------------------------------------------------------

    @property
    def events_classified(self) -> int:
        """Events made from writes, in all."""
        return self.dispatcher.events_classified

    @property
    def matched(self) -> int:
        """Events that matched an agent's filters and entered its inbox (once per agent)."""
        return self.dispatcher.matched

    @property
    def throttled(self) -> int:
        """Matched events over an agent's rate limit, all agents together (exact: tallied
        events are counted first)."""
        return self.dispatcher.throttled

    @property
    def overflowed(self) -> int:
        """Matched events pushed out of a full inbox (drop-oldest), all agents together."""
        return self.dispatcher.overflowed

    @property
    def notifications(self) -> int:
        """C{notifications/message} written to agents' streams."""
        return self.delivery.notifications

    # -- subscriptions -------------------------------------------------------------------------

    def configure(self, state: IClientState, subscription: Subscription | None) -> AgentStream | None:
        """Set (or, with None, remove) C{state}'s subscription; saved in its client state."""
        if subscription is None:
            state.drop_subscription(STATE_KEY)
            agent = self.agents.pop(state.client_id, None)
            if agent is not None:
                self._drop(agent)
            self._stale = self._spec_stale = True
            self.active()
            return None
        raw = subscription.to_json()
        state.set_subscription(STATE_KEY, raw)
        agent = self.agents.get(state.client_id)
        if agent is None:
            agent = self.agents[state.client_id] = self._new_agent(state.client_id, subscription,
                                                                   raw)
        else:
            self.dispatcher.leave(agent)  # counted with the old filters up to here
            agent.reconfigure(subscription, raw, self._matcher(subscription))
        self._stale = self._spec_stale = True
        self.active()  # the extension learns a new DOM watch now, not at the next write
        return agent

    def _new_agent(self, client_id: str, subscription: Subscription, raw: Any) -> AgentStream:
        return AgentStream(client_id, subscription, raw, self.inbox_size, self._fold,
                           self._matcher(subscription))

    def _matcher(self, subscription: Subscription) -> Matcher | None:
        """The matcher of a subscribed agent whose subscription equals C{subscription}, if any:
        agents that subscribe alike share one subscription and one matcher (both immutable)
        instead of a copy each (docs/streaming.md, "Memory per subscription"). A scan of the
        agent table, on subscribing only."""
        for other in self.agents.values():
            if other.subscription == subscription:
                return other.matcher
        return None

    def agent(self, state: IClientState) -> AgentStream | None:
        """C{state}'s agent stream if it is subscribed (restoring it from the state if needed)."""
        raw = state.subscriptions.get(STATE_KEY) if isinstance(state.subscriptions, dict) else None
        agent = self.agents.get(state.client_id)
        if agent is not None and agent.raw is raw:
            return agent
        return self._sync(state.client_id, raw, agent)

    def _sync(self, client_id: str, raw: Any, agent: AgentStream | None) -> AgentStream | None:
        subscription = Subscription.from_json(raw)  # None for anything that no longer validates
        if subscription is None:
            if agent is not None:
                del self.agents[client_id]
                self._drop(agent)
                self._stale = self._spec_stale = True
            return None
        if agent is None:
            agent = self.agents[client_id] = self._new_agent(client_id, subscription, raw)
        else:
            self.dispatcher.leave(agent)
            agent.reconfigure(subscription, raw, self._matcher(subscription))
        self._stale = self._spec_stale = True
        return agent

    def _drop(self, agent: AgentStream) -> None:
        self.dispatcher.leave(agent)
        self._spec_stale = True
        agent.end()

    def active(self) -> tuple[AgentStream, ...]:
        """The subscribed agents, re-read from the registry at most every L{REFRESH_SECONDS}
        (a client that came back within the TTL brings its saved subscription with it)."""
        now = self.clock.seconds()
        if self._stale or now - self._refreshed >= REFRESH_SECONDS:
            self._refreshed = now
            self._stale = False
            seen = set()
            for state in self.registry.list():
                subs = state.subscriptions
                raw = subs.get(STATE_KEY) if isinstance(subs, dict) else None
                agent = self.agents.get(state.client_id)
                if raw is not None or agent is not None:
                    if agent is None or agent.raw is not raw:
                        agent = self._sync(state.client_id, raw, agent)
                        self._stale = False
                    if agent is not None:
                        seen.add(state.client_id)
            for cid in [c for c in self.agents if c not in seen]:  # expired clients
                self._drop(self.agents.pop(cid))
            self._active = tuple(self.agents.values())
            types = None if any(a.matcher.types is None for a in self._active) else \
                {t for a in self._active for t in a.matcher.types or ()}
            self._wanted_types = None if types is None else frozenset(types)
            self._wanted_buffers = buffers_for(self._wanted_types)
            if self._spec_stale:
                self._spec_stale = False
                self.dispatcher.respec(self._active)
            self.watches.update(self._active)
        return self._active

    # -- the notifier's subscriber (off the ingest path) ---------------------------------------

    def wants(self, write: Any) -> bool:
        """The notifier's predicate, asked on the ingest path for every write: could this write
        concern an agent? No (nothing queued, nothing scheduled) when no active agent subscribed
        to a type the buffer carries, unless the agent table is due for a re-read (a client
        back within its TTL brings its saved subscription), which L{on_write} then does."""
        buffer = write.buffer
        if buffer in self._wanted_buffers:
            return True
        if buffer not in SOURCE_BUFFERS:
            return False
        return self._stale or self.clock.seconds() - self._refreshed >= REFRESH_SECONDS

    def on_write(self, write: Any) -> None:
        """One buffer write (called by the notifier on a later reactor turn)."""
        if write.buffer not in SOURCE_BUFFERS:
            return
        agents = self.active()
        if not agents or write.buffer not in self._wanted_buffers:
            return
        self.writes_seen += 1
        self.dispatcher.write(write, agents)

    def publish_dom(self, report: dict[str, Any]) -> int:
        """The extension reported DOM watches met (C{POST /dom-changes}): each change is a
        C{dom_change} event for the one agent whose watch it is (rate limit, notices and inbox
        as for every event). Return how many events were made."""
        agents = self.active()
        if not agents:
            return 0
        by_agent: dict[str, list[Any]] = {}
        for client_id, event in self.watches.events(report, self.clock.seconds()):
            by_agent.setdefault(client_id, []).append(event)
        n = 0
        for client_id, events in by_agent.items():
            agent = self.agents.get(client_id)
            if agent is not None and agent in agents:
                self.dispatcher.dispatch(events, (agent,))
                n += len(events)
        return n

    def publish_audit(self, violations: Iterable[Any], url: str, tab_id: Any) -> int:
        """An accessibility audit ran: its violations become C{accessibility_violation} events.
        Return how many events were made."""
        agents = self.active()
        if not agents:
            return 0
        events = audit_events(violations, url, tab_id, self.clock.seconds())
        self.dispatcher.dispatch(events, agents)
        return len(events)

    # -- reading ---------------------------------------------------------------------------------

    def read(self, state: IClientState, since: int | None = None, limit: int = DEFAULT_INBOX,
             ack: bool = True) -> dict[str, Any] | None:
        """The agent's events after C{since} (default: after the last acknowledged one), oldest
        first, acknowledging them. None when the agent is not subscribed."""
        agent = self.agent(state)
        if agent is None:
            return None
        inbox = agent.inbox
        after = inbox.acked if since is None else max(0, since)
        items, more = inbox.after(after, limit)
        if ack and items:
            inbox.ack(items[-1]["seq"])
            if agent.full_notice is not None and agent.full_notice["seq"] <= items[-1]["seq"]:
                agent.set_full_notice(None)
        if ack:
            agent.tell_resource(False)
        return {"events": items, "has_more": more, "last_seq": inbox.last_seq,
                "acknowledged": inbox.acked, "unread": len(inbox), "dropped": inbox.dropped,
                "throttled": agent.throttled_total}

    def wait(self, state: IClientState, seconds: float) -> Deferred:
        """A Deferred that fires (with None) when the agent's inbox gets an item, or after
        C{seconds}; cancelling it only stops the wait."""
        agent = self.agent(state)
        d: Deferred[None] = Deferred(lambda d: agent.unwait(d) if agent else None)
        if agent is None:
            d.callback(None)
            return d
        agent.add_waiter(d)

        def timed_out() -> None:
            if not d.called:
                d.callback(None)

        call = self.clock.callLater(seconds, timed_out)

        def done(result: Any) -> Any:
            if call.active():
                call.cancel()
            agent.unwait(d)
            return result

        return d.addBoth(done)

    def resource(self, state: IClientState) -> dict[str, Any]:
        """What C{gasoline://events} shows: the unread items (reading does not acknowledge;
        the next new item sends C{notifications/resources/updated} again)."""
        agent = self.agent(state)
        if agent is None:
            return {"streaming_enabled": False, "events": []}
        agent.tell_resource(False)
        return {"streaming_enabled": True, "events": agent.inbox.unread(),
                "last_seq": agent.inbox.last_seq, "acknowledged": agent.inbox.acked,
                "untrusted_content": UNTRUSTED}

    def service(self) -> Any:
        """A service whose stop cancels the hub's timers and releases long-polls."""
        return StopHook(self.stop, name="streaming")

    def unread_note(self, state: IClientState) -> str | None:
        """"3 new browser events: 2 error, 1 network_failure — observe {what:"events"}" (capped),
        or None when nothing is unread."""
        agent = self.agents.get(state.client_id)
        if agent is None or not agent.inbox.items:
            return None
        counts: dict[str, int] = {}
        for _, item in agent.inbox.items:
            t = item.get("event_type", "event")
            counts[t] = counts.get(t, 0) + 1
        n = len(agent.inbox.items)
        parts = ", ".join(f"{c} {t}" for t, c in sorted(counts.items(), key=lambda kv: -kv[1]))
        note = f"{n} new browser event{'s' if n != 1 else ''}: {parts}"
        tail = ' — observe {what:"events"}'
        if len(note) + len(tail) > MAX_NOTE:
            note = note[: MAX_NOTE - len(tail) - 1] + "…"
        return note + tail

    def status(self, state: IClientState) -> dict[str, Any]:
        """C{state}'s subscription and its inbox's figures (C{configure} status)."""
        agent = self.agent(state)
        if agent is None:
            return {"streaming_enabled": False}
        session = self.delivery.stream_session(agent.client_id)
        return {"streaming_enabled": True, "subscribe": list(agent.subscription.types),
                "filters": agent.subscription.filters(), "unread": len(agent.inbox),
                "last_seq": agent.inbox.last_seq, "acknowledged": agent.inbox.acked,
                "dropped": agent.inbox.dropped, "throttled": agent.throttled_total,
                "pushed": agent.pushed, "inbox_capacity": agent.inbox.capacity,
                "queued": agent.queued, "delivered_late": agent.queued_total,
                "stream": None if session is None else session.transport}

    # -- GET /events listeners -------------------------------------------------------------------

    def events_token(self, client_id: str) -> str:
        """The proof C{GET /events?client=<id>&proof=<p>} needs: only the agent that subscribed
        learns it (in C{configure {what:"streaming"}}'s answer), so knowing a client id is not
        enough to read that agent's events. Valid for this run of the daemon."""
        digest = hmac.new(self.events_secret, b"events\0" + client_id.encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(digest.digest()[:24]).decode().rstrip("=")

    def events_url(self, client_id: str) -> str:
        """The path of C{client_id}'s C{GET /events} stream, proof included."""
        return f"/events?client={client_id}&proof={self.events_token(client_id)}"

    def listen(self, client_id: str, listener: Listener,
               end: Callable[[], None] | None = None) -> AgentStream | None:
        """Call C{listener(item)} for each new inbox item of C{client_id}; C{end()} when its
        subscription ends (unsubscribed, expired, daemon stopping). None: not subscribed."""
        state = self.registry.get(client_id)
        agent = self.agent(state) if state is not None else None
        if agent is not None:
            agent.listen(listener, end)
        return agent

    def unlisten(self, client_id: str, listener: Listener) -> None:
        """C{listener} (its stream is gone) hears no more of C{client_id}'s items."""
        agent = self.agents.get(client_id)
        if agent is not None:
            agent.unlisten(listener)

    def stop(self) -> None:
        """Cancel timers and release waiters (daemon shutdown; keeps tests free of timers)."""
        for agent in self.agents.values():
            self._drop(agent)

"""What a subscription holds at rest, and that sharing it between agents changes nothing they see.

The figures are bench/streams_memory.py's (docs/streaming.md, "Memory per subscription"); these
tests check the mechanisms behind them: agents that subscribe alike share one subscription and
one matcher (both immutable) and still get their own events; an agent at rest has no empty
waiter or listener containers, which appear at first use and work as before.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from gasoline.core.storage.store import CONSOLE
from gasoline.streaming.subscription import parse


def subscribe(app: Any, client_id: str, args: dict[str, Any]) -> Any:
    state = app.registry.register(client_id)
    return app.streaming.configure(state, parse(args))


def error(app: Any, clock: Any, message: str, url: str = "https://app.example.test/") -> None:
    app.store.add(CONSOLE, [{"level": "error", "type": "console", "message": message,
                             "url": url, "tabId": 1}])
    clock.advance(0)


def test_agents_subscribing_alike_share_subscription_and_matcher_not_their_inboxes(app, clock):
    alike = {"subscribe": ["error"], "filters": {"rate_limit": 50}}
    a = subscribe(app, "A", alike)
    b = subscribe(app, "B", {"subscribe": ["error"], "filters": {"rate_limit": 50}})
    c = subscribe(app, "C", {"subscribe": ["error"], "filters": {"rate_limit": 50,
                                                                 "url_pattern": "checkout"}})
    assert b.matcher is a.matcher and b.subscription is a.subscription
    assert c.matcher is not a.matcher and c.subscription != a.subscription
    # Each still has its own inbox and saved form (the client state's, persisted per client).
    assert b.inbox is not a.inbox and b.raw is not a.raw
    assert b.raw == a.raw and app.registry.get("B").subscriptions["streaming"] is b.raw

    error(app, clock, "TypeError: one", "https://app.example.test/checkout")
    error(app, clock, "TypeError: two")
    assert [e["message"] for e in a.inbox.unread()] == ["TypeError: one", "TypeError: two"]
    assert [e["message"] for e in b.inbox.unread()] == ["TypeError: one", "TypeError: two"]
    assert [e["message"] for e in c.inbox.unread()] == ["TypeError: one"]
    app.streaming.read(app.registry.get("A"))  # A acknowledges: B's items stay
    assert len(a.inbox) == 0 and len(b.inbox) == 2

    # A changes its filters: it gets C's matcher (equal now); B keeps the one it had.
    old = b.matcher
    subscribe(app, "A", {"subscribe": ["error"], "filters": {"rate_limit": 50,
                                                             "url_pattern": "checkout"}})
    assert a.matcher is c.matcher and b.matcher is old
    error(app, clock, "TypeError: three")
    assert [e["message"] for e in a.inbox.unread()] == []
    assert [e["message"] for e in b.inbox.unread()][-1] == "TypeError: three"


def test_subscriptions_listing_the_same_types_share_the_tuple():
    one = parse({"subscribe": ["error", "network_failure"], "filters": {"rate_limit": 7}})
    two = parse({"subscribe": ["error", "network_failure"], "filters": {"slow_ms": 2000}})
    assert one.types is two.types and one.types == ("error", "network_failure")


def test_an_agent_at_rest_has_no_waiter_or_listener_containers_until_used(app, clock):
    agent = subscribe(app, "A", {"subscribe": ["error"]})
    assert (agent.waiters, agent.listeners, agent.enders, agent.queue) == ((), (), None, None)
    assert agent.window_start == float("-inf")

    state = app.registry.get("A")
    woken: list[Any] = []
    d: Deferred = app.streaming.wait(state, 10)
    d.addCallback(woken.append)
    heard: list[dict[str, Any]] = []
    ended: list[bool] = []
    agent.listen(heard.append, lambda: ended.append(True))
    assert len(agent.waiters) == 1 and agent.listeners == [heard.append]

    error(app, clock, "TypeError: wake")
    assert woken == [None] and [e["message"] for e in heard] == ["TypeError: wake"]
    assert len(agent.waiters) == 0  # released by the wake

    agent.unlisten(heard.append)
    agent.unlisten(heard.append)  # twice: no error
    agent.unwait(d)  # not waiting any more: no error
    error(app, clock, "TypeError: after")
    assert len(heard) == 1

    agent.listen(heard.append, lambda: ended.append(True))
    app.streaming.configure(state, None)  # unsubscribing ends the listener's stream
    assert ended == [True] and agent.listeners == () and agent.enders is None

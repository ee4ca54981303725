"""C{filters.over_limit}: "drop" (count, the default) or "queue" (bounded, sent after the window)."""

from __future__ import annotations

import pytest

from test_streaming import Agent, err, ingest, payload, timers

from gasoline.core.errors import InvalidParam
from gasoline.core.storage.store import CONSOLE
from gasoline.streaming.inbox import QUEUE_CAPACITY
from gasoline.streaming.subscription import parse


@pytest.fixture(autouse=True)
def _no_timer_left(clock):
    yield
    assert clock.getDelayedCalls() == []


def messages(agent):
    return [e["message"] for e in agent.events() if e["event_type"] == "error"]


def test_over_limit_is_validated_and_reported():
    assert parse({"subscribe": ["error"]}).over_limit == "drop"
    assert parse({"subscribe": ["error"], "filters": {"over_limit": "queue"}}).queues
    with pytest.raises(InvalidParam) as e:
        parse({"subscribe": ["error"], "filters": {"over_limit": "keep"}})
    assert "drop, queue" in e.value.message


def test_queued_events_are_delivered_after_the_window_in_order(app, clock):
    q, d = Agent(app, "Q"), Agent(app, "D")
    body = payload(q.subscribe(["error"], rate_limit=3, over_limit="queue"))
    assert body["filters"]["over_limit"] == "queue"
    d.subscribe(["error"], rate_limit=3)
    ingest(app, clock, CONSOLE, [err(f"e{i}") for i in range(8)])
    assert messages(q) == ["e0", "e1", "e2"] and messages(d) == ["e0", "e1", "e2"]
    status = payload(q.tool("configure", {"what": "streaming", "action": "status"}))
    assert status["queued"] == 5
    clock.advance(1.0)  # the next window: three more, in order
    assert messages(q) == [f"e{i}" for i in range(6)]
    ingest(app, clock, CONSOLE, [err("late")])  # behind the two still queued
    clock.advance(1.0)
    assert messages(q) == [f"e{i}" for i in range(8)] + ["late"]
    # Nothing was dropped for the queueing agent: no notice; the dropping one got its notice.
    assert not [e for e in q.events() if e["event_type"] == "rate_limit_exceeded"]
    [notice] = [e for e in d.events() if e["event_type"] == "rate_limit_exceeded"]
    assert notice["throttled"] == 5 and messages(d) == ["e0", "e1", "e2", "late"]
    status = payload(q.tool("configure", {"what": "streaming", "action": "status"}))
    assert status["queued"] == 0 and status["delivered_late"] == 6 and status["throttled"] == 0
    assert timers(clock) == []
    app.streaming.stop()


def test_the_queue_is_bounded_and_what_it_drops_is_counted(app, clock):
    q = Agent(app, "Q")
    q.subscribe(["error"], rate_limit=100, over_limit="queue")
    n = 100 + QUEUE_CAPACITY + 25
    ingest(app, clock, CONSOLE, [err(f"e{i}") for i in range(n)])
    agent = app.streaming.agents["Q"]
    assert agent.queued == QUEUE_CAPACITY
    clock.advance(1.0)
    [notice] = [e for e in q.events() if e["event_type"] == "rate_limit_exceeded"]
    assert notice["throttled"] == 25
    clock.advance(1.0)
    got = messages(q)
    # The first window's 100, then the newest QUEUE_CAPACITY of the rest (the oldest 25 left).
    assert got[:100] == [f"e{i}" for i in range(100)]
    assert got[100:] == [f"e{i}" for i in range(125, n)]
    assert agent.queued == 0
    app.streaming.stop()


def test_switching_back_to_drop_counts_what_waited_and_unsubscribing_leaves_no_timer(app, clock):
    q = Agent(app, "Q")
    q.subscribe(["error"], rate_limit=2, over_limit="queue")
    ingest(app, clock, CONSOLE, [err(f"e{i}") for i in range(6)])
    assert app.streaming.agents["Q"].queued == 4
    q.subscribe(["error"], rate_limit=2)
    status = payload(q.tool("configure", {"what": "streaming", "action": "status"}))
    assert status["queued"] == 0 and status["throttled"] == 4
    q.subscribe(["error"], rate_limit=2, over_limit="queue")
    ingest(app, clock, CONSOLE, [err(f"x{i}") for i in range(6)])
    q.tool("configure", {"what": "streaming", "enabled": False})
    assert timers(clock) == []

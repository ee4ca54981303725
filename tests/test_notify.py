"""Notifier: delivery on a later clock turn, isolation from failing subscribers, bounded pending."""

from __future__ import annotations

from twisted.internet import task
from twisted.logger import capturedLogs

from gasoline.core.storage.notify import Notifier
from gasoline.core.storage.store import Added, CONSOLE, TelemetryStore


def one_turn(clock: task.Clock) -> None:
    """Run the calls due now but not those they schedule, as one reactor iteration would.

    (C{Clock.advance(0)} also runs calls scheduled while it runs, hiding any yield.)
    """
    due = [c for c in clock.getDelayedCalls() if c.getTime() <= clock.seconds()]
    for call in due:
        clock.calls.remove(call)
        call.called = 1
        call.func(*call.args, **call.kw)


def subscribed(**options):
    """A notifier on a fresh clock with one subscriber: C{(clock, notifier, what it got)}."""
    clock = task.Clock()
    n = Notifier(clock, **options)
    got: list = []
    n.subscribe(got.append)
    return clock, n, got


def publish(n, events):
    for event in events:
        n.publish(event)


def test_events_are_delivered_on_a_later_turn_in_order():
    clock, n, got = subscribed()
    n.publish("a")
    n.publish("b")
    assert got == []  # publish returns before any subscriber runs
    clock.advance(0)
    assert got == ["a", "b"]
    assert n.published == 2
    assert clock.getDelayedCalls() == []


def test_every_subscriber_gets_every_event():
    clock = task.Clock()
    n = Notifier(clock)
    first: list = []
    second: list = []
    n.subscribe(first.append)
    n.subscribe(second.append)
    for i in range(3):
        n.publish(i)
    clock.advance(0)
    assert first == second == [0, 1, 2]
    assert n.subscriber_count == 2


def test_a_raising_subscriber_is_logged_and_others_still_get_the_event():
    clock = task.Clock()
    n = Notifier(clock)
    got: list = []
    calls: list = []

    def broken(event):
        calls.append(event)
        raise RuntimeError("subscriber bug")

    n.subscribe(broken)
    n.subscribe(got.append)
    n.publish("x")
    n.publish("y")
    with capturedLogs() as events:
        clock.advance(0)
    assert got == ["x", "y"]
    assert calls == ["x", "y"]  # stays subscribed after failing
    failures = [e for e in events if "log_failure" in e]
    assert len(failures) == 2
    assert all(e["log_failure"].check(RuntimeError) for e in failures)
    assert clock.getDelayedCalls() == []


def test_a_failing_subscriber_never_breaks_ingest():
    clock = task.Clock()
    store = TelemetryStore(clock)

    def broken(event):
        raise RuntimeError("boom")

    store.notifier.subscribe(broken)
    with capturedLogs():
        assert store.add(CONSOLE, [{"message": "m", "level": "error"}]) == Added(0, 1)
        assert store.read(CONSOLE).items == [{"message": "m", "level": "error"}]
        clock.advance(0)
    assert store.add(CONSOLE, [{"message": "n"}]) == Added(1, 2)


def test_unsubscribe_stops_delivery_and_is_idempotent():
    clock = task.Clock()
    n = Notifier(clock)
    got: list = []
    unsubscribe = n.subscribe(got.append)
    n.publish(1)
    clock.advance(0)
    unsubscribe()
    unsubscribe()
    assert n.subscriber_count == 0
    n.publish(2)
    clock.advance(0)
    assert got == [1]
    assert clock.getDelayedCalls() == []


def test_unsubscribing_the_same_callback_twice_removes_one_subscription_each():
    clock = task.Clock()
    n = Notifier(clock)
    got: list = []
    first = n.subscribe(got.append)
    n.subscribe(got.append)
    first()
    first()  # the second call must not remove the other subscription
    n.publish("e")
    clock.advance(0)
    assert got == ["e"]


def test_unsubscribe_during_a_flush_takes_effect_from_the_next_event():
    clock = task.Clock()
    n = Notifier(clock)
    got: list = []
    holder: dict = {}

    def first(event):
        if event == 1:
            holder["unsub"]()

    n.subscribe(first)
    holder["unsub"] = n.subscribe(got.append)
    for i in range(3):
        n.publish(i)
    clock.advance(0)
    # Unsubscribed while event 1 was being delivered: gets event 1, not event 2.
    assert got == [0, 1]


def test_pending_events_are_bounded_and_drops_are_counted():
    clock, n, got = subscribed(max_pending=3)
    publish(n, range(5))
    assert n.dropped == 2
    assert n.pending == 3
    clock.advance(0)
    assert got == [2, 3, 4]  # the oldest ones went


def test_a_big_backlog_is_delivered_in_batches_that_yield_the_reactor():
    clock, n, got = subscribed(batch=2)
    publish(n, range(5))
    one_turn(clock)
    assert got == [0, 1]
    assert len(clock.getDelayedCalls()) == 1  # the rest waits for a later turn
    one_turn(clock)
    assert got == [0, 1, 2, 3]
    n.publish(5)  # joins the backlog, in order
    one_turn(clock)
    assert got == [0, 1, 2, 3, 4, 5]
    assert clock.getDelayedCalls() == []


def test_publishing_from_a_subscriber_is_delivered_on_a_later_turn():
    clock = task.Clock()
    n = Notifier(clock)
    got: list = []

    def echo(event):
        got.append(event)
        if event == "ping":
            n.publish("pong")

    n.subscribe(echo)
    n.publish("ping")
    one_turn(clock)
    assert got == ["ping"]  # no recursion into subscribers
    one_turn(clock)
    assert got == ["ping", "pong"]
    assert clock.getDelayedCalls() == []


def test_nothing_is_scheduled_without_subscribers():
    clock = task.Clock()
    n = Notifier(clock)
    n.publish("lost")
    assert clock.getDelayedCalls() == []
    assert n.published == 0


def test_stop_cancels_a_scheduled_flush():
    clock, n, got = subscribed()
    n.publish(1)
    assert len(clock.getDelayedCalls()) == 1
    n.stop()
    assert clock.getDelayedCalls() == []
    clock.advance(0)
    assert got == []


def test_an_event_no_subscriber_wants_is_neither_queued_nor_scheduled():
    clock = task.Clock()
    n = Notifier(clock)
    got: list = []
    n.subscribe(got.append, wants=lambda e: e % 2 == 0)
    n.publish(1)
    assert n.pending == 0 and clock.getDelayedCalls() == [] and n.unwanted == 1
    n.publish(2)
    assert n.pending == 1 and len(clock.getDelayedCalls()) == 1
    clock.advance(0)
    assert got == [2]


def test_a_subscriber_without_a_predicate_wants_everything_and_gets_every_event():
    clock = task.Clock()
    n = Notifier(clock)
    picky: list = []
    everything: list = []
    n.subscribe(picky.append, wants=lambda e: False)
    unsubscribe = n.subscribe(everything.append)
    n.publish(1)
    clock.advance(0)
    # One subscriber wanted it: every subscriber receives it (the picky one ignores what it must).
    assert everything == [1] and picky == [1]
    unsubscribe()
    n.publish(2)
    clock.advance(0)
    assert everything == [1] and picky == [1] and n.unwanted == 1


def test_a_raising_predicate_never_breaks_the_publisher_and_counts_as_wanted():
    clock = task.Clock()
    n = Notifier(clock)
    got: list = []

    def broken(event):
        raise RuntimeError("boom")

    n.subscribe(got.append, wants=broken)
    with capturedLogs() as events:
        n.publish(1)
    clock.advance(0)
    assert got == [1]
    assert any("predicate" in str(e.get("log_format", "")) for e in events)


def test_unsubscribing_one_of_two_identical_callbacks_keeps_the_others_predicate():
    clock = task.Clock()
    n = Notifier(clock)
    got: list = []
    first = n.subscribe(got.append, wants=lambda e: e == "a")
    n.subscribe(got.append, wants=lambda e: e == "b")
    first()
    n.publish("a")
    n.publish("b")
    clock.advance(0)
    assert got == ["b"]


def test_flushes_are_spaced_by_the_interval_under_a_burst():
    clock, n, got = subscribed(interval=0.002)
    n.publish("a")
    clock.advance(0)
    assert got == ["a"]  # the first flush is not delayed
    clock.advance(0.0005)
    n.publish("b")
    clock.advance(0)
    assert got == ["a"]  # 0.5 ms after the last flush: waits for the interval's end
    clock.advance(0.001)
    n.publish("c")  # joins the pending flush
    assert [c.getTime() for c in clock.getDelayedCalls()] == [0.002]
    clock.advance(0.0005)
    assert got == ["a", "b", "c"]
    clock.advance(0.01)
    n.publish("d")  # the last flush is older than the interval: the next turn
    clock.advance(0)
    assert got == ["a", "b", "c", "d"]
    assert clock.getDelayedCalls() == []


def test_a_clock_that_did_not_move_is_not_a_burst():
    clock, n, got = subscribed(interval=0.002)
    for event in "abc":
        n.publish(event)
        clock.advance(0)  # a test clock stands still: every flush on the next turn
        assert got[-1] == event


def test_interval_must_not_be_negative():
    import pytest

    with pytest.raises(ValueError):
        Notifier(task.Clock(), interval=-1)

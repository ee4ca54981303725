"""TelemetryStore: buffers, the WebSocket connection table, performance snapshots, events, stats."""

from __future__ import annotations

import orjson
import pytest
from twisted.internet import task

from gasoline.core.storage.store import (
    Added,
    ACTIONS,
    CONSOLE,
    DEFAULT_BUFFERS,
    EXTENSION_LOGS,
    MAX_CLOSED_CONNECTIONS,
    MAX_PERFORMANCE_URLS,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
    BufferSpec,
    BufferWrite,
    TelemetryStore,
)


class RecordingJournal:
    def __init__(self) -> None:
        self.appended: list[tuple[list[bytes], int]] = []
        self.clears = 0

    def append(self, encoded, first_seq):
        self.appended.append((list(encoded), first_seq))

    def cleared(self):
        self.clears += 1


def make(buffers=None):
    clock = task.Clock()
    clock.advance(1000.0)
    store = TelemetryStore(clock, buffers)
    events: list[BufferWrite] = []
    store.notifier.subscribe(events.append)
    return clock, store, events


def ws(kind, conn="c1", **extra):
    return {"type": "websocket", "event": kind, "id": conn, **extra}


@pytest.mark.parametrize(
    "name", [CONSOLE, NETWORK_BODIES, WEBSOCKET_EVENTS, ACTIONS, WATERFALL, EXTENSION_LOGS]
)
def test_every_buffer_stores_and_reads_back_entries(name):
    clock, store, _ = make()
    batch = [{"n": i, "text": "é ✓", "nested": {"a": [1, 2]}} for i in range(3)]
    assert store.add(name, batch) == Added(0, 3)
    assert store.add(name, [{"n": 3}]) == Added(3, 4)
    res = store.read(name)
    assert res.items == batch + [{"n": 3}]
    assert res.next_cursor == 4
    assert store.read(name, cursor=3).items == [{"n": 3}]
    assert store.last_write[name] == clock.seconds()


def test_entries_are_stored_as_compact_json_bytes():
    _, store, _ = make()
    store.add(CONSOLE, [{"a": 1, "b": "x"}])
    assert list(store.buffers[CONSOLE]) == [b'{"a":1,"b":"x"}']


def test_buffer_specs_override_defaults():
    _, store, _ = make({CONSOLE: BufferSpec(3, 0)})
    store.add(CONSOLE, [{"i": i} for i in range(5)])
    res = store.read(CONSOLE)
    assert res.items == [{"i": 2}, {"i": 3}, {"i": 4}]
    assert store.read(CONSOLE, 0).missed == 2
    assert store.buffers[NETWORK_BODIES].capacity == DEFAULT_BUFFERS[NETWORK_BODIES].entries


def test_byte_budget_bounds_a_buffer():
    _, store, _ = make({ACTIONS: BufferSpec(1000, 100)})
    store.add(ACTIONS, [{"v": "x" * 20} for _ in range(20)])
    ring = store.buffers[ACTIONS]
    assert ring.bytes_used <= 100
    assert len(ring) == 100 // len(orjson.dumps({"v": "x" * 20}))


def test_one_event_per_batch_after_the_write():
    clock, store, events = make()
    store.add(CONSOLE, [{"m": 1}, {"m": 2}])
    store.add(CONSOLE, [{"m": 3}])
    assert events == []  # delivered on a later turn
    clock.advance(0)
    assert events == [
        BufferWrite(CONSOLE, 0, 2, ({"m": 1}, {"m": 2}), 1000.0),
        BufferWrite(CONSOLE, 2, 3, ({"m": 3},), 1000.0),
    ]
    assert clock.getDelayedCalls() == []


def test_empty_batch_writes_and_publishes_nothing():
    clock, store, events = make()
    store.add(CONSOLE, [{"m": 1}])
    assert store.add(CONSOLE, []) == Added(1, 1)
    clock.advance(0)
    assert len(events) == 1


def test_journal_receives_the_encoded_batch_of_its_buffer_only():
    _, store, _ = make()
    journal = RecordingJournal()
    store.journals[CONSOLE] = journal
    store.add(CONSOLE, [{"a": 1}])
    store.add(CONSOLE, [{"b": 2}, {"c": 3}])
    store.add(ACTIONS, [{"type": "click"}])
    assert journal.appended == [([b'{"a":1}'], 0), ([b'{"b":2}', b'{"c":3}'], 1)]
    store.clear(ACTIONS)
    assert journal.clears == 0
    store.clear(CONSOLE)
    assert journal.clears == 1
    store.clear()
    assert journal.clears == 2


def test_restore_loads_entries_without_events_or_journal():
    clock, store, events = make()
    journal = RecordingJournal()
    store.journals[CONSOLE] = journal
    assert store.restore(CONSOLE, [b'{"old":1}', b'{"old":2}']) == 2
    clock.advance(0)
    assert events == [] and journal.appended == []
    assert store.read(CONSOLE).items == [{"old": 1}, {"old": 2}]
    assert store.add(CONSOLE, [{"new": 3}]) == Added(2, 3)


def test_websocket_connection_table_counts_messages_and_rates():
    clock, store, _ = make()
    store.add(WEBSOCKET_EVENTS, [ws("open", url="wss://a/socket", tab_id=4)])
    clock.advance(10)
    store.add(
        WEBSOCKET_EVENTS,
        [ws("message", direction="incoming")] * 3
        + [ws("message", direction="outgoing")] * 2
        + [ws("error")],
    )
    status = store.websocket_status()
    assert status["closed"] == []
    (conn,) = status["active"]
    assert conn["id"] == "c1" and conn["url"] == "wss://a/socket" and conn["tab_id"] == 4
    assert conn["state"] == "open"
    assert conn["messages"] == {"incoming": 3, "outgoing": 2, "total": 5}
    assert conn["errors"] == 1
    assert conn["rate_per_second"] == 0.5  # 5 messages over 10 s
    assert conn["last_message_at"] == 1010.0


def test_a_just_opened_connection_does_not_report_an_absurd_rate():
    _, store, _ = make()
    store.add(WEBSOCKET_EVENTS, [ws("open", url="wss://a"), ws("message")])
    (conn,) = store.websocket_status()["active"]
    assert conn["rate_per_second"] == 1.0


def test_closing_moves_a_connection_to_recently_closed():
    clock, store, _ = make()
    store.add(WEBSOCKET_EVENTS, [ws("open", "c1", url="wss://a"), ws("open", "c2", url="wss://b")])
    clock.advance(4)
    store.add(WEBSOCKET_EVENTS, [ws("message", "c1"), ws("close", "c1", code=1000, reason="bye")])
    clock.advance(100)
    status = store.websocket_status()
    assert [c["id"] for c in status["active"]] == ["c2"]
    (closed,) = status["closed"]
    assert closed["state"] == "closed"
    assert (closed["close_code"], closed["close_reason"]) == (1000, "bye")
    assert closed["closed_at"] == 1004.0
    # The rate of a closed connection is frozen at close time.
    assert closed["rate_per_second"] == 0.25


def test_recently_closed_connections_are_bounded_newest_first():
    _, store, _ = make()
    n = MAX_CLOSED_CONNECTIONS + 5
    for i in range(n):
        store.add(WEBSOCKET_EVENTS, [ws("open", f"c{i}"), ws("close", f"c{i}")])
    closed = store.websocket_status()["closed"]
    assert len(closed) == MAX_CLOSED_CONNECTIONS
    assert closed[0]["id"] == f"c{n - 1}"
    assert closed[-1]["id"] == "c5"
    assert store.websocket_status()["active"] == []


def test_websocket_events_without_an_id_are_stored_but_not_tracked():
    _, store, _ = make()
    store.add(WEBSOCKET_EVENTS, [{"event": "open"}, {"event": "message", "id": 7}])
    assert len(store.read(WEBSOCKET_EVENTS).items) == 2
    assert store.websocket_status() == {"active": [], "closed": []}


def test_clearing_websocket_events_empties_the_connection_table():
    _, store, _ = make()
    store.add(WEBSOCKET_EVENTS, [ws("open", "a"), ws("open", "b"), ws("close", "b")])
    store.clear(WEBSOCKET_EVENTS)
    assert store.websocket_status() == {"active": [], "closed": []}


def test_performance_keeps_the_latest_snapshot_per_url():
    clock, store, events = make()
    assert store.add_performance([{"url": "/a", "load": 1}, {"url": "/b", "load": 2}]) == 2
    store.add_performance([{"url": "/a", "load": 3}])
    assert dict(store.performance) == {"/b": {"url": "/b", "load": 2}, "/a": {"url": "/a", "load": 3}}
    clock.advance(0)
    assert [e.buffer for e in events] == ["performance", "performance"]
    assert store.stats()["performance"]["used"] == 2


def test_performance_is_bounded_least_recently_updated_first():
    _, store, _ = make()
    store.add_performance([{"url": f"/p{i}"} for i in range(MAX_PERFORMANCE_URLS)])
    store.add_performance([{"url": "/p0", "v": 2}])  # refreshed: now the newest
    store.add_performance([{"url": "/new"}])
    assert len(store.performance) == MAX_PERFORMANCE_URLS
    assert "/p1" not in store.performance
    assert store.performance["/p0"] == {"url": "/p0", "v": 2}
    assert "/new" in store.performance


def test_clear_one_buffer_leaves_the_others():
    _, store, _ = make()
    store.add(CONSOLE, [{"a": 1}, {"a": 2}])
    store.add(ACTIONS, [{"b": 1}])
    store.add_performance([{"url": "/x"}])
    assert store.clear(CONSOLE) == 2
    assert store.read(CONSOLE).items == []
    assert store.read(ACTIONS).items == [{"b": 1}]
    assert len(store.performance) == 1
    # Sequence numbers keep counting after a clear.
    assert store.add(CONSOLE, [{"a": 3}]) == Added(2, 3)


def test_clear_everything_counts_every_entry_and_performance():
    _, store, _ = make()
    store.add(CONSOLE, [{"a": 1}, {"a": 2}])
    store.add(NETWORK_BODIES, [{"b": 1}])
    store.add_performance([{"url": "/x"}, {"url": "/y"}])
    assert store.clear() == 5
    assert all(s["used"] == 0 for s in store.stats().values())


def test_stats_report_capacity_used_and_head_per_buffer():
    _, store, _ = make({CONSOLE: BufferSpec(2, 0)})
    store.add(CONSOLE, [{"i": i} for i in range(3)])
    stats = store.stats()
    assert set(stats) == set(DEFAULT_BUFFERS) | {"performance"}
    assert stats[CONSOLE]["capacity"] == 2
    assert stats[CONSOLE]["used"] == 2
    assert stats[CONSOLE]["head"] == 3
    assert stats[CONSOLE]["oldest"] == 1
    assert stats[CONSOLE]["bytes"] == sum(len(b) for b in store.buffers[CONSOLE])
    assert stats[ACTIONS] == {
        "capacity": DEFAULT_BUFFERS[ACTIONS].entries, "used": 0, "head": 0, "oldest": 0,
        "bytes": 0, "max_bytes": DEFAULT_BUFFERS[ACTIONS].max_bytes,
    }


def test_unknown_buffer_name_is_a_key_error():
    _, store, _ = make()
    with pytest.raises(KeyError):
        store.add("nope", [{"a": 1}])


def test_stored_entries_cost_about_their_json_size():
    """orjson's output over-allocates (~4 KiB each); the store must keep exact-size bytes."""
    import gc
    import tracemalloc

    _, store, _ = make({CONSOLE: BufferSpec(2000, 0)})
    batch = [{"message": "m" * 200, "level": "log", "n": i} for i in range(50)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(40):
            store.add(CONSOLE, batch)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    json_bytes = store.buffers[CONSOLE].bytes_used
    assert len(store.buffers[CONSOLE]) == 2000
    assert grown < json_bytes + 2000 * 80  # object headers and rounding, not kilobytes each


def test_test_boundaries_are_bounded_and_forget_the_oldest_test_first():
    from gasoline.core.storage.boundaries import TestBoundaries

    b = TestBoundaries(max_active=2)
    b.start("a", 1.0)
    b.start("b", 2.0)
    b.start("a", 3.0)  # restarting a known test does not evict anyone
    b.start("c", 4.0)  # one too many: "b" (the oldest) is forgotten
    assert sorted(b.ids()) == ["a", "c"]
    b.end("a")
    b.end("unknown")
    assert b.ids() == ["c"]

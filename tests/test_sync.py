"""The command queue, the extension link and ``POST /sync`` (extension-protocol.md §3), on a Clock."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from gasoline._version import EXTENSION_COMPAT_VERSION
from gasoline.app import Config, build
from gasoline.core.extension.commands import Command, CommandQueue
from gasoline.core.extension.link import ExtensionLink
from gasoline.core.storage.store import EXTENSION_LOGS, TelemetryStore
from gasoline.http.request import GasolineSite
from gasoline.testing import EXTENSION_HEADERS, stub_answer
from treq.testing import StubTreq

URL = "http://127.0.0.1:7890"


def make_link(clock: Clock | None = None) -> ExtensionLink:
    clock = clock or Clock()
    return ExtensionLink(clock, TelemetryStore(clock), CommandQueue(clock))


@pytest.fixture
def link(clock):
    """An extension link on C{clock}; stopped after the test, which must leave no timer behind."""
    link = make_link(clock)
    yield link
    link.stop()
    assert clock.getDelayedCalls() == []


def fired(d):
    """The result of an already-fired Deferred (fails the test if it has not fired)."""
    out = []
    d.addBoth(lambda r: (out.append(r), r)[1])
    assert out, "Deferred has not fired"
    if isinstance(out[0], Failure):
        d.addErrback(lambda _: None)
    return out[0]


def not_fired(d) -> bool:
    out = []
    d.addBoth(lambda r: (out.append(r), r)[1])
    return not out


# -- CommandQueue --------------------------------------------------------------------------------


def test_enqueued_commands_get_sequential_q_ids_and_frozen_fields():
    clock = Clock()
    clock.advance(100)
    q = CommandQueue(clock, ttl=30)
    a = q.enqueue("dom", {"selector": "h1"}, owner="client-a", tab_id=7, correlation_id="c-1")
    b = q.enqueue("a11y", owner="client-b")
    assert (a.id, b.id) == ("q-1", "q-2")
    assert a.owner == "client-a" and a.tab_id == 7 and a.correlation_id == "c-1"
    assert a.created_at == 100 and a.expires_at == 130
    with pytest.raises(AttributeError):
        a.type = "other"  # type: ignore[misc]
    assert a.to_json() == {
        "id": "q-1", "type": "dom", "params": {"selector": "h1"}, "tab_id": 7, "correlation_id": "c-1"
    }
    assert b.to_json() == {"id": "q-2", "type": "a11y", "params": {}}


def test_ack_delivers_that_command_and_every_earlier_one():
    q = CommandQueue(Clock())
    for _ in range(4):
        q.enqueue("dom", {}, "c")
    q.ack("q-2")
    assert [c.id for c in q.deliverable()] == ["q-3", "q-4"]
    q.ack("q-1")  # an older ack never re-opens delivered commands
    assert [c.id for c in q.deliverable()] == ["q-3", "q-4"]
    q.ack("nonsense")
    q.ack("q-999")  # a stale id from the future acks only what exists
    assert q.deliverable() == []
    later = q.enqueue("dom", {}, "c")
    assert [c.id for c in q.deliverable()] == [later.id]


def test_acked_commands_stay_outstanding_until_resolved():
    q = CommandQueue(Clock())
    cmd = q.enqueue("dom", {}, "owner-1")
    q.ack(cmd.id)
    assert q.get(cmd.id) == cmd
    results = []
    q.on_result(results.append)
    assert q.resolve({"id": cmd.id, "status": "complete", "result": {"n": 1}}) is True
    assert results == [
        {"id": cmd.id, "status": "complete", "result": {"n": 1}, "owner": "owner-1", "type": "dom"}
    ]
    assert q.get(cmd.id) is None


def test_resolve_is_idempotent_and_ignores_unknown_ids():
    q = CommandQueue(Clock())
    cmd = q.enqueue("dom", {}, "o", correlation_id="corr")
    results = []
    unsubscribe = q.on_result(results.append)
    assert q.resolve({"id": "q-77", "result": 1}) is False
    assert q.resolve({"no": "id"}) is False
    assert q.resolve("not a dict") is False  # type: ignore[arg-type]
    assert q.resolve({"id": cmd.id, "error": "boom"}) is True
    assert q.resolve({"id": cmd.id, "result": "again"}) is False
    assert len(results) == 1
    assert results[0]["status"] == "error" and results[0]["correlation_id"] == "corr"
    unsubscribe()
    other = q.enqueue("dom", {}, "o")
    q.resolve({"id": other.id})
    assert len(results) == 1


def test_failing_result_listener_does_not_break_resolution():
    q = CommandQueue(Clock())
    cmd = q.enqueue("dom", {}, "o")
    seen = []
    q.on_result(lambda r: 1 / 0)
    q.on_result(seen.append)
    assert q.resolve({"id": cmd.id, "result": None})
    assert [r["id"] for r in seen] == [cmd.id]


def test_commands_expire_on_the_clock_and_listeners_hear_it():
    clock = Clock()
    q = CommandQueue(clock, ttl=30)
    old = q.enqueue("dom", {}, "o")
    clock.advance(20)
    young = q.enqueue("dom", {}, "o")
    results = []
    q.on_result(results.append)
    clock.advance(10)
    assert [c.id for c in q.deliverable()] == [young.id]
    assert [(r["id"], r["status"], r["error"]) for r in results] == [
        (old.id, "expired", "command_expired")
    ]
    assert q.resolve({"id": old.id, "result": "late"}) is False
    assert clock.getDelayedCalls() == []


def test_expiry_follows_each_commands_own_deadline_not_queue_order():
    clock = Clock()
    q = CommandQueue(clock, ttl=30)
    slow = q.enqueue("dom", {}, "o")              # expires at 30
    quick = q.enqueue("dom", {}, "o", ttl=5)      # queued later, expires first (5)
    done = q.enqueue("dom", {}, "o", ttl=1)       # resolved before its deadline
    assert q.resolve({"id": done.id, "result": 1})
    results = []
    q.on_result(results.append)
    clock.advance(5)
    assert [c.id for c in q.deliverable()] == [slow.id]
    assert [(r["id"], r["status"]) for r in results] == [(quick.id, "expired")]
    clock.advance(25)
    assert q.deliverable() == [] and q.outstanding() == []
    assert [r["id"] for r in results] == [quick.id, slow.id]  # the resolved one is not re-reported


def test_many_resolved_commands_leave_no_deadline_bookkeeping_behind():
    clock = Clock()
    q = CommandQueue(clock, ttl=60)
    for _ in range(1000):
        q.resolve({"id": q.enqueue("dom", {}, "o").id, "result": None})
    live = q.enqueue("dom", {}, "o")
    q.expire()
    assert q.outstanding() == [live]
    assert len(q._deadlines) <= 2 * len(q.outstanding()) + 64


def test_wait_fires_at_once_when_a_command_is_queued():
    clock = Clock()
    q = CommandQueue(clock)
    d = q.wait(5)
    assert not_fired(d)
    q.enqueue("dom", {}, "o")
    assert fired(d) is None
    assert q.waiting == 0
    assert clock.getDelayedCalls() == []


def test_wait_times_out_with_none():
    clock = Clock()
    q = CommandQueue(clock)
    d = q.wait(5)
    clock.advance(4.9)
    assert not_fired(d)
    clock.advance(0.1)
    assert fired(d) is None
    assert q.waiting == 0 and clock.getDelayedCalls() == []


def test_cancelled_wait_leaves_no_timer_or_waiter():
    clock = Clock()
    q = CommandQueue(clock)
    d = q.wait(5)
    d.cancel()
    assert fired(d).check(CancelledError)
    assert q.waiting == 0
    assert clock.getDelayedCalls() == []
    q.enqueue("dom", {}, "o")  # waking after a cancel must not touch the dead Deferred


def test_fail_all_reports_every_outstanding_command():
    q = CommandQueue(Clock())
    a = q.enqueue("dom", {}, "A")
    b = q.enqueue("dom", {}, "B")
    results = []
    q.on_result(results.append)
    from gasoline.core.errors import ExtensionDisconnected

    failed = q.fail_all(ExtensionDisconnected("gone"))
    assert failed == [a, b]
    assert [(r["id"], r["owner"], r["error"]) for r in results] == [
        (a.id, "A", "extension_disconnected"), (b.id, "B", "extension_disconnected")
    ]
    assert q.outstanding() == [] and q.deliverable() == []


def test_command_is_a_frozen_value():
    c = Command("q-1", "dom", {}, None, None, None, 0.0, 1.0)
    assert c.number == 1
    assert c == Command("q-1", "dom", {}, None, None, None, 0.0, 1.0)


# -- ExtensionLink -------------------------------------------------------------------------------


def test_sync_with_a_command_waiting_answers_at_once_with_fast_poll():
    clock = Clock()
    clock.advance(1_700_000_000)
    link = make_link(clock)
    cmd = link.commands.enqueue("dom", {"selector": "a"}, "c", tab_id=3)
    resp = fired(link.sync({"ext_session_id": "ext_1_x", "settings": {}}))
    assert resp == {
        "ack": True,
        "commands": [{"id": cmd.id, "type": "dom", "params": {"selector": "a"}, "tab_id": 3}],
        "next_poll_ms": 200,
        "server_time": "2023-11-14T22:13:20.000Z",
        "server_version": EXTENSION_COMPAT_VERSION,
        "capture_overrides": {},
        "daemon_instance": link.instance,
    }
    datetime.fromisoformat(resp["server_time"].replace("Z", "+00:00"))
    assert EXTENSION_COMPAT_VERSION.startswith("0.7.")
    link.stop()
    assert clock.getDelayedCalls() == []


def test_idle_sync_is_held_five_seconds_then_answers_empty_and_asks_for_the_next_at_once(clock, link):
    d = link.sync({})
    clock.advance(4.9)
    assert not_fired(d)
    clock.advance(0.1)
    resp = fired(d)
    # No pause between polls: the next one is held the same way, so one is always waiting and a
    # command queued at any moment goes out at once (a pause would be a quantum it waits out).
    assert resp["commands"] == [] and resp["next_poll_ms"] == 0


def test_a_sync_reporting_results_is_answered_at_once_and_the_next_poll_comes_at_once(clock, link):
    cmd = link.commands.enqueue("dom", {}, "agent")
    assert [c["id"] for c in fired(link.sync({}))["commands"]] == [cmd.id]
    resp = fired(link.sync({"last_command_ack": cmd.id,
                            "command_results": [{"id": cmd.id, "status": "complete", "result": {}}]}))
    assert resp["commands"] == [] and resp["next_poll_ms"] == 0


def test_after_handing_out_commands_only_an_extension_that_pushes_results_is_asked_back_at_once(clock, link):
    """The published extension reports a result on its next poll, which must not be held while
    the command runs: it waits 200 ms. An extension that says C{command_push} sends each result on
    a sync of its own, so its next poll may be held at once."""
    cmd = link.commands.enqueue("dom", {}, "agent")
    assert fired(link.sync({}))["next_poll_ms"] == 200
    assert fired(link.sync({"command_push": "yes"}))["next_poll_ms"] == 200  # only true counts
    assert fired(link.sync({"command_push": True}))["next_poll_ms"] == 0
    link.commands.ack(cmd.id)
    d = link.sync({"command_push": True})
    assert not_fired(d)  # its next poll is held
    d.cancel()


def test_pushes_are_answered_at_once_while_the_poll_stays_held(clock, link):
    cmd = link.commands.enqueue("dom", {}, "agent")
    results = []
    link.commands.on_result(results.append)
    d = link.sync({"settings": {"tracked_tab_id": 7, "pilot_enabled": True}, "command_push": True,
                   "last_command_ack": cmd.id})
    assert not_fired(d)  # the poll is held while the command runs
    # A results push.
    push = fired(link.sync({"command_push": True, "hold": False, "in_progress": [],
                            "command_results": [{"id": cmd.id, "status": "complete", "result": {"ok": 1}}]}))
    assert push["commands"] == [] and [r["id"] for r in results] == [cmd.id]
    assert link.settings == {"tracked_tab_id": 7, "pilot_enabled": True}  # none sent: kept
    # A settings push: the tracked page changed.
    pushed = fired(link.sync({"command_push": True, "hold": False,
                              "settings": {"tracked_tab_id": 7, "tracked_tab_url": "http://a.test/2"}}))
    assert pushed["commands"] == [] and link.settings["tracked_tab_url"] == "http://a.test/2"
    assert not_fired(d) and link.commands.waiting == 1
    # A command queued now answers the held poll at once.
    nxt = link.commands.enqueue("dom", {}, "agent")
    assert [c["id"] for c in fired(d)["commands"]] == [nxt.id]
    # Only hold false makes a sync a push.
    link.commands.ack(nxt.id)
    held = link.sync({"command_push": True, "hold": 0})
    assert not_fired(held)
    held.cancel()


def test_with_long_polls_off_the_answers_ask_for_a_pause(clock):
    link = make_link(clock)
    link.long_poll = 0
    assert fired(link.sync({}))["next_poll_ms"] == 1000
    link.commands.enqueue("dom", {}, "agent")
    assert fired(link.sync({"command_push": True}))["next_poll_ms"] == 200
    link.stop()


def test_new_command_wakes_a_held_sync_at_once(clock, link):
    d = link.sync({})
    clock.advance(1)
    cmd = link.commands.enqueue("execute", {"script": "1+1"}, "c")
    resp = fired(d)
    assert [c["id"] for c in resp["commands"]] == [cmd.id]
    assert resp["next_poll_ms"] == 200
    assert link.commands.waiting == 0


def test_commands_are_resent_on_every_sync_until_acked(clock, link):
    a = link.commands.enqueue("dom", {}, "c")
    b = link.commands.enqueue("dom", {}, "c")
    assert [c["id"] for c in fired(link.sync({}))["commands"]] == [a.id, b.id]
    assert [c["id"] for c in fired(link.sync({}))["commands"]] == [a.id, b.id]
    assert [c["id"] for c in fired(link.sync({"last_command_ack": a.id}))["commands"]] == [b.id]
    d = link.sync({"last_command_ack": b.id})
    assert not_fired(d)  # nothing left to hand out: long poll
    d.cancel()


def test_one_sync_hands_out_at_most_max_commands_and_asks_for_the_rest_at_once():
    clock = Clock()
    link = make_link(clock)
    link.max_commands = 3
    ids = [link.commands.enqueue("dom", {}, "c").id for _ in range(7)]
    first = fired(link.sync({}))
    assert [c["id"] for c in first["commands"]] == ids[:3]
    assert first["next_poll_ms"] == 0  # more are waiting: come back now
    again = fired(link.sync({}))  # not acked yet: the same oldest three again
    assert [c["id"] for c in again["commands"]] == ids[:3]
    second = fired(link.sync({"last_command_ack": ids[2]}))
    assert [c["id"] for c in second["commands"]] == ids[3:6] and second["next_poll_ms"] == 0
    last = fired(link.sync({"last_command_ack": ids[5]}))
    assert [c["id"] for c in last["commands"]] == ids[6:]
    assert last["next_poll_ms"] == 200  # everything handed out: the usual busy poll
    link.stop()


def test_command_results_in_a_sync_resolve_their_commands():
    clock = Clock()
    link = make_link(clock)
    cmd = link.commands.enqueue("dom", {}, "agent")
    results = []
    link.commands.on_result(results.append)
    d = link.sync({
        "last_command_ack": cmd.id,
        "command_results": [
            {"id": cmd.id, "status": "complete", "result": {"matches": 2}},
            {"id": cmd.id, "status": "complete", "result": "duplicate"},
            {"id": "q-404", "status": "complete"},
            "garbage",
        ],
    })
    # Nothing left to hand out, but a sync that reports results is answered at once (holding it
    # would delay the extension's next result by the long poll).
    assert fired(d)["commands"] == []
    assert [(r["id"], r["result"]) for r in results] == [(cmd.id, {"matches": 2})]
    assert results[0]["owner"] == "agent"
    link.stop()


def test_settings_are_replaced_by_each_sync():
    link = make_link()
    link.commands.enqueue("dom", {}, "c")  # keep syncs answering at once
    fired(link.sync({"settings": {"tracked_tab_id": 5, "pilot_enabled": True}}))
    assert link.settings == {"tracked_tab_id": 5, "pilot_enabled": True}
    fired(link.sync({"settings": {"tracked_tab_id": 0}}))
    assert link.settings == {"tracked_tab_id": 0}
    fired(link.sync({"settings": "not an object"}))
    assert link.settings == {"tracked_tab_id": 0}
    link.stop()


def test_extension_logs_are_redacted_into_their_buffer():
    clock = Clock()
    link = make_link(clock)
    link.commands.enqueue("dom", {}, "c")
    fired(link.sync({"extension_logs": [
        {"level": "info", "message": "auth header Bearer abc.def.ghi123 sent"},
        {"level": "debug", "message": "ok", "data": {"password": "hunter2", "n": 1}},
        "not an entry",
    ]}))
    entries = link.store.read(EXTENSION_LOGS).items
    assert len(entries) == 2
    assert "abc.def.ghi123" not in json.dumps(entries)
    assert "hunter2" not in json.dumps(entries)
    assert entries[1]["data"]["n"] == 1
    link.stop()


def test_extension_is_disconnected_ten_seconds_after_the_last_sync():
    clock = Clock()
    link = make_link(clock)
    assert link.connected is False and link.last_sync is None
    link.commands.enqueue("dom", {}, "c")
    fired(link.sync({}))
    assert link.connected is True
    clock.advance(9)
    fired(link.sync({}))  # the timer restarts on every sync
    clock.advance(9.9)
    assert link.connected is True
    clock.advance(0.1)
    assert link.connected is False
    assert clock.getDelayedCalls() == []


def test_going_disconnected_fails_pending_commands_fast_and_runs_hooks():
    clock = Clock()
    link = make_link(clock)
    hooks = []
    link.on_disconnect(lambda: hooks.append(clock.seconds()))
    remove = link.on_disconnect(lambda: hooks.append("removed hook ran"))
    remove()
    results = []
    link.commands.on_result(results.append)
    link.commands.enqueue("dom", {}, "agent")
    fired(link.sync({}))
    clock.advance(10)
    assert hooks == [10.0]
    assert [(r["status"], r["error"], r["owner"]) for r in results] == [
        ("error", "extension_disconnected", "agent")
    ]
    assert link.commands.outstanding() == []
    from gasoline.core.errors import ExtensionDisconnected

    with pytest.raises(ExtensionDisconnected):
        link.require_connected()
    assert clock.getDelayedCalls() == []


def test_stop_cancels_the_liveness_timer(clock, link):
    link.commands.enqueue("dom", {}, "c")
    fired(link.sync({}))
    assert len(clock.getDelayedCalls()) == 1


def test_cancelled_long_poll_leaves_only_the_liveness_timer():
    clock = Clock()
    link = make_link(clock)
    d = link.sync({})
    d.cancel()
    assert fired(d).check(CancelledError)
    assert link.commands.waiting == 0
    assert len(clock.getDelayedCalls()) == 1  # liveness only
    link.stop()
    assert clock.getDelayedCalls() == []


# -- over HTTP -----------------------------------------------------------------------------------


def make_app(tmp_path):
    clock = Clock()
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    return app, clock, StubTreq(app.resource)


def response(treq, d):
    return stub_answer(treq, d)


def test_http_sync_long_polls_and_is_woken_by_a_command(tmp_path):
    app, clock, treq = make_app(tmp_path)
    d = treq.post(f"{URL}/sync", data=json.dumps({"ext_session_id": "s1"}), headers=EXTENSION_HEADERS)
    out = []
    d.addCallback(lambda r: treq.content(r).addCallback(lambda body: out.append((r.code, body))))
    treq.flush()
    assert out == []
    cmd = app.extension.commands.enqueue("dom", {"selector": "p"}, "agent")
    treq.flush()
    code, body = out[0]
    assert code == 200
    assert json.loads(body)["commands"] == [cmd.to_json()]
    app.extension.stop()
    app.store.notifier.stop()
    assert clock.getDelayedCalls() == []


def test_http_sync_get_is_405_and_bad_json_is_400(tmp_path):
    app, clock, treq = make_app(tmp_path)
    r, body = response(treq, treq.get(f"{URL}/sync", headers=EXTENSION_HEADERS))
    assert r.code == 405 and "error" in json.loads(body)
    r, body = response(treq, treq.post(f"{URL}/sync", data=b"{nope", headers=EXTENSION_HEADERS))
    assert r.code == 400 and json.loads(body)["error"].startswith("invalid JSON")
    r, body = response(treq, treq.post(f"{URL}/sync", data=b"[1]", headers=EXTENSION_HEADERS))
    assert r.code == 400
    assert app.extension.commands.waiting == 0


def test_client_going_away_during_a_long_poll_cleans_up(tmp_path):
    """Klein cancels the route's Deferred when the connection drops: no waiter, no poll timer."""
    clock = Clock()
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    site = GasolineSite(app.resource, reactor=clock)
    proto = site.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    body = b"{}"
    proto.dataReceived(
        b"POST /sync HTTP/1.1\r\nHost: 127.0.0.1:7890\r\n"
        b"X-Gasoline-Client: gasoline-extension/0.7.9\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    assert app.extension.commands.waiting == 1
    assert transport.value() == b""
    proto.connectionLost(ConnectionDone_())
    assert app.extension.commands.waiting == 0
    app.extension.stop()
    assert clock.getDelayedCalls() == []


def ConnectionDone_():
    from twisted.internet.error import ConnectionDone
    from twisted.python.failure import Failure

    return Failure(ConnectionDone())

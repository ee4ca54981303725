"""The query router (gasoline.core.extension.router) on a task.Clock: routing, isolation, timeouts,
cancellation, disconnects, limits, async mode, and the screenshot path over StubTreq."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from treq.testing import StubTreq

from gasoline.app import Config, build
from gasoline.core.clients.registry import ClientRegistry
from gasoline.core.extension.commands import CommandQueue
from gasoline.core.errors import (
    ExtensionDisconnected,
    ExtensionTimeout,
    GasolineError,
    InvalidParam,
    QueueFull,
)
from gasoline.core.extension.link import ExtensionLink
from gasoline.core.errors import CommandCancelled, ExtensionError
from gasoline.core.extension.router import QueryRouter
from gasoline.core.storage.store import TelemetryStore
from gasoline.testing import EXTENSION_HEADERS


class World:
    """A link + queue + router on one Clock, with the extension's side driven by hand."""

    def __init__(self, **router_kw):
        self.clock = Clock()
        self.clock.advance(1_000)
        self.link = ExtensionLink(self.clock, TelemetryStore(self.clock), CommandQueue(self.clock))
        self.router = QueryRouter(self.clock, self.link, **router_kw)

    def connect(self):
        d = self.link.sync({"ext_session_id": "ext_1"})  # one sync: connected; drop its long poll
        d.addErrback(lambda f: f.trap(CancelledError))
        d.cancel()

    def sync(self, results=(), ack=None):
        """One extension sync reporting C{results}; returns the commands handed out."""
        body = {"command_results": list(results)}
        if ack is not None:
            body["last_command_ack"] = ack
        out = []
        d = self.link.sync(body)
        d.addCallback(out.append)
        if not out:
            d.addErrback(lambda f: f.trap(CancelledError))
            d.cancel()
            return []
        return out[0]["commands"]

    def close(self):
        self.link.stop()
        self.link.store.notifier.stop()
        self.router.close()


def outcome(d):
    """What C{d} fired with (a Failure is consumed); fails the test if it has not fired."""
    out = []
    d.addBoth(out.append)
    assert out, "Deferred has not fired"
    return out[0]


def has_fired(d) -> bool:
    out = []
    d.addBoth(lambda r: (out.append(r), r)[1])
    return bool(out)


@pytest.fixture
def w():
    world = World()
    world.connect()
    yield world
    world.close()


def test_two_owners_concurrently_each_get_their_own_result(w):
    da = w.router.call("A", "dom", {"selector": "#a"})
    db = w.router.call("B", "dom", {"selector": "#b"})
    commands = w.sync()
    by_selector = {c["params"]["selector"]: c["id"] for c in commands}
    assert set(by_selector) == {"#a", "#b"}
    # Answer B first, in one sync, with A's result after it.
    w.sync([
        {"id": by_selector["#b"], "status": "complete", "result": {"answer": "for B"}},
        {"id": by_selector["#a"], "status": "complete", "result": {"answer": "for A"}},
    ], ack=commands[-1]["id"])
    assert outcome(da) == {"answer": "for A"}
    assert outcome(db) == {"answer": "for B"}
    assert w.router.pending_count() == 0
    assert w.clock.getDelayedCalls() == [w.link._timer]  # only the link's liveness timer


def test_a_result_fires_only_the_deferred_of_its_command_id(w):
    da = w.router.call("A", "dom", {"selector": "x"})
    db = w.router.call("B", "dom", {"selector": "x"})
    a_id = w.router.pending_commands("A")[0]["command_id"]
    w.sync([{"id": a_id, "status": "complete", "result": "only A"}])
    assert outcome(da) == "only A"
    assert not has_fired(db)
    assert [p["command_id"] for p in w.router.pending_commands("B")] != [a_id]
    db.cancel()
    outcome(db)


def test_a_result_delivered_twice_is_ignored_the_second_time(w):
    d = w.router.call("A", "dom", {})
    cid = w.router.pending_commands("A")[0]["command_id"]
    w.sync([{"id": cid, "status": "complete", "result": 1}])
    w.sync([{"id": cid, "status": "complete", "result": 2}])
    assert outcome(d) == 1
    assert w.router.stats["complete"] == 1


def test_call_times_out_with_extension_timeout_and_removes_the_command(w):
    d = w.router.call("A", "dom", {"selector": "p"}, timeout=2.0)
    cid = w.router.pending_commands("A")[0]["command_id"]
    w.clock.advance(1.9)
    assert not has_fired(d)
    w.clock.advance(0.2)
    failure = outcome(d)
    assert isinstance(failure, Failure) and failure.check(ExtensionTimeout)
    assert failure.value.code == "extension_timeout"
    assert cid in failure.value.message and "2 s" in failure.value.message
    assert w.link.commands.get(cid) is None
    assert w.sync() == []  # no longer delivered
    assert w.router.pending_commands("A") == []
    assert w.router.failed_commands("A")[0]["status"] == "timeout"
    # A late result for the timed-out command goes nowhere.
    w.sync([{"id": cid, "status": "complete", "result": "late"}])
    w.close()
    assert w.clock.getDelayedCalls() == []


def test_cancel_removes_the_command_so_it_is_not_delivered_any_more(w):
    d = w.router.call("A", "dom", {"selector": "p"})
    keep = w.router.call("A", "dom", {"selector": "q"})
    cid = w.router.pending_commands("A")[0]["command_id"]
    assert w.router.cancel("A", cid) is True
    failure = outcome(d)
    assert failure.check(CancelledError)
    delivered = w.sync()
    assert [c["params"]["selector"] for c in delivered] == ["q"]
    assert w.router.failed_commands("A")[0]["status"] == "cancelled"
    keep.cancel()
    outcome(keep)
    w.close()
    assert w.clock.getDelayedCalls() == []


def test_another_client_cannot_cancel_an_owners_command(w):
    d = w.router.call("A", "dom", {})
    cid = w.router.pending_commands("A")[0]["command_id"]
    assert w.router.cancel("B", cid) is False
    assert not has_fired(d)
    assert [c["id"] for c in w.sync()] == [cid]
    d.cancel()
    outcome(d)


def test_client_gone_cancels_only_that_clients_commands(w):
    a1 = w.router.call("A", "dom", {"n": 1})
    a2 = w.router.submit("A", "dom", {"n": 2})
    b = w.router.call("B", "dom", {"n": 3})
    assert w.router.client_gone("A") == 2
    assert outcome(a1).check(CancelledError)
    assert w.router.command_result("A", a2)["status"] == "cancelled"
    assert [c["params"]["n"] for c in w.sync()] == [3]
    assert w.router.pending_count() == 1 and not has_fired(b)
    bid = w.router.pending_commands("B")[0]["command_id"]
    w.sync([{"id": bid, "status": "complete", "result": "b"}])
    assert outcome(b) == "b"
    w.close()
    assert w.clock.getDelayedCalls() == []


def test_disconnected_extension_fails_fast_without_queueing():
    world = World()  # never synced
    d = world.router.call("A", "dom", {})
    failure = outcome(d)
    assert failure.check(ExtensionDisconnected)
    assert failure.value.code == "extension_disconnected"
    assert world.link.commands.outstanding() == []
    with pytest.raises(ExtensionDisconnected):
        world.router.submit("A", "dom", {})
    world.close()
    assert world.clock.getDelayedCalls() == []


def test_pending_calls_fail_fast_when_the_extension_goes_away(w):
    da = w.router.call("A", "dom", {}, timeout=60)
    corr = w.router.submit("B", "a11y", {}, timeout=60)
    w.clock.advance(10)  # no sync for 10 s: the link declares the extension gone
    failure = outcome(da)
    assert failure.check(ExtensionDisconnected)
    result = w.router.command_result("B", corr)
    assert result["status"] == "error" and result["error"] == "extension_disconnected"
    assert w.router.pending_count() == 0
    assert outcome(w.router.call("A", "dom", {})).check(ExtensionDisconnected)
    w.close()
    assert w.clock.getDelayedCalls() == []


def test_disconnect_hook_fails_commands_the_queue_no_longer_holds(w):
    """Even a command already removed from the queue (delivered, then lost) fails on disconnect."""
    d = w.router.call("A", "dom", {}, timeout=60)
    cid = w.router.pending_commands("A")[0]["command_id"]
    w.link.commands.cancel(cid)  # the queue forgot it; the router still waits
    w.clock.advance(10)
    assert outcome(d).check(ExtensionDisconnected)
    assert w.router.pending_count() == 0


def test_extension_error_result_fails_with_its_text(w):
    d = w.router.call("A", "dom", {"selector": "???"})
    cid = w.router.pending_commands("A")[0]["command_id"]
    w.sync([{"id": cid, "status": "error", "error": "invalid selector: ???"}])
    failure = outcome(d)
    assert failure.check(ExtensionError) and isinstance(failure.value, GasolineError)
    assert "invalid selector: ???" in failure.value.message
    assert failure.value.to_json()["extension_error"] == "invalid selector: ???"
    entry = w.router.failed_commands("A")[0]
    assert entry["status"] == "error" and entry["command_id"] == cid


def test_extension_timeout_and_cancelled_statuses_map_to_their_errors(w):
    d1 = w.router.call("A", "dom", {})
    d2 = w.router.call("A", "dom", {})
    ids = [p["command_id"] for p in w.router.pending_commands("A")]
    w.sync([{"id": ids[0], "status": "timeout", "error": "page busy"},
            {"id": ids[1], "status": "cancelled", "error": "user closed tab"}])
    assert outcome(d1).check(ExtensionTimeout)
    f2 = outcome(d2)
    assert f2.check(CommandCancelled) and "user closed tab" in f2.value.message


def test_unknown_query_type_from_the_extension_is_an_error(w):
    d = w.router.call("A", "frobnicate", {})
    cid = w.router.pending_commands("A")[0]["command_id"]
    w.sync([{"id": cid, "error": "unknown_query_type"}])
    failure = outcome(d)
    assert failure.check(ExtensionError) and "unknown_query_type" in failure.value.message


def test_per_client_limit_refuses_with_queue_full_and_leaves_others_alone():
    world = World(per_client_limit=2, total_limit=10)
    world.connect()
    held = [world.router.call("A", "dom", {}) for _ in range(2)]
    failure = outcome(world.router.call("A", "dom", {}))
    assert failure.check(QueueFull) and failure.value.code == "queue_full"
    assert failure.value.to_json()["scope"] == "client"
    with pytest.raises(QueueFull):
        world.router.submit("A", "dom", {})
    other = world.router.call("B", "dom", {})
    assert not has_fired(other)
    assert len(world.link.commands.outstanding()) == 3
    # Once one of A's commands finishes, A may queue again.
    held[0].cancel()
    outcome(held[0])
    third = world.router.call("A", "dom", {})
    assert not has_fired(third)
    for d in (held[1], other, third):
        d.cancel()
        outcome(d)
    world.close()
    assert world.clock.getDelayedCalls() == []


def test_total_limit_refuses_with_queue_full():
    world = World(per_client_limit=5, total_limit=3)
    world.connect()
    held = [world.router.call(owner, "dom", {}) for owner in ("A", "B", "C")]
    failure = outcome(world.router.call("D", "dom", {}))
    assert failure.check(QueueFull) and failure.value.to_json()["scope"] == "total"
    assert world.router.stats["queue_full"] == 1
    for d in held:
        d.cancel()
        outcome(d)
    world.close()
    assert world.clock.getDelayedCalls() == []


@pytest.mark.parametrize("bad", [
    {"owner": ""}, {"type": ""}, {"params": [1]}, {"timeout": 0}, {"timeout": -1},
    {"timeout": True}, {"timeout": "5"}, {"timeout": 10_000}, {"timeout": float("nan")},
    {"tab_id": "7"}, {"tab_id": True},
])
def test_bad_arguments_are_invalid_param(w, bad):
    args = {"owner": "A", "type": "dom", "params": {}, "timeout": None, "tab_id": None, **bad}
    d = w.router.call(args["owner"], args["type"], args["params"], tab_id=args["tab_id"],
                      timeout=args["timeout"])
    assert outcome(d).check(InvalidParam)
    assert w.link.commands.outstanding() == []


# -- async mode -----------------------------------------------------------------------------------


def test_submit_returns_a_correlation_id_and_only_its_owner_reads_the_result(w):
    corr = w.router.submit("A", "dom", {"selector": "h1"})
    assert w.router.command_result("A", corr)["status"] == "pending"
    commands = w.sync()
    assert commands[0]["correlation_id"] == corr
    w.sync([{"id": commands[0]["id"], "status": "complete", "result": {"html": "<h1>"}}])
    result = w.router.command_result("A", corr)
    assert result["status"] == "complete" and result["result"] == {"html": "<h1>"}
    assert result["correlation_id"] == corr and result["command_id"] == commands[0]["id"]
    # Another client gets exactly what an unknown id gets: no_data, nothing else.
    with pytest.raises(GasolineError) as other:
        w.router.command_result("B", corr)
    with pytest.raises(GasolineError) as unknown:
        w.router.command_result("B", "dom-999-deadbeef")
    assert other.value.code == unknown.value.code == "no_data"
    assert other.value.message == str(unknown.value).replace("dom-999-deadbeef", corr)
    assert other.value.to_json().keys() == unknown.value.to_json().keys()
    assert "result" not in other.value.to_json()


def test_async_command_times_out_into_a_timeout_status(w):
    corr = w.router.submit("A", "dom", {}, timeout=3)
    w.clock.advance(3)
    result = w.router.command_result("A", corr)
    assert result["status"] == "timeout" and result["error"] == "extension_timeout"
    assert w.sync() == []


def test_async_error_result_keeps_the_extension_text(w):
    corr = w.router.submit("A", "execute", {"script": "boom()"})
    cid = w.sync()[0]["id"]
    w.sync([{"id": cid, "status": "error", "error": "ReferenceError: boom is not defined"}])
    result = w.router.command_result("A", corr)
    assert result["status"] == "error" and "boom is not defined" in result["message"]


def test_cancel_accepts_a_correlation_id(w):
    corr = w.router.submit("A", "dom", {})
    assert w.router.cancel("B", corr) is False
    assert w.router.cancel("A", corr) is True
    assert w.router.command_result("A", corr)["status"] == "cancelled"
    assert w.sync() == []


def test_finished_outcomes_expire_then_disappear(w):
    w.router.result_ttl = 100
    corr = w.router.submit("A", "dom", {})
    cid = w.sync()[0]["id"]
    w.sync([{"id": cid, "status": "complete", "result": "secret-ish"}])
    w.clock.advance(99)
    w.connect()
    assert w.router.command_result("A", corr)["status"] == "complete"
    w.clock.advance(2)
    expired = w.router.command_result("A", corr)
    assert expired["status"] == "expired" and "result" not in expired
    w.clock.advance(101)
    with pytest.raises(GasolineError) as e:
        w.router.command_result("A", corr)
    assert e.value.code == "no_data"


def test_outcomes_per_client_are_bounded_dropping_the_oldest_finished(w):
    w.router.max_outcomes = 3
    corrs = []
    for i in range(5):
        corrs.append(w.router.submit("A", "dom", {"i": i}))
        cid = w.sync()[0]["id"]
        w.sync([{"id": cid, "status": "complete", "result": i}], ack=cid)
    with pytest.raises(GasolineError):
        w.router.command_result("A", corrs[0])
    assert [w.router.command_result("A", c)["result"] for c in corrs[2:]] == [2, 3, 4]


def test_pending_and_failed_commands_list_only_the_callers_own(w):
    a = w.router.call("A", "dom", {"selector": "a"})
    corr = w.router.submit("A", "a11y", {})
    b = w.router.call("B", "dom", {"selector": "b"}, timeout=1)
    w.clock.advance(1)
    outcome(b)
    mine = w.router.pending_commands("A")
    assert [p["type"] for p in mine] == ["dom", "a11y"]
    assert mine[1]["correlation_id"] == corr
    assert all(p["status"] == "pending" and p["delivered"] is False for p in mine)
    assert w.router.pending_commands("B") == []
    assert w.router.failed_commands("A") == []
    assert [f["status"] for f in w.router.failed_commands("B")] == ["timeout"]
    # Acknowledged commands show as delivered.
    commands = w.sync()
    w.sync(ack=commands[-1]["id"])
    assert all(p["delivered"] for p in w.router.pending_commands("A"))
    a.cancel()
    outcome(a)


def test_registry_mirrors_the_owners_pending_command_ids(tmp_path):
    world = World()
    registry = ClientRegistry(world.clock, 3600, 10, tmp_path)
    registry.register("A")
    world.router.registry = registry
    world.connect()
    d = world.router.call("A", "dom", {})
    cid = world.router.pending_commands("A")[0]["command_id"]
    assert registry.get("A").pending_commands == {cid}
    world.sync([{"id": cid, "status": "complete", "result": None}])
    assert outcome(d) is None
    assert registry.get("A").pending_commands == set()
    world.close()


def test_no_timers_leak_after_a_mix_of_outcomes(w):
    calls = [w.router.call(f"c{i % 3}", "dom", {"i": i}, timeout=5) for i in range(9)]
    commands = w.sync()
    w.sync([{"id": c["id"], "status": "complete", "result": c["params"]["i"]}
            for c in commands[:3]], ack=commands[-1]["id"])
    w.router.cancel("c0", commands[3]["id"])
    w.router.client_gone("c1")
    w.clock.advance(5)
    results = [outcome(d) for d in calls]
    assert results[:3] == [0, 1, 2]
    assert all(isinstance(r, Failure) for r in results[3:])
    assert w.router.pending_count() == 0
    w.close()
    assert w.clock.getDelayedCalls() == []


# -- screenshots through POST /screenshots with query_id --------------------------------------------


PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()


def test_screenshot_command_resolves_through_post_screenshots_for_each_owner(tmp_path):
    clock = Clock()
    clock.advance(1_700_000_000)
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    treq = StubTreq(app.resource)
    app.extension.touch()
    da = app.router.call("A", "screenshot", {})
    db = app.router.call("B", "screenshot", {})
    ids = [c.id for c in app.extension.commands.deliverable()]

    def post(query_id):
        out = []
        d = treq.post("http://127.0.0.1:7890/screenshots", headers=EXTENSION_HEADERS,
                      data=json.dumps({"data_url": PNG, "url": "http://x/", "query_id": query_id}))
        d.addCallback(lambda r: treq.content(r).addCallback(lambda b: out.append((r.code, b))))
        treq.flush()
        return out[0]

    # Two uploads within the same second: both answer their query (no 429 for query uploads).
    code_b, _ = post(ids[1])
    code_a, _ = post(ids[0])
    assert code_a == code_b == 200
    ra, rb = outcome(da), outcome(db)
    assert ra["path"] != rb["path"]
    assert (tmp_path / "screenshots" / ra["filename"]).exists()
    assert (tmp_path / "screenshots" / rb["filename"]).exists()
    # An unsolicited upload right after is still rate limited.
    code, _ = post("q-999")
    assert code == 429


def test_outcomes_and_failures_of_clients_that_never_read_them_are_swept(w):
    w.router.result_ttl = 100
    corr = w.router.submit("A", "dom", {}, timeout=1)
    failing = w.router.call("B", "dom", {}, timeout=1)
    w.clock.advance(1)
    assert outcome(failing).check(ExtensionTimeout)
    assert w.router._outcomes and w.router._failed
    # Neither A nor B reads again; other clients' commands drive the sweep.
    for _ in range(3):
        w.clock.advance(100)
        w.connect()
        d = w.router.call("C", "dom", {})
        d.cancel()
        assert outcome(d).check(CancelledError)
    assert "A" not in w.router._outcomes and "B" not in w.router._failed
    with pytest.raises(GasolineError):
        w.router.command_result("A", corr)


@settings(max_examples=60, deadline=None)
@given(
    owners=st.lists(st.sampled_from(["A", "B", "C"]), min_size=1, max_size=12),
    data=st.data(),
)
def test_any_order_of_results_fires_each_owner_with_its_own_answer(owners, data):
    """Hypothesis: results in any order, split across syncs, repeated, mixed with unknown and
    garbage ids, and some callers cancelling: every Deferred gets its own answer or nothing."""
    # Draw everything first: hypothesis may abort an example inside a draw.
    n = len(owners)
    order = data.draw(st.permutations(range(n)))
    cancelled = data.draw(st.sets(st.integers(0, n - 1), max_size=n // 2))
    extra = data.draw(st.lists(st.one_of(
        st.integers(0, n - 1), st.sampled_from(["unknown", "no-id", "garbage"])), max_size=5))
    cut = data.draw(st.integers(0, n + len(extra)))
    world = World()
    world.connect()
    calls = [(owner, world.router.call(owner, "dom", {"n": i})) for i, owner in enumerate(owners)]
    commands = world.sync()
    for i in cancelled:
        world.router.cancel(owners[i], commands[i]["id"])

    def result_for(item):
        if isinstance(item, int):
            c = commands[item]
            return {"id": c["id"], "status": "complete", "result": {"n": c["params"]["n"]}}
        return {"unknown": {"id": "q-999", "result": {"n": -1}}, "no-id": {"id": None},
                "garbage": {"nope": 1}}[item]

    results = [result_for(i) for i in list(order) + extra]
    world.sync(results[:cut])
    world.sync(results[cut:])
    for i, (owner, d) in enumerate(calls):
        got = outcome(d)
        if i in cancelled:
            assert isinstance(got, Failure) and got.check(CancelledError)
        else:
            assert got == {"n": i}
    assert world.router.pending_count() == 0
    world.close()
    assert world.clock.getDelayedCalls() == []


def test_tab_id_is_delivered_with_the_command(w):
    d = w.router.call("A", "dom", {"selector": "p"}, tab_id=12)
    assert w.sync()[0]["tab_id"] == 12
    d.cancel()
    assert outcome(d).check(CancelledError)


# -- the extension's own error codes: every one it can send is structured ----------------------------

def _extension_codes() -> set[str]:
    """Every error code the extension's sources can put in a result: fail('x', ...),
    new Refused('x', ...) and {error: 'x', ...} literals."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "extension"
    pattern = re.compile(r"(?:\bfail\(|new Refused\(|\berror: )'([a-z_]+)'")
    found: set[str] = set()
    for path in root.rglob("*.js"):
        if "vendor" in path.parts:
            continue
        found.update(pattern.findall(path.read_text()))
    return found


def test_every_code_the_extension_sends_has_its_own_error_and_hint(w):
    from gasoline.core.errors import EXTENSION_CODES

    codes = _extension_codes()
    assert {"file_url_refused", "element_not_found", "invalid_selector"} <= codes  # the scan works
    # unknown_query_type stays generic: the tools turn it into extension_outdated themselves.
    missing = codes - set(EXTENSION_CODES) - {"unknown_query_type"}
    assert not missing, f"extension codes with no structured error: {sorted(missing)}"
    for code in sorted(codes - {"unknown_query_type"}):
        d = w.router.call("A", "dom", {"selector": "#x"})
        cid = w.router.pending_commands("A")[0]["command_id"]
        w.sync([{"id": cid, "status": "error", "error": code,
                 "result": {"error": code, "message": f"what {code} says", "selector": "#x"}}])
        error = outcome(d).value
        body = error.to_json()
        assert body["error"] == code and body["retry"] and f"what {code} says" in body["message"]
        assert body["retryable"] is EXTENSION_CODES[code][0]
        assert body["extension_error"].startswith(code)


def test_the_file_url_hint_names_the_options_toggle():
    from pathlib import Path

    from gasoline.core.errors import EXTENSION_CODES

    options = (Path(__file__).resolve().parent.parent / "extension/options/options.html").read_text()
    hint = EXTENSION_CODES["file_url_refused"][1]
    toggle = "Let agents open and act on local"
    assert toggle in options and toggle in hint

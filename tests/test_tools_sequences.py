"""configure save_sequence / replay_sequence, diff_sessions and restart: through the real MCP
server on a task.Clock (commands answered by hand), plus one real-daemon test of restart."""

from __future__ import annotations

import json
import urllib.request

import pytest
from _mcp_calls import parsed, session_for
from _mcp_calls import start as _start

from gasoline.app import Config, build
from gasoline.core.storage.store import ACTIONS, CONSOLE, NETWORK_BODIES
from gasoline.core.lifecycle import SHUTDOWN_DELAY
from gasoline.testing import client_headers
from gasoline.tools import _playback as playback
from support import DaemonProcess

T0 = 1_700_000_000


@pytest.fixture
def app(tmp_path, clock):
    clock.advance(T0)
    app = build(Config(state_dir=tmp_path, persist=False, tool_rate_limit=0), clock)
    connect(app)
    yield app
    app.router.close()
    app.extension.stop()


def connect(app, pilot=True):
    app.extension.sync({"settings": {"tracked_tab_id": 1, "pilot_enabled": pilot,
                                     "tracked_tab_url": "https://app.test/"}})


def start(app, session, tool="configure", **args):
    """Start a tool call; return the list its response lands in."""
    return _start(app, session, tool, args)


def ok(app, session, **args):
    err, summary, data = parsed(start(app, session, **args))
    assert not err, (summary, data)
    return summary, data


def error(app, session, **args):
    err, summary, data = parsed(start(app, session, **args))
    assert err, (summary, data)
    return data


def answer_all(app, reply=None, status="complete", error=None):
    """Answer every command waiting for the extension; return them."""
    cmds = app.extension.commands.deliverable()
    for cmd in cmds:
        out = {"id": cmd.id, "status": status}
        if reply is not None:
            out["result"] = reply
        if error is not None:
            out["error"] = error
        app.extension.commands.resolve(out)
    return cmds


STEPS = [{"what": "navigate", "url": "https://app.test/login"},
         {"action": "type", "selector": "#user", "text": "ada"},
         {"what": "click", "selector": "text=Sign in"},
         {"what": "get_text", "selector": "h1"}]


# -- save_sequence ----------------------------------------------------------------------------


def test_save_list_get_delete_sequences_per_client(app):
    a, b = session_for(app, "A"), session_for(app, "B")
    summary, data = ok(app, a, what="save_sequence", name="login", steps=STEPS,
                       description="log in as ada")
    assert "4 steps" in summary and data["reference"] == "A:login"
    assert data["steps"][1] == {"what": "type", "selector": "#user", "text": "ada"}
    listed = ok(app, a, what="save_sequence", sequence_action="list")[1]["sequences"]
    assert [(s["name"], s["steps"], s["description"]) for s in listed] == [
        ("login", 4, "log in as ada")]
    # Names are per client: B has none, and B's own "login" does not touch A's.
    assert ok(app, b, what="save_sequence", sequence_action="list")[1]["sequences"] == []
    ok(app, b, what="save_sequence", name="login", steps=STEPS[:1])
    assert len(ok(app, a, what="save_sequence", sequence_action="get",
                  name="login")[1]["steps"]) == 4
    ok(app, a, what="save_sequence", sequence_action="delete", name="login")
    assert error(app, a, what="save_sequence", sequence_action="get", name="login")["error"] \
        == "no_data"
    assert len(ok(app, b, what="save_sequence", sequence_action="get",
                  name="login")[1]["steps"]) == 1
    # Sequences are Gasoline's own kv namespace: not listed by load.
    assert ok(app, a, what="load")[1]["namespaces"] == []


@pytest.mark.parametrize("steps, fragment", [
    ([], "non-empty list"),
    ("click", "non-empty list"),
    ([{"what": "fly"}], "step 0: 'what' must be an interact mode"),
    ([{"selector": "#x"}], "step 0: 'what' must be an interact mode"),
    ([{"what": "click", "selector": "#a"}, 7], "step 1 must be an object"),
    ([{"what": "click", "selector": "#a", "background": True}], "background"),
    ([{"what": "click", "selector": "#a", "wait": False}], "background"),
    ([{"what": "click"}] * (playback.MAX_SEQUENCE_STEPS + 1), "at most"),
    ([{"what": "type", "selector": "#a", "text": "x" * 70_000}], "bytes"),
])
def test_save_sequence_validates_steps_against_the_interact_modes(app, steps, fragment):
    data = error(app, session_for(app, "A"), what="save_sequence", name="bad", steps=steps)
    assert data["error"] == "invalid_param" and fragment in data["message"]


def test_save_sequence_name_rules(app):
    a = session_for(app, "A")
    assert error(app, a, what="save_sequence", steps=STEPS)["error"] == "missing_param"
    assert error(app, a, what="save_sequence", name="x:y", steps=STEPS)["error"] == "invalid_param"
    assert error(app, a, what="save_sequence", name="x")["error"] == "missing_param"


def test_save_sequence_from_the_callers_recorded_actions(app):
    app.store.add(ACTIONS, [
        {"type": "navigate", "timestamp": 1, "to_url": "https://app.test/login"},
        {"type": "input", "timestamp": 2, "value": "ada", "selectors": {"testId": "user"}},
        {"type": "input", "timestamp": 3, "value": "[redacted]", "selectors": {"css": "#pw"}},
        {"type": "scroll", "timestamp": 4, "scroll_y": 300},
        {"type": "click", "timestamp": 5, "selectors": {"role": {"role": "button",
                                                                 "name": "Sign in"}}},
    ])
    summary, data = ok(app, session_for(app, "A"), what="save_sequence", name="rec",
                       from_actions=True)
    assert data["steps"] == [
        {"what": "navigate", "url": "https://app.test/login"},
        {"what": "type", "selector": '[data-testid="user"]', "text": "ada"},
        {"what": "click", "selector": 'role=button[name="Sign in"]'},
    ]
    assert data["skipped_actions"] == 2 and "2 recorded actions skipped" in summary


def test_sequences_persist_with_the_client_state(tmp_path, clock):
    clock.advance(T0)
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    ok(app, session_for(app, "persisted"), what="save_sequence", name="login", steps=STEPS)
    app.registry.flush(force=True)
    again = build(Config(state_dir=tmp_path, persist=False), clock)
    got = ok(again, session_for(again, "persisted"), what="save_sequence",
             sequence_action="get", name="login")[1]
    assert got["steps"][0] == {"what": "navigate", "url": "https://app.test/login"}
    for a in (app, again):
        a.router.close()
        a.extension.stop()


# -- replay_sequence ------------------------------------------------------------------------------


def test_replay_runs_each_step_through_the_router_as_the_caller_in_order(app):
    a = session_for(app, "A")
    session_for(app, "B")  # another client is connected (its pending view must stay empty)
    ok(app, a, what="save_sequence", name="login", steps=STEPS)
    out = start(app, a, what="replay_sequence", name="login")
    seen = []
    while not out:
        cmds = answer_all(app, {"success": True, "text": "Welcome"})
        assert len(cmds) == 1  # one step at a time
        seen.append((cmds[0].type, cmds[0].params.get("action")))
        # Every command belongs to A: B's view of pending commands stays empty.
        assert app.router.pending_count("B") == 0
    assert seen == [("browser_action", "navigate"), ("dom_action", "type"),
                    ("dom_action", "click"), ("dom_action", "get_text")]
    err, summary, data = parsed(out)
    assert not err and data["status"] == "complete" and data["counts"] == {"complete": 4}
    assert summary.startswith("sequence login: 4/4 steps complete")
    assert [s["what"] for s in data["steps"]] == ["navigate", "type", "click", "get_text"]
    # Each AI step was recorded as an action, as an interact call would be.
    recorded = [json.loads(x) for x in app.store.buffers[ACTIONS].read(0).items]
    assert [r.get("source") for r in recorded] == ["ai", "ai", "ai"]
    assert {r.get("client_id") for r in recorded} == {"A"}


def test_replay_stops_at_the_first_failure_unless_continue_on_error(app):
    a = session_for(app, "A")
    ok(app, a, what="save_sequence", name="s", steps=STEPS)
    out = start(app, a, what="replay_sequence", name="s")
    answer_all(app, {"success": True})
    answer_all(app, status="error", error="element_not_found")
    err, summary, data = parsed(out)
    assert not err and data["status"] == "failed"
    assert [s["status"] for s in data["steps"]] == ["complete", "error", "not_run", "not_run"]
    assert data["steps"][1]["error"] == "element_not_found"
    assert "element_not_found" in data["steps"][1]["message"]
    assert "FAILED at step 1 (type" in summary and "2 not run" in summary
    assert app.extension.commands.deliverable() == []

    out = start(app, a, what="replay_sequence", name="s", continue_on_error=True)
    answer_all(app, {"success": True})
    answer_all(app, status="error", error="element_not_found")
    answer_all(app, {"success": True})
    answer_all(app, {"success": True, "text": "hi"})
    _, _, data = parsed(out)
    assert [s["status"] for s in data["steps"]] == ["complete", "error", "complete", "complete"]


def test_replay_refusals(app):
    a = session_for(app, "A")
    assert error(app, a, what="replay_sequence")["error"] == "missing_param"
    assert error(app, a, what="replay_sequence", name="nope")["error"] == "no_data"
    ok(app, a, what="save_sequence", name="s", steps=STEPS)
    # Another client's sequence is reachable on purpose as "client:name", and runs as the caller.
    b = session_for(app, "B")
    out = start(app, b, what="replay_sequence", name="A:s")
    assert app.router.pending_count("B") == 1 and app.router.pending_count("A") == 0
    answer_all(app, status="error", error="stop")
    assert parsed(out)[2]["status"] == "failed"
    # Disconnected extension: refused at once, nothing queued.
    app.clock.advance(11)
    assert error(app, a, what="replay_sequence", name="s")["error"] == "extension_disconnected"


def test_replay_respects_the_per_client_queue_limit(app):
    a = session_for(app, "A")
    ok(app, a, what="save_sequence", name="s", steps=STEPS)
    for _ in range(app.router.per_client_limit):
        app.router.submit("A", "dom", {"selector": "body"})
    assert error(app, a, what="replay_sequence", name="s")["error"] == "queue_full"
    # Other clients are not limited by A's queue.
    b = session_for(app, "B")
    out = start(app, b, what="replay_sequence", name="A:s")
    assert app.router.pending_count("B") == 1 and not out


def test_replay_gives_up_starting_steps_after_its_time_budget(app):
    a = session_for(app, "A")
    ok(app, a, what="save_sequence", name="s", steps=STEPS)
    out = start(app, a, what="replay_sequence", name="s", continue_on_error=True)
    app.clock.advance(playback.REPLAY_BUDGET + 20)  # the first step times out meanwhile
    assert out, "the replay must answer once its budget is spent"
    _, _, data = parsed(out)
    assert [s["status"] for s in data["steps"]] == ["error", "not_run", "not_run", "not_run"]
    assert "budget" in data["steps"][1]["reason"]


# -- diff_sessions ------------------------------------------------------------------------------------


def perf(load, lcp):
    return {"url": "https://app.test/", "timing": {"load": load, "largest_contentful_paint": lcp}}


def test_diff_sessions_between_two_checkpoints_and_now(app):
    a = session_for(app, "A")
    app.store.add(CONSOLE, [{"level": "error", "message": "Old: flaky widget", "ts": T0}])
    app.store.add(NETWORK_BODIES, [{"method": "GET", "url": "https://app.test/api/old",
                                    "status": 500}])
    app.store.add_performance([perf(1000, 900)])
    ok(app, a, what="checkpoint", name="one")
    app.store.add(CONSOLE, [{"level": "error", "message": "New: cart is undefined", "ts": T0 + 1},
                            {"level": "log", "message": "fine", "ts": T0 + 1}])
    app.store.add(NETWORK_BODIES, [
        {"method": "GET", "url": "https://app.test/api/old", "status": 500},
        {"method": "POST", "url": "https://app.test/api/cart?x=1", "status": 404}])
    app.store.add_performance([perf(2500, 910)])
    ok(app, a, what="checkpoint", name="two")
    app.store.add(CONSOLE, [{"level": "error", "message": "Later: after two", "ts": T0 + 2}])

    summary, data = ok(app, a, what="diff_sessions", from_checkpoint="one", to_checkpoint="two")
    assert data["buffers"]["console"] == {"at_from": 1, "at_to": 3, "added": 2}
    assert data["buffers"]["network_bodies"]["added"] == 2
    assert [e["message"] for e in data["new_errors"]] == ["New: cart is undefined"]
    assert [e["message"] for e in data["resolved_errors"]] == ["Old: flaky widget"]
    assert data["new_failing_urls"] == ["POST https://app.test/api/cart"]
    assert data["failing_urls_between"] == ["GET https://app.test/api/old",
                                            "POST https://app.test/api/cart"]
    assert data["vitals"]["changed"] == [{"url": "https://app.test/", "metric": "load",
                                          "before": 1000.0, "after": 2500.0, "delta": 1500.0,
                                          "direction": "worse"}]  # LCP moved by only 10 ms
    assert summary.startswith("one -> two: 1 new error kind(s), 1 resolved, 1 new failing URL")

    # Against now (the default), the later error is new too.
    _, now = ok(app, a, what="diff_sessions", checkpoint="one")
    assert now["to"] == "now"
    assert {e["message"] for e in now["new_errors"]} == {"New: cart is undefined",
                                                         "Later: after two"}
    # Given the wrong way round, it compares in time order and says so.
    _, rev = ok(app, a, what="diff_sessions", from_checkpoint="two", to_checkpoint="one")
    assert rev["from"] == "one" and "other way round" in rev["notes"][0]


def test_diff_sessions_applies_the_callers_noise_rules_and_checkpoint_namespaces(app):
    a, b = session_for(app, "A"), session_for(app, "B")
    ok(app, a, what="checkpoint", name="cp")
    app.store.add(CONSOLE, [{"level": "error", "message": "HMR update failed", "ts": T0},
                            {"level": "error", "message": "Real bug", "ts": T0}])
    ok(app, b, what="noise_rule", noise_action="add", pattern="HMR", field="message")
    assert error(app, b, what="diff_sessions", from_checkpoint="cp")["error"] == "no_data"
    _, seen_by_b = ok(app, b, what="diff_sessions", from_checkpoint="A:cp")
    _, seen_by_a = ok(app, a, what="diff_sessions", from_checkpoint="cp")
    assert [e["message"] for e in seen_by_b["new_errors"]] == ["Real bug"]
    assert seen_by_b["noise_hidden"] == 1
    assert sorted(e["message"] for e in seen_by_a["new_errors"]) == ["HMR update failed",
                                                                     "Real bug"]
    assert error(app, a, what="diff_sessions")["error"] == "missing_param"


# -- restart ----------------------------------------------------------------------------------------


def test_restart_without_confirm_only_reports_what_it_would_affect(app):
    a, b = session_for(app, "A"), session_for(app, "B")
    app.router.submit("B", "dom", {})
    app.router.submit("A", "dom", {})
    stops = []
    app.shutdown.stop = lambda: stops.append(1)
    summary, data = ok(app, a, what="restart")
    assert data["restarted"] is False and data["other_connected_clients"] == 1
    assert data["your_pending_commands"] == 1 and data["other_pending_commands"] == 1
    assert "nothing was done" in summary
    app.clock.advance(1)
    assert stops == [] and not app.shutdown.stopping
    assert b.client_id == "B"


def test_restart_is_refused_while_other_clients_are_connected(app):
    a, b = session_for(app, "A"), session_for(app, "secret-bob")
    stops = []
    app.shutdown.stop = lambda: stops.append(1)
    data = error(app, a, what="restart", confirm=True)
    assert data["error"] == "other_clients_connected" and data["others"] == 1
    assert "secret-bob" not in json.dumps(data)  # how many, never who
    app.clock.advance(1)
    assert stops == []
    # Once B has gone, A may restart.
    app.mcp.close_session(b)
    _, data = ok(app, a, what="restart", confirm=True)
    assert data["restarted"] is True and data["already_stopping"] is False
    assert stops == []
    app.clock.advance(SHUTDOWN_DELAY)
    assert stops == [1]
    assert ok(app, a, what="restart", confirm=True)[1]["already_stopping"] is True


def test_restart_without_a_stop_hook_is_unavailable(app):
    assert app.shutdown.stop is None  # unit tests: tap never set it
    data = error(app, session_for(app, "A"), what="restart", confirm=True)
    assert data["error"] == "restart_unavailable"
    assert error(app, session_for(app, "A"), what="restart", confirm="yes")["error"] \
        == "invalid_param"


def _mcp(d, client, body, session_id=None):
    url = d.url
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               **client_headers(d, client)}
    if session_id:
        headers["mcp-session-id"] = session_id
    req = urllib.request.Request(f"{url}/mcp", data=json.dumps(body).encode(), headers=headers,
                                 method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read().decode()
        sid = resp.headers.get("mcp-session-id") or session_id
    if "data:" in raw and not raw.lstrip().startswith("{"):
        raw = [line[5:] for line in raw.splitlines() if line.startswith("data:")][-1]
    return (json.loads(raw) if raw.strip() else None), sid


def _agent(d, client):
    _, sid = _mcp(d, client, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": client, "version": "1"}}})
    _mcp(d, client, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    return sid


def _configure(d, client, sid, **args):
    out, _ = _mcp(d, client, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": {"name": "configure", "arguments": args}}, sid)
    result = out["result"]
    return result["isError"], json.loads(result["content"][0]["text"].partition("\n")[2])


@pytest.mark.integration
def test_restart_stops_the_real_daemon_only_when_the_caller_is_alone(tmp_path):
    d = DaemonProcess(state_dir=tmp_path / "state")
    d.start()
    try:
        a = _agent(d, "agent-a")
        b = _agent(d, "agent-b")  # a second agent connects
        failed, body = _configure(d, "agent-a", a, what="restart", confirm=True)
        assert failed and body["error"] == "other_clients_connected"
        assert d.process.poll() is None
        # B leaves (DELETE /mcp with its session id ends it); now A is alone and the restart goes
        # ahead.
        req = urllib.request.Request(f"{d.url}/mcp", method="DELETE",
                                     headers={**client_headers(d, "agent-b"), "Mcp-Session-Id": b})
        urllib.request.urlopen(req, timeout=10).close()
        failed, body = _configure(d, "agent-a", a, what="restart", confirm=True)
        assert not failed and body["restarted"] is True, body
        assert d.process.wait(10) == 0
        assert not d.info_path.exists()
    finally:
        d.stop()


def test_steps_that_could_not_be_persisted_are_refused(app):
    data = error(app, session_for(app, "A"), what="save_sequence", name="big",
                 steps=[{"what": "scroll_to", "selector": "#a", "y": 2**70}])
    assert data["error"] == "invalid_param" and "64 bits" in data["message"]


def test_cancelling_a_replay_cancels_its_command_and_starts_no_further_step(app):

    from twisted.internet.defer import maybeDeferred

    from gasoline.tools.configure import MODES
    from gasoline.tools.context import ToolContext

    ok(app, session_for(app, "A"), what="save_sequence", name="s", steps=STEPS)
    ctx = ToolContext(app=app.daemon, tools=app.tools, request=None, state=app.registry.get("A"), client_id="A",
                      tool="configure",
                      mode="replay_sequence")
    d = maybeDeferred(MODES["replay_sequence"], ctx, {"what": "replay_sequence", "name": "s"})
    assert app.router.pending_count("A") == 1
    failures = []
    d.addErrback(failures.append)
    d.cancel()
    assert failures and failures[0].check(Exception)
    assert app.router.pending_count("A") == 0
    app.clock.advance(60)
    assert app.router.pending_count("A") == 0 and app.extension.commands.deliverable() == []


# -- hostile input -----------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CONF_KEYS = ["name", "steps", "from_actions", "recording", "last_n", "description",
             "sequence_action", "continue_on_error", "from_checkpoint", "to_checkpoint",
             "checkpoint", "confirm", "limit", "scope", "tab_id"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                    st.text(max_size=20), st.sampled_from(["s", "cp", "A:s", "B:cp", "now",
                                                           "list", "delete", "get"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)
step_lists = st.lists(st.fixed_dictionaries({"what": st.sampled_from(
    ["click", "navigate", "get_text", "fly", 3])}, optional={"selector": values, "url": values}),
    max_size=3)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mode=st.sampled_from(["save_sequence", "replay_sequence", "diff_sessions", "restart"]),
       args=st.dictionaries(st.sampled_from(CONF_KEYS), values | step_lists, max_size=5),
       connected=st.booleans())
def test_any_configure_arguments_give_a_well_formed_answer_and_never_stop_a_shared_daemon(
        tmp_path_factory, mode, args, connected):
    clock = __import__("twisted.internet.task", fromlist=["Clock"]).Clock()
    clock.advance(T0)
    app = build(Config(state_dir=tmp_path_factory.mktemp("c"), persist=False,
                       tool_rate_limit=0), clock)
    stops = []
    app.shutdown.stop = lambda: stops.append(1)
    if connected:
        connect(app)
    a, b = session_for(app, "A"), session_for(app, "B")
    ok(app, a, what="save_sequence", name="s", steps=STEPS[:2])
    ok(app, b, what="checkpoint", name="cp")
    out = start(app, a, what=mode, **args)
    clock.advance(0)
    if not out:
        answer_all(app, status="error", error="enough")
    if not out:
        clock.advance(200)
    err, summary, data = parsed(out)
    if err:
        assert data["error"] != "internal_error", data
    assert summary
    clock.advance(1)
    assert stops == []  # B is connected: no restart
    assert app.router.pending_count() == 0
    app.router.close()
    app.extension.stop()

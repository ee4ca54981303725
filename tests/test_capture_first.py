"""
Capture first (L{gasoline.core.turns}): agents' tool calls run within a per-turn budget of the
reactor, the rest wait for later turns, and the extension's posts are served at once however
many reads wait; under overload agents are answered C{daemon_busy} with C{retry_after_ms}.

Deterministic: the reactor is a C{task.Clock} (a turn is one C{advance(0)}) and each read costs
2 ms on a fake timer, so a 10 ms turn runs five of them.
"""

from __future__ import annotations

import json

import attrs
import pytest

from _mcp_calls import session_for, start
from test_mcp_http import Client

from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE
from gasoline.core.turns import TURN_BUDGET, TurnBudget
from gasoline.testing import EXTENSION_HEADERS

COST = 0.002


def turn(clock):
    """One reactor turn: the calls due when it starts (as C{runUntilCurrent} runs them; a
    C{callLater(0)} made during the turn waits for the next one, which C{advance} would not)."""
    due = [c for c in clock.calls if c.getTime() <= clock.seconds()]
    for c in due:
        clock.calls.remove(c)
        c.called = 1
        c.func(*c.args, **c.kw)


@pytest.fixture
def costly(tmp_path, clock):
    """The daemon with every observe call costing C{COST} seconds of (fake) reactor time."""
    app = build(Config(state_dir=tmp_path, persist=False, max_clients=100), clock)
    now = [0.0]
    app.mcp.turns = TurnBudget(clock, timer=lambda: now[0])
    tool = app.mcp.tools.get("observe")

    def handler(ctx, args, _inner=tool.handler):
        now[0] += COST
        return _inner(ctx, args)

    app.mcp.tools.add(attrs.evolve(tool, handler=handler))
    yield app
    app.mcp.close_all()


def _post_logs(client, n):
    entries = [{"level": "error", "message": f"captured {i}", "ts": i} for i in range(n)]
    return client.request("POST", {"entries": entries}, url="http://localhost/logs",
                          headers=EXTENSION_HEADERS)


def test_capture_is_served_while_reads_saturate_the_reactor(costly, clock):
    app = costly
    client = Client(app)
    sessions = [session_for(app, f"agent-{k}") for k in range(40)]
    answers = [start(app, s, "observe", {"what": "errors"}, rid=10 + k)
               for k, s in enumerate(sessions)]
    per_turn = int(round(TURN_BUDGET / COST))
    assert sum(1 for a in answers if a) == per_turn  # this turn's budget, then they wait
    assert app.mcp.turns.queued == 40 - per_turn
    # The extension posts while 35 reads wait: served now, not after them.
    response, body = _post_logs(client, 200)
    assert response.code == 200, body
    assert json.loads(body)["received"] == 200 and len(app.store.buffers[CONSOLE]) == 200
    # Each later turn runs one budget's worth; every read is answered, in order.
    turns = 0
    while app.mcp.turns.queued:
        before = sum(1 for a in answers if a)
        turn(clock)
        turns += 1
        assert sum(1 for a in answers if a) - before <= per_turn
        # Capture between every two turns.
        assert _post_logs(client, 10)[0].code == 200
    assert all(answers) and turns == (40 - per_turn + per_turn - 1) // per_turn
    assert all(not a[0]["result"]["isError"] for a in answers)
    # Reads that waited see what was captured while they waited.
    last = json.loads(answers[-1][0]["result"]["content"][0]["text"].partition("\n")[2])
    assert last["count"] == 100


def test_under_overload_agents_get_retry_after_before_capture_waits(costly, clock):
    app = costly
    app.mcp.turns.max_queued = 20
    client = Client(app)
    sessions = [session_for(app, f"agent-{k}") for k in range(40)]
    answers = [start(app, s, "observe", {"what": "errors"}, rid=k) for k, s in enumerate(sessions)]
    per_turn = int(round(TURN_BUDGET / COST))
    busy = [a[0]["result"] for a in answers if a and a[0]["result"]["isError"]]
    assert len(busy) == 40 - per_turn - 20
    error = json.loads(busy[0]["content"][0]["text"].partition("\n")[2])
    assert error["error"] == "daemon_busy" and error["retryable"] is True
    assert error["retry_after_ms"] >= 100
    assert _post_logs(client, 50)[0].code == 200  # capture never waits
    # A queue whose head waited past max_wait refuses too, until it drains.
    app.mcp.turns.max_queued = 1000
    clock.rightNow += app.mcp.turns.max_wait  # time passes, no turn runs (a stalled reactor)
    late = start(app, session_for(app, "late"), "observe", {"what": "errors"}, rid=99)
    assert late and "daemon_busy" in late[0]["result"]["content"][0]["text"]
    while app.mcp.turns.queued:
        turn(clock)
    assert app.mcp.turns.refused >= len(busy)


def test_an_idle_daemon_answers_every_call_at_once(tmp_path, clock):
    """With the default options (the real budget on the clock's own time), calls that cost
    less than the budget are answered in the same turn: no added latency for one agent."""
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    s = session_for(app, "me")
    for i in range(50):
        assert start(app, s, "observe", {"what": "errors"}, rid=i)
    assert app.mcp.turns.deferred == 0
    app.mcp.close_all()


def test_a_queued_call_that_is_cancelled_never_runs(costly, clock):
    app = costly
    sessions = [session_for(app, f"agent-{k}") for k in range(8)]
    answers = [start(app, s, "observe", {"what": "errors"}, rid=k) for k, s in enumerate(sessions)]
    per_turn = int(round(TURN_BUDGET / COST))
    assert app.mcp.turns.queued == 8 - per_turn
    last = sessions[-1]
    app.mcp.handle(last, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 7}})
    assert app.mcp.turns.queued == 8 - per_turn - 1
    while app.mcp.turns.queued:
        turn(clock)
    assert all(a and a[0] is not None for a in answers[:-1])
    assert answers[-1] in ([], [None])  # no answer for a cancelled request
    assert app.mcp.tools.calls["observe"] == 7  # and it never ran

"""C{_meta.data_counts}: entries beyond the caller's own cursors, on every tool result."""

from __future__ import annotations

from _mcp_calls import session_for, start

from gasoline.core.storage.store import ACTIONS, CONSOLE, NETWORK_BODIES
from gasoline.mcp.tools import Tool


def counts(app, session, tool="configure", args=None, rid=1):
    out = start(app, session, tool, args if args is not None else {"what": "health"}, rid)
    assert out, "no answer"
    return out[0]["result"]["_meta"]["data_counts"]


def test_counts_follow_each_clients_own_cursors(app):
    me, other = session_for(app, "me"), session_for(app, "other")
    assert counts(app, me) == {}
    app.store.add(CONSOLE, [{"level": "error", "message": f"e{i}"} for i in range(3)])
    app.store.add(ACTIONS, [{"type": "click", "timestamp": 1}])
    # errors and logs are two views with two cursors on one buffer: raw entries beyond each.
    assert counts(app, me) == {"errors": 3, "logs": 3, "actions": 1}
    # Reading logs moves my logs cursor only; the count is on the result of that very read.
    assert counts(app, me, "observe", {"what": "logs"}) == {"errors": 3, "actions": 1}
    assert counts(app, me, "observe", {"what": "actions"}) == {"errors": 3}
    assert counts(app, other) == {"errors": 3, "logs": 3, "actions": 1}
    app.store.add(CONSOLE, [{"level": "info", "message": "later"}])
    assert counts(app, me) == {"errors": 4, "logs": 1}
    assert counts(app, other) == {"errors": 4, "logs": 4, "actions": 1}


def test_counts_stop_at_evicted_entries_and_after_a_clear(app):
    me = session_for(app, "me")
    ring = app.store.buffers[NETWORK_BODIES]
    app.store.add(NETWORK_BODIES, [{"url": f"http://x/{i}", "status": 200}
                                   for i in range(ring.capacity + 5)])
    # Evicted entries are not readable: the count is what a read would still find.
    assert counts(app, me)["network_bodies"] == ring.capacity
    start(app, me, "configure", {"what": "clear", "buffer": "network", "scope": "all"})
    assert "network_bodies" not in counts(app, me, rid=2)


def test_errors_and_proxied_results_carry_the_counts_too(app):
    me = session_for(app, "me")
    app.store.add(CONSOLE, [{"level": "log", "message": "x"}])
    out = start(app, me, "observe", {"what": "no_such_mode"})
    assert out[0]["result"]["isError"] is True
    assert out[0]["result"]["_meta"]["data_counts"] == {"errors": 1, "logs": 1}
    # A proxied tool's own _meta is kept beside the counts.
    app.mcp.tools.add(Tool("srv__t", "t", {"type": "object"}, lambda ctx, a: {
        "content": [{"type": "text", "text": "hi"}], "_meta": {"srv": 1}}, proxied=True))
    out = start(app, me, "srv__t", {}, 2)
    assert out[0]["result"]["_meta"] == {"srv": 1, "data_counts": {"errors": 1, "logs": 1}}

"""
Client slots and identity: only live clients hold slots (quiet sessions give way,
least recently used first, keeping their state inheritable), closing a session releases its slot
at once, and rate limits cannot be bypassed by switching client ids on one connection.
"""

from __future__ import annotations

import json

from gasoline.app import DEFAULT_MAX_CLIENTS, Config, build
from gasoline.mcp import jsonrpc
from test_mcp_http import Client, conn, init_msg


def _tool_call(app, session, i):
    out = []
    app.mcp.handle(session, jsonrpc.request(i, "tools/call", {
        "name": "configure", "arguments": {"what": "health"}})).addCallback(out.append)
    return out[0]["result"]


def _limited(result) -> bool:
    return result["isError"] and "rate_limited" in result["content"][0]["text"]


def test_quiet_sessions_never_lock_out_new_clients_with_the_default_limit(tmp_path, clock):
    """Ten SDK sessions that went quiet (no DELETE) used to lock out everyone for an hour."""
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    client = Client(app)
    sids = [client.initialize() for _ in range(DEFAULT_MAX_CLIENTS * 3)]
    assert len(set(sids)) == DEFAULT_MAX_CLIENTS * 3
    live = [s for s in app.mcp.sessions.values() if not s.closed]
    assert len(live) == DEFAULT_MAX_CLIENTS
    # The newest ones survive (LRU eviction).
    assert {s.session_id for s in live} == set(sids[-DEFAULT_MAX_CLIENTS:])
    app.mcp.close_all()


def test_delete_releases_the_slot_at_once(tmp_path, clock):
    app = build(Config(state_dir=tmp_path, persist=False, max_clients=1), clock)
    client = Client(app)
    sid = client.initialize(headers=None)
    # Keep it busy (an open stream), so only DELETE can free the slot.
    client.stream("GET", headers={"mcp-session-id": sid, "accept": "text/event-stream"})
    response, body = client.post(init_msg())
    assert response.code == 429
    response, _ = client.request("DELETE", headers={"mcp-session-id": sid})
    assert response.code == 204
    response, body = client.post(init_msg())
    assert response.code == 200, body
    app.mcp.close_all()


def test_rate_limit_holds_across_client_ids_on_one_connection(tmp_path, clock):
    app = build(Config(state_dir=tmp_path, persist=False, tool_rate_limit=3), clock)
    sessions = []
    for cid in ("a", "b", "c"):
        s = app.mcp.open_session(cid, "connector")
        app.mcp.handle(s, init_msg())
        s.transport_key = "connection:1"
        sessions.append(s)
    results = [_tool_call(app, sessions[i % 3], i) for i in range(4)]
    assert [_limited(r) for r in results] == [False, False, False, True]
    other = app.mcp.open_session("d", "connector")
    app.mcp.handle(other, init_msg())
    other.transport_key = "connection:2"
    assert not _limited(_tool_call(app, other, 9))
    app.mcp.close_all()


def test_the_http_transport_keys_sessions_by_their_connection(tmp_path, clock):
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    client = Client(app)
    client.initialize(headers=conn("repo-a"))
    client.initialize(headers=conn("repo-b"))
    keys = {s.transport_key for s in app.mcp.sessions.values()}
    assert all(k and k.startswith("connection:") for k in keys)
    response, body = client.post({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "configure", "arguments": {"what": "health"}}}, conn("repo-a"))
    assert response.code == 200 and json.loads(body)["result"]["isError"] is False
    app.mcp.close_all()


def _observe(client, cid, i):
    return client.post({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
        "name": "observe", "arguments": {"what": "errors"}}}, conn(cid, connection=f"c-{cid}"))


def test_eleven_working_agents_with_ten_slots_never_evict_each_other(tmp_path, clock):
    """Eleven agents (the connector form, each its own client id) calling every 2 s against the
    default ten slots: the eleventh is refused with a 429 naming --max-clients, and not one of
    the ten loses its session; once one of them stops for RECLAIM_MIN_QUIET, the newcomer gets
    its slot and the idle one is told, on its next call, why its session is gone."""
    from gasoline.mcp.server import RECLAIM_MIN_QUIET

    app = build(Config(state_dir=tmp_path, persist=False), clock)
    client = Client(app)
    agents = [f"agent-{k}" for k in range(DEFAULT_MAX_CLIENTS + 1)]
    for cid in agents[:-1]:
        client.initialize(headers=conn(cid, connection=f"c-{cid}"))
    first = {s.client_id: s.session_id for s in app.mcp.sessions.values()}
    refused = 0
    for rnd in range(30):  # a minute of work
        clock.advance(2)
        for cid in agents[:-1]:
            response, body = _observe(client, cid, rnd)
            assert response.code == 200, body
        response, body = client.post(init_msg(), conn(agents[-1], connection="c-new"))
        assert response.code == 429, body
        error = json.loads(body)["error"]
        assert "--max-clients 10" in error["message"]
        assert error["data"]["error"] == "too_many_clients"
        refused += 1
    assert refused == 30
    # Not one session was closed or replaced.
    assert {s.client_id: s.session_id for s in app.mcp.sessions.values()} == first
    # agent-0 stops working; the others go on.
    for t in range(int(RECLAIM_MIN_QUIET // 10) + 1):
        clock.advance(10)
        for cid in agents[1:-1]:
            assert _observe(client, cid, 100 + t)[0].code == 200
    response, body = client.post(init_msg(), conn(agents[-1], connection="c-new"))
    assert response.code == 200, body
    response, body = _observe(client, agents[0], 999)
    assert response.code == 404
    message = json.loads(body)["error"]["message"]
    assert "to make room for another client (--max-clients reached)" in message
    assert "send initialize" in message
    app.mcp.close_all()


def test_anonymous_sessions_stop_thrashing_once_a_reclaimed_one_comes_back(tmp_path, clock):
    """SDK clients without a client id (their sessions are left behind, so a quiet one gives way
    at once) -- until a reclaimed one is used again: then working sessions keep their slots and
    the newcomer is refused."""
    app = build(Config(state_dir=tmp_path, persist=False, max_clients=2), clock)
    client = Client(app)
    a, b = client.initialize(), client.initialize()
    clock.advance(1)
    c = client.initialize()  # a was quiet: it gives way (an abandoned session, as far as we know)
    response, body = client.post({"jsonrpc": "2.0", "id": 5, "method": "ping"},
                                 {"mcp-session-id": a})
    assert response.code == 404 and "--max-clients reached" in json.loads(body)["error"]["message"]
    # a came back: it was working. Now nobody evicts b or c while they work.
    for _ in range(20):
        clock.advance(2)
        for sid in (b, c):
            assert client.post({"jsonrpc": "2.0", "id": 6, "method": "ping"},
                               {"mcp-session-id": sid})[0].code == 200
        response, body = client.post(init_msg())
        assert response.code == 429, body
    assert {b, c} <= set(app.mcp.sessions)
    app.mcp.close_all()

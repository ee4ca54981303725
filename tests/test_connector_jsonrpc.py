"""
The connector speaks JSON-RPC exactly: notifications are never answered, messages
that are neither requests, notifications nor responses get -32600, an invalid id is never echoed,
and a batch the daemon refuses as a whole is answered at once instead of after the 30 s bound.
"""

from __future__ import annotations

from test_connector import finish, handshake, lines, make_bridge, send

from gasoline.connect.bridge import INVALID_REQUEST
from gasoline.connect.client import Reply


def test_empty_object_gets_invalid_request_locally():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    bridge.line_received(b"{}")
    assert daemon.posts == []
    [got] = lines(out)
    assert got["id"] is None and got["error"]["code"] == INVALID_REQUEST
    finish(clock, bridge)


def test_non_string_method_gets_invalid_request_with_its_valid_id():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    send(bridge, {"jsonrpc": "2.0", "id": 7, "method": 42})
    send(bridge, {"jsonrpc": "2.0", "method": ["x"]})
    assert daemon.posts == []
    got = lines(out)
    assert [g["error"]["code"] for g in got] == [INVALID_REQUEST, INVALID_REQUEST]
    assert got[0]["id"] == 7 and got[1]["id"] is None
    finish(clock, bridge)


def test_invalid_id_is_not_echoed_back():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    for bad in ({"evil": "<script>"}, [1, 2], True, None, 1.5):
        send(bridge, {"jsonrpc": "2.0", "id": bad, "method": "ping"})
    assert daemon.posts == []
    got = lines(out)
    assert len(got) == 5
    assert all(g["id"] is None and g["error"]["code"] == INVALID_REQUEST for g in got)
    finish(clock, bridge)


def test_a_refused_notification_is_never_answered():
    clock, daemon, bridge, out = make_bridge()
    bridge.start()
    # Before initialize the daemon refuses a notification with HTTP 400 and a null-id error.
    send(bridge, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    _, _, d = daemon.posts[0]
    d.callback(Reply(400, "application/json",
                     b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no session"}}'))
    # ... or with a 200 carrying the null-id error.
    send(bridge, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}})
    daemon.answer(1, {"jsonrpc": "2.0", "id": None,
                      "error": {"code": -32600, "message": "no session"}})
    assert out == []
    finish(clock, bridge)


def test_a_refused_batch_is_answered_at_once_for_each_request():
    clock, daemon, bridge, out = make_bridge()
    handshake(bridge, daemon)
    out.clear()
    send(bridge, [{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                  {"jsonrpc": "2.0", "id": "two", "method": "tools/list"},
                  {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}])
    daemon.answer(len(daemon.posts) - 1, {
        "jsonrpc": "2.0", "id": None,
        "error": {"code": INVALID_REQUEST, "message": "batches are not supported"}})
    got = lines(out)
    assert sorted(str(g["id"]) for g in got) == ["1", "two"]
    assert all(g["error"]["code"] == INVALID_REQUEST for g in got)
    assert bridge.pending_ids == []
    # Nothing is left waiting for the 30 s bound: stdin EOF finishes at once.
    finish(clock, bridge)


def test_a_batch_with_one_invalid_member_forwards_the_rest():
    clock, daemon, bridge, out = make_bridge()
    handshake(bridge, daemon)
    out.clear()
    send(bridge, [{}, {"jsonrpc": "2.0", "id": 3, "method": "ping"}])
    [(sent, _, _)] = daemon.posts[-1:]
    assert sent == [{"jsonrpc": "2.0", "id": 3, "method": "ping"}]
    assert lines(out)[0]["error"]["code"] == INVALID_REQUEST
    daemon.answer(len(daemon.posts) - 1, [{"jsonrpc": "2.0", "id": 3, "result": {}}])
    assert lines(out)[1] == [{"jsonrpc": "2.0", "id": 3, "result": {}}]
    finish(clock, bridge)



"""
No page can wedge or starve the agents: an oversized entry never blocks a cursor,
``/test-boundary`` ids are bounded and stored by reference, one request's items and JSON values are
bounded (413 naming the limit), idle connections time out, open connections are capped (one log
line), and the file-descriptor soft limit is raised at start.
"""

from __future__ import annotations

import json

import orjson
import pytest
from twisted.logger import globalLogPublisher

from gasoline.core.storage.boundaries import MAX_TEST_ID_LENGTH
from gasoline.core.storage.store import CONSOLE
from gasoline.core.validate import MAX_BATCH_ITEMS, MAX_JSON_TOKENS
from gasoline.http.request import IDLE_TIMEOUT
from gasoline.tap import raise_nofile_limit
from gasoline.testing import EXTENSION_HEADERS
from gasoline.tools._reader import READ_BUDGET
from support import connect, site_on_clock
from test_guards import URL, call as http, make
from test_tools_observe import ok, s  # noqa: F401  (s: a fixture)

ENTRY = {"level": "log", "message": "m", "ts": "2023-11-14T22:13:20.000Z"}


def test_an_entry_larger_than_the_read_budget_is_returned_cut_and_the_cursor_moves(app, s):
    app.store.add(CONSOLE, [dict(ENTRY, message="a" * (READ_BUDGET * 2),
                                 args=["b" * READ_BUDGET] * 3), dict(ENTRY, message="after")])
    _, first = ok(app, s, what="logs")
    assert first["count"] == 1
    [cut] = first["logs"] if "logs" in first else first["entries"]
    assert "_truncated" in cut and "more chars" in cut["message"]
    assert len(orjson.dumps(cut)) < READ_BUDGET
    _, second = ok(app, s, what="logs")
    assert second["count"] == 1 and second["cursor"] > first["cursor"]
    _, third = ok(app, s, what="logs")
    assert third["count"] == 0 and third["has_more"] is False


def test_an_oversized_entry_read_backwards_is_cut_too(app, s):
    app.store.add(CONSOLE, [dict(ENTRY, message="z" * (READ_BUDGET + 10))])
    _, page = ok(app, s, what="logs", last_n=5)
    assert page["count"] == 1


def test_test_boundary_ids_are_bounded(tmp_path):
    _, treq = make(tmp_path)
    r, body = http(treq, "POST", f"{URL}/test-boundary", headers=EXTENSION_HEADERS,
                   data=json.dumps({"test_id": "x" * (MAX_TEST_ID_LENGTH + 1),
                                    "action": "start"}).encode())
    assert r.code == 400 and str(MAX_TEST_ID_LENGTH) in json.loads(body)["error"]


def test_test_boundary_ids_are_stored_by_reference(tmp_path):
    app, treq = make(tmp_path)
    for i in range(100):
        http(treq, "POST", f"{URL}/test-boundary", headers=EXTENSION_HEADERS,
             data=json.dumps({"test_id": f"{i:03d}" + "t" * 250, "action": "start"}).encode())
    r, _ = http(treq, "POST", f"{URL}/logs", headers=EXTENSION_HEADERS,
                data=json.dumps({"entries": [ENTRY] * MAX_BATCH_ITEMS}).encode())
    assert r.code == 200
    ring = app.store.buffers[CONSOLE]
    stored = ring.read(0).items
    assert len(stored) == MAX_BATCH_ITEMS
    # Each stored entry names its test set by number: bytes, not 100 x 253 characters.
    assert max(len(b) for b in stored) < 200
    r, body = http(treq, "GET", f"{URL}/snapshot?test_id=007" + "t" * 250,
                   headers=EXTENSION_HEADERS)
    logs = json.loads(body)["logs"]
    assert len(logs) == MAX_BATCH_ITEMS and len(logs[0]["test_ids"]) == 100


def test_a_batch_over_the_item_limit_is_413_naming_it(tmp_path):
    app, treq = make(tmp_path)
    r, body = http(treq, "POST", f"{URL}/logs", headers=EXTENSION_HEADERS,
                   data=json.dumps({"entries": [ENTRY] * (MAX_BATCH_ITEMS + 1)}).encode())
    assert r.code == 413 and json.loads(body)["limit"] == MAX_BATCH_ITEMS
    assert len(app.store.buffers[CONSOLE]) == 0


@pytest.mark.parametrize("item", [b"{}", b"1", b"[]"])
def test_millions_of_tiny_items_are_refused_before_parsing(tmp_path, item):
    app, treq = make(tmp_path)
    body = b'{"entries":[' + b",".join([item] * 1_600_000) + b"]}"
    r, out = http(treq, "POST", f"{URL}/logs", headers=EXTENSION_HEADERS, data=body)
    assert r.code == 413
    answer = json.loads(out)
    assert answer["limit"] == MAX_JSON_TOKENS and "per request" in answer["error"]
    assert len(app.store.buffers[CONSOLE]) == 0


def _complete_a_request(channel) -> None:
    channel.dataReceived(b"GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")


def test_idle_connections_are_closed_after_the_timeout():
    site, clock = site_on_clock()
    channel, transport = connect(site)
    _complete_a_request(channel)  # (a connection that never does is cut at the header deadline)
    clock.advance(IDLE_TIMEOUT - 1)
    assert not transport.disconnecting
    clock.advance(2)
    assert transport.disconnecting


def test_open_connections_are_capped_with_one_log_line():
    site, clock = site_on_clock(max_connections=3)
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        open_ = [connect(site) for _ in range(3)]
        assert all(c is not None for c in open_)
        for channel, _ in open_:  # connections that completed a request are never evicted
            _complete_a_request(channel)
        assert [connect(site) for _ in range(5)] == [None] * 5
        lines = [e for e in events if "connection cap" in e.get("log_format", "")]
        assert len(lines) == 1 and site.refused_connections == 5
        channel, _ = open_[0]
        channel.connectionLost(None)
        assert connect(site) is not None
    finally:
        globalLogPublisher.removeObserver(events.append)
    for c in clock.getDelayedCalls():
        c.cancel()


def test_the_file_descriptor_soft_limit_is_raised_to_the_hard_limit():
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(256, hard) if hard != resource.RLIM_INFINITY else 256
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        now_soft, now_hard = raise_nofile_limit()
        assert now_hard == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == now_soft
        assert now_soft == (hard if hard != resource.RLIM_INFINITY else 65536)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

"""``GET /health``: the fields the extension reads plus uptime, buffers, extension and clients."""

from __future__ import annotations

import json

from gasoline.testing import stub_request
from treq.testing import StubTreq
from twisted.internet.task import Clock

from gasoline._version import __version__
from gasoline.app import Config, build
from gasoline.testing import EXTENSION_HEADERS

URL = "http://127.0.0.1:7890"


def get(treq, path="/health", method="GET", headers=None, data=None):
    response, body = stub_request(treq, method, URL + path, headers=headers, data=data)
    return response.code, (json.loads(body) if body else None)


def make(tmp_path, **config):
    clock = Clock()
    clock.advance(1_700_000_000)
    app = build(Config(state_dir=tmp_path, persist=False, **config), clock)
    return app, clock, StubTreq(app.resource)


def test_health_has_the_fields_the_extension_reads(tmp_path):
    app, clock, treq = make(tmp_path, max_entries=500)
    code, body = get(treq)
    assert code == 200
    assert body["status"] == "ok"
    assert body["service-name"] == "gasoline" and body["name"] == "gasoline"
    assert body["version"] == __version__
    assert body["logs"] == {"entries": 0, "max_entries": 500, "log_file": None, "log_file_size": 0}
    assert body["capture"]["extension_connected"] is False
    assert body["capture"]["extension_last_seen"] is None
    assert body["extension"] == {"connected": False, "last_poll": None}
    assert body["uptime_seconds"] == 0
    assert set(body["buffers"]["console"]) >= {"capacity", "used", "head"}
    assert body["clients"]["active"] == 0 and body["clients"]["list"] == []


def test_health_needs_no_extension_header_and_no_api_key(tmp_path):
    app, clock, treq = make(tmp_path, api_key="k")
    assert get(treq)[0] == 200


def test_health_reflects_logs_uptime_and_extension_sync(tmp_path):
    app, clock, treq = make(tmp_path)
    get(treq, "/logs", "POST", EXTENSION_HEADERS,
        json.dumps({"entries": [{"level": "log"}, {"level": "error"}]}))
    app.extension.commands.enqueue("dom", {}, "agent")  # so the sync answers at once
    code, _ = get(treq, "/sync", "POST", EXTENSION_HEADERS,
                  json.dumps({"settings": {"tracked_tab_id": 9, "pilot_enabled": True}}))
    assert code == 200
    clock.advance(2.5)
    code, body = get(treq)
    assert body["logs"]["entries"] == 2
    assert body["buffers"]["console"]["used"] == 2 and body["buffers"]["console"]["head"] == 2
    assert body["uptime_seconds"] == 2.5
    assert body["capture"]["extension_connected"] is True
    assert body["capture"]["extension_last_seen"] == "2023-11-14T22:13:20.000Z"
    assert body["capture"]["tracked_tab_id"] == 9 and body["capture"]["pilot_enabled"] is True
    assert body["extension"] == {"connected": True, "last_poll": "2023-11-14T22:13:20.000Z"}
    clock.advance(10)
    assert get(treq)[1]["extension"]["connected"] is False
    assert clock.getDelayedCalls() == []


def test_health_lists_registered_clients(tmp_path):
    app, clock, treq = make(tmp_path)
    app.registry.register("agent-a", now=clock.seconds())
    body = get(treq)[1]
    assert body["clients"]["active"] == 1
    assert [c["id"] for c in body["clients"]["list"]] == ["agent-a"]


def test_with_an_api_key_health_lists_client_ids_only_to_key_holders(tmp_path):
    """GET /events and the MCP client header take a client id: with --api-key, a caller without
    the key learns how many clients there are, never their ids."""
    app, clock, treq = make(tmp_path, api_key="sekrit")
    app.registry.register("agent-a", now=clock.seconds())
    code, body = get(treq)
    assert code == 200 and body["clients"]["active"] == 1 and "list" not in body["clients"]
    assert "agent-a" not in json.dumps(body)
    code, body = get(treq, headers={"X-Gasoline-Key": "wrong"})
    assert code == 200 and "list" not in body["clients"]
    code, body = get(treq, headers={"X-Gasoline-Key": "sekrit"})
    assert [c["id"] for c in body["clients"]["list"]] == ["agent-a"]


def test_health_reports_the_journal_file_when_persisting(tmp_path):
    clock = Clock()
    app = build(Config(state_dir=tmp_path, persist=True), clock)
    treq = StubTreq(app.resource)
    get(treq, "/logs", "POST", EXTENSION_HEADERS, json.dumps({"entries": [{"level": "log"}]}))
    body = get(treq)[1]
    assert body["logs"]["log_file"] == str(app.journal.path)
    assert isinstance(body["logs"]["log_file_size"], int)


def test_health_other_methods_are_405_json(tmp_path):
    app, clock, treq = make(tmp_path)
    code, body = get(treq, method="POST", data=b"{}")
    assert code == 405 and "error" in body
    code, body = get(treq, "/health/extra")
    assert code == 404 and body["error"] == "not found"

"""C{GET /logs}: cursor reads over plain HTTP, under the client proof and C{--api-key}."""

from __future__ import annotations

import json

from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE
from gasoline.testing import EXTENSION_HEADERS, client_headers
from treq.testing import StubTreq

BASE = "http://127.0.0.1:7890"
SECRET = "AKIAIOSFODNN7EXAMPLE"


class Daemon:
    def __init__(self, tmp_path, **config) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.app = build(Config(state_dir=tmp_path / "state", persist=False, **config), self.clock)
        self.stub = StubTreq(self.app.resource)

    def request(self, method, path, headers=None, body=None):
        d = self.stub.request(method, BASE + path, headers=headers or {},
                              data=None if body is None else json.dumps(body).encode())
        self.stub.flush()
        response = d.result
        content = self.stub.content(response)
        self.stub.flush()
        text = content.result
        return response.code, (json.loads(text) if text else None)

    def read(self, client, query="", **extra):
        return self.request("GET", "/logs" + query, {**client_headers(self.app, client), **extra})


def console(n, start=0, level="log"):
    return [{"level": level, "type": "console", "message": f"line {i}", "url": "http://x/",
             "ts": "2026-11-29T03:00:00.000Z"} for i in range(start, start + n)]


def test_two_clients_read_through_independent_cursors(tmp_path):
    d = Daemon(tmp_path)
    d.app.store.add(CONSOLE, console(5))
    code, a = d.read("agent-a", "?limit=3")
    assert code == 200, a
    assert [e["message"] for e in a["entries"]] == ["line 0", "line 1", "line 2"]
    assert a["has_more"] is True and a["cursor"] == 3
    assert a["data_counts"] == {"errors": 5, "logs": 2}
    assert a["untrusted_content"] and a["summary"]
    # B has its own cursor: it starts from the beginning, and A's reads do not move it.
    code, b = d.read("agent-b")
    assert code == 200 and [e["message"] for e in b["entries"]] == [f"line {i}" for i in range(5)]
    code, a = d.read("agent-a")
    assert [e["message"] for e in a["entries"]] == ["line 3", "line 4"]
    d.app.store.add(CONSOLE, console(1, 5))
    assert [e["message"] for e in d.read("agent-a")[1]["entries"]] == ["line 5"]
    assert [e["message"] for e in d.read("agent-b")[1]["entries"]] == ["line 5"]
    assert d.read("agent-b")[1]["entries"] == []
    # The HTTP cursor is the one observe logs moves (the agent and its script share it).
    assert d.app.registry.get("agent-a").cursors["console"] == 6


def test_the_same_redaction_filters_and_audit_as_the_tool(tmp_path):
    d = Daemon(tmp_path)
    d.app.store.add(CONSOLE, [{"level": "error", "type": "console", "url": "http://x/",
                               "message": f"key {SECRET} leaked"}] + console(2))
    code, body = d.read("agent-a", "?level=error")
    assert code == 200 and len(body["entries"]) == 1
    assert SECRET not in json.dumps(body) and "leaked" in json.dumps(body)
    assert d.app.mcp.tools.audit_log("agent-a")[-1]["mode"] == "logs"


def test_bad_requests_get_clear_errors(tmp_path):
    d = Daemon(tmp_path)
    d.app.store.add(CONSOLE, console(2))
    code, body = d.request("GET", "/logs")
    assert code == 400 and "X-Gasoline-Client" in body["error"]
    code, body = d.read("agent-a", "?nope=1")
    assert code == 400 and "nope" in body["message"]
    code, body = d.read("agent-a", "?limit=1&limit=2")
    assert code == 400 and "2 times" in body["message"]
    code, body = d.read("agent-a", "?limit=abc")
    assert code == 400 and body["error"] == "invalid_param"
    code, body = d.request("GET", "/logs", {"X-Gasoline-Client": "agent-a",
                                            "X-Gasoline-Client-Proof": "A" * 43})
    assert code == 403
    code, _ = d.request("HEAD", "/logs", client_headers(d.app, "agent-a"))
    assert code == 405
    # None of it moved the cursor.
    assert d.app.registry.get("agent-a") is None or \
        d.app.registry.get("agent-a").cursors.get("console", 0) == 0


def test_api_key_is_required_and_the_extension_routes_are_unchanged(tmp_path):
    d = Daemon(tmp_path, api_key="k" * 32)
    code, _ = d.read("agent-a")
    assert code == 401
    code, body = d.request("POST", "/logs", EXTENSION_HEADERS, {"entries": console(2)})
    assert code == 200 and body["received"] == 2
    code, body = d.read("agent-a", **{"X-Gasoline-Key": "k" * 32})
    assert code == 200 and len(body["entries"]) == 2


def test_a_preflight_is_judged_by_the_route_it_asks_for(tmp_path):
    d = Daemon(tmp_path)
    ext = {"Origin": "chrome-extension://abcdefghijklmnop"}
    code, _ = d.request("OPTIONS", "/logs", {**ext, "Access-Control-Request-Method": "POST"})
    assert code == 204  # the extension's POST /logs
    code, _ = d.request("OPTIONS", "/logs", {**ext, "Access-Control-Request-Method": "GET"})
    assert code == 403  # GET /logs is an agent's: no extension origin

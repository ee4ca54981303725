"""The tools over the real HTTP surface (POST /mcp through StubTreq): three X-Gasoline-Client ids
keep separate cursors, secrets in network bodies are redacted on the wire, and the rate limit
refuses only the flooding client."""

from __future__ import annotations

import json

import pytest
from treq.testing import StubTreq
from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE, NETWORK_BODIES
from gasoline.testing import client_headers

URL = "http://localhost/mcp"
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


class Agent:
    def __init__(self, app, client_id: str) -> None:
        self.stub = StubTreq(app.resource)
        self.headers = {**HEADERS, **client_headers(app, client_id)}
        self.n = 0
        response, _ = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": client_id, "version": "1"}}})
        assert response.code == 200
        sid = response.headers.getRawHeaders("mcp-session-id")
        if sid:
            self.headers["mcp-session-id"] = sid[0]
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, body):
        out: list = []
        self.stub.request("POST", URL, data=json.dumps(body).encode(),
                          headers=self.headers).addCallback(out.append)
        self.stub.flush()
        content: list = []
        out[0].content().addCallback(content.append)
        self.stub.flush()
        return out[0], content[0]

    def tool(self, name: str, **args):
        self.n += 1
        response, raw = self.post({"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                                   "params": {"name": name, "arguments": args}})
        assert response.code == 200, raw
        text = raw.decode()
        if text.startswith("event:") or text.startswith("id:") or "\ndata:" in text:
            text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
        result = json.loads(text)["result"]
        summary, _, payload = result["content"][0]["text"].partition("\n")
        return result["isError"], summary, json.loads(payload), result["content"][0]["text"]


@pytest.fixture
def app(tmp_path):
    clock = Clock()
    clock.advance(1_700_000_000)
    return build(Config(state_dir=tmp_path, persist=False), clock)


def test_three_agents_over_http_have_their_own_cursors(app):
    a, b, c = Agent(app, "http-a"), Agent(app, "http-b"), Agent(app, "http-c")
    app.store.add(CONSOLE, [{"level": "error", "message": "one"}])
    assert a.tool("observe", what="errors")[2]["count"] == 1
    assert a.tool("observe", what="errors")[2]["count"] == 0
    app.store.add(CONSOLE, [{"level": "error", "message": "two"}])
    assert [e["message"] for e in b.tool("observe", what="errors")[2]["entries"]] == ["one", "two"]
    assert c.tool("observe", what="errors", last_n=1)[2]["entries"][0]["message"] == "two"
    assert [e["message"] for e in c.tool("observe", what="errors")[2]["entries"]] == ["one", "two"]
    assert [e["message"] for e in a.tool("observe", what="errors")[2]["entries"]] == ["two"]


def test_planted_password_and_bearer_header_never_reach_the_wire(app):
    agent = Agent(app, "http-redact")
    app.store.add(NETWORK_BODIES, [{
        "method": "POST", "url": "http://localhost:3000/login", "status": 200,
        "request_body": '{"password":"hunter2","user":"bob"}',
        "request_headers": {"Authorization": "Bearer abcdef0123456789abcdef0123456789"},
    }])
    err, _, data, text = agent.tool("observe", what="network_bodies")
    assert not err and data["count"] == 1
    assert "hunter2" not in text and "abcdef0123456789abcdef0123456789" not in text
    assert "bob" in text and "[REDACTED:" in text


def test_rate_limit_over_http_refuses_only_the_flooder(app):
    flooder, calm = Agent(app, "http-flood"), Agent(app, "http-calm")
    for _ in range(100):
        assert flooder.tool("configure", what="health")[0] is False
    err, summary, data, _ = flooder.tool("observe", what="errors")
    assert err and data["error"] == "rate_limited" and data["retry_after_seconds"] > 0
    assert calm.tool("observe", what="errors")[0] is False

"""End to end: a real daemon (``twistd -n gasoline``), the FakeExtension running the real /sync loop
over HTTP in its own process, and two agents using the official ``mcp`` SDK over streamable HTTP.

Two agents run ``analyze dom`` concurrently with different selectors and each gets its own answer
(the slower command was queued first, so answers arrive out of order); an agent cannot fetch
another agent's ``command_result``; interact actions reach the extension and are recorded with
``source: "ai"``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from support import reap
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gasoline.testing import client_headers

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

#: The fake extension's process: dom answers echo the selector after a selector-dependent delay.
FAKE = textwrap.dedent("""
    import sys
    from twisted.internet import reactor, stdio
    from twisted.internet.protocol import Protocol
    from twisted.internet.task import deferLater
    from gasoline.testing import FakeExtension

    def dom(params):
        selector = params.get("selector")
        delay = 0.6 if "slow" in str(selector) else 0.05
        answer = {"url": "http://localhost:3000/", "count": 1, "selector": selector,
                  "matches": [{"tag": "div", "text": "answer for " + str(selector)}]}
        return deferLater(reactor, delay, lambda: answer)

    class StopOnEOF(Protocol):
        def connectionLost(self, reason=None):
            fake.stop().addBoth(lambda _: reactor.stop())

    fake = FakeExtension(sys.argv[1], reactor, handlers={"dom": dom}, poll_interval=0)
    stdio.StandardIO(StopOnEOF())
    reactor.callWhenRunning(fake.start)
    reactor.run()
""")


def _health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=5) as resp:
        return json.loads(resp.read())


@pytest.fixture
def fake_extension(daemon):
    proc = subprocess.Popen([sys.executable, "-c", FAKE, daemon.url], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while not _health(daemon.url).get("capture", {}).get("extension_connected"):
            assert proc.poll() is None, proc.stderr.read().decode(errors="replace")
            assert time.monotonic() < deadline, "the fake extension never connected"
            time.sleep(0.05)
        yield proc
    finally:
        proc.stdin.close()
        reap(proc)
        proc.stderr.close()


def _body(result) -> tuple[str, dict]:
    summary, _, payload = result.content[0].text.partition("\n")
    return summary, json.loads(payload) if payload else {}


async def _agents(daemon, ids: list[str], body) -> list:
    """Run C{body(session)} for one MCP session per client id (proven), concurrently."""
    url = daemon.url + "/mcp"

    async def one(client_id: str):
        http = create_mcp_http_client(headers=client_headers(daemon, client_id))
        async with http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await body(client_id, session)

    return await asyncio.gather(*(one(i) for i in ids))


def test_two_agents_concurrent_analyze_dom_each_get_their_own_answer(daemon, fake_extension):
    selectors = {"agent-a": "#slow-a", "agent-b": "#fast-b"}

    async def body(client_id, session):
        results = await asyncio.gather(*(
            session.call_tool("analyze", {"what": "dom", "selector": f"{selectors[client_id]}-{i}",
                                          "json": True})  # the page's echo of the selector too
            for i in range(5)))
        return [(r.is_error, _body(r)) for r in results]

    out = asyncio.run(asyncio.wait_for(_agents(daemon, list(selectors), body), 60))
    for client_id, results in zip(selectors, out):
        for i, (is_error, (summary, data)) in enumerate(results):
            want = f"{selectors[client_id]}-{i}"
            assert is_error is False, summary
            assert data["dom"]["selector"] == want
            assert data["dom"]["matches"][0]["text"] == f"answer for {want}"
            assert summary.startswith(f"1 element(s) match '{want}'")


def test_an_agent_cannot_fetch_another_agents_command_result(daemon, fake_extension):
    async def main():
        started = {}

        async def a(client_id, session):
            r = await session.call_tool("analyze", {"what": "dom", "selector": "#mine",
                                                    "background": True})
            started["cid"] = _body(r)[1]["correlation_id"]
            for _ in range(100):
                r = await session.call_tool("observe", {"what": "command_result",
                                                        "correlation_id": started["cid"]})
                data = _body(r)[1]
                if data.get("status") != "pending":
                    return data
                await asyncio.sleep(0.05)
            return data

        [mine] = await _agents(daemon, ["agent-a"], a)

        async def b(client_id, session):
            return await session.call_tool("observe", {"what": "command_result",
                                                       "correlation_id": started["cid"]})

        [theirs] = await _agents(daemon, ["agent-b"], b)
        return mine, theirs

    mine, theirs = asyncio.run(asyncio.wait_for(main(), 60))
    assert mine["status"] == "complete"
    assert mine["result"]["matches"][0]["text"] == "answer for #mine"
    assert theirs.is_error is True
    text = theirs.content[0].text
    assert "no_data" in text and "answer for #mine" not in text


def test_interact_click_reaches_the_extension_and_is_recorded_as_an_ai_action(daemon, fake_extension):
    async def body(client_id, session):
        click = await session.call_tool("interact", {"what": "click", "selector": "text=Buy"})
        actions = await session.call_tool("observe", {"what": "actions"})
        shot = await session.call_tool("interact", {"what": "screenshot"})
        return click, actions, shot

    [(click, actions, shot)] = asyncio.run(asyncio.wait_for(
        _agents(daemon, ["agent-a"], body), 60))
    # The screenshot command was answered through POST /screenshots with query_id.
    assert shot.is_error is False, shot.content[0].text
    path = _body(shot)[1]["path"]
    assert path.startswith(str(daemon.state_dir)) and Path(path).read_bytes()[:4] == b"\x89PNG"
    assert click.is_error is False, click.content[0].text
    assert "click 'text=Buy' done" in click.content[0].text
    assert actions.is_error is False
    assert '"source":"ai"' in actions.content[0].text
    assert '"text":"Buy"' in actions.content[0].text


@pytest.fixture
def local_site():
    """A plain HTTP server on 127.0.0.1 (in a thread of this process): /ok answers 200, else 404."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200 if self.path.startswith("/ok") else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_link_validation_in_the_daemon_resolves_pins_and_guards(daemon, local_site):
    """The real resolver (thread pool) and pinned HTTP client: loopback is refused by default and
    checked when allowed (the hosts resolve through getaddrinfo in the daemon)."""
    port = local_site
    urls = [f"http://localhost:{port}/ok", f"http://127.0.0.1:{port}/missing"]

    async def body(client_id, session):
        refused = await session.call_tool("analyze", {"what": "link_validation", "urls": urls})
        allowed = await session.call_tool("analyze", {"what": "link_validation", "urls": urls,
                                                      "allow_private": True})
        return refused, allowed

    [(refused, allowed)] = asyncio.run(asyncio.wait_for(
        _agents(daemon, ["agent-a"], body), 60))
    _, r = _body(refused)
    assert r["refused"] == 2 and r["checked"] == 2
    _, a = _body(allowed)
    by_url = {x["url"]: x for x in a["results"]}
    assert by_url[urls[0]]["class"] == "ok" and by_url[urls[0]]["status"] == 200
    assert by_url[urls[1]]["class"] == "broken" and by_url[urls[1]]["status"] == 404
    assert a["refused"] == 0

"""gasoline.testing: stub_request/stub_answer over treq's StubTreq, and the fakes."""

from __future__ import annotations

import pytest
from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from gasoline.testing import response_body, stub_answer, stub_request


class _Echo(Resource):
    isLeaf = True

    def __init__(self):
        super().__init__()
        self.seen = []
        self.held = []

    def render(self, request):
        self.seen.append(request)
        if request.path == b"/later":
            self.held.append(request)
            return NOT_DONE_YET
        return b"%s %s" % (request.method, request.content.read())


def test_stub_request_returns_the_response_and_its_whole_body():
    echo = _Echo()
    response, body = stub_request(StubTreq(echo), "POST", "http://127.0.0.1:7890/x", data=b"a=1")
    assert response.code == 200 and body == b"POST a=1" and len(echo.seen) == 1


def test_a_held_response_arrives_on_flush_and_a_long_poll_on_the_clock():
    echo = _Echo()
    http = StubTreq(echo)
    got = []
    http.get("http://127.0.0.1:7890/later").addCallback(got.append)
    http.flush()
    assert got == [] and len(echo.held) == 1
    held = echo.held.pop()
    held.write(b"done")
    held.finish()
    http.flush()
    assert got[0].code == 200
    assert stub_answer(http, http.get("http://127.0.0.1:7890/now"))[1] == b"GET "
    clock = Clock()

    def answer_late():
        request = echo.held.pop()
        request.write(b"late")
        request.finish()

    clock.callLater(3, answer_late)
    response, body = stub_request(http, "GET", "http://127.0.0.1:7890/later", clock=clock, wait=5)
    assert body == b"late" and clock.seconds() == 3


def test_stub_request_says_which_request_went_unanswered():
    http = StubTreq(_Echo())
    with pytest.raises(AssertionError, match="no response to GET http://127.0.0.1:7890/later"):
        stub_request(http, "GET", "http://127.0.0.1:7890/later")


# -- FakeSessionTools: the MCP layer's session tools without the session proxy ---------------------


def _mcp(server, session, method, params, id=1):
    from gasoline.mcp import jsonrpc

    out: list = []
    message = (jsonrpc.request(id, method, params) if id is not None
               else jsonrpc.notification(method, params))
    server.handle(session, message).addCallback(out.append)
    return out[0] if out else None


def test_a_sessions_own_tools_are_listed_after_the_servers_and_called_through_it(app):
    """The MCP layer talks to a session's extra tools only through ISessionTools: the fake
    (not the proxy) is listed after Gasoline's tools, called by name, and gets progress."""
    from zope.interface.verify import verifyObject

    from gasoline.interfaces import ISessionTools
    from gasoline.testing import FakeSessionTools

    server = app.mcp
    fake = FakeSessionTools(["fake_echo", "observe"])
    assert verifyObject(ISessionTools, fake)
    session = server.open_session("agent-a", "streamable")
    session.extra_tools = fake
    init = _mcp(server, session, "initialize", {"protocolVersion": "2025-06-18",
                                                "capabilities": {}, "clientInfo": {}})
    assert init["result"]["capabilities"]["tools"] == {"listChanged": True}
    _mcp(server, session, "notifications/initialized", {}, id=None)

    names = [t["name"] for t in _mcp(server, session, "tools/list", {})["result"]["tools"]]
    own = [t["name"] for t in server.tools.definitions()]
    assert names == own + ["fake_echo", "observe"]

    answer = _mcp(server, session, "tools/call", {"name": "fake_echo", "arguments": {"x": 1}})
    assert answer["result"]["content"][0]["text"] == 'fake_echo {"x": 1}'
    # The server's own tool of the same name wins: the fake's is never called.
    _mcp(server, session, "tools/call", {"name": "observe", "arguments": {"what": "errors"}})
    assert fake.calls == [("fake_echo", {"x": 1})]

    _mcp(server, session, "notifications/progress", {"progressToken": "t", "progress": 1},
         id=None)
    assert fake.progress_seen == [{"progressToken": "t", "progress": 1}]

    # Another session without extra tools sees none of them.
    other = server.open_session("agent-b", "streamable")
    _mcp(server, other, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                       "clientInfo": {}})
    _mcp(server, other, "notifications/initialized", {}, id=None)
    assert "fake_echo" not in [t["name"] for t in
                               _mcp(server, other, "tools/list", {})["result"]["tools"]]
    unknown = _mcp(server, other, "tools/call", {"name": "fake_echo", "arguments": {}})
    assert "Unknown tool" in unknown["error"]["message"]


@pytest.mark.parametrize("raw,body", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\n!!!\r\n0\r\n\r\n",
     b"hello!!!"),
    (b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", b""),
])
def test_response_body_reads_both_framings(raw, body):
    assert response_body(raw) == body

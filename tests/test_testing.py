"""The in-memory HTTP client of gasoline.testing: the daemon's own site, public APIs only."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from gasoline.http.request import GasolineRequest, GasolineSite
from gasoline.testing import StubHTTP, stub_answer, stub_request


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


def test_requests_are_served_by_the_daemons_own_site_and_request_class():
    echo = _Echo()
    http = StubHTTP(echo)
    response, body = stub_request(http, "POST", "http://127.0.0.1:7890/x", data=b"a=1&b=2",
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert isinstance(http.site, GasolineSite)
    assert response.code == 200 and body == b"POST a=1&b=2"
    (request,) = echo.seen
    assert isinstance(request, GasolineRequest)
    assert request.args == {}  # no form parsing: every route takes JSON
    assert request.body_length == 7


def test_a_held_response_arrives_on_flush_and_a_long_poll_on_the_clock():
    echo = _Echo()
    http = StubHTTP(echo)
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
    http = StubHTTP(_Echo())
    with pytest.raises(AssertionError, match="no response to GET http://127.0.0.1:7890/later"):
        stub_request(http, "GET", "http://127.0.0.1:7890/later")

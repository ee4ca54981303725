"""The daemon's HTTP channel's per-connection socket tuning."""

from __future__ import annotations

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.pages import notFound
from twisted.web.resource import Resource

from gasoline.http.request import GasolineSite


class _TCPTransport(StringTransport):
    def __init__(self, error: OSError | None = None):
        super().__init__()
        self.no_delay_calls: list[bool] = []
        self._error = error

    def setTcpNoDelay(self, enabled):
        self.no_delay_calls.append(enabled)
        if self._error is not None:
            raise self._error


REQUEST = b"GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def _connect(transport: StringTransport):
    site = GasolineSite(notFound(), reactor=Clock())  # (a 404 for every path)
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
    channel.makeConnection(transport)
    return channel


def test_nagle_is_turned_off_once_when_a_connection_opens():
    transport = _TCPTransport()
    channel = _connect(transport)
    assert transport.no_delay_calls == [True]
    channel.dataReceived(REQUEST)
    channel.dataReceived(REQUEST)  # later requests on the same keep-alive connection
    assert transport.no_delay_calls == [True]
    assert transport.value().count(b"HTTP/1.1 404") == 2


def test_a_transport_without_tcp_options_is_left_alone():
    channel = _connect(StringTransport())  # e.g. a transport with no TCP options at all
    channel.dataReceived(REQUEST)
    assert channel.transport.value().startswith(b"HTTP/1.1 404")


def test_a_socket_that_refuses_the_tcp_option_is_still_served():
    transport = _TCPTransport(OSError(95, "Operation not supported"))  # a UNIX socket
    channel = _connect(transport)
    channel.dataReceived(REQUEST)
    assert transport.no_delay_calls == [True] and transport.value().startswith(b"HTTP/1.1 404")


def test_form_bodies_reach_the_route_unparsed():
    """twisted.web's form parsing is off on the site: a form or multipart body is the route's
    to judge (every route takes JSON and refuses anything else as JSON), never parsed into
    request.args, and never twisted.web's bare 400 and dropped connection when malformed."""
    seen = []

    class Route(Resource):
        isLeaf = True

        def render(self, request):
            seen.append((request.content.read(), request.args))
            return b"{}"

    site = GasolineSite(Route(), reactor=Clock())
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
    transport = StringTransport()
    channel.makeConnection(transport)
    for ctype, body in ((b"application/x-www-form-urlencoded", b"a=1&b=2"),
                        (b"multipart/form-data; boundary=x", b"--x\r\nnot a part")):
        channel.dataReceived(b"POST /logs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (ctype, len(body), body))
        assert transport.value().startswith(b"HTTP/1.1 200")
        transport.clear()
        assert seen.pop() == (body, {})

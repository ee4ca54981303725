"""The request class's per-connection socket tuning."""

from __future__ import annotations

from gasoline.http.request import _no_delay


class _Transport:
    def __init__(self):
        self.calls = []

    def setTcpNoDelay(self, enabled):
        self.calls.append(enabled)


class _Channel:
    def __init__(self, transport):
        self.transport = transport


def test_nagle_is_turned_off_once_per_connection():
    transport = _Transport()
    channel = _Channel(transport)
    _no_delay(channel)
    _no_delay(channel)  # a second request on the same keep-alive connection
    assert transport.calls == [True]


def test_a_transport_without_tcp_options_is_left_alone():
    channel = _Channel(object())  # e.g. a UNIX socket transport
    _no_delay(channel)
    _no_delay(None)
    assert channel._gasoline_no_delay is True

"""
A child's stdin (L{gasoline.proxy.child._Stdin}): one message, one C{write}, at once; what a full
pipe cannot take waits, in order, for the pipe to drain; closing waits for the queue; a child
that closed its end drops the queue without an error. On real pipes; the reactor is a recorder
of C{addWriter}/C{removeWriter} (the descriptor's only use of it).
"""

from __future__ import annotations

import os

import pytest
from zope.interface import implementer
from zope.interface.verify import verifyObject
from twisted.internet.interfaces import IReactorFDSet, IWriteDescriptor

from gasoline.proxy import child as child_module
from gasoline.proxy.child import _Stdin


@implementer(IReactorFDSet)
class Writers:
    def __init__(self) -> None:
        self.writers: list = []
        self.log: list[tuple[str, int]] = []

    def addWriter(self, writer) -> None:
        assert writer not in self.writers
        self.writers.append(writer)
        self.log.append(("add", writer.fileno()))

    def removeWriter(self, writer) -> None:
        self.writers.remove(writer)
        self.log.append(("remove", writer.fileno()))

    addReader = removeReader = getReaders = getWriters = removeAll = None  # type: ignore


class Pipe:
    """A non-blocking pipe; the write end belongs to the L{_Stdin} under test (it closes it),
    the read end is the child's."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.w, False)
        os.set_blocking(self.r, False)
        self.stdin = _Stdin(Writers(), self.w)

    def child_exits(self) -> None:
        os.close(self.r)
        self.r = -1


@pytest.fixture
def pipe():
    p = Pipe()
    yield p
    p.stdin.abort()  # closes the write end once (idempotent)
    if p.r >= 0:
        os.close(p.r)


def _read_all(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def test_a_message_goes_out_in_one_write_at_once(pipe, monkeypatch):
    r, w, stdin = pipe.r, pipe.w, pipe.stdin
    reactor = stdin._reactor
    assert verifyObject(IWriteDescriptor, stdin)
    writes = []
    real_write = os.write

    def counting(fd, data):
        writes.append((fd, bytes(data)))
        return real_write(fd, data)

    monkeypatch.setattr(child_module.os, "write", counting)
    stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    stdin.write(b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
    monkeypatch.undo()
    assert [data for fd, data in writes if fd == w] == [
        b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n']
    assert _read_all(r) == b"".join(data for _, data in writes)
    assert reactor.log == [] and stdin.queued == 0  # no reactor turn, no registration


def test_a_full_pipe_queues_in_order_and_drains(pipe):
    r, w, stdin = pipe.r, pipe.w, pipe.stdin
    reactor = stdin._reactor
    big = bytes(range(256)) * 1024  # 256 KiB: more than a pipe holds
    stdin.write(big)
    assert 0 < stdin.queued < len(big)
    assert reactor.writers == [stdin]
    stdin.write(b"after\n")  # behind the queue, never before it
    received = b""
    while reactor.writers:
        received += _read_all(r)
        stdin.doWrite()
    received += _read_all(r)
    assert received == big + b"after\n"
    assert stdin.queued == 0 and reactor.log == [("add", w), ("remove", w)]
    stdin.write(b"next\n")  # empty again: straight out
    assert _read_all(r) == b"next\n" and reactor.writers == []


def test_close_waits_for_the_queue_then_the_child_reads_eof(pipe):
    r, stdin = pipe.r, pipe.stdin
    reactor = stdin._reactor
    big = b"x" * (300 * 1024)
    stdin.write(big)
    stdin.close()
    assert not stdin.closed
    stdin.write(b"ignored after close\n")
    received = b""
    while not stdin.closed:
        received += _read_all(r)
        stdin.doWrite()
    received += _read_all(r)
    assert received == big
    assert os.read(r, 10) == b""  # end of file: the write end is closed
    assert reactor.writers == []


def test_close_with_nothing_queued_closes_at_once(pipe):
    r, stdin = pipe.r, pipe.stdin
    stdin.close()
    assert stdin.closed and os.read(r, 10) == b""


def test_a_child_that_closed_its_stdin_drops_the_queue_quietly(pipe):
    stdin = pipe.stdin
    reactor = stdin._reactor
    stdin.write(b"x" * (200 * 1024))
    assert reactor.writers == [stdin]
    pipe.child_exits()
    stdin.doWrite()  # EPIPE: no exception, queue dropped, unregistered, closed
    assert stdin.closed and stdin.queued == 0 and reactor.writers == []
    stdin.write(b"more\n")  # still quiet
    stdin.doWrite()


def test_epipe_on_the_first_write_is_quiet_too(pipe):
    stdin = pipe.stdin
    pipe.child_exits()
    stdin.write(b"hello\n")
    assert stdin.closed

"""Shared pytest fixtures."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from _modes_harness import Harness

from gasoline.app import Config, build
from support import DaemonProcess


@pytest.fixture
def clock():
    """A C{task.Clock} at a realistic epoch time (RFC 3339 stamps and ages look like real ones)."""
    c = Clock()
    c.advance(1_700_000_000)
    return c


@pytest.fixture
def app(tmp_path, clock):
    """The whole daemon object graph on C{clock}, persistence off, state in C{tmp_path}; its MCP
    sessions, streaming hub, notifier, extension link and router are stopped afterwards."""
    a = build(Config(state_dir=tmp_path, persist=False), clock)
    yield a
    a.mcp.close_all()
    a.streaming.stop()
    a.store.notifier.stop()
    a.extension.stop()
    a.router.close()


@pytest.fixture
def daemon(tmp_path):
    """A real ``twistd -n gasoline`` on a free loopback port with a temporary state dir."""
    d = DaemonProcess(state_dir=tmp_path / "state")
    d.start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def h(tmp_path):
    """The mode-table harness (tests/_modes_harness.py): a daemon on a Clock, modes called
    directly; it must leave no timer behind."""
    harness = Harness.create(tmp_path)
    yield harness
    harness.close()
    assert harness.clock.getDelayedCalls() == []

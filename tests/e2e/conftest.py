"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

import signal

import pytest
from support import require_tool

from harness import CHROMIUM, Chromium, TestSite

#: Each end-to-end test must finish within this many seconds (SIGALRM fails it otherwise).
TEST_TIME_LIMIT = 120


@pytest.fixture(autouse=True)
def time_limit():
    def expired(signum, frame):
        raise TimeoutError(f"end-to-end test exceeded {TEST_TIME_LIMIT}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_TIME_LIMIT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def chromium_bin():
    return require_tool("chromium", CHROMIUM, "the extension's end-to-end tests drive a real Chromium")


@pytest.fixture
def site():
    s = TestSite().start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def browser(chromium_bin):
    b = Chromium(executable=chromium_bin)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def ext_daemon(daemon):
    """The real daemon the extension streams into (tests/conftest.py's C{daemon})."""
    return daemon

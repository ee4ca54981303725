"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from support import require_tool

from harness import CHROMIUM, Chromium, TestSite

#: Each end-to-end test must finish within this many seconds (SIGALRM fails it otherwise).
TEST_TIME_LIMIT = 120


#: A real-browser test that fails is run once more (pytest-rerunfailures; the summary counts it
#: as "rerun", and the first failure stays in the log with the extension's state): a few of these
#: tests wait for capture that, on a loaded 2-core machine, has arrived late about once in a
#: hundred runs (docs/e2e-mcp.md, "Reruns"). Unit tests never get a second run.
E2E_RERUNS = 1
_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.flaky(reruns=E2E_RERUNS, reruns_delay=1))


def pytest_runtest_logreport(report):
    """A failure that gets a rerun is printed in full all the same: it is a finding, not noise."""
    if report.outcome == "rerun":
        sys.stderr.write(f"\n[e2e rerun] {report.nodeid} failed once, running it again:\n"
                         f"{report.longreprtext[-6000:]}\n")


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

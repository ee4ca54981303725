"""Shared pytest fixtures."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from _modes_harness import Harness

from gasoline.app import Config, build
from support import USER_PORT, DaemonProcess, listening_sockets

# -- the suite leaves the user's daemon alone ---------------------------------------------------------
#
# No test may bind, stop or talk to port 7890 or use the user's state dir. Two mechanisms:
#  - every process the suite starts inherits GASOLINE_STATE_DIR pointing into a temporary dir, so a
#    command or connector that names no daemon finds the suite's (empty) state dir, never the
#    user's, and the lifecycle commands never fall back to a port (gasoline.admin_cli);
#  - what listens on 7890 at the start of the session (read from /proc/net/tcp*, without connecting)
#    must still listen, the same socket, at its end, and nothing else may: a suite that stopped
#    the user's daemon fails, and so does one that left something of its own listening there
#    (a daemon a command started on the default port).

_user_port_at_start: set[str] | None = None


def pytest_sessionstart(session):
    global _user_port_at_start
    import os
    import tempfile

    _user_port_at_start = listening_sockets(USER_PORT)
    os.environ["GASOLINE_STATE_DIR"] = tempfile.mkdtemp(prefix="gasoline-suite-state-")


def pytest_sessionfinish(session, exitstatus):
    import os
    import shutil

    suite_state = os.environ.get("GASOLINE_STATE_DIR", "")
    if "gasoline-suite-state-" in suite_state:
        shutil.rmtree(suite_state, ignore_errors=True)
    if _user_port_at_start is None:
        return  # no /proc: the check is not made
    now = listening_sockets(USER_PORT) or set()
    stopped, started = _user_port_at_start - now, now - _user_port_at_start
    messages = []
    if stopped:
        messages.append(f"the test suite stopped what was listening on port {USER_PORT} when it "
                        f"started (socket inodes {sorted(stopped)}): a test acted on the user's "
                        "daemon")
    if started:
        messages.append(f"something the test suite started still listens on port {USER_PORT} "
                        f"(socket inodes {sorted(started)}): a test started a daemon on the "
                        "user's port")
    if messages:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for message in messages:
            if reporter is not None:
                reporter.write_line(f"ERROR: {message}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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

"""No process a child server starts outlives the daemon's decision to end it, on the
paths where the daemon ends a child itself (the daemon's own death, ``kill -9`` included, is
``tests/test_proxy_daemon.py``): a server that fails to start is killed at once, and what it
detached (``setsid`` after a double fork, outside the watchdog's process group) goes with it: the
watchdog is its subreaper and kills descendants one by one on the daemon's SIGUSR1."""

from __future__ import annotations

import sys

import pytest
import pytest_twisted

from _proxy_harness import Daemon, alive, wait_for

pytestmark = pytest.mark.integration

#: Detaches a grandchild (its pid in argv[1]'s file), then never answers initialize.
HANG = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1] + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"""


@pytest_twisted.ensureDeferred
async def test_a_server_that_fails_to_start_takes_its_detached_grandchild_along(tmp_path):
    wd = tmp_path / "proj"
    wd.mkdir()
    marker = tmp_path / "grandchild.pid"
    d = Daemon(tmp_path, {"hang": {"command": sys.executable, "args": ["-c", HANG, str(marker)]}},
               proxy={"startTimeout": 1}).start()
    try:
        info = await d.init(wd)
        assert info["servers"]["hang"]["status"] in ("down", "starting")
        assert "failed to start" in info["servers"]["hang"]["error"]
        assert marker.exists()
        grandchild = int(marker.read_text())
        # Gone at once (SIGKILL from its subreaper), not left to init.
        assert await wait_for(lambda: not alive(grandchild), timeout=10), grandchild
    finally:
        await d.stop()

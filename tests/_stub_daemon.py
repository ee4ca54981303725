"""The whole daemon object graph on a C{task.Clock}, served in memory (C{treq.testing.StubTreq})."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from treq.testing import StubTreq
from twisted.internet.task import Clock

from gasoline.app import Config, build

#: Never connected to: the in-memory client serves every URL from the daemon's resource.
URL = "http://127.0.0.1:7890"


class StubDaemon:
    """C{build(Config(...), clock)} with persistence off, its clock at a realistic epoch (RFC 3339
    stamps look like real ones), and C{treq}, an in-memory HTTP client of its resource."""

    def __init__(self, state_dir: Path, **config: Any) -> None:
        self.state_dir = state_dir
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.app = build(Config(state_dir=state_dir, persist=False, **config), self.clock)
        self.treq = StubTreq(self.app.resource)

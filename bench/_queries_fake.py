"""
The FakeExtension in its own process, for ``bench/queries.py`` (so that the extension's side does
not share the daemon's reactor, as a real browser does not).

    python bench/_queries_fake.py URL WORK_MS [sequential]

``dom`` commands are answered after a uniform 0..WORK_MS of simulated work (0: at once); with
``sequential`` one at a time (as the real extension runs one tab's commands), else all at once.
Runs until stdin closes (the benchmark closes it) or SIGTERM.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from twisted.internet import reactor, stdio
from twisted.internet.protocol import Protocol
from twisted.internet.task import deferLater

from gasoline.testing import FakeExtension


def dom_answer(params: dict) -> dict:
    selector = params.get("selector")
    return {"selector": selector, "match_count": 1,
            "matches": [{"tag": "div", "text": f"fake match for {selector}", "visible": True}]}


class StopOnEOF(Protocol):
    def __init__(self, fake: FakeExtension) -> None:
        self.fake = fake

    def connectionLost(self, reason=None) -> None:
        self.fake.stop().addBoth(lambda _: reactor.stop())


def main() -> None:
    url, work_ms = sys.argv[1], float(sys.argv[2])
    sequential = sys.argv[3:4] == ["sequential"]
    rng = random.Random(4)
    if work_ms > 0:
        handlers = {"dom": lambda params: deferLater(
            reactor, rng.uniform(0, work_ms) / 1000.0, dom_answer, params)}
    else:
        handlers = {"dom": dom_answer}
    fake = FakeExtension(url, reactor, handlers=handlers, poll_interval=0,
                         sequential=sequential)
    stdio.StandardIO(StopOnEOF(fake))
    reactor.callWhenRunning(fake.start)
    reactor.run()


if __name__ == "__main__":
    main()

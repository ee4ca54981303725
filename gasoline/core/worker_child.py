"""
A worker process of L{gasoline.core.workers.WorkerPool}: C{python -m gasoline.core.worker_child
PREFIX...}. It answers the pool's C{Run} commands (AMP on its stdin/stdout), one at a time: the
job's module must be one of the allowed C{PREFIX}es (or under one), its function is called with
the decoded arguments, and its result is sent back as JSON. Nothing else is written to stdout.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import orjson
from twisted.internet import stdio, task
from twisted.internet.defer import Deferred
from twisted.internet.protocol import connectionDone
from twisted.protocols import amp
from twisted.python.failure import Failure

from gasoline.core.workers import JobFailed, Run


class Child(amp.AMP):
    def __init__(self, allowed: tuple[str, ...], done: Deferred) -> None:
        super().__init__()
        self.allowed = allowed
        self.done = done

    @Run.responder
    def run(self, job: str, payload: bytes) -> dict[str, Any]:
        module_name, _, func_name = job.partition(":")
        if not any(module_name == p or module_name.startswith(p + ".") for p in self.allowed):
            raise JobFailed(f"job {job!r} is not under an allowed module")
        try:
            func = getattr(importlib.import_module(module_name), func_name)
            data = orjson.loads(payload)
            result = func(*data.get("args", ()), **data.get("kwargs", {}))
            return {"result": orjson.dumps(result, default=str, option=orjson.OPT_NON_STR_KEYS)}
        except Exception as e:
            raise JobFailed(f"{type(e).__name__}: {e}"[:2000]) from None

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        super().connectionLost(reason)
        if not self.done.called:
            self.done.callback(None)


def main(reactor: Any, *allowed: str) -> Deferred:
    done: Deferred = Deferred()
    stdio.StandardIO(Child(tuple(allowed), done), reactor=reactor)
    return done


if __name__ == "__main__":
    task.react(main, sys.argv[1:])

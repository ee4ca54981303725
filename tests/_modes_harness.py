"""Test harness for the analyze/generate/interact mode handlers: the real daemon components
(L{gasoline.app.build}) on a C{task.Clock}, the real query router, and commands answered by hand."""

from __future__ import annotations

from typing import Any

import attrs
import orjson
from twisted.internet import task
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.python.failure import Failure

from gasoline.app import Config, build
from gasoline.tools.context import ToolContext


@attrs.define
class Harness:
    clock: task.Clock
    app: Any

    @classmethod
    def create(cls, tmp_path, connected: bool = True, **settings: Any) -> "Harness":
        clock = task.Clock()
        clock.advance(1_767_225_600)  # 2026-01-01: realistic epoch times
        app = build(Config(state_dir=tmp_path / "state", persist=False), clock)
        h = cls(clock, app)
        if connected:
            app.extension.touch()
        app.extension.settings = {"pilot_enabled": True, "tracked_tab_id": 1,
                                   "tracked_tab_url": "https://app.test/page",
                                   "tracked_tab_title": "App", **settings}
        return h

    def ctx(self, client_id: str = "A", tool: str = "analyze", mode: str = "",
            cwd: str | None = None) -> ToolContext:
        state = self.app.registry.get(client_id) or self.app.registry.register(client_id)
        state.cwd = cwd  # (as the agent's connector reports it)
        return ToolContext(app=self.app.daemon, tools=self.app.tools, request=None, state=state,
                           client_id=client_id, tool=tool, mode=mode)

    def run(self, modes: dict[str, Any], mode: str, args: dict[str, Any] | None = None,
            client_id: str = "A", tool: str = "analyze", cwd: str | None = None) -> Any:
        args = {"what": mode, **(args or {})}
        # As the dispatcher does: a coroutine handler becomes a Deferred; a failure already
        # there (argument validation) is raised at once, as a plain handler raises it.
        d = maybeDeferred(modes[mode], self.ctx(client_id, tool, mode, cwd), args)
        now: list[Any] = []

        def grab(result: Any) -> Any:
            now.append(result)
            return result

        d.addBoth(grab)
        if not now:
            return d  # waits for the extension: the test answers, then reads the Deferred
        d.addErrback(lambda f: None)  # handled here, below
        if isinstance(now[0], Failure):
            now[0].raiseException()
        return now[0]

    def commands(self) -> list[Any]:
        return self.app.extension.commands.deliverable()

    def answer(self, command: Any, result: Any = None, status: str = "complete",
               error: str | None = None) -> None:
        out: dict[str, Any] = {"id": command.id, "status": status}
        if result is not None:
            out["result"] = result
        if error is not None:
            out["error"] = error
        assert self.app.extension.commands.resolve(out)

    def close(self) -> None:
        self.app.router.close()
        self.app.extension.stop()
        self.app.store.notifier.stop()


def parse(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(summary line, JSON body) of a tool result (or of an already-fired Deferred of one)."""
    text = fired(result)["content"][0]["text"]
    summary, _, body = text.partition("\n")
    return summary, orjson.loads(body) if body else {}


def fired(d: Any) -> Any:
    """The result a Deferred already fired with (raising its failure)."""
    if not isinstance(d, Deferred):
        return d
    out: list[Any] = []
    d.addBoth(out.append)
    assert out, "the Deferred has not fired"
    value = out[0]
    if hasattr(value, "raiseException"):
        value.raiseException()
    return value

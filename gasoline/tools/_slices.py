"""
Long generator work in slices, with progress: the reactor runs between slices.

A generator over a full buffer can take seconds (C{generate har} over 1 000 captured bodies of
~20 KB: ~14 s here, all of it redaction), and a tool handler runs on the reactor thread: done in one
go, it would stall every other client, ingest included, and no progress heartbeat could be sent.
So such work is written as a step generator (it yields C{(done, total)} after each unit and
returns its result, like L{gasoline.generate.har.har_steps}) and run by L{run_in_slices}: steps
for up to L{SLICE} seconds, then back to the reactor (C{callLater(0)}), until it returns.

Each slice that ends with work left says where it is (C{"HAR: 120 of 1000 entries"}): as the
call's working message (carried by the progress heartbeat every second) and, at most once a
second, as a C{notifications/progress} of its own with C{progress}/C{total} in units. Work that
finishes within its first slice is answered synchronously, exactly as before (no Deferred, no
notification).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any

from twisted.internet.defer import Deferred

#: Seconds of work between two returns to the reactor.
SLICE = 0.05
#: Seconds between two progress notifications of the work itself (heartbeats come in between).
REPORT_EVERY = 1.0


def run_in_slices(ctx: Any, steps: Generator[tuple[int, int], None, Any], label: str,
                  unit: str = "entries", slice_seconds: float | None = None,
                  timer: Callable[[], float] = time.perf_counter) -> Any:
    """Run C{steps} to its end; its return value, or a Deferred of it when it needed more than
    one slice. Cancelling that Deferred stops the work before its next slice.

    @param ctx: the tool call's L{gasoline.tools.context.ToolContext} (clock, progress).
    @param label: what is being made, for the messages (C{"HAR"}).
    @param slice_seconds: the slice length (default L{SLICE}, read at call time).
    @param timer: measures slices (wall time, not the reactor's clock: it measures work).
    """
    length = SLICE if slice_seconds is None else slice_seconds
    last_report: list[float] = []

    def run_slice() -> tuple[bool, Any]:
        deadline = timer() + length
        while True:
            try:
                done, total = next(steps)
            except StopIteration as finished:
                return True, finished.value
            if timer() >= deadline:
                report(done, total)
                return False, None

    def report(done: int, total: int) -> None:
        message = f"{label}: {done} of {total} {unit}"
        ctx.working(message)
        now = ctx.clock.seconds()
        if not last_report or now - last_report[0] >= REPORT_EVERY:
            last_report[:] = [now]
            ctx.progress(done, total, message)

    finished, value = run_slice()
    if finished:
        return value
    pending: list[Any] = []

    def cancel(_d: Deferred) -> None:
        if pending and pending[0].active():
            pending[0].cancel()
        steps.close()

    result: Deferred = Deferred(cancel)

    def next_slice() -> None:
        pending.clear()
        try:
            finished, value = run_slice()
        except BaseException:  # a bug in the generator fails the call, as it would in one go
            result.errback()
            return
        if finished:
            result.callback(value)
        else:
            pending.append(ctx.clock.callLater(0, next_slice))

    pending.append(ctx.clock.callLater(0, next_slice))
    return result

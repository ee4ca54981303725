"""Progress of long tool calls (gasoline.mcp.progress): with a progress token, a call that runs
longer than a second sends C{notifications/progress} at least once a second with a message, its
progress strictly increasing; link validation says n of m, an extension round trip says it is
waiting and for how long, a sequence replay says step n of m; nothing without a token and no
timer left once the call answers."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.mcp import jsonrpc
from gasoline.mcp.progress import ProgressReporter


@pytest.fixture
def app(tmp_path):
    clock = Clock()
    clock.advance(1_700_000_000)
    return build(Config(state_dir=tmp_path, persist=False, tool_rate_limit=0), clock)


def session(app, client_id="progress-agent"):
    s = app.mcp.open_session(client_id, "streamable")
    out: list = []
    app.mcp.handle(s, jsonrpc.request(0, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}})).addCallback(out.append)
    app.mcp.handle(s, jsonrpc.notification("notifications/initialized"))
    return s


def call(app, s, name, args, token="tok"):
    sent: list = []
    out: list = []
    params: dict[str, Any] = {"name": name, "arguments": args}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    app.mcp.handle(s, jsonrpc.request(5, "tools/call", params), sent.append) \
        .addCallback(out.append)
    return sent, out


def progress_of(sent) -> list[dict]:
    return [m["params"] for m in sent if m.get("method") == "notifications/progress"]


def assert_increasing(notes):
    values = [n["progress"] for n in notes]
    assert values == sorted(values) and len(set(values)) == len(values), values


def test_reporter_heartbeats_every_second_with_elapsed_time():
    clock = Clock()
    sent: list = []
    reporter = ProgressReporter(clock, lambda p, t, m: sent.append((p, t, m)), "analyze dom")
    reporter.start()
    clock.advance(0.5)
    assert sent == []  # a call answered within a second sends nothing
    for _ in range(3):
        clock.advance(1)
    assert [s[0] for s in sent] == [0.5, 0.75, 0.875]
    assert [s[2] for s in sent] == [f"analyze dom: working ({n} s)" for n in (2, 2, 4)]
    assert sent[-1][2] == "analyze dom: working (4 s)"
    reporter.update(2, 5, "2 of 5 done")
    clock.advance(1)
    clock.advance(1)
    values = [s[0] for s in sent]
    assert values[3] == 2 and 2 < values[4] < values[5] < 3
    assert sent[-1][1] == 5 and sent[-1][2] == "2 of 5 done (6 s)"
    reporter.stop()
    assert clock.getDelayedCalls() == []


def test_reporter_stops_counting_up_when_every_unit_is_done():
    clock = Clock()
    sent: list = []
    reporter = ProgressReporter(clock, lambda p, t, m: sent.append(p), "x").start()
    reporter.update(3, 3, "all done, writing the answer")
    for _ in range(3):
        clock.advance(1)
    assert sent == [3]
    reporter.stop()


def test_extension_round_trip_reports_waiting_and_how_long(app):
    s = session(app)
    app.extension.touch()
    sent, out = call(app, s, "analyze", {"what": "dom", "selector": "h1"})
    assert out == []
    for _ in range(3):
        app.clock.advance(1)
        app.extension.touch()  # the extension keeps syncing, it just has not answered yet
    notes = progress_of(sent)
    assert len(notes) == 3
    assert all(n["progressToken"] == "tok" for n in notes)
    assert notes[-1]["message"] == "waiting for the extension to answer dom (3 s)"
    assert_increasing(notes)
    (pending,) = app.router.pending_commands("progress-agent")
    app.extension.commands.resolve({"id": pending["command_id"], "status": "complete",
                                    "result": {"url": "http://x/", "count": 0, "matches": []}})
    assert out and "result" in out[0]
    sent.clear()
    app.clock.advance(5)
    assert progress_of(sent) == []  # nothing after the answer
    app.mcp.close_all()
    app.extension.stop()


class SlowValidator:
    """A link validator whose checks finish when the test says so."""

    def __init__(self) -> None:
        self.pending: list[tuple[Deferred, str]] = []

    def validate(self, urls, allow_private=False, on_progress=None):
        from gasoline.analysis import summarize_link_results

        results: list = []
        done = Deferred()

        def finish_one():
            url = urls[len(results)]
            results.append({"url": url, "status": 200, "ok": True})
            if on_progress is not None:
                on_progress(len(results), len(urls), url)
            if len(results) == len(urls):
                summary = summarize_link_results(results)
                summary.update(refused=0, allow_private=allow_private)
                done.callback(summary)

        self.finish_one = finish_one
        return done


def test_link_validation_reports_n_of_m(app):
    validator = SlowValidator()
    app.tools.runtime.link_validator = validator
    s = session(app)
    urls = [f"https://example.com/{i}" for i in range(4)]
    sent, out = call(app, s, "analyze", {"what": "link_validation", "urls": urls})
    app.clock.advance(1)
    validator.finish_one()
    app.clock.advance(1)
    validator.finish_one()
    validator.finish_one()
    app.clock.advance(1)
    validator.finish_one()
    assert out and "result" in out[0], out
    notes = progress_of(sent)
    messages = [n["message"] for n in notes]
    assert messages[0].startswith("analyze link_validation: working")
    assert "1 of 4 links checked" in messages
    assert "3 of 4 links checked" in messages
    assert "2 of 4 links checked" in messages and "4 of 4 links checked" in messages
    assert any(m.startswith("1 of 4 links checked (") for m in messages)  # a heartbeat
    assert notes[-1]["total"] == 4
    assert_increasing(notes)
    app.mcp.close_all()


def test_sequence_replay_reports_step_n_of_m(app):
    s = session(app)
    app.extension.touch()
    steps = [{"what": "navigate", "url": "http://localhost:3000/a"},
             {"what": "navigate", "url": "http://localhost:3000/b"}]
    _, saved = call(app, s, "configure", {"what": "save_sequence", "name": "two",
                                          "steps": steps}, token=None)
    assert saved and not saved[0]["result"]["isError"], saved
    sent, out = call(app, s, "configure", {"what": "replay_sequence", "name": "two"})
    notes = progress_of(sent)
    assert notes[0]["message"] == "step 1 of 2: navigate" and notes[0]["total"] == 2
    for i in range(2):
        app.clock.advance(1)
        app.extension.touch()
        (pending,) = app.router.pending_commands("progress-agent")
        app.extension.commands.resolve({"id": pending["command_id"], "status": "complete",
                                        "result": {"url": steps[i]["url"]}})
    messages = [n["message"] for n in progress_of(sent)]
    assert "step 2 of 2: navigate" in messages
    assert any("waiting for the extension" in m for m in messages)
    assert_increasing(progress_of(sent))
    assert out, sent
    app.mcp.close_all()
    app.extension.stop()


def test_no_progress_without_a_token(app):
    s = session(app)
    app.extension.touch()
    sent, out = call(app, s, "analyze", {"what": "dom", "selector": "h1"}, token=None)
    for _ in range(3):
        app.clock.advance(1)
        app.extension.touch()
    assert progress_of(sent) == []
    app.mcp.close_all()
    app.extension.stop()


# -- generators over large buffers: in slices, with "n of m entries" ------------------------------

def body_of(answer: dict) -> dict:
    """The JSON body of a tool result (its text after the summary line)."""
    import json

    return json.loads(answer["result"]["content"][0]["text"].partition("\n")[2])


def _bodies(n: int) -> list[dict]:
    return [{"url": f"https://app.test/api/{i}", "method": "GET", "status": 200,
             "content_type": "application/json", "response_body": '{"ok": true}',
             "timestamp": "2026-01-01T00:00:00Z"} for i in range(n)]


def test_har_over_a_large_buffer_runs_in_slices_and_reports_n_of_m(app, monkeypatch):
    """Work that takes 0.4 s per entry (the clock moves while it runs): the reactor gets control
    between slices, so heartbeats and "HAR: n of 10 entries" reach the caller at least about once
    a second, progress strictly increasing, and the answer is the whole HAR."""
    import gasoline.tools._slices as slices
    import gasoline.tools.generate as generate_tool
    from gasoline.core.storage.store import NETWORK_BODIES
    from gasoline.generate.har import har_steps

    app.store.add(NETWORK_BODIES, _bodies(10))

    def slow_steps(*a, **k):
        steps = har_steps(*a, **k)
        while True:
            try:
                step = next(steps)
            except StopIteration as done:
                return done.value
            app.clock.rightNow += 0.4  # the work takes (reactor-clock) time
            yield step

    monkeypatch.setattr(generate_tool, "har_steps", slow_steps)
    monkeypatch.setattr(slices, "SLICE", 0.0)  # every entry is a slice of its own
    s = session(app)
    started = app.clock.seconds()
    sent: list = []
    out: list = []
    app.mcp.handle(s, jsonrpc.request(5, "tools/call", {
        "name": "generate", "arguments": {"what": "har"}, "_meta": {"progressToken": "har"}}),
        lambda m: sent.append((app.clock.seconds(), m))).addCallback(out.append)
    assert out == []  # the first slice gave the reactor back
    app.clock.advance(0)
    assert out, sent
    result = out[0]["result"]
    assert not result["isError"], result
    assert body_of(out[0])["entries"] == 10
    notes = [(t, m["params"]) for t, m in sent if m.get("method") == "notifications/progress"]
    assert notes, sent
    assert all(n["progressToken"] == "har" and n.get("message") for _, n in notes)
    counted = [n for _, n in notes if n["message"].startswith("HAR: ")]
    assert counted and all(n["total"] == 10 for n in counted)
    assert counted[0]["message"] == "HAR: 1 of 10 entries"
    assert_increasing([n for _, n in notes])
    times = [started] + [t for t, _ in notes]
    assert max(b - a for a, b in zip(times, times[1:])) <= 1.0 + 0.4 + 1e-9
    assert app.clock.seconds() - started >= 4.0  # it did take the time, and was heard meanwhile
    app.mcp.close_all()


def test_a_small_har_is_answered_at_once_without_progress(app):
    from gasoline.core.storage.store import NETWORK_BODIES

    app.store.add(NETWORK_BODIES, _bodies(3))
    s = session(app)
    sent, out = call(app, s, "generate", {"what": "har"})
    assert out and body_of(out[0])["entries"] == 3
    assert progress_of(sent) == []
    app.mcp.close_all()


def test_run_in_slices_yields_between_slices_and_stops_when_cancelled():
    from types import SimpleNamespace

    from gasoline.tools._slices import run_in_slices

    clock = Clock()
    reports: list = []
    ctx = SimpleNamespace(clock=clock, working=lambda m: reports.append(("working", m)),
                          progress=lambda n, t, m: reports.append(("progress", n, t, m)))
    ran: list = []

    def steps(n):
        for i in range(n):
            ran.append(i)
            yield i + 1, n
        return "done"

    ticks = iter(range(10_000))
    timer = lambda: next(ticks) * 0.01  # noqa: E731  (each reading: 10 ms later)
    d = run_in_slices(ctx, steps(100), "X", "rows", slice_seconds=0.05, timer=timer)
    assert isinstance(d, Deferred) and len(ran) < 100
    first = len(ran)
    assert reports[:2] == [("working", f"X: {first} of 100 rows"),
                           ("progress", first, 100, f"X: {first} of 100 rows")]
    results: list = []
    d.addCallback(results.append)
    clock.advance(0)
    assert results == ["done"] and len(ran) == 100
    # Reported at most once a second of the clock (it did not move): one progress, many workings.
    assert sum(1 for r in reports if r[0] == "progress") == 1
    assert sum(1 for r in reports if r[0] == "working") > 5
    # Cancelled: no slice runs after it, the generator is closed.
    ran.clear()
    gen = steps(100)
    d = run_in_slices(ctx, gen, "X", slice_seconds=0.05, timer=timer)
    d.addErrback(lambda f: results.append(f.type.__name__))
    stopped_at = len(ran)
    d.cancel()
    clock.advance(0)
    assert len(ran) == stopped_at and results[-1] == "CancelledError"
    assert clock.getDelayedCalls() == []
    assert gen.gi_frame is None  # closed
    # Work done within its first slice is answered synchronously.
    assert run_in_slices(ctx, steps(3), "X", slice_seconds=10.0) == "done"


# -- configure playback, wait:true: step n of m -------------------------------------------------

def test_playback_with_wait_reports_step_n_of_m_and_answers_the_outcome(app):
    from gasoline.core.storage.store import ACTIONS

    s = session(app)
    app.extension.touch()
    app.extension.settings = {"pilot_enabled": True, "tracked_tab_id": 1,
                              "tracked_tab_url": "https://app.test/"}
    _, out = call(app, s, "configure", {"what": "recording_start", "name": "r"}, token=None)
    assert out and not out[0]["result"]["isError"], out
    app.store.add(ACTIONS, [
        {"type": "click", "selectors": {"css": "#a"}, "url": "https://app.test/"},
        {"type": "click", "selectors": {"css": "#b"}, "url": "https://app.test/"},
        {"type": "scroll", "scroll_y": 100},
    ])
    _, out = call(app, s, "configure", {"what": "recording_stop"}, token=None)
    assert out and not out[0]["result"]["isError"], out
    sent, out = call(app, s, "configure", {"what": "playback", "name": "r", "wait": True,
                                           "from_start": False})
    assert out == []  # it waits for the steps
    notes = progress_of(sent)
    assert notes[0]["message"] == "step 1 of 2: click" and notes[0]["total"] == 2
    for _ in range(2):
        app.clock.advance(1.5)
        app.extension.touch()
        (pending,) = app.router.pending_commands("progress-agent")
        app.extension.commands.resolve({"id": pending["command_id"], "status": "complete",
                                        "result": {"success": True}})
    assert out, sent
    body = body_of(out[0])
    assert body["status"] == "complete" and body["counts"] == {"complete": 2, "skipped": 1}
    messages = [n["message"] for n in progress_of(sent)]
    assert "step 2 of 2: click" in messages
    assert any("waiting for the extension" in m for m in messages)  # heartbeats in between
    assert_increasing(progress_of(sent))
    sent.clear()
    app.clock.advance(3)
    assert progress_of(sent) == []  # nothing after the answer
    app.mcp.close_all()
    app.extension.stop()


def test_playback_without_wait_sends_no_progress_after_its_answer(app):
    from gasoline.core.storage.store import ACTIONS

    s = session(app)
    app.extension.touch()
    app.extension.settings = {"pilot_enabled": True, "tracked_tab_id": 1}
    call(app, s, "configure", {"what": "recording_start", "name": "r"}, token=None)
    app.store.add(ACTIONS, [{"type": "click", "selectors": {"css": "#a"}}])
    call(app, s, "configure", {"what": "recording_stop"}, token=None)
    sent, out = call(app, s, "configure", {"what": "playback", "name": "r", "from_start": False})
    assert out and body_of(out[0])["status"] == "running"
    app.clock.advance(3)
    app.extension.touch()
    assert progress_of(sent) == []
    app.mcp.close_all()
    app.extension.stop()

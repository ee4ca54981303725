"""The FakeExtension (gasoline.testing) against the daemon's components on the real reactor:
real sockets on 127.0.0.1, the real /sync loop, results routed by the query router."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.task import deferLater

from gasoline.core.errors import ExtensionError
from gasoline.testing import FakeExtension, FakeExtensionError
from support import InProcessDaemon

pytestmark = pytest.mark.integration


def _reactor():
    from twisted.internet import reactor

    return reactor


async def _running(tmp_path, **fake_kw):
    reactor = _reactor()
    daemon = InProcessDaemon(reactor, tmp_path / "state").start()
    fake = FakeExtension(daemon.url, reactor, **fake_kw).start()
    await fake.connected()
    return reactor, daemon, fake


async def _shutdown(daemon, fake):
    await fake.stop()
    await daemon.stop()


@pytest_twisted.ensureDeferred
async def test_two_clients_concurrent_dom_calls_are_each_answered_correctly(tmp_path):
    reactor, daemon, fake = await _running(tmp_path)
    router = daemon.app.router
    try:
        calls = []
        for i in range(10):
            for owner in ("agent-a", "agent-b"):
                selector = f"#{owner}-{i}"
                calls.append((owner, selector, router.call(owner, "dom", {"selector": selector},
                                                           timeout=10)))
        results = await gatherResults([d for _, _, d in calls])
        for (owner, selector, _), result in zip(calls, results):
            assert result["selector"] == selector
            assert result["matches"][0]["text"] == f"fake match for {selector}"
        assert router.pending_count() == 0
        assert len(fake.received) == 20
        assert sorted(r["id"] for r in fake.sent_results) == sorted(c["id"] for c in fake.received)
    finally:
        await _shutdown(daemon, fake)


@pytest_twisted.ensureDeferred
async def test_fake_extension_sends_the_sync_request_shape_and_acks(tmp_path):
    reactor, daemon, fake = await _running(
        tmp_path, settings={"tracked_tab_id": 42, "tracked_tab_url": "http://localhost:4000/x",
                            "pilot_enabled": False})
    link = daemon.app.extension
    try:
        assert link.session_id == fake.ext_session_id
        assert link.extension_version == "0.7.9"
        assert link.settings["tracked_tab_id"] == 42
        assert link.settings["pilot_enabled"] is False
        result = await daemon.app.router.call("a", "page_info", {}, timeout=10)
        assert result["tab_id"] == 42 and result["url"] == "http://localhost:4000/x"
        # The next sync acknowledges the command: it is not handed out again.
        command_id = fake.received[-1]["id"]
        for _ in range(100):
            if link.commands.acked_upto >= int(command_id[2:]):
                break
            await deferLater(reactor, 0.02, lambda: None)
        assert link.commands.acked_upto == int(command_id[2:])
        assert link.commands.deliverable() == []
        fake.set_settings(tracked_tab_id=7)
        await daemon.app.router.call("a", "tabs", {}, timeout=10)
        for _ in range(100):
            if link.settings.get("tracked_tab_id") == 7:
                break
            await deferLater(reactor, 0.02, lambda: None)
        assert link.settings["tracked_tab_id"] == 7
    finally:
        await _shutdown(daemon, fake)


@pytest_twisted.ensureDeferred
async def test_pluggable_handlers_deferred_results_and_errors(tmp_path):
    reactor = _reactor()
    slow: Deferred = Deferred()

    def boom(params):
        raise FakeExtensionError("element_not_found: " + params["selector"])

    handlers = {"computed_styles": lambda params: slow, "dom_action": boom}
    reactor_, daemon, fake = await _running(tmp_path, handlers=handlers)
    router = daemon.app.router
    try:
        styles = router.call("a", "computed_styles", {"selector": "h1"}, timeout=10)
        failing = router.call("b", "dom_action", {"selector": "#nope"}, timeout=10)
        unknown = router.call("c", "no_such_type", {}, timeout=10)
        with pytest.raises(ExtensionError, match="element_not_found: #nope"):
            await failing
        with pytest.raises(ExtensionError, match="unknown_query_type"):
            await unknown
        assert not styles.called
        reactor.callLater(0.05, slow.callback, {"color": "red"})
        assert await styles == {"color": "red"}
    finally:
        await _shutdown(daemon, fake)


@pytest_twisted.ensureDeferred
async def test_screenshot_commands_are_answered_through_post_screenshots(tmp_path):
    reactor, daemon, fake = await _running(tmp_path)
    try:
        a, b = await gatherResults([
            daemon.app.router.call("a", "screenshot", {}, timeout=10),
            daemon.app.router.call("b", "screenshot", {}, timeout=10),
        ])
        assert a["filename"] != b["filename"]
        assert (tmp_path / "state" / "screenshots" / a["filename"]).exists()
        assert (tmp_path / "state" / "screenshots" / b["filename"]).exists()
        assert all(r["via"] == "/screenshots" for r in fake.sent_results)
    finally:
        await _shutdown(daemon, fake)


@pytest_twisted.ensureDeferred
async def test_stop_cancels_the_in_flight_long_poll(tmp_path):
    reactor, daemon, fake = await _running(tmp_path)
    queue = daemon.app.extension.commands
    try:
        for _ in range(100):  # the fake's next sync is being held by the daemon
            if queue.waiting:
                break
            await deferLater(reactor, 0.02, lambda: None)
        assert queue.waiting == 1
        syncs = daemon.app.extension.syncs
        await fake.stop()
        for _ in range(100):  # the dropped connection cancels the daemon's held request
            if not queue.waiting:
                break
            await deferLater(reactor, 0.02, lambda: None)
        assert queue.waiting == 0
        await deferLater(reactor, 0.3, lambda: None)
        assert daemon.app.extension.syncs == syncs
        assert fake.errors == []
    finally:
        await daemon.stop()


@pytest_twisted.ensureDeferred
async def test_sequential_fake_runs_one_command_at_a_time_and_no_result_waits_for_the_long_poll(
    tmp_path,
):
    """Three agents' commands run one after the other (as the real extension runs one tab's
    commands); a result must not wait behind the previous result's sync (the daemon
    answers a sync that reports results at once instead of holding it for its 5 s long poll)."""
    reactor = _reactor()
    running = [0, 0]  # now, most at once

    async def slow_dom(params):
        running[0] += 1
        running[1] = max(running)
        await deferLater(reactor, 0.05, lambda: None)
        running[0] -= 1
        return {"selector": params["selector"]}

    def handler(params):
        return Deferred.fromCoroutine(slow_dom(params))

    # A slow poll loop, so that results go out only in the result syncs.
    _, daemon, fake = await _running(tmp_path, handlers={"dom": handler}, sequential=True,
                                     poll_interval=3.0)
    try:
        started = reactor.seconds()
        results = await gatherResults([
            daemon.app.router.call(f"agent-{x}", "dom", {"selector": f"#{x}"}, timeout=10)
            for x in "abc"
        ])
        elapsed = reactor.seconds() - started
        assert [r["selector"] for r in results] == ["#a", "#b", "#c"]
        assert running[1] == 1
        assert elapsed < 2.0, f"the last result waited {elapsed:.2f} s"
    finally:
        await _shutdown(daemon, fake)

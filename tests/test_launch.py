"""``gasoline browser`` without a browser: options, pre-pairing, the command line, the pipe client.

The real launch (Chromium, daemon, agent) is tests/e2e/test_browser_launch.py.
"""

from __future__ import annotations

import json
import os
import stat

import pytest
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.task import Clock
from twisted.python import usage
from twisted.python.failure import Failure

from gasoline.core.trust.identity import fingerprint_of
from gasoline.core.trust.pairing import DaemonIdentity
from gasoline.launch import prepair
from gasoline.launch.chromium import (
    BrowserProcess,
    CDPError,
    LaunchError,
    chromium_argv,
    extension_dir,
    find_chromium,
)
from gasoline.launch.main import BrowserOptions


def offered_by(state_dir) -> dict:
    """What ``GET /pairing`` of a daemon with this state dir answers."""
    return DaemonIdentity.from_state_dir(state_dir, Clock()).describe()


def test_prepaired_settings_are_exactly_what_the_popup_and_tracking_would_write():
    identity = {"key": "K", "fingerprint": "F"}
    settings = prepair.prepaired_settings("http://127.0.0.1:4321", identity, 12, "http://x/",
                                          pilot=True, track_all=False, headless=True)
    assert settings == {
        "serverUrl": "http://127.0.0.1:4321", "gasolineDaemonIdentity": identity,
        "trackedTabId": 12, "trackedTabUrl": "http://x/", "gasolineTrackAllTabs": False,
        "aiWebPilotEnabled": True,
        "gasolineLaunchedBy": {"by": "gasoline browser", "headless": True},
    }
    # Every key is one the extension reads (extension/lib/settings.js STORAGE_KEYS).
    source = (extension_dir() / "lib" / "settings.js").read_text()
    for key in settings:
        assert f"'{key}'" in source, key


def test_the_pinned_identity_is_the_state_dirs_key_when_the_port_offers_the_same(tmp_path):
    offered = offered_by(tmp_path)
    identity = prepair.pinned_identity(tmp_path, offered, "http://127.0.0.1:4321")
    assert identity["key"] == offered["key"]
    assert identity["fingerprint"] == offered["fingerprint"] == fingerprint_of(
        prepair.daemon_public_key(tmp_path))
    assert identity["server_url"] == "http://127.0.0.1:4321"


def test_a_port_offering_another_key_is_not_pinned(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    offered_by(ours)
    with pytest.raises(prepair.IdentityMismatch, match="--state-dir"):
        prepair.pinned_identity(ours, offered_by(theirs), "http://127.0.0.1:4321")
    with pytest.raises(prepair.IdentityMismatch):
        prepair.pinned_identity(ours, None, "http://127.0.0.1:4321")  # no /pairing at all


def test_without_a_key_file_nothing_is_pinned(tmp_path):
    with pytest.raises(prepair.IdentityMismatch, match="no daemon identity"):
        prepair.pinned_identity(tmp_path, {"key": "x"}, "http://127.0.0.1:1")


def test_the_command_line_loads_the_extension_with_a_private_pipe_not_a_port(tmp_path):
    argv = chromium_argv("/usr/bin/chromium", tmp_path / "p", tmp_path / "ext", headless=True,
                         root=False)
    assert argv[0] == "/usr/bin/chromium" and argv[-1] == "about:blank"
    assert f"--user-data-dir={tmp_path / 'p'}" in argv
    assert f"--load-extension={tmp_path / 'ext'}" in argv
    assert "--remote-debugging-pipe" in argv
    assert not [a for a in argv if a.startswith("--remote-debugging-port")]
    assert "--headless=new" in argv and "--no-sandbox" not in argv
    headed_root = chromium_argv("c", tmp_path, tmp_path, headless=False, root=True)
    assert "--no-sandbox" in headed_root and not [a for a in headed_root if "headless" in a]


def test_the_extension_is_found_beside_the_package():
    assert (extension_dir() / "manifest.json").is_file()


def test_find_chromium_looks_on_path_and_names_what_it_looked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LaunchError, match="chromium-browser"):
        find_chromium()
    with pytest.raises(LaunchError, match="no such executable"):
        find_chromium(str(tmp_path / "nope"))
    fake = tmp_path / "google-chrome"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert find_chromium() == str(fake)
    assert find_chromium(str(fake)) == str(fake)


@pytest.mark.parametrize("argv,url", [([], "about:blank"), (["example.test/x"], "http://example.test/x"),
                                      (["localhost:3000/a"], "http://localhost:3000/a"),
                                      (["https://a.test"], "https://a.test")])
def test_options_take_one_url(argv, url, monkeypatch, tmp_path):
    monkeypatch.setenv("GASOLINE_STATE_DIR", str(tmp_path))
    o = BrowserOptions()
    o.parseOptions(argv + ["--port", "4321"])
    assert o["url"] == url and o["base-url"] == "http://127.0.0.1:4321"


def test_options_refuse_other_schemes(monkeypatch, tmp_path):
    monkeypatch.setenv("GASOLINE_STATE_DIR", str(tmp_path))
    for url in ("javascript:alert(1)", "data:text/html,x", "chrome://settings"):
        with pytest.raises(usage.UsageError):
            BrowserOptions().parseOptions([url])


# -- the DevTools client over the pipe -----------------------------------------------------------


class FakeProcessTransport:
    def __init__(self):
        self.to_child: list[tuple[int, bytes]] = []
        self.closed: list[int] = []
        self.signals: list[str] = []
        self.pid = 4242

    def writeToChild(self, fd, data):
        self.to_child.append((fd, data))

    def closeChildFD(self, fd):
        self.closed.append(fd)

    def signalProcess(self, name):
        self.signals.append(name)


def started(clock):
    proto = BrowserProcess(clock)
    proto.makeConnection(FakeProcessTransport())
    return proto


def test_a_call_goes_to_fd_3_and_its_answer_comes_from_fd_4_in_pieces():
    clock = Clock()
    proto = started(clock)
    assert proto.transport.closed == [0]
    out = []
    proto.call("Browser.getVersion").addCallback(out.append)
    [(fd, data)] = proto.transport.to_child
    assert fd == 3 and data.endswith(b"\0")
    sent = json.loads(data[:-1])
    assert sent["method"] == "Browser.getVersion"
    answer = json.dumps({"id": sent["id"], "result": {"product": "Chrome/1"}}).encode() + b"\0"
    proto.childDataReceived(4, json.dumps({"method": "Target.targetCreated"}).encode() + b"\0")
    proto.childDataReceived(4, answer[:7])
    assert out == []
    proto.childDataReceived(4, answer[7:])
    assert out == [{"product": "Chrome/1"}]
    proto.childDataReceived(2, b"noise on stderr")
    assert proto.output.endswith(b"noise on stderr")


def test_an_error_answer_fails_the_call_and_silence_times_out():
    clock = Clock()
    proto = started(clock)
    failures = []
    proto.call("Nope.nope").addErrback(failures.append)
    msg_id = json.loads(proto.transport.to_child[0][1][:-1])["id"]
    proto.childDataReceived(4, json.dumps({"id": msg_id, "error": {"message": "no such method"}}).encode() + b"\0")
    assert failures[0].check(CDPError) and "no such method" in str(failures[0].value)
    proto.call("Slow.call", timeout=5).addErrback(failures.append)
    clock.advance(5)
    assert failures[1].check(DeferredTimeout)
    assert proto._waiting == {}
    assert clock.getDelayedCalls() == []


def test_the_browser_ending_fails_pending_calls_and_terminate_escalates():
    clock = Clock()
    proto = started(clock)
    failures = []
    proto.call("Target.getTargets").addErrback(failures.append)
    done = []
    proto.terminate(grace=10).addCallback(done.append)
    assert proto.transport.signals == ["TERM"]
    clock.advance(10)
    assert proto.transport.signals == ["TERM", "KILL"]
    proto.processEnded(Failure(ProcessTerminated(signal=9)))
    assert failures[0].check(CDPError)
    assert done == [None] and not proto.running
    assert clock.getDelayedCalls() == []
    with pytest.raises(CDPError):
        proto.call("Browser.getVersion")


def test_terminate_of_an_ended_browser_fires_at_once():
    clock = Clock()
    proto = started(clock)
    proto.processEnded(Failure(ProcessDone(0)))
    done = []
    proto.terminate().addCallback(done.append)
    assert done == [0] and proto.transport.signals == []


def test_the_key_file_is_read_not_created(tmp_path):
    assert prepair.daemon_public_key(tmp_path) is None
    assert os.listdir(tmp_path) == []


# -- interact {what:"launch_browser"} --------------------------------------------------------------


def _app(tmp_path, **config):
    from gasoline.app import Config, build

    clock = Clock()
    return build(Config(state_dir=tmp_path, persist=False, **config), clock)


def test_launch_browser_is_off_by_default(tmp_path):
    from _mcp_calls import call, session_for

    app = _app(tmp_path)
    assert app.tools.launcher is None
    failed, summary, payload = call(app, session_for(app, "a"), "interact",
                                    {"what": "launch_browser", "url": "http://example.test/"})
    assert failed and payload["error"] == "launch_disabled"
    assert "--allow-launch-browser" in summary + json.dumps(payload)


def test_allowing_it_needs_a_reactor_that_starts_processes(tmp_path):
    """On a plain clock (tests) there is no launcher even when allowed: nothing can be spawned."""
    assert _app(tmp_path, allow_launch_browser=True).tools.launcher is None


def test_launch_browser_runs_the_launcher_with_the_agents_choices(tmp_path):
    from _mcp_calls import call, parsed, session_for, start

    from gasoline.tools._launch_browser import CAPTURE_WAIT

    app = _app(tmp_path)
    calls = []

    class FakeLauncher:
        async def launch(self, url, **flags):
            calls.append((url, flags))
            return "gasoline browser: detached (pid 1, browser pid 2, tab 3)"

    app.tools.launcher = FakeLauncher()
    out = start(app, session_for(app, "a"), "interact", {
        "what": "launch_browser", "url": "http://example.test/", "headless": True,
        "track_all": True})
    app.clock.advance(CAPTURE_WAIT)  # no extension syncs here: answered after the bound
    failed, summary, payload = parsed(out)
    assert not failed, payload
    assert payload["capture_flowing"] is False and "observe may see nothing yet" in summary
    assert calls == [("http://example.test/", {"headless": True, "pilot": True, "track_all": True})]
    assert payload["launched"] is True and "detached" in payload["output"]
    failed, _, payload = call(app, session_for(app, "a"), "interact",
                              {"what": "launch_browser", "url": "javascript:alert(1)"})
    assert failed and payload["error"] == "invalid_param" and len(calls) == 1


def test_the_launcher_runs_gasoline_browser_detached_on_this_daemons_port(tmp_path):
    from twisted.internet.testing import MemoryReactorClock

    from gasoline.tools._launch import BrowserLauncher, LaunchFailed

    launcher = BrowserLauncher(MemoryReactorClock(), tmp_path)
    with pytest.raises(LaunchFailed, match="port"):
        launcher.argv("http://x/", headless=True, pilot=False, track_all=False)
    (tmp_path / "daemon.json").write_text(json.dumps({"pid": 1, "port": 43210}))
    argv = launcher.argv("http://x/", headless=True, pilot=False, track_all=False)
    assert argv[1:5] == ["-m", "gasoline", "browser", "--detach"]
    assert argv[argv.index("--port") + 1] == "43210"
    assert argv[argv.index("--state-dir") + 1] == str(tmp_path)
    assert "--headless" in argv and "--pilot" not in argv and argv[-2:] == ["--", "http://x/"]


def test_launch_browser_answers_once_the_launched_pages_capture_is_flowing(tmp_path):
    """The answer waits for the launched extension's sync on the page (its sync held from before
    the navigation is answered at once, so the next one comes), then for the page's capture to
    arrive and go quiet: an observe right after the answer sees what the page logged."""
    from _mcp_calls import parsed, session_for, start

    from gasoline.core.storage.store import CONSOLE
    from gasoline.tools._launch_browser import CAPTURE_FIRST, CAPTURE_QUIET

    app = _app(tmp_path)

    def step(clock, seconds):
        """Advance in small steps, as time passes (each poll of the wait runs)."""
        clock.pump([0.01] * int(round(seconds / 0.01)))

    class FakeLauncher:
        async def launch(self, url, **flags):
            return "gasoline browser: detached (pid 1, browser pid 2, tab 3)"

    app.tools.launcher = FakeLauncher()
    link = app.extension
    held = link.sync({"settings": {"tracked_tab_id": 3, "tracked_tab_url": "about:blank"}})
    step(app.clock, 0.1)
    assert not held.called  # the long poll holds it
    out = start(app, session_for(app, "a"), "interact",
                {"what": "launch_browser", "url": "http://example.test/app?x=1"})
    step(app.clock, 0.1)
    assert held.called and out == []  # answered at once: the extension syncs again
    link.sync({"settings": {"tracked_tab_id": 3, "tracked_tab_url": "about:blank"}})
    step(app.clock, 0.5)
    assert out == []  # the tab has not navigated yet
    link.sync({"settings": {"tracked_tab_id": 3,
                            "tracked_tab_url": "http://example.test/app?x=1"}})
    step(app.clock, 0.1)
    app.store.add(CONSOLE, [{"level": "error", "message": "boom"}])  # the page's capture
    step(app.clock, CAPTURE_QUIET / 2)
    app.store.add(CONSOLE, [{"level": "error", "message": "boom 2"}])
    step(app.clock, CAPTURE_QUIET / 2)
    assert out == []  # still arriving
    step(app.clock, CAPTURE_QUIET + 0.1)
    failed, summary, payload = parsed(out)
    assert not failed and payload["capture_flowing"] is True, payload
    assert payload["waited_ms"] < 2000

    # A page that captures nothing: flowing once shown for CAPTURE_FIRST seconds.
    out = start(app, session_for(app, "b"), "interact",
                {"what": "launch_browser", "url": "http://example.test/quiet"})
    step(app.clock, 0.1)
    link.sync({"settings": {"tracked_tab_id": 4, "tracked_tab_url": "http://example.test/quiet"}})
    step(app.clock, CAPTURE_FIRST - 0.5)
    assert out == []
    step(app.clock, 1.0)
    failed, _, payload = parsed(out)
    assert not failed and payload["capture_flowing"] is True, payload

"""StopHook: the one service a collaborator hands the daemon so that its stop runs at shutdown."""

from __future__ import annotations

from twisted.application.service import IService, MultiService
from zope.interface.verify import verifyObject

from gasoline.app import Config, build
from gasoline.core.lifecycle import StopHook


def test_a_stop_hook_runs_its_stop_once_when_its_parent_stops():
    stopped = []
    parent = MultiService()
    hook = StopHook(lambda: stopped.append(True), name="thing")
    verifyObject(IService, hook)
    hook.setServiceParent(parent)
    parent.startService()
    assert stopped == [] and hook.running
    parent.stopService()
    assert stopped == [True] and not hook.running
    assert parent.getServiceNamed("thing") is hook


def test_the_daemons_collaborators_stop_with_its_services_and_leave_no_timer(tmp_path, clock):
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    app.services.startService()
    app.mcp.open_session("agent", "streamable")  # arms its idle timer
    assert clock.getDelayedCalls() != []
    app.services.stopService()
    assert app.mcp.sessions == {}
    assert clock.getDelayedCalls() == []


def test_a_hook_handle_removes_the_hook_once_and_then_does_nothing():
    from gasoline.core.hooks import add_hook

    hooks: list = []
    first, second = (lambda: 1), (lambda: 2)
    remove_first = add_hook(hooks, first)
    add_hook(hooks, second)
    remove_first()
    remove_first()
    assert hooks == [second]

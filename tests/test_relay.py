"""
The CDP hub relay against a fake extension link (gasoline.relay.testing): id rewriting, session
isolation, events only to holders, emulated browser-level methods, late-joiner replay, shared-state
containment, extension replacement and disappearance.
"""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock
from zope.interface.verify import verifyObject

from gasoline.relay.hub import Relay
from gasoline.relay.model import IRelayPeer, RelayRefused
from gasoline.relay.targets import BROWSER_TARGET_ID, filter_matches
from gasoline.relay.testing import FakeCDPFailure, FakeExtensionLink, RecordingPeer


def _request_timers(clock) -> list:
    """Pending timers other than the idle reaper's (one per connected client)."""
    return [c for c in clock.getDelayedCalls() if getattr(c.func, "__name__", "") != "_watch_idle"]


@pytest.fixture
def relay(clock):
    return Relay(clock)


@pytest.fixture
def ext(relay):
    return FakeExtensionLink(relay).connect()


class Client:
    """A CDP client driving the relay directly (what an autobahn connection does)."""

    def __init__(self, relay: Relay, client_id: str | None = None):
        self.relay = relay
        self.peer = RecordingPeer()
        self.client = relay.client_connected(client_id, self.peer)
        self.next_id = 1

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             msg_id: int | None = None) -> int:
        if msg_id is None:
            msg_id, self.next_id = self.next_id, self.next_id + 1
        message = {"id": msg_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self.relay.client_message(self.client, message)
        return msg_id

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        msg_id = self.send(method, params, session)
        reply = self.peer.responses()[msg_id]
        assert "error" not in reply, reply
        return reply["result"]

    def error(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        msg_id = self.send(method, params, session)
        reply = self.peer.responses()[msg_id]
        assert "result" not in reply, reply
        return reply["error"]

    def attach(self, target_id: str) -> str:
        return self.call("Target.attachToTarget", {"targetId": target_id, "flatten": True})["sessionId"]


def test_peers_provide_the_interface(relay):
    verifyObject(IRelayPeer, RecordingPeer())
    verifyObject(IRelayPeer, FakeExtensionLink(relay))


def test_two_clients_using_the_same_ids_each_get_their_own_answer(relay, ext):
    tab = ext.add_tab()
    ext.auto = False
    a, b = Client(relay, "a"), Client(relay, "b")
    ext.auto = True
    sa, sb = a.attach(tab.target_id), b.attach(tab.target_id)
    ext.auto = False
    a.send("Runtime.evaluate", {"expression": "'from a'"}, session=sa, msg_id=7)
    b.send("Runtime.evaluate", {"expression": "'from b'"}, session=sb, msg_id=7)
    first, second = ext.unanswered
    assert first["id"] != second["id"]  # relay-global ids, not the clients' ids
    # Answer in the opposite order: each answer still reaches the client that asked.
    ext.answer(second, {"result": {"value": "B"}})
    ext.answer(first, {"result": {"value": "A"}})
    assert a.peer.responses()[7] == {"id": 7, "sessionId": sa, "result": {"result": {"value": "A"}}}
    assert b.peer.responses()[7] == {"id": 7, "sessionId": sb, "result": {"result": {"value": "B"}}}
    assert ext.holders == {tab.tab_id: 2}  # one attachment, two holders


def test_a_client_cannot_use_another_clients_session(relay, ext):
    tab = ext.add_tab()
    a, b = Client(relay, "a"), Client(relay, "b")
    sa = a.attach(tab.target_id)
    err = b.error("Runtime.evaluate", {"expression": "document.cookie"}, session=sa)
    assert err["message"] == "Session with given id not found."
    assert "Runtime.evaluate" not in ext.sent_methods()


def test_events_reach_only_the_sessions_holding_the_target_and_its_domain(relay, ext):
    one, two = ext.add_tab(), ext.add_tab()
    a, b, c = Client(relay, "a"), Client(relay, "b"), Client(relay, "c")
    sa, sb = a.attach(one.target_id), b.attach(two.target_id)
    sc = c.attach(one.target_id)
    a.call("Network.enable", session=sa)
    b.call("Network.enable", session=sb)
    for p in (a.peer, b.peer, c.peer):
        p.take()
    ext.event(one, "Network.requestWillBeSent", {"requestId": "1"})
    ext.event(one, "Inspector.targetCrashed")
    assert a.peer.events() == [
        {"method": "Network.requestWillBeSent", "params": {"requestId": "1"}, "sessionId": sa},
        {"method": "Inspector.targetCrashed", "params": {}, "sessionId": sa},
    ]
    assert b.peer.events() == []  # another tab
    # c holds the tab but never enabled Network: only the ungated event.
    assert c.peer.events() == [{"method": "Inspector.targetCrashed", "params": {}, "sessionId": sc}]


def test_browser_level_methods_are_emulated_and_never_reach_chrome(relay, ext):
    tab = ext.add_tab()
    a = Client(relay)
    version = a.call("Browser.getVersion")
    assert version["product"] == "Chrome/142.0.0.0" and "Chrome/142" in version["userAgent"]
    assert a.call("Browser.setDownloadBehavior", {"behavior": "default", "eventsEnabled": True}) == {}
    assert a.call("Target.getBrowserContexts") == {"browserContextIds": []}
    assert a.call("Target.getTargetInfo")["targetInfo"]["targetId"] == BROWSER_TARGET_ID
    infos = a.call("Target.getTargets")["targetInfos"]
    assert [(i["targetId"], i["type"]) for i in infos] == [(tab.target_id, "page")]
    assert a.call("Target.getTargetInfo", {"targetId": tab.target_id})["targetInfo"]["url"] == tab.url
    browser_session = a.call("Target.attachToBrowserTarget")["sessionId"]
    assert a.call("Browser.getVersion", session=browser_session)["protocolVersion"] == "1.3"
    assert a.call("Target.activateTarget", {"targetId": tab.target_id}) == {}
    assert ext.sent_methods() == []
    assert a.error("Browser.crash")["message"] == "'Browser.crash' wasn't found"
    assert a.error("Target.setAutoAttach", {"autoAttach": True})["code"] == -32602  # no flatten


def test_root_auto_attach_attaches_pages_and_waits_for_the_extension(relay, ext):
    tab = ext.add_tab()
    a = Client(relay)
    assert a.call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True,
                                           "flatten": True}) == {}
    attached = a.peer.events("Target.attachedToTarget")
    assert len(attached) == 1
    assert attached[0]["params"]["targetInfo"]["targetId"] == tab.target_id
    assert attached[0]["params"]["waitingForDebugger"] is False
    # The event precedes the answer, as in Chrome.
    kinds = ["event" if "method" in m else "answer" for m in a.peer.sent]
    assert kinds == ["event", "answer"]
    assert ext.holders == {tab.tab_id: 1}


def test_puppeteer_style_filter_gets_tab_targets_then_pages_under_them(relay, ext):
    tab = ext.add_tab()
    a = Client(relay)
    a.call("Target.setDiscoverTargets", {"discover": True, "filter": [{}]})
    created = [e["params"]["targetInfo"]["type"] for e in a.peer.events("Target.targetCreated")]
    assert created == ["tab", "page"]
    a.call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True,
                                    "flatten": True,
                                    "filter": [{"type": "page", "exclude": True}, {}]})
    (tab_event,) = a.peer.events("Target.attachedToTarget")
    assert tab_event["params"]["targetInfo"]["type"] == "tab"
    assert ext.holders == {}  # a tab target needs no attachment yet
    tab_session = tab_event["params"]["sessionId"]
    a.peer.take()
    a.call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True,
                                    "flatten": True, "filter": [{}]}, session=tab_session)
    assert a.call("Runtime.runIfWaitingForDebugger", session=tab_session) == {}
    (page_event,) = a.peer.events("Target.attachedToTarget")
    assert page_event["sessionId"] == tab_session
    assert page_event["params"]["targetInfo"] == {**page_event["params"]["targetInfo"],
                                                  "targetId": tab.target_id, "type": "page"}
    page_session = page_event["params"]["sessionId"]
    res = a.call("Runtime.evaluate", {"expression": "1"}, session=page_session)
    assert res["result"]["value"] == f"{tab.tab_id}:1"
    assert ext.holders == {tab.tab_id: 1}


def test_late_joiner_gets_existing_targets_and_execution_contexts_replayed(relay, ext):
    tab = ext.add_tab()
    a = Client(relay, "a")
    sa = a.attach(tab.target_id)
    a.call("Runtime.enable", session=sa)
    ctx = {"id": 1, "origin": "https://example.test", "name": "", "uniqueId": "u1",
           "auxData": {"isDefault": True, "type": "default", "frameId": tab.target_id}}
    ext.event(tab, "Runtime.executionContextCreated", {"context": ctx})
    ext.event(tab, "Runtime.executionContextCreated", {"context": {**ctx, "id": 2, "uniqueId": "u2"}})
    ext.event(tab, "Runtime.executionContextDestroyed", {"executionContextId": 2})
    b = Client(relay, "b")
    b.call("Target.setDiscoverTargets", {"discover": True})
    assert [e["params"]["targetInfo"]["targetId"] for e in b.peer.events("Target.targetCreated")] \
        == [tab.target_id]
    b.call("Target.setAutoAttach", {"autoAttach": True, "flatten": True,
                                    "waitForDebuggerOnStart": True})
    (attached,) = b.peer.events("Target.attachedToTarget")
    sb = attached["params"]["sessionId"]
    assert sb != sa
    b.peer.take()
    b.call("Runtime.enable", session=sb)
    replayed = [m for m in b.peer.sent if m.get("method") == "Runtime.executionContextCreated"]
    assert replayed == [{"method": "Runtime.executionContextCreated", "params": {"context": ctx},
                         "sessionId": sb}]
    # Replayed before the answer, like Chrome's first enable.
    assert "method" in b.peer.sent[0] and "id" in b.peer.sent[-1]


def test_disable_reaches_chrome_only_when_no_other_session_needs_the_domain(relay, ext):
    tab = ext.add_tab()
    a, b = Client(relay, "a"), Client(relay, "b")
    sa, sb = a.attach(tab.target_id), b.attach(tab.target_id)
    a.call("Network.enable", session=sa)
    b.call("Network.enable", session=sb)
    a.call("Network.disable", session=sa)
    assert ext.sent_methods().count("Network.disable") == 0
    ext.event(tab, "Network.loadingFinished", {"requestId": "9"})
    assert b.peer.events("Network.loadingFinished") and not a.peer.events("Network.loadingFinished")
    b.call("Network.disable", session=sb)
    assert ext.sent_methods().count("Network.disable") == 1


def test_fetch_interception_is_held_by_one_client_and_released_when_it_leaves(relay, ext):
    tab = ext.add_tab()
    a, b = Client(relay, "a"), Client(relay, "b")
    sa, sb = a.attach(tab.target_id), b.attach(tab.target_id)
    a.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=sa)
    err = b.error("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=sb)
    assert "held by another client" in err["message"]
    ext.event(tab, "Fetch.requestPaused", {"requestId": "r1"})
    assert a.peer.events("Fetch.requestPaused") and not b.peer.events("Fetch.requestPaused")
    relay.client_lost(a.client)
    assert ext.sent_methods()[-1] == "Fetch.disable"
    assert ext.holders == {tab.tab_id: 1}  # b still holds the tab
    b.call("Fetch.enable", {"patterns": []}, session=sb)


def test_create_target_gives_the_creator_a_private_tab_closed_with_it(relay, ext):
    a, b = Client(relay, "a"), Client(relay, "b")
    a.call("Target.setAutoAttach", {"autoAttach": True, "flatten": True})
    b.call("Target.setDiscoverTargets", {"discover": True})
    b.call("Target.setAutoAttach", {"autoAttach": True, "flatten": True})
    a.peer.take()
    target_id = a.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    (attached,) = a.peer.events("Target.attachedToTarget")
    assert attached["params"]["targetInfo"]["targetId"] == target_id
    assert a.peer.sent[-1]["result"] == {"targetId": target_id}  # after the attach, as Chrome
    ext.announce()  # the extension lists the new tab (with its owner)
    assert b.peer.events("Target.targetCreated") == [] and b.peer.events("Target.attachedToTarget") == []
    assert b.call("Target.getTargets")["targetInfos"] == []
    assert b.error("Target.attachToTarget", {"targetId": target_id, "flatten": True})["code"] == -32602
    assert b.error("Target.closeTarget", {"targetId": target_id})["code"] == -32602
    tab_id = relay.targets[target_id].tab_id
    relay.client_lost(a.client)
    assert tab_id not in ext.tabs  # closed with its creator
    assert target_id not in relay.targets


def test_a_client_may_not_close_a_users_tab(relay, ext):
    tab = ext.add_tab()
    a = Client(relay)
    assert "only the tabs it created" in a.error("Target.closeTarget", {"targetId": tab.target_id})["message"]
    assert tab.tab_id in ext.tabs


def test_browser_close_closes_only_that_client_and_its_tabs(relay, ext, clock):
    user_tab = ext.add_tab()
    a, b = Client(relay, "a"), Client(relay, "b")
    sb = b.attach(user_tab.target_id)
    created = a.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    assert a.call("Browser.close") == {}
    clock.advance(0)
    assert a.peer.closed == (1000, "Browser.close")
    assert created not in relay.targets and user_tab.tab_id in ext.tabs
    assert b.call("Runtime.evaluate", {"expression": "2"}, session=sb)["result"]["value"] \
        == f"{user_tab.tab_id}:2"
    assert _request_timers(clock) == []


def test_detach_releases_the_tab_hold_and_notifies_only_that_client(relay, ext):
    tab = ext.add_tab()
    a, b = Client(relay, "a"), Client(relay, "b")
    sa, sb = a.attach(tab.target_id), b.attach(tab.target_id)
    assert ext.holders == {tab.tab_id: 2}
    b.peer.take()
    a.call("Target.detachFromTarget", {"sessionId": sa})
    assert ext.holders == {tab.tab_id: 1}
    assert a.peer.events("Target.detachedFromTarget")[0]["params"]["sessionId"] == sa
    assert b.peer.events() == []
    assert a.error("Target.detachFromTarget", {"sessionId": sb})["code"] == -32602


def test_child_sessions_are_mapped_per_client(relay, ext):
    tab = ext.add_tab()
    a, b = Client(relay, "a"), Client(relay, "b")
    sa, sb = a.attach(tab.target_id), b.attach(tab.target_id)
    a.peer.take()
    b.peer.take()
    a.call("Target.setAutoAttach", {"autoAttach": True, "flatten": True,
                                    "waitForDebuggerOnStart": False}, session=sa)
    worker = {"targetId": "W1", "type": "worker", "title": "", "url": "https://example.test/w.js",
              "attached": True, "canAccessOpener": False}
    ext.event(tab, "Target.attachedToTarget", {"sessionId": "CHROME-CHILD", "targetInfo": worker,
                                               "waitingForDebugger": False})
    (child_event,) = a.peer.events("Target.attachedToTarget")
    child = child_event["params"]["sessionId"]
    assert child_event["sessionId"] == sa and child != "CHROME-CHILD"
    assert b.peer.events("Target.attachedToTarget") == []  # b did not ask for child targets
    a.call("Runtime.enable", session=child)
    seen = []
    ext.send_handler = lambda tab_id, session, method, params: seen.append((session, method)) or {}
    a.call("Runtime.evaluate", {"expression": "self"}, session=child)
    assert seen == [("CHROME-CHILD", "Runtime.evaluate")]
    ext.event(tab, "Runtime.consoleAPICalled", {"type": "log", "args": []}, session_id="CHROME-CHILD")
    assert a.peer.events("Runtime.consoleAPICalled")[0]["sessionId"] == child
    # b asks later: the existing child is replayed to it under its own session id.
    b.call("Target.setAutoAttach", {"autoAttach": True, "flatten": True,
                                    "waitForDebuggerOnStart": False}, session=sb)
    (b_child,) = b.peer.events("Target.attachedToTarget")
    assert b_child["sessionId"] == sb and b_child["params"]["sessionId"] not in (child, "CHROME-CHILD")
    ext.event(tab, "Target.detachedFromTarget", {"sessionId": "CHROME-CHILD"})
    assert a.peer.events("Target.detachedFromTarget")[0]["params"]["sessionId"] == child
    assert child not in a.client.sessions


def test_second_extension_connection_replaces_the_first_with_close_1000(relay, ext):
    tab = ext.add_tab()
    a = Client(relay)
    sa = a.attach(tab.target_id)
    ext.auto = False
    msg = a.send("Runtime.evaluate", {"expression": "1"}, session=sa)
    second = FakeExtensionLink(relay)
    second.tabs = dict(ext.tabs)
    second.connect()
    assert ext.closed == (1000, "Replaced by a new extension connection")
    assert "replaced" in a.peer.responses()[msg]["error"]["message"]
    assert [e["params"]["sessionId"] for e in a.peer.events("Target.detachedFromTarget")] == [sa]
    # Messages from the replaced connection are ignored.
    ext.answer(ext.unanswered[0], {"result": {"value": "stale"}})
    sa2 = a.attach(tab.target_id)
    assert a.call("Runtime.evaluate", {"expression": "3"}, session=sa2)["result"]["value"] == f"{tab.tab_id}:3"


def test_vanished_extension_fails_pending_commands_with_a_clear_error(relay, ext, clock):
    tab = ext.add_tab()
    a = Client(relay)
    a.call("Target.setDiscoverTargets", {"discover": True})
    sa = a.attach(tab.target_id)
    ext.auto = False
    msg = a.send("Page.navigate", {"url": "https://example.test/next"}, session=sa)
    relay.extension_lost(ext)
    assert a.peer.responses()[msg]["error"] == {"code": -32000, "message": "Gasoline extension disconnected"}
    assert a.peer.events("Target.detachedFromTarget")[-1]["params"]["sessionId"] == sa
    assert a.peer.events("Target.targetDestroyed")[-1]["params"]["targetId"] == tab.target_id
    err = a.error("Target.attachToTarget", {"targetId": tab.target_id, "flatten": True})
    assert err["code"] == -32602  # the target is gone with the extension
    err = a.error("Target.createTarget", {"url": "about:blank"})
    assert "not connected" in err["message"]
    assert _request_timers(clock) == []


def test_an_unanswered_command_times_out_with_a_cdp_error(relay, ext, clock):
    tab = ext.add_tab()
    a = Client(relay)
    sa = a.attach(tab.target_id)
    ext.auto = False
    msg = a.send("Runtime.evaluate", {"expression": "while(1){}"}, session=sa)
    clock.advance(relay.request_timeout - 0.1)
    assert msg not in a.peer.responses()
    clock.advance(0.2)
    assert "did not answer Runtime.evaluate" in a.peer.responses()[msg]["error"]["message"]
    assert relay.status()["pending"] == 0
    assert _request_timers(clock) == []


def test_extension_errors_are_passed_through_as_cdp_errors(relay, ext):
    tab = ext.add_tab()
    a = Client(relay)
    sa = a.attach(tab.target_id)

    def handler(tab_id, session, method, params):
        raise FakeCDPFailure("Cannot find context with specified id")

    ext.send_handler = handler
    err = a.error("Runtime.evaluate", {"expression": "1", "contextId": 99}, session=sa)
    assert err == {"code": -32000, "message": "Cannot find context with specified id"}


def test_a_tab_leaving_the_exposed_set_detaches_its_sessions(relay, ext):
    tab = ext.add_tab()
    a = Client(relay)
    a.call("Target.setDiscoverTargets", {"discover": True})
    sa = a.attach(tab.target_id)
    ext.remove_tab(tab.tab_id)  # the user untracked it or turned the pilot off
    assert a.peer.events("Target.detachedFromTarget")[-1]["params"]["sessionId"] == sa
    assert a.peer.events("Target.targetDestroyed")[-1]["params"]["targetId"] == tab.target_id
    assert a.error("Runtime.evaluate", {"expression": "1"}, session=sa)["message"] \
        == "Session with given id not found."


def test_a_new_tab_is_announced_to_discovering_and_auto_attaching_clients(relay, ext):
    a = Client(relay)
    a.call("Target.setDiscoverTargets", {"discover": True})
    a.call("Target.setAutoAttach", {"autoAttach": True, "flatten": True})
    tab = ext.add_tab()
    assert a.peer.events("Target.targetCreated")[0]["params"]["targetInfo"]["targetId"] == tab.target_id
    assert a.peer.events("Target.attachedToTarget")[0]["params"]["targetInfo"]["targetId"] == tab.target_id
    tab.url = "https://example.test/other"
    ext.announce()
    assert a.peer.events("Target.targetInfoChanged")[0]["params"]["targetInfo"]["url"] == tab.url


@pytest.mark.parametrize("text, code", [
    (b"{not json", -32700),
    (b"[1, 2]", -32600),
    (b'{"method": "Browser.getVersion"}', -32600),
    (b'{"id": true, "method": "Browser.getVersion"}', -32600),
    (b'{"id": 1}', -32600),
    (b'{"id": 1, "method": "Browser.getVersion", "params": [1]}', -32602),
    (b'{"id": 1, "method": "Runtime.evaluate", "sessionId": 5}', -32001),
    (b'{"id": 1, "method": "Runtime.evaluate", "sessionId": "NOPE"}', -32001),
    (b'{"id": 1, "method": "Target.setDiscoverTargets", "params": {"discover": "yes"}}', -32602),
    (b'{"id": 1, "method": "Target.attachToTarget", "params": {"targetId": {"$gt": ""}, "flatten": true}}', -32602),
])
def test_malformed_commands_get_cdp_errors(relay, ext, text, code):
    a = Client(relay)
    relay.client_text(a.client, text)
    (reply,) = a.peer.sent
    assert reply["error"]["code"] == code
    assert a.call("Browser.getVersion")["protocolVersion"] == "1.3"  # the connection goes on


def test_client_ids_are_unique_validated_and_limited(relay):
    Client(relay, "same")
    with pytest.raises(RelayRefused) as e:
        Client(relay, "same")
    assert e.value.close_code == 4004
    with pytest.raises(RelayRefused) as e:
        Client(relay, "../etc")
    assert e.value.close_code == 4400
    small = Relay(Clock(), max_clients=1)
    Client(small)
    with pytest.raises(RelayRefused) as e:
        Client(small)
    assert e.value.close_code == 4029


def test_the_extension_hears_the_client_count_and_can_disconnect_everyone(relay, ext):
    notes = ext.notes
    a, b = Client(relay, "a"), Client(relay, "b")
    assert notes[-1] == {"method": "clients", "params": {"count": 2, "ids": ["a", "b"]}}
    relay.extension_message(ext, {"method": "disconnectClients", "params": {}})
    assert a.peer.closed == b.peer.closed == (1000, "Disconnected from the Gasoline popup")
    assert relay.clients == {}
    relay.extension_message(ext, {"method": "ping"})
    assert notes[-1] == {"method": "pong"}


def test_hostile_extension_messages_are_ignored(relay, ext):
    tab = ext.add_tab()
    a = Client(relay)
    a.attach(tab.target_id)
    for junk in [None, [], "x", {"id": "1"}, {"id": 999999, "result": {}}, {"method": "event"},
                 {"method": "event", "params": {"tabId": "1", "method": 5}},
                 {"method": "event", "params": {"tabId": tab.tab_id, "method": "X.y", "sessionId": 3}},
                 {"method": "targets", "params": {"targets": [{"tabId": True, "targetId": ""}, 5]}},
                 {"method": "detached", "params": {"tabId": None}}]:
        relay.extension_message(ext, junk)
    assert tab.target_id not in relay.targets  # the junk list replaced the exposed set
    ext.announce()
    assert a.call("Browser.getVersion")


def test_filter_matching_follows_chrome():
    assert filter_matches(None, "page") and not filter_matches(None, "tab")
    assert not filter_matches(None, "browser")
    assert filter_matches([{}], "tab")
    assert not filter_matches([{"type": "page", "exclude": True}, {}], "page")
    assert filter_matches([{"type": "page", "exclude": True}, {}], "tab")
    assert not filter_matches([], "page")


def _create_target_held(relay, ext):
    """Client C{a} (auto-attaching) asks for a new tab; the fake extension holds its answers:
    C{(client, the request's id, the extension's pending createTarget)}."""
    a = Client(relay, "a")
    a.call("Target.setAutoAttach", {"autoAttach": True, "flatten": True})
    ext.auto = False
    msg = a.send("Target.createTarget", {"url": "about:blank"})
    (create,) = ext.unanswered
    return a, msg, create


def test_create_target_racing_the_extensions_announcement_attaches_once(relay, ext):
    a, msg, create = _create_target_held(relay, ext)
    ext.answer(create)  # the fake creates the tab; hold the attach it triggers
    (attach,) = ext.unanswered
    ext.announce()  # the extension lists the tab (with its owner) while the attach is pending
    assert ext.unanswered == [attach]  # no second attach
    assert msg not in a.peer.responses()  # the answer waits for the attach, as in Chrome
    ext.answer(attach)
    assert len(a.peer.events("Target.attachedToTarget")) == 1
    assert "targetId" in a.peer.responses()[msg]["result"]


def test_announcement_before_the_create_answer_still_attaches_once(relay, ext):
    a, msg, create = _create_target_held(relay, ext)
    ext.unanswered.clear()
    ext._next_tab += 1
    from gasoline.relay.testing import FakeTab

    tab = FakeTab(ext._next_tab, f"{ext._next_tab:032X}", "about:blank", "",
                  a.client.owner_key)
    ext.tabs[tab.tab_id] = tab
    ext.announce()  # announced first: the owner's auto-attach starts
    (attach,) = ext.unanswered
    ext.answer(create, {"tabId": tab.tab_id, "targetId": tab.target_id, "url": "about:blank"})
    assert msg not in a.peer.responses()
    ext.answer(attach)
    assert len(a.peer.events("Target.attachedToTarget")) == 1
    assert a.peer.responses()[msg]["result"] == {"targetId": tab.target_id}


def test_chrome_detaching_a_tab_detaches_its_sessions_and_target_closed_destroys_it(relay, ext):
    one, two = ext.add_tab(), ext.add_tab()
    a = Client(relay)
    a.call("Target.setDiscoverTargets", {"discover": True})
    s1, s2 = a.attach(one.target_id), a.attach(two.target_id)
    relay.extension_message(ext, {"method": "detached", "params": {"tabId": one.tab_id,
                                                                   "reason": "canceled_by_user"}})
    assert [e["params"]["sessionId"] for e in a.peer.events("Target.detachedFromTarget")] == [s1]
    assert one.target_id in relay.targets  # the user's tab is still there: attach again later
    assert a.peer.events("Target.targetDestroyed") == []
    relay.extension_message(ext, {"method": "detached", "params": {"tabId": two.tab_id,
                                                                   "reason": "target_closed"}})
    assert a.peer.events("Target.detachedFromTarget")[-1]["params"]["sessionId"] == s2
    assert a.peer.events("Target.targetDestroyed")[-1]["params"]["targetId"] == two.target_id
    # The extension lets go of nothing more: Chrome already detached (no detach requests).
    assert [r["method"] for r in ext.requests].count("detach") == 0


def test_the_relay_package_imports_only_the_core_never_twisted_web():
    import ast
    from pathlib import Path

    import gasoline.relay

    allowed = ("gasoline.core", "gasoline.common", "gasoline.relay", "twisted.internet", "twisted.logger",
               "twisted.python", "zope.interface", "attrs", "orjson", "__future__",
               "prometheus_client.core")  # its /metrics series (gasoline.relay.metrics)
    for path in Path(gasoline.relay.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for block in ast.walk(tree)  # (annotations are not imported at run time)
                       if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
                       for inner in block.body for n in ast.walk(inner)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                if top in ("typing", "itertools", "re", "secrets", "collections"):
                    continue
                assert name.startswith(allowed), f"{path.name} imports {name}"


def test_a_created_tab_announced_again_after_an_extension_reconnect_still_closes_with_its_client(relay, ext):
    a = Client(relay, "a")
    target_id = a.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    tab_id = relay.targets[target_id].tab_id
    second = FakeExtensionLink(relay)
    second.tabs = dict(ext.tabs)  # the same browser, a new link (the worker restarted)
    second.connect()
    assert relay.targets[target_id].owner == a.client.owner_key
    relay.client_lost(a.client)
    assert tab_id not in second.tabs


def test_a_cdp_client_is_told_when_the_extension_waits_for_the_user_to_pair(tmp_path):
    """The relay's "not connected" error names the pairing wait the daemon sees."""
    from twisted.internet.task import Clock

    from gasoline.app import Config, build

    clock = Clock()
    app = build(Config(state_dir=tmp_path, persist=False), clock)
    try:
        assert app.relay.not_connected_why() is None
        app.extension.pairing_offered()
        why = app.relay.not_connected_why()
        assert "waiting for the user to pair" in why and "Pair with this daemon" in why
        clock.advance(11)  # no longer asking: back to plain "not connected"
        assert app.relay.not_connected_why() is None
    finally:
        app.extension.stop()
        app.store.notifier.stop()
        app.router.close()
        app.mcp.close_all()
        app.streaming.stop()


# -- private tabs belong to the creator's connection ----------------------------------------------


def test_a_private_tab_whose_closing_failed_is_never_shown_to_a_later_client_with_the_same_id(
        relay, ext):
    a = Client(relay, "a")
    target_id = a.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    tab_id = relay.targets[target_id].tab_id
    ext.auto = False
    relay.client_lost(a.client)  # the extension does not close it (the answer never comes)
    (close,) = [m for m in ext.unanswered if m["method"] == "closeTab"]
    ext.answer(close, error={"code": -32000, "message": "cannot close"})
    ext.unanswered.clear()
    ext.auto = True
    assert tab_id in ext.tabs and target_id in relay.targets
    again = Client(relay, "a")  # a later client picks the same id
    again.call("Target.setDiscoverTargets", {"discover": True})
    again.call("Target.setAutoAttach", {"autoAttach": True, "flatten": True})
    assert again.call("Target.getTargets")["targetInfos"] == []
    assert again.peer.events("Target.targetCreated") == []
    assert again.peer.events("Target.attachedToTarget") == []
    assert again.error("Target.attachToTarget", {"targetId": target_id, "flatten": True})["code"] \
        == -32602
    assert again.error("Target.closeTarget", {"targetId": target_id})["code"] == -32602
    assert [t.target_id for t in relay.visible_targets(again.client)] == []
    ext.announce()  # still listed: nobody sees it, and it is shut once more
    assert again.call("Target.getTargets")["targetInfos"] == []


def test_a_private_tab_listed_with_a_dead_connections_owner_is_closed_not_adopted(relay, ext):
    a = Client(relay, "a")
    second = FakeExtensionLink(relay)
    second.tabs = {}
    # A tab created by connection "a" of an earlier daemon run (or a 0.7.9 extension's plain id):
    from gasoline.relay.testing import FakeTab

    for owner in ("a", "a.0123456789abcdef"):
        tab = FakeTab(500 + len(second.tabs), f"{500 + len(second.tabs):032X}", "about:blank", "",
                      owner)
        second.tabs[tab.tab_id] = tab
    second.connect()
    assert second.tabs == {}  # both closed by the relay
    assert a.call("Target.getTargets")["targetInfos"] == []


# -- idle CDP clients are reaped --------------------------------------------------------------------


def test_idle_cdp_clients_are_disconnected_after_the_bound_and_free_their_slots(clock):
    from gasoline.relay.hub import DEFAULT_CLIENT_IDLE_TIMEOUT

    relay = Relay(clock)
    FakeExtensionLink(relay).connect()
    idle = [Client(relay, f"idle{i}") for i in range(relay.max_clients)]
    with pytest.raises(RelayRefused):
        Client(relay, "late")
    busy = idle[0]
    for _ in range(int(DEFAULT_CLIENT_IDLE_TIMEOUT // 60) + 1):
        clock.advance(60)
        busy.call("Browser.getVersion")  # a client that works is never reaped
    assert [c.peer.closed[0] for c in idle[1:]] == [4408] * (relay.max_clients - 1)
    assert busy.peer.closed is None and list(relay.clients) == ["idle0"]
    late = Client(relay, "late")  # the slots are free again
    assert late.client.client_id in relay.clients
    clock.advance(DEFAULT_CLIENT_IDLE_TIMEOUT + 1)
    assert relay.clients == {} and clock.getDelayedCalls() == []


# -- WebSocket messages get the HTTP bodies' structural JSON limit ----------------------------------


def test_a_cdp_message_of_too_many_json_values_is_refused_before_decoding(relay, ext, monkeypatch):
    from gasoline.core.validate import MAX_JSON_TOKENS
    from gasoline.relay import hub

    a = Client(relay, "a")
    decoded = []
    real_loads = hub.orjson.loads
    monkeypatch.setattr(hub.orjson, "loads", lambda b: decoded.append(len(b)) or real_loads(b))
    body = b'{"id":1,"method":"Runtime.evaluate","params":{"x":[' + b",".join(
        [b"0"] * (MAX_JSON_TOKENS + 1)) + b"]}}"
    relay.client_text(a.client, body)
    (reply,) = a.peer.sent[-1:]
    assert reply["id"] is None and str(MAX_JSON_TOKENS) in reply["error"]["message"]
    assert decoded == []  # never parsed
    relay.client_text(a.client, b'{"id":2,"method":"Browser.getVersion"}')
    assert a.peer.sent[-1]["id"] == 2 and "result" in a.peer.sent[-1]


# -- hostile parameters to every method the relay answers itself ------------------------------------

#: Every parameter the emulated methods read, and JSON values of every shape for them.
_PARAMS = ("targetId", "sessionId", "url", "filter", "autoAttach", "flatten", "discover", "background")
_HOSTILE = (None, True, False, 0, -1, 2**70, 1.5, "", "x", "TAB", [], [None], [5], [[]], [{}],
            [{"type": []}], [{"type": "page", "exclude": []}], {}, {"a": [1]}, {"$gt": ""})


def test_hostile_parameters_to_every_emulated_method_get_one_answer_never_an_internal_error(clock):
    """Every method in the relay's own table, on the root and on a browser, tab and page session:
    each parameter it reads, set to JSON of every shape, gets exactly one answer, a result or a
    CDP error, and never the catch-all's "Internal relay error" (a defect). A fresh relay per
    method, so what one call creates (tabs, sessions) does not slow the next method's calls."""
    methods = sorted(Relay(clock).root_methods) + ["Runtime.runIfWaitingForDebugger"]
    answered = 0
    for kind in ("root", "browser", "tab", "page"):
        for method in methods:
            if method == "Browser.close":
                continue  # it ends the connection (its own test covers it)
            relay = Relay(clock)
            ext = FakeExtensionLink(relay).connect()
            tab = ext.add_tab()
            a = Client(relay, "a")
            tab_target_id = relay.targets[tab.target_id].tab_target_id

            def open_session() -> str | None:
                if kind == "browser":
                    return a.call("Target.attachToBrowserTarget")["sessionId"]
                if kind == "tab":
                    return a.call("Target.attachToTarget",
                                  {"targetId": tab_target_id, "flatten": True})["sessionId"]
                return a.attach(tab.target_id) if kind == "page" else None

            valid = {"targetId": tab.target_id, "autoAttach": True, "flatten": True,
                     "discover": True, "url": "about:blank"}
            session = open_session()
            for key in _PARAMS:
                for base in ({}, valid):
                    for value in _HOSTILE:
                        if session is not None and session not in a.client.sessions:
                            session = open_session()  # a detach with valid params ended it
                        a.peer.take()
                        msg_id = a.send(method, {**base, key: value}, session)
                        replies = [m for m in a.peer.take() if m.get("id") == msg_id]
                        assert len(replies) == 1, (method, kind, key, value, replies)
                        error = replies[0].get("error")
                        assert error is None or error["message"] != "Internal relay error", (
                            method, kind, key, value, error)
                        answered += 1
            assert a.peer.closed is None and relay.clients["a"] is a.client
    assert answered == 4 * (len(methods) - 1) * len(_PARAMS) * 2 * len(_HOSTILE)


def test_a_defect_in_a_handler_is_one_internal_error_answer_and_the_connection_goes_on(
        relay, ext, monkeypatch):
    a = Client(relay, "a")

    def broken(client, params):
        raise KeyError("a defect")

    monkeypatch.setitem(relay.root_methods, "Target.getTargets", broken)
    assert a.error("Target.getTargets") == {"code": -32000, "message": "Internal relay error"}
    assert relay.counts["command_errors"] == 1
    assert a.call("Browser.getVersion")["protocolVersion"] == "1.3"

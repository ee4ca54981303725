"""
Client sessions on a tab, and what they share: commands forwarded to the tab, the tab's events
fanned out, and the domain state several clients hold on one C{chrome.debugger} attachment.

Several clients on one tab share one attachment, so domain state is counted per client session:
C{X.enable} is forwarded (it is idempotent), C{X.disable} reaches Chrome only when no other session
on the same target still has C{X} enabled. A late C{Runtime.enable} gets the tab's current
execution contexts replayed (Chrome sends them only on the first enable); a late child
C{Target.setAutoAttach} gets the tab's current child targets. C{Fetch} interception is held by one
client per target at a time (another's C{Fetch.enable} fails with a clear error), and is disabled
when its holder leaves, so no request stays paused for a client that is gone.

An event from a tab (or one of its child sessions) goes only to the sessions attached to it, and of
those only to sessions that enabled the event's domain (L{GATED_DOMAINS}).

Which session a command is for, and the methods the relay answers itself, are the hub's
(L{gasoline.relay.hub}) and the Target domain's (L{gasoline.relay.targets}).
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gasoline.relay.link import RelayLink
from gasoline.relay.model import (
    CDPClient,
    CDPError,
    Session,
    Target,
    auto_attach_flag,
    is_int,
    new_session_id,
)

#: Domains whose events go only to sessions that enabled the domain.
GATED_DOMAINS = frozenset({
    "Accessibility", "Animation", "Audits", "Autofill", "BackgroundService", "CSS", "Console",
    "DOM", "DOMStorage", "Debugger", "DeviceAccess", "FedCm", "Fetch", "HeapProfiler",
    "IndexedDB", "LayerTree", "Log", "Media", "Network", "Overlay", "Page", "Performance",
    "Preload", "Profiler", "Runtime", "Security", "ServiceWorker", "WebAuthn",
})


@attrs.define(eq=False)
class TabSessions:
    """The page and child sessions of every client, per tab: forwarding, fan-out, shared state."""

    #: The connected clients by id (the hub's table, shared by name).
    clients: Mapping[str, CDPClient]
    #: The targets the relay knows by id (the Target domain's table, shared by name): a session
    #: whose target is no longer in it has nothing left to undo in Chrome.
    targets: Mapping[str, Target]
    link: RelayLink
    #: Events fanned out to client sessions (one per receiving session, for C{/metrics}).
    events: int = 0

    def on(self, target: Target, chrome_session: str | None) -> list[Session]:
        """Client sessions bound to one Chrome session of C{target} (page or child)."""
        return [s for c in self.clients.values() if not c.closed for s in c.sessions.values()
                if s.target is target and s.kind in ("page", "child")
                and s.chrome_session == chrome_session]

    # ----------------------------------------------------------------- commands

    def command(self, session: Session, method: str, params: dict) -> Deferred | dict:
        """Forward C{method} on a page or child C{session} to its tab, counting shared state."""
        target = session.target
        assert target is not None  # a page or child session has its target
        client = session.client
        domain, _, name = method.partition(".")
        if name == "disable" and domain in GATED_DOMAINS:
            session.disable(domain)
            if any(domain in s.enabled for s in self.on(target, session.chrome_session)):
                return {}  # another client still relies on it: Chrome keeps it on
        late_runtime = False
        if name == "enable" and domain in GATED_DOMAINS:
            others = [s for s in self.on(target, session.chrome_session)
                      if s is not session and domain in s.enabled]
            if domain == "Fetch" and others:
                raise CDPError("Gasoline relay: Fetch interception on this target is held by "
                               "another client (one Fetch client per tab)")
            late_runtime = domain == "Runtime" and bool(others) and domain not in session.enabled
            session.enable(domain)  # before the answer: Chrome's first events precede it
        d = self.forward(session, method, params)
        if name == "enable" and domain in GATED_DOMAINS:
            def enable_failed(failure: Failure) -> Failure:
                session.disable(domain)
                return failure
            d.addErrback(enable_failed)
        if late_runtime:
            def replay(result: Any) -> Any:
                for ctx in list(target.contexts.get(session.chrome_session, {}).values()):
                    client.send({"method": "Runtime.executionContextCreated",
                                 "params": {"context": ctx}, "sessionId": session.session_id})
                return result
            d.addCallback(replay)
        return d

    def child_auto_attach(self, session: Session, params: dict) -> Deferred | dict:
        """C{Target.setAutoAttach} on a page (or child) session: Chrome's child targets."""
        auto = auto_attach_flag(params)
        was = session.auto_attach
        target = session.target
        assert target is not None  # a page or child session
        session.set_auto_attach(dict(params) if auto else None)
        others = [s for s in self.on(target, session.chrome_session)
                  if s is not session and s.auto_attach is not None]
        if not auto and others:
            return {}
        d = self.forward(session, "Target.setAutoAttach", params)
        if auto and was is None:
            def replay(result: Any) -> Any:
                for child, (announced_on, child_params) in list(target.children.items()):
                    if announced_on == session.chrome_session and not any(
                            session.client.sessions.get(c) is not None
                            and session.client.sessions[c].chrome_session == child
                            for c in session.children):
                        self.announce_child(session, child, child_params)
                return result
            d.addCallback(replay)
        return d

    def forward(self, session: Session, method: str, params: dict) -> Deferred:
        """Send C{method} to the tab (and Chrome session) C{session} is bound to."""
        assert session.target is not None  # only a target's session forwards
        request: dict[str, Any] = {"tabId": session.target.tab_id, "method": method,
                                   "params": params}
        if session.chrome_session is not None:
            request["sessionId"] = session.chrome_session
        return self.link.request("send", request)

    # ----------------------------------------------------------------- events

    def chrome_event(self, target: Target, params: dict) -> None:
        """An event from C{target} (the extension's C{event} notification's C{params})."""
        method = params.get("method")
        if not isinstance(method, str):
            return
        chrome_session = params.get("sessionId") or None
        if chrome_session is not None and not isinstance(chrome_session, str):
            return
        event_params = params.get("params")
        event_params = event_params if isinstance(event_params, dict) else {}
        self._track_state(target, chrome_session, method, event_params)
        if method == "Target.attachedToTarget":
            child = event_params.get("sessionId")
            if isinstance(child, str):
                target.add_child(child, chrome_session, event_params)
                for session in self.on(target, chrome_session):
                    if session.auto_attach is not None:
                        self.announce_child(session, child, event_params)
            return
        if method == "Target.detachedFromTarget":
            child = str(event_params.get("sessionId"))
            target.drop_child(child)
            for session in self.on(target, child):
                self.detach(session.client, session, chrome=False)
            return
        domain = method.partition(".")[0]
        for session in self.on(target, chrome_session):
            if domain in GATED_DOMAINS and domain not in session.enabled:
                continue
            self.events += 1
            session.client.send({"method": method, "params": event_params,
                                 "sessionId": session.session_id})

    def _track_state(self, target: Target, chrome_session: str | None, method: str,
                     params: dict) -> None:
        """Keep what a late C{Runtime.enable} must be told (the live execution contexts)."""
        if method == "Runtime.executionContextCreated":
            ctx = params.get("context")
            if isinstance(ctx, dict) and is_int(ctx.get("id")):
                target.context_created(chrome_session, ctx)
        elif method == "Runtime.executionContextDestroyed":
            ctx_id = params.get("executionContextId")
            if is_int(ctx_id):
                target.context_destroyed(chrome_session, ctx_id)
        elif method == "Runtime.executionContextsCleared":
            target.contexts_cleared(chrome_session)

    def announce_child(self, parent: Session, chrome_child: str, params: dict) -> None:
        """A child target (worker, iframe) of C{parent}'s tab: a new child session for its client."""
        client = parent.client
        session = Session(session_id=new_session_id(), client=client, kind="child",
                          target=parent.target, chrome_session=chrome_child, parent=parent)
        client.add_session(session)
        parent.announced(session.session_id)
        client.send({"method": "Target.attachedToTarget", "sessionId": parent.session_id,
                     "params": {**params, "sessionId": session.session_id}})

    # ----------------------------------------------------------------- detaching

    def detach(self, client: CDPClient, session: Session, chrome: bool,
               notify: bool = True) -> None:
        """Drop C{session} (and the sessions announced on it) for C{client}.

        C{chrome}: undo in Chrome what only this session needed (domains nobody else has on,
        Fetch interception, the tab hold). C{notify}: tell the client (C{detachedFromTarget}).
        """
        if client.drop_session(session.session_id) is None:
            return
        for child_id in list(session.children):
            child = client.sessions.get(child_id)
            if child is not None:
                self.detach(client, child, chrome=chrome, notify=notify)
        if session.parent is not None:
            session.parent.forget_child(session.session_id)
        target = session.target
        if chrome and target is not None and session.kind in ("page", "child") \
                and self.targets.get(target.target_id) is target:
            others = self.on(target, session.chrome_session)
            for domain in sorted(session.enabled):
                if not any(domain in s.enabled for s in others):
                    request: dict[str, Any] = {"tabId": target.tab_id,
                                               "method": f"{domain}.disable", "params": {}}
                    if session.chrome_session is not None:
                        request["sessionId"] = session.chrome_session
                    self.link.fire_and_forget("send", request)
        if session.holds_tab and target is not None:
            session.release_tab()
            if self.targets.get(target.target_id) is target:
                self.link.fire_and_forget("detach", {"tabId": target.tab_id})
        if notify and not client.closed and target is not None:
            event: dict[str, Any] = {"method": "Target.detachedFromTarget", "params": {
                "sessionId": session.session_id,
                "targetId": target.tab_target_id if session.kind == "tab" else target.target_id}}
            if session.parent is not None:
                event["sessionId"] = session.parent.session_id
            client.send(event)

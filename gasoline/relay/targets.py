"""
The Target domain, emulated: which tabs exist and who may see them, discovery, attaching and
auto-attaching, and the tabs clients create and close.

C{chrome.debugger} has no browser target, so the relay answers the browser-level C{Target} methods
itself (L{TargetDomain.methods}), from the tabs the extension announces (L{TargetDomain.announced}).

Visibility
==========
A client sees the targets the extension exposes (tracked tabs with the pilot enabled) plus the
tabs it created itself with C{Target.createTarget}; tabs another client created are invisible to
it. A created tab belongs to the client's I{connection} (its
L{CDPClient.owner_key<gasoline.relay.model.CDPClient.owner_key>}, not its id): it is closed when
that connection ends (L{TargetDomain.close_created}), and a tab whose closing failed is closed
again when the extension lists it, never shown to a later client that reuses the id.

Attaching
=========
Sessions are flat only. A page session holds the tab in Chrome (the extension's C{attach}) before
it is announced; auto-attach follows Chrome's C{Target.TargetFilter} (L{filter_matches}), so
Playwright's default gets pages and puppeteer's gets a tab target per tab, whose own
C{Target.setAutoAttach} attaches the page (L{TargetDomain.tab_command}). What the sessions then
share on the tab is L{gasoline.relay.sessions}'.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import attrs
from twisted.internet.defer import Deferred, gatherResults
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline.common import INVALID_PARAMS, METHOD_NOT_FOUND
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
from gasoline.relay.sessions import TabSessions

log = Logger()

#: The browser target's id (what C{Target.getTargetInfo} without params describes).
BROWSER_TARGET_ID = "GASOLINE0BROWSER0TARGET00000000"
#: Chrome's default auto-attach filter: everything but the browser and tab targets.
DEFAULT_FILTER: tuple[dict[str, Any], ...] = ({"type": "browser", "exclude": True}, {"type": "tab", "exclude": True}, {})
#: Browser-level Target methods; sent on a page session they are answered as on the root.
BROWSER_ONLY_METHODS = frozenset({
    "Target.attachToBrowserTarget", "Target.createTarget", "Target.closeTarget",
    "Target.setDiscoverTargets", "Target.getTargets", "Target.activateTarget",
    "Target.getBrowserContexts", "Target.attachToTarget",
})

#: A root method's handler: (client, params) -> the result, or a Deferred of it.
Handler = Callable[[CDPClient, dict], Any]


def filter_matches(filters: Iterable[dict] | None, target_type: str) -> bool:
    """Chrome's C{Target.TargetFilter}: the first entry whose C{type} matches (or has none) decides."""
    for entry in DEFAULT_FILTER if filters is None else filters:
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        if kind is None or kind == target_type:
            return not entry.get("exclude", False)
    return False


@attrs.define(eq=False)
class TargetDomain:
    """The target table and the browser-level C{Target} methods. See the module docstring."""

    #: The connected clients by id (the hub's table, shared by name).
    clients: Mapping[str, CDPClient]
    #: The targets by id; this object adds and removes them (shared by name with L{sessions}).
    targets: dict[str, Target]
    link: RelayLink
    sessions: TabSessions

    def methods(self) -> dict[str, Handler]:
        """The root C{Target} methods this domain answers, by name."""
        return {
            "Target.getBrowserContexts": self._get_browser_contexts,
            "Target.setDiscoverTargets": self._set_discover_targets,
            "Target.getTargets": self._get_targets,
            "Target.getTargetInfo": self._get_target_info,
            "Target.setAutoAttach": self._set_auto_attach,
            "Target.attachToTarget": self._attach_to_target,
            "Target.attachToBrowserTarget": self._attach_to_browser_target,
            "Target.detachFromTarget": self.detach_from_target,
            "Target.createTarget": self._create_target,
            "Target.closeTarget": self._close_target,
            "Target.activateTarget": self._activate_target,
        }

    def visible(self, client: CDPClient | None) -> list[Target]:
        """Targets C{client} may see (C{None}: anyone, i.e. only the user's exposed tabs)."""
        return [t for t in self.targets.values()
                if t.owner is None or (client is not None and t.owner == client.owner_key)]

    def by_tab(self, tab_id: Any) -> Target | None:
        """The target of the extension's tab C{tab_id}, if the relay knows it."""
        if not is_int(tab_id):
            return None
        for target in self.targets.values():
            if target.tab_id == tab_id:
                return target
        return None

    # ------------------------------------------------------------------------- extension side

    def announced(self, raw: Any) -> None:
        """The extension's full list of exposed tabs (and tabs created for clients)."""
        if not isinstance(raw, list):
            return
        seen: dict[str, dict] = {}
        for item in raw:
            if (isinstance(item, dict) and isinstance(item.get("targetId"), str)
                    and is_int(item.get("tabId")) and item["targetId"]):
                seen[item["targetId"]] = item
        for target_id in [t for t in self.targets if t not in seen]:
            self.gone(self.targets[target_id])
        for target_id, item in seen.items():
            url, title = str(item.get("url") or ""), str(item.get("title") or "")
            target = self.targets.get(target_id)
            if target is None:
                target = Target(target_id=target_id, tab_id=item["tabId"], url=url, title=title,
                                owner=self._owner_of(item))
                self.targets[target_id] = target
                owner = self._owner_client(target.owner)
                if owner is not None:  # (again) a tab of a connected client: it closes with it
                    owner.created_tab(target_id)
                elif target.owner is not None:
                    # Its creator's connection is gone (closing it at disconnect failed, or the
                    # daemon restarted): close it now; nobody else may see it meanwhile.
                    self.link.fire_and_forget("closeTab", {"tabId": target.tab_id})
                self._target_appeared(target)
            elif (target.url, target.title) != (url, title):
                target.retitle(url, title)
                for client in self._clients_seeing(target):
                    if client.discover and filter_matches(client.discover_filter, "page"):
                        client.send({"method": "Target.targetInfoChanged", "params": {
                            "targetInfo": target.info(self._attached(client, target))}})

    def gone(self, target: Target) -> None:
        """C{target} is no more: its clients' sessions are detached and C{targetDestroyed} sent."""
        self.targets.pop(target.target_id, None)
        for client in list(self.clients.values()):
            for session in [s for s in client.sessions.values()
                            if s.target is target and s.parent is None]:
                self.sessions.detach(client, session, chrome=False)
            if client.discover and (target.owner is None or target.owner == client.owner_key):
                for kind in ("page", "tab"):
                    if filter_matches(client.discover_filter, kind):
                        client.send({"method": "Target.targetDestroyed", "params": {
                            "targetId": target.tab_target_id if kind == "tab" else target.target_id}})
            client.tab_gone(target.target_id)

    def chrome_detached(self, params: dict) -> None:
        """Chrome detached the extension from a tab for good (all holders lost it)."""
        target = self.by_tab(params.get("tabId"))
        if target is None:
            return
        if params.get("reason") == "target_closed":
            # The tab's renderer went away under the debugger: the target is gone for every
            # client; the extension re-announces the tab after a cooldown (a fresh target).
            self.gone(target)
            return
        target.detached()
        for client in list(self.clients.values()):
            for session in [s for s in client.sessions.values()
                            if s.target is target and s.kind == "page"]:
                session.release_tab()  # the extension already let go
                self.sessions.detach(client, session, chrome=False)

    def close_created(self, client: CDPClient) -> None:
        """C{client}'s connection ended: close the tabs it created."""
        for target_id in client.take_created():
            target = self.targets.get(target_id)
            if target is not None:
                self.link.fire_and_forget("closeTab", {"tabId": target.tab_id})

    def _owner_of(self, item: dict) -> str | None:
        owner = item.get("owner")
        return owner if isinstance(owner, str) and owner else None

    def _owner_client(self, owner: str | None) -> CDPClient | None:
        """The connected client whose connection created a tab of owner C{owner}, if any."""
        if owner is None:
            return None
        client = self.clients.get(owner.rpartition(".")[0])
        return client if client is not None and client.owner_key == owner else None

    def _clients_seeing(self, target: Target) -> list[CDPClient]:
        return [c for c in self.clients.values()
                if not c.closed and (target.owner is None or target.owner == c.owner_key)]

    def _attached(self, client: CDPClient, target: Target) -> bool:
        return any(s.target is target and s.kind == "page" for s in client.sessions.values())

    def _target_appeared(self, target: Target) -> None:
        for client in self._clients_seeing(target):
            self._announce(client, target)

    def _announce(self, client: CDPClient, target: Target) -> Deferred:
        """Tell C{client} about a target it may see: discovery events, then root auto-attach.

        The Deferred fires (never fails) when the auto-attach, if any, is done.
        """
        if client.discover:
            for kind in ("tab", "page"):
                if filter_matches(client.discover_filter, kind):
                    client.send({"method": "Target.targetCreated",
                                 "params": {"targetInfo": target.info(False, kind)}})
        if client.auto_attach is None:
            return _succeed(None)
        return self._auto_attach(client, target, client.auto_attach, parent=None).addErrback(
            lambda f: log.debug("relay: auto-attach failed: {f}", f=f.getErrorMessage()))

    # ------------------------------------------------------------------------- root methods

    def _get_browser_contexts(self, client: CDPClient, params: dict) -> dict:
        return {"browserContextIds": []}

    def _set_discover_targets(self, client: CDPClient, params: dict) -> dict:
        discover = params.get("discover")
        if not isinstance(discover, bool):
            raise CDPError("Invalid parameters: discover: boolean value expected", INVALID_PARAMS)
        was = client.discover
        client.set_discover(discover, params.get("filter")
                            if isinstance(params.get("filter"), list) else None)
        if discover and not was:
            for target in self.visible(client):
                for kind in ("tab", "page"):
                    if filter_matches(client.discover_filter, kind):
                        client.send({"method": "Target.targetCreated", "params": {
                            "targetInfo": target.info(self._attached(client, target), kind)}})
        return {}

    def _get_targets(self, client: CDPClient, params: dict) -> dict:
        filters = params.get("filter") if isinstance(params.get("filter"), list) else None
        infos = []
        for target in self.visible(client):
            for kind in ("tab", "page"):
                if filter_matches(filters, kind):
                    infos.append(target.info(self._attached(client, target), kind))
        return {"targetInfos": infos}

    def _get_target_info(self, client: CDPClient, params: dict) -> dict:
        target_id = params.get("targetId")
        if target_id is None:
            return {"targetInfo": {"targetId": BROWSER_TARGET_ID, "type": "browser", "title": "",
                                   "url": "", "attached": True, "canAccessOpener": False}}
        target, kind = self._visible_target(client, target_id)
        return {"targetInfo": target.info(self._attached(client, target), kind)}

    def _visible_target(self, client: CDPClient, target_id: Any) -> tuple[Target, str]:
        if isinstance(target_id, str):
            for target in self.visible(client):
                if target.target_id == target_id:
                    return target, "page"
                if target.tab_target_id == target_id:
                    return target, "tab"
        raise CDPError("No target with given id found", INVALID_PARAMS)

    def _set_auto_attach(self, client: CDPClient, params: dict,
                         parent: Session | None = None) -> Deferred | dict:
        auto = auto_attach_flag(params)
        if parent is None:
            was = client.auto_attach
            client.set_auto_attach(dict(params) if auto else None)
            if not auto or was is not None:
                return {}
            targets = self.visible(client)
        else:  # a tab target's session: auto-attach its page
            was = parent.auto_attach
            parent.set_auto_attach(dict(params) if auto else None)
            if not auto or was is not None:
                return {}
            assert parent.target is not None  # a tab session has its target
            targets = [parent.target]
        pending = [self._auto_attach(client, t, params, parent) for t in targets]
        if not pending:
            return {}
        return gatherResults(pending, consumeErrors=True).addBoth(lambda _: {})

    def _auto_attach(self, client: CDPClient, target: Target, params: dict,
                     parent: Session | None) -> Deferred:
        """Attach C{client} to C{target} as auto-attach would: a tab target or a page."""
        filters = params.get("filter") if isinstance(params.get("filter"), list) else None
        if parent is None and filter_matches(filters, "tab"):
            if client.session_for(target, "tab", None) is None:
                session = Session(session_id=new_session_id(), client=client, kind="tab",
                                  target=target)
                client.add_session(session)
                client.send({"method": "Target.attachedToTarget", "params": {
                    "sessionId": session.session_id, "targetInfo": target.info(True, "tab"),
                    "waitingForDebugger": False}})
            return _succeed({})
        if parent is not None or filter_matches(filters, "page"):
            if client.session_for(target, "page", parent) is not None:
                return _succeed({})
            key = (target.target_id, parent.session_id if parent is not None else None)
            if key in client.attaching:  # an auto-attach of this target is under way
                return _waiter(client.attaching[key])
            waiters: list[Deferred] = []
            client.attaching_to(key, waiters)
            first = _waiter(waiters)

            def done(result: Any) -> None:
                client.attached_to(key)
                for w in waiters:
                    if isinstance(result, Failure):
                        w.errback(result)
                    else:
                        w.callback(result)
                return None

            self._attach_page(client, target, parent).addBoth(done)
            return first
        return _succeed({})

    def _attach_page(self, client: CDPClient, target: Target, parent: Session | None) -> Deferred:
        """Hold the tab in Chrome, then announce a new page session to C{client}."""
        d = self.link.request("attach", {"tabId": target.tab_id})

        def attached(_: Any) -> Session:
            if client.closed or self.targets.get(target.target_id) is not target:
                self.link.fire_and_forget("detach", {"tabId": target.tab_id})
                raise CDPError("Target closed while attaching")
            session = Session(session_id=new_session_id(), client=client, kind="page",
                              target=target, parent=parent, holds_tab=True)
            client.add_session(session)
            event: dict[str, Any] = {"method": "Target.attachedToTarget", "params": {
                "sessionId": session.session_id, "targetInfo": target.info(True),
                "waitingForDebugger": False}}
            if parent is not None:
                parent.announced(session.session_id)
                event["sessionId"] = parent.session_id
            client.send(event)
            return session

        return d.addCallback(attached)

    def _attach_to_target(self, client: CDPClient, params: dict) -> Deferred | dict:
        if params.get("flatten") is not True:
            raise CDPError("Only flatten sessions are supported by the Gasoline relay "
                           "(Target.attachToTarget needs flatten: true)", INVALID_PARAMS)
        target, kind = self._visible_target(client, params.get("targetId"))
        if kind == "tab":
            session = Session(session_id=new_session_id(), client=client, kind="tab", target=target)
            client.add_session(session)
            client.send({"method": "Target.attachedToTarget", "params": {
                "sessionId": session.session_id, "targetInfo": target.info(True, "tab"),
                "waitingForDebugger": False}})
            return {"sessionId": session.session_id}
        return self._attach_page(client, target, None).addCallback(
            lambda session: {"sessionId": session.session_id})

    def _attach_to_browser_target(self, client: CDPClient, params: dict) -> dict:
        session = Session(session_id=new_session_id(), client=client, kind="browser")
        client.add_session(session)
        client.send({"method": "Target.attachedToTarget", "params": {
            "sessionId": session.session_id,
            "targetInfo": self._get_target_info(client, {})["targetInfo"],
            "waitingForDebugger": False}})
        return {"sessionId": session.session_id}

    def detach_from_target(self, client: CDPClient, params: dict,
                           parent: Session | None = None) -> dict:
        """C{Target.detachFromTarget}, on the root or on the session C{parent} it was sent on."""
        session_id = params.get("sessionId")
        session = client.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None and isinstance(params.get("targetId"), str):
            session = next((s for s in client.sessions.values() if s.target is not None
                            and params["targetId"] in (s.target.target_id, s.target.tab_target_id)
                            and s.parent is parent), None)
        if session is None:
            raise CDPError("No session with given id", INVALID_PARAMS)
        if session.kind == "child":
            assert session.target is not None and session.parent is not None  # a child has both
            # A child target (worker, iframe) is Chrome's: detach it there for this client only
            # when no other client holds it.
            others = [s for s in self.sessions.on(session.target, session.chrome_session)
                      if s is not session]
            self.sessions.detach(client, session, chrome=False)
            if not others:
                self.link.fire_and_forget("send", {
                    "tabId": session.target.tab_id, "sessionId": session.parent.chrome_session,
                    "method": "Target.detachFromTarget",
                    "params": {"sessionId": session.chrome_session}})
            return {}
        self.sessions.detach(client, session, chrome=True)
        return {}

    def _create_target(self, client: CDPClient, params: dict) -> Deferred:
        url = params.get("url", "about:blank")
        if not isinstance(url, str):
            raise CDPError("Invalid parameters: url: string value expected", INVALID_PARAMS)
        d = self.link.request("createTab", {"url": url or "about:blank",
                                            "background": params.get("background") is True,
                                            "owner": client.owner_key})

        def created(result: dict) -> Deferred:
            target_id, tab_id = result.get("targetId"), result.get("tabId")
            if not isinstance(target_id, str) or not is_int(tab_id):
                raise CDPError("The extension could not create the tab")
            if client.closed:
                self.link.fire_and_forget("closeTab", {"tabId": tab_id})
                raise CDPError("Client closed")
            client.created_tab(target_id)
            target = self.targets.get(target_id)
            if target is None:
                # Only its owner can see it: announce it to the owner and answer after the
                # owner's auto-attach, as Chrome does.
                target = Target(target_id=target_id, tab_id=tab_id, url=str(result.get("url") or url),
                                title=str(result.get("title") or ""), owner=client.owner_key)
                self.targets[target_id] = target
                pending = self._announce(client, target)
            else:  # the extension's announcement came first (and announced it)
                target.give_to(client.owner_key)
                in_flight = client.attaching.get((target_id, None))
                pending = _waiter(in_flight) if in_flight is not None else _succeed(None)
            return pending.addBoth(lambda _: {"targetId": target_id})

        return d.addCallback(created)

    def _close_target(self, client: CDPClient, params: dict) -> Deferred:
        target, _kind = self._visible_target(client, params.get("targetId"))
        if target.owner != client.owner_key:
            raise CDPError("Gasoline relay: a client may close only the tabs it created "
                           "(Target.createTarget); this is one of the user's tabs")
        d = self.link.request("closeTab", {"tabId": target.tab_id})
        return d.addCallback(lambda _: {"success": True})

    def _activate_target(self, client: CDPClient, params: dict) -> Deferred:
        target, _kind = self._visible_target(client, params.get("targetId"))
        return self.link.request("activateTab", {"tabId": target.tab_id}).addCallback(
            lambda _: {})

    # ------------------------------------------------------------------------- tab targets

    def tab_command(self, client: CDPClient, session: Session, method: str,
                    params: dict) -> Deferred | dict:
        """A command on a tab-target C{session} (puppeteer's): all of it is emulated."""
        target = session.target
        assert target is not None  # a tab session has its target
        if method == "Target.setAutoAttach":
            return self._set_auto_attach(client, params, parent=session)
        if method == "Runtime.runIfWaitingForDebugger":
            return {}
        if method == "Target.getTargetInfo":
            return {"targetInfo": target.info(True, "tab")}
        if method == "Target.detachFromTarget":
            return self.detach_from_target(client, params, parent=session)
        raise CDPError(f"'{method}' wasn't found", METHOD_NOT_FOUND)


def _waiter(waiters: list[Deferred]) -> Deferred:
    """A new Deferred, added to C{waiters} (fired by whoever owns the list)."""
    d: Deferred = Deferred()
    waiters.append(d)
    return d


def _succeed(value: Any) -> Deferred:
    d: Deferred = Deferred()
    d.callback(value)
    return d

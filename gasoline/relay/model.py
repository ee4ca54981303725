"""
The relay's vocabulary: what it knows of its peers (a L{CDPClient} per connection, each client's
L{Session}s, the L{Target}s the extension exposes), the errors it answers with, and the
L{IRelayPeer} interface both kinds of connection provide.

These are records with a few small helpers and no protocol logic: the parts of the relay
(L{gasoline.relay.hub}, L{gasoline.relay.sessions}, L{gasoline.relay.targets}) change them, and
the HTTP layer and the status page read them.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, TypeGuard

import attrs
from zope.interface import Interface

from gasoline.common import INVALID_PARAMS, SERVER_ERROR

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred
    from twisted.internet.interfaces import IDelayedCall

#: The (emulated) browser context every target belongs to.
BROWSER_CONTEXT_ID = "GASOLINE0DEFAULT0CONTEXT0000000"


class IRelayPeer(Interface):
    """One WebSocket peer of the relay (a CDP client or the extension), as the relay sees it."""

    def send(message: dict[str, Any]) -> None:
        """Send C{message} (a JSON-able dict) as one text message; never raises."""

    def close(code: int, reason: str) -> None:
        """Close the connection with a WebSocket close C{code} and C{reason} (a str)."""


class CDPError(Exception):
    """A CDP error answer C{{"code": ..., "message": ...}}."""

    def __init__(self, message: str, code: int = SERVER_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


class RelayRefused(Exception):
    """A CDP client connection the relay refuses (C{close_code}, C{reason})."""

    def __init__(self, close_code: int, reason: str) -> None:
        super().__init__(reason)
        self.close_code = close_code
        self.reason = reason


def new_session_id() -> str:
    """A client session id: random, never shared between clients."""
    return secrets.token_hex(16).upper()


def is_int(value: Any) -> TypeGuard[int]:
    """An integer that is not a C{bool} (JSON's numbers as ids and tab ids)."""
    return isinstance(value, int) and not isinstance(value, bool)


def auto_attach_flag(params: dict) -> bool:
    """C{autoAttach} of C{Target.setAutoAttach}, checked: a boolean, and only flatten sessions."""
    auto = params.get("autoAttach")
    if not isinstance(auto, bool):
        raise CDPError("Invalid parameters: autoAttach: boolean value expected", INVALID_PARAMS)
    if auto and params.get("flatten") is not True:
        raise CDPError("Only flatten sessions are supported by the Gasoline relay "
                       "(Target.setAutoAttach needs flatten: true)", INVALID_PARAMS)
    return auto


@attrs.define(eq=False)
class Target:
    """A tab the relay knows about (from the extension's announcements)."""

    target_id: str
    tab_id: int
    url: str = ""
    title: str = ""
    #: The L{CDPClient.owner_key} of the connection that created this tab with
    #: C{Target.createTarget} (C{None}: a user's tab).
    owner: str | None = None
    #: Runtime execution contexts per Chrome session (C{None}: the tab itself), id -> description.
    contexts: dict[str | None, dict[int, dict]] = attrs.Factory(dict)
    #: Child targets Chrome attached, per Chrome child session id: the C{attachedToTarget} params
    #: and the Chrome session they were announced on.
    children: dict[str, tuple[str | None, dict]] = attrs.Factory(dict)

    def retitle(self, url: str, title: str) -> None:
        """The extension announced the tab's new URL and title."""
        self.url, self.title = url, title

    def give_to(self, owner: str) -> None:
        """The tab is C{owner}'s (a L{CDPClient.owner_key}: the connection that created it)."""
        self.owner = owner

    def add_child(self, chrome_child: str, chrome_session: str | None, params: dict) -> None:
        """Chrome attached a child target (C{attachedToTarget} C{params}) as session
        C{chrome_child}, announced on C{chrome_session}."""
        self.children[chrome_child] = (chrome_session, params)

    def drop_child(self, chrome_child: str) -> None:
        """Chrome detached the child session C{chrome_child}: it and its contexts are gone."""
        self.children.pop(chrome_child, None)
        self.contexts.pop(chrome_child, None)

    def context_created(self, chrome_session: str | None, context: dict) -> None:
        """C{Runtime.executionContextCreated} on C{chrome_session}."""
        self.contexts.setdefault(chrome_session, {})[context["id"]] = context

    def context_destroyed(self, chrome_session: str | None, context_id: int) -> None:
        """C{Runtime.executionContextDestroyed} on C{chrome_session}."""
        self.contexts.get(chrome_session, {}).pop(context_id, None)

    def contexts_cleared(self, chrome_session: str | None) -> None:
        """C{Runtime.executionContextsCleared} on C{chrome_session}."""
        self.contexts.pop(chrome_session, None)

    def detached(self) -> None:
        """Chrome let go of the tab: no context and no child session is live any more."""
        self.contexts.clear()
        self.children.clear()

    @property
    def tab_target_id(self) -> str:
        return "TAB" + self.target_id[3:] if len(self.target_id) > 3 else "TAB-" + self.target_id

    def info(self, attached: bool, kind: str = "page") -> dict[str, Any]:
        return {
            "targetId": self.tab_target_id if kind == "tab" else self.target_id,
            "type": kind,
            "title": self.title,
            "url": self.url,
            "attached": attached,
            "canAccessOpener": False,
            "browserContextId": BROWSER_CONTEXT_ID,
        }


@attrs.define(eq=False)
class Session:
    """One client's session: a tab target, a page, a child of a page, or the browser."""

    session_id: str
    client: CDPClient
    #: C{"page"}, C{"tab"} (puppeteer's tab target), C{"child"} or C{"browser"}.
    kind: str
    target: Target | None = None
    #: The Chrome session on the tab (C{None} for the page itself, a child session id otherwise).
    chrome_session: str | None = None
    #: The session this one was announced on (C{None}: the client's root).
    parent: Session | None = None
    enabled: set[str] = attrs.Factory(set)
    #: This session's C{Target.setAutoAttach} params (child auto-attach on a page, or page
    #: auto-attach on a tab target); C{None} when off.
    auto_attach: dict | None = None
    #: Client session ids of the sessions announced on this one.
    children: set[str] = attrs.Factory(set)
    #: Chrome is holding the tab for this session (page sessions only).
    holds_tab: bool = False

    def set_auto_attach(self, params: dict | None) -> None:
        """This session's C{Target.setAutoAttach} params (C{None}: off)."""
        self.auto_attach = params

    def release_tab(self) -> None:
        """Chrome no longer holds the tab for this session."""
        self.holds_tab = False

    def enable(self, domain: str) -> None:
        """The client enabled C{domain} on this session."""
        self.enabled.add(domain)

    def disable(self, domain: str) -> None:
        """C{domain} is off for this session (disabled, or its enable failed)."""
        self.enabled.discard(domain)

    def announced(self, child_id: str) -> None:
        """The session C{child_id} was announced on this one."""
        self.children.add(child_id)

    def forget_child(self, child_id: str) -> None:
        """The session C{child_id} announced on this one was dropped."""
        self.children.discard(child_id)


@attrs.define(eq=False)
class CDPClient:
    """One connected CDP client."""

    client_id: str
    peer: IRelayPeer
    sessions: dict[str, Session] = attrs.Factory(dict)
    discover: bool = False
    #: The C{filter} of C{Target.setDiscoverTargets} (C{None}: Chrome's default).
    discover_filter: list | None = None
    #: Root C{Target.setAutoAttach} params (C{None}: off).
    auto_attach: dict | None = None
    #: Auto-attaches under way: (target id, parent session id) -> the attach's Deferred.
    attaching: dict[tuple[str, str | None], list[Deferred]] = attrs.Factory(dict)
    #: Target ids this client created (C{Target.createTarget}).
    created: set[str] = attrs.Factory(set)
    closed: bool = False
    commands: int = 0
    #: This connection's key for the tabs it creates (the client id and a random part: a later
    #: connection with the same id never owns them).
    owner_key: str = attrs.Factory(lambda self: f"{self.client_id}.{secrets.token_hex(8)}",
                                   takes_self=True)
    #: When the client last sent a message (the relay's clock), for the idle reaper.
    last_active: float = 0.0
    idle_timer: IDelayedCall | None = None

    def send(self, message: dict) -> None:
        if not self.closed:
            self.peer.send(message)

    def add_session(self, session: Session) -> None:
        """A session of this client was announced to it."""
        self.sessions[session.session_id] = session

    def drop_session(self, session_id: str) -> Session | None:
        """The session C{session_id} is dropped; it, or None when it was not the client's."""
        return self.sessions.pop(session_id, None)

    def created_tab(self, target_id: str) -> None:
        """This client created the tab C{target_id} (closed when the client goes)."""
        self.created.add(target_id)

    def tab_gone(self, target_id: str) -> None:
        """The tab C{target_id} is gone."""
        self.created.discard(target_id)

    def take_created(self) -> list[str]:
        """The tabs this client created, now no longer its (its connection ended)."""
        created = list(self.created)
        self.created.clear()
        return created

    def set_discover(self, discover: bool, filters: list | None) -> None:
        """C{Target.setDiscoverTargets}: on or off, with its C{filter}."""
        self.discover, self.discover_filter = discover, filters

    def set_auto_attach(self, params: dict | None) -> None:
        """The root C{Target.setAutoAttach} params (C{None}: off)."""
        self.auto_attach = params

    def attaching_to(self, key: tuple[str, str | None], waiters: list[Deferred]) -> None:
        """An auto-attach of C{key} (target id, parent session id) is under way; C{waiters}
        fire when it ends."""
        self.attaching[key] = waiters

    def attached_to(self, key: tuple[str, str | None]) -> None:
        """That auto-attach ended."""
        self.attaching.pop(key, None)

    def active(self, now: float) -> None:
        """The client sent a message at C{now} (the idle reaper's clock)."""
        self.last_active = now

    def count_command(self) -> None:
        """One more well-formed command from the client."""
        self.commands += 1

    def arm_idle(self, timer: IDelayedCall | None) -> None:
        """C{timer} checks whether the client went idle (C{None}: that check ran)."""
        self.idle_timer = timer

    def close(self) -> None:
        """The connection closed: nothing more is sent, the idle check is cancelled."""
        self.closed = True
        timer, self.idle_timer = self.idle_timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def session_for(self, target: Target, kind: str, parent: Session | None) -> Session | None:
        for s in self.sessions.values():
            if s.target is target and s.kind == kind and s.parent is parent:
                return s
        return None

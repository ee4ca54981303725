"""
The CDP hub: many DevTools-protocol clients, one extension, the user's real tabs.

Every CDP client (Playwright, puppeteer-core, chrome-devtools-mcp, ...) talks to the relay as if it
were a browser's browser-level DevTools endpoint; the relay forwards what a tab can answer to the
extension, which runs it with C{chrome.debugger}, and emulates what it cannot (the C{Browser}
domain and the browser-level C{Target} methods). See docs/relay.md for the whole contract.

Isolation
=========
 - B{Ids}: every command forwarded to the extension gets a relay-global id (one counter for the
   whole relay); the extension's answer is matched by that id only, and written back to the one
   client that asked, under the id that client chose. Two clients may use the same ids freely.
 - B{Sessions}: each client has its own session ids (random, never shared), each mapped to a
   (target, Chrome child session) pair; a command on another client's session id is an unknown
   session, exactly as in Chrome.
 - B{Events}: an event from a tab (or one of its child sessions) goes only to the sessions that
   are attached to it, and of those only to sessions that enabled the event's domain.
 - B{Visibility}: a client sees the targets the extension exposes (tracked tabs with the pilot
   enabled) plus the tabs it created itself with C{Target.createTarget}; tabs another client
   created are invisible to it. A created tab belongs to the client's I{connection} (its
   L{CDPClient.owner_key}, not its id): it is closed when that connection ends, and a tab whose
   closing failed is closed again when the extension lists it, never shown to a later client
   that reuses the id.

Shared state on one tab
=======================
Several clients on one tab share one C{chrome.debugger} attachment, so domain state is counted per
client session: C{X.enable} is forwarded (it is idempotent), C{X.disable} reaches Chrome only when
no other session on the same target still has C{X} enabled. A late C{Runtime.enable} gets the
tab's current execution contexts replayed (Chrome sends them only on the first enable); a late
child C{Target.setAutoAttach} gets the tab's current child targets. C{Fetch} interception is held
by one client per target at a time (another's C{Fetch.enable} fails with a clear error), and is
disabled when its holder leaves, so no request stays paused for a client that is gone.

The extension link
==================
One extension connection at a time; a new one replaces the old (closed with code 1000). Requests
to the extension fail with a CDP error after C{request_timeout} seconds, and at once when the link
goes away: no client command waits forever. When the link goes, every client session is detached
(C{Target.detachedFromTarget}, C{Target.targetDestroyed}); when a link comes back the extension
announces its tabs again and clients that auto-attach get them re-attached.
"""

from __future__ import annotations

import itertools
import re
import secrets
from typing import Any, Callable, Iterable, TypeGuard

import attrs
import orjson
from twisted.internet.defer import Deferred, fail, gatherResults
from twisted.internet.defer import TimeoutError as DeferredTimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Interface

from gasoline.common import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
)
from gasoline.core.validate import MAX_JSON_TOKENS, json_tokens

log = Logger()

#: Chrome's code for a command on an unknown session id.
SESSION_NOT_FOUND = -32001

#: Seconds a forwarded command waits for the extension before the client gets a CDP error.
DEFAULT_REQUEST_TIMEOUT = 30.0
#: CDP clients connected at once.
DEFAULT_MAX_CLIENTS = 16
#: Seconds a CDP client may send no command before it is disconnected (close code 4408), so idle
#: connections cannot hold the relay's slots.
DEFAULT_CLIENT_IDLE_TIMEOUT = 300.0
#: A client id in a C{/cdp/<id>} path.
CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The (emulated) browser context every target belongs to.
BROWSER_CONTEXT_ID = "GASOLINE0DEFAULT0CONTEXT0000000"
#: The browser target's id (what C{Target.getTargetInfo} without params describes).
BROWSER_TARGET_ID = "GASOLINE0BROWSER0TARGET00000000"

#: Domains whose events go only to sessions that enabled the domain.
GATED_DOMAINS = frozenset({
    "Accessibility", "Animation", "Audits", "Autofill", "BackgroundService", "CSS", "Console",
    "DOM", "DOMStorage", "Debugger", "DeviceAccess", "FedCm", "Fetch", "HeapProfiler",
    "IndexedDB", "LayerTree", "Log", "Media", "Network", "Overlay", "Page", "Performance",
    "Preload", "Profiler", "Runtime", "Security", "ServiceWorker", "WebAuthn",
})
#: Chrome's default auto-attach filter: everything but the browser and tab targets.
DEFAULT_FILTER: tuple[dict[str, Any], ...] = ({"type": "browser", "exclude": True}, {"type": "tab", "exclude": True}, {})


#: The keys of L{Relay.counts}.
COUNTS = ("commands", "command_errors", "events", "extension_requests", "extension_links")


class IRelayPeer(Interface):
    """One WebSocket peer of the relay (a CDP client or the extension), as the relay sees it."""

    def send(message):
        """Send C{message} (a JSON-able dict) as one text message; never raises."""

    def close(code, reason):
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


def _session_id() -> str:
    return secrets.token_hex(16).upper()


def filter_matches(filters: Iterable[dict] | None, target_type: str) -> bool:
    """Chrome's C{Target.TargetFilter}: the first entry whose C{type} matches (or has none) decides."""
    for entry in DEFAULT_FILTER if filters is None else filters:
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        if kind is None or kind == target_type:
            return not entry.get("exclude", False)
    return False


def _auto_attach_flag(params: dict) -> bool:
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
    client: "CDPClient"
    #: C{"page"}, C{"tab"} (puppeteer's tab target), C{"child"} or C{"browser"}.
    kind: str
    target: Target | None = None
    #: The Chrome session on the tab (C{None} for the page itself, a child session id otherwise).
    chrome_session: str | None = None
    #: The session this one was announced on (C{None}: the client's root).
    parent: "Session | None" = None
    enabled: set[str] = attrs.Factory(set)
    #: This session's C{Target.setAutoAttach} params (child auto-attach on a page, or page
    #: auto-attach on a tab target); C{None} when off.
    auto_attach: dict | None = None
    #: Client session ids of the sessions announced on this one.
    children: set[str] = attrs.Factory(set)
    #: Chrome is holding the tab for this session (page sessions only).
    holds_tab: bool = False


@attrs.define(eq=False)
class CDPClient:
    """One connected CDP client."""

    client_id: str
    peer: Any
    sessions: dict[str, Session] = attrs.Factory(dict)
    discover: bool = False
    discover_filter: Any = None
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
    idle_timer: Any = None

    def send(self, message: dict) -> None:
        if not self.closed:
            self.peer.send(message)

    def session_for(self, target: Target, kind: str, parent: Session | None) -> Session | None:
        for s in self.sessions.values():
            if s.target is target and s.kind == kind and s.parent is parent:
                return s
        return None


@attrs.define(eq=False)
class Relay:
    """The hub. See the module docstring."""

    clock: IReactorTime
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    max_clients: int = DEFAULT_MAX_CLIENTS
    #: Seconds without a message after which a client is disconnected (0: never).
    client_idle_timeout: float = DEFAULT_CLIENT_IDLE_TIMEOUT
    #: Called with the number of connected clients whenever it changes (metrics, tests).
    on_clients_changed: Callable[[int], None] | None = None
    #: Why the extension is not connected when the daemon knows better than "not connected"
    #: (it waits for the user to pair it): a sentence, or None.
    not_connected_why: Callable[[], str | None] = lambda: None

    clients: dict[str, CDPClient] = attrs.Factory(dict)
    targets: dict[str, Target] = attrs.Factory(dict)
    extension: Any = None
    #: What the extension said about the browser in its C{hello}.
    browser: dict[str, str] = attrs.Factory(dict)
    _ids: Any = attrs.Factory(lambda: itertools.count(1))
    _pending: dict[int, Deferred] = attrs.Factory(dict)
    #: Running totals read by C{/metrics} (L{gasoline.relay.metrics}): C{commands} from CDP
    #: clients, C{command_errors} answered with an error, C{events} fanned out to client
    #: sessions, C{extension_requests} sent to the extension, C{extension_links} it opened.
    counts: dict[str, int] = attrs.Factory(lambda: dict.fromkeys(COUNTS, 0))

    # ------------------------------------------------------------------------- status

    @property
    def extension_connected(self) -> bool:
        return self.extension is not None

    def status(self) -> dict[str, Any]:
        return {
            "extension_connected": self.extension_connected,
            "clients": len(self.clients),
            "client_ids": sorted(self.clients),
            "targets": len(self.targets),
            "pending": len(self._pending),
        }

    def product(self) -> str:
        return self.browser.get("product") or "Chrome/0.0.0.0"

    def user_agent(self) -> str:
        return self.browser.get("userAgent") or ""

    def version_info(self) -> dict[str, Any]:
        """C{Browser.getVersion}'s answer (also C{/json/version}'s body, without the URL)."""
        return {
            "protocolVersion": "1.3",
            "product": self.product(),
            "revision": "@gasoline",
            "userAgent": self.user_agent(),
            "jsVersion": self.browser.get("jsVersion", ""),
        }

    def visible_targets(self, client: CDPClient | None) -> list[Target]:
        """Targets C{client} may see (C{None}: anyone, i.e. only the user's exposed tabs)."""
        return [t for t in self.targets.values()
                if t.owner is None or (client is not None and t.owner == client.owner_key)]

    # ------------------------------------------------------------------------- extension side

    def extension_attached(self, peer) -> None:
        """A new extension connection: it replaces any previous one (closed with code 1000)."""
        old = self.extension
        if old is not None:
            self._link_lost("Gasoline extension connection replaced")
            old.close(1000, "Replaced by a new extension connection")
        self.extension = peer
        self.counts["extension_links"] += 1
        self._notify_extension_clients()

    def extension_lost(self, peer) -> None:
        """The extension connection C{peer} closed (a replaced connection is ignored)."""
        if peer is self.extension:
            self._link_lost("Gasoline extension disconnected")

    def _link_lost(self, why: str) -> None:
        self.extension = None
        pending, self._pending = self._pending, {}
        for d in pending.values():
            d.errback(CDPError(why))
        for target in list(self.targets.values()):
            self._target_gone(target)

    def extension_message(self, peer, message: Any) -> None:
        """One parsed JSON message from the extension connection C{peer}."""
        if peer is not self.extension or not isinstance(message, dict):
            return
        if "id" in message and "method" not in message:
            d = self._pending.pop(mid, None) if _is_int(mid := message.get("id")) else None
            if d is None:
                return
            error = message.get("error")
            if error is not None:
                err = error if isinstance(error, dict) else {}
                code = raw_code if _is_int(raw_code := err.get("code")) else SERVER_ERROR
                d.errback(CDPError(str(err.get("message") or error), code))
            else:
                result = message.get("result")
                d.callback(result if isinstance(result, dict) else {})
            return
        method = message.get("method")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "ping":
            peer.send({"method": "pong"})
        elif method == "hello":
            browser = {k: str(params[k]) for k in ("product", "userAgent", "jsVersion", "version")
                       if isinstance(params.get(k), str)}
            self.browser.update(browser)
            self._targets_announced(params.get("targets"))
        elif method == "targets":
            self._targets_announced(params.get("targets"))
        elif method == "event":
            self._chrome_event(params)
        elif method == "detached":
            self._chrome_detached(params)
        elif method == "disconnectClients":
            for client in list(self.clients.values()):
                self._close_client(client, 1000, "Disconnected from the Gasoline popup")

    def _send_extension(self, method: str, params: dict) -> Deferred:
        """Send a request to the extension; the Deferred fires with its result or a L{CDPError}."""
        if self.extension is None:
            why = self.not_connected_why()
            return fail(CDPError(f"Gasoline extension is not connected: {why}" if why else
                                 "Gasoline extension is not connected (open the browser with the "
                                 "Gasoline extension and point it at this daemon)"))
        request_id = next(self._ids)
        self.counts["extension_requests"] += 1

        def cancel(_d):
            self._pending.pop(request_id, None)

        d: Deferred = Deferred(cancel)
        self._pending[request_id] = d
        self.extension.send({"id": request_id, "method": method, "params": params})

        def timed_out(failure: Failure):
            failure.trap(DeferredTimeoutError)
            raise CDPError(f"Gasoline extension did not answer {params.get('method', method)} "
                           f"within {self.request_timeout:g} s")

        d.addTimeout(self.request_timeout, self.clock)
        d.addErrback(timed_out)
        return d

    def _fire_and_forget(self, method: str, params: dict) -> None:
        self._send_extension(method, params).addErrback(lambda f: None)

    def _notify_extension_clients(self) -> None:
        if self.extension is not None:
            self.extension.send({"method": "clients", "params": {
                "count": len(self.clients), "ids": sorted(self.clients)}})
        if self.on_clients_changed is not None:
            self.on_clients_changed(len(self.clients))

    def _targets_announced(self, raw: Any) -> None:
        """The extension's full list of exposed tabs (and tabs created for clients)."""
        if not isinstance(raw, list):
            return
        seen: dict[str, dict] = {}
        for item in raw:
            if (isinstance(item, dict) and isinstance(item.get("targetId"), str)
                    and _is_int(item.get("tabId")) and item["targetId"]):
                seen[item["targetId"]] = item
        for target_id in [t for t in self.targets if t not in seen]:
            self._target_gone(self.targets[target_id])
        for target_id, item in seen.items():
            url, title = str(item.get("url") or ""), str(item.get("title") or "")
            target = self.targets.get(target_id)
            if target is None:
                target = Target(target_id=target_id, tab_id=item["tabId"], url=url, title=title,
                                owner=self._owner_of(item))
                self.targets[target_id] = target
                owner = self._owner_client(target.owner)
                if owner is not None:  # (again) a tab of a connected client: it closes with it
                    owner.created.add(target_id)
                elif target.owner is not None:
                    # Its creator's connection is gone (closing it at disconnect failed, or the
                    # daemon restarted): close it now; nobody else may see it meanwhile.
                    self._fire_and_forget("closeTab", {"tabId": target.tab_id})
                self._target_appeared(target)
            elif (target.url, target.title) != (url, title):
                target.url, target.title = url, title
                for client in self._clients_seeing(target):
                    if client.discover and filter_matches(client.discover_filter, "page"):
                        client.send({"method": "Target.targetInfoChanged", "params": {
                            "targetInfo": target.info(self._attached(client, target))}})

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

    def _target_gone(self, target: Target) -> None:
        self.targets.pop(target.target_id, None)
        for client in list(self.clients.values()):
            for session in [s for s in client.sessions.values()
                            if s.target is target and s.parent is None]:
                self._detach_session(client, session, chrome=False)
            if client.discover and (target.owner is None or target.owner == client.owner_key):
                for kind in ("page", "tab"):
                    if filter_matches(client.discover_filter, kind):
                        client.send({"method": "Target.targetDestroyed", "params": {
                            "targetId": target.tab_target_id if kind == "tab" else target.target_id}})
            client.created.discard(target.target_id)

    def _chrome_detached(self, params: dict) -> None:
        """Chrome detached the extension from a tab for good (all holders lost it)."""
        target = self._target_by_tab(params.get("tabId"))
        if target is None:
            return
        if params.get("reason") == "target_closed":
            # The tab's renderer went away under the debugger: the target is gone for every
            # client; the extension re-announces the tab after a cooldown (a fresh target).
            self._target_gone(target)
            return
        target.contexts.clear()
        target.children.clear()
        for client in list(self.clients.values()):
            for session in [s for s in client.sessions.values()
                            if s.target is target and s.kind == "page"]:
                session.holds_tab = False  # the extension already let go
                self._detach_session(client, session, chrome=False)

    def _target_by_tab(self, tab_id: Any) -> Target | None:
        if not _is_int(tab_id):
            return None
        for target in self.targets.values():
            if target.tab_id == tab_id:
                return target
        return None

    def _chrome_event(self, params: dict) -> None:
        target = self._target_by_tab(params.get("tabId"))
        method = params.get("method")
        if target is None or not isinstance(method, str):
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
                target.children[child] = (chrome_session, event_params)
                for session in self._sessions_on(target, chrome_session):
                    if session.auto_attach is not None:
                        self._announce_child(session, child, event_params)
            return
        if method == "Target.detachedFromTarget":
            child = str(event_params.get("sessionId"))
            target.children.pop(child, None)
            target.contexts.pop(child, None)
            for session in self._sessions_on(target, child):
                self._detach_session(session.client, session, chrome=False)
            return
        domain = method.partition(".")[0]
        for session in self._sessions_on(target, chrome_session):
            if domain in GATED_DOMAINS and domain not in session.enabled:
                continue
            self.counts["events"] += 1
            session.client.send({"method": method, "params": event_params,
                                 "sessionId": session.session_id})

    def _track_state(self, target: Target, chrome_session: str | None, method: str,
                     params: dict) -> None:
        """Keep what a late C{Runtime.enable} must be told (the live execution contexts)."""
        if method == "Runtime.executionContextCreated":
            ctx = params.get("context")
            if isinstance(ctx, dict) and _is_int(ctx.get("id")):
                target.contexts.setdefault(chrome_session, {})[ctx["id"]] = ctx
        elif method == "Runtime.executionContextDestroyed":
            ctx_id = params.get("executionContextId")
            if _is_int(ctx_id):
                target.contexts.get(chrome_session, {}).pop(ctx_id, None)
        elif method == "Runtime.executionContextsCleared":
            target.contexts.pop(chrome_session, None)

    def _sessions_on(self, target: Target, chrome_session: str | None) -> list[Session]:
        """Client sessions bound to one Chrome session of C{target} (page or child)."""
        return [s for c in self.clients.values() if not c.closed for s in c.sessions.values()
                if s.target is target and s.kind in ("page", "child")
                and s.chrome_session == chrome_session]

    def _announce_child(self, parent: Session, chrome_child: str, params: dict) -> None:
        client = parent.client
        session = Session(session_id=_session_id(), client=client, kind="child",
                          target=parent.target, chrome_session=chrome_child, parent=parent)
        client.sessions[session.session_id] = session
        parent.children.add(session.session_id)
        client.send({"method": "Target.attachedToTarget", "sessionId": parent.session_id,
                     "params": {**params, "sessionId": session.session_id}})

    # ------------------------------------------------------------------------- client side

    def new_client_id(self) -> str:
        return "c" + secrets.token_hex(8)

    def client_connected(self, client_id: str | None, peer) -> CDPClient:
        """Register a CDP client; raises L{RelayRefused} (duplicate id, bad id, too many)."""
        if client_id is None or client_id == "":
            client_id = self.new_client_id()
        if not CLIENT_ID.fullmatch(client_id):
            raise RelayRefused(4400, "Invalid client id (1-64 characters of A-Z a-z 0-9 _ -)")
        if client_id in self.clients:
            raise RelayRefused(4004, f"Client id {client_id} is already connected")
        if len(self.clients) >= self.max_clients:
            raise RelayRefused(4029, f"Too many CDP clients (at most {self.max_clients})")
        client = CDPClient(client_id=client_id, peer=peer, last_active=self.clock.seconds())
        self.clients[client_id] = client
        self._watch_idle(client)
        self._notify_extension_clients()
        return client

    def _watch_idle(self, client: CDPClient) -> None:
        """Disconnect C{client} once it has sent nothing for L{client_idle_timeout} seconds."""
        if self.client_idle_timeout <= 0 or client.closed:
            return
        due = client.last_active + self.client_idle_timeout - self.clock.seconds()
        if due > 0:
            client.idle_timer = self.clock.callLater(due, self._watch_idle, client)
            return
        client.idle_timer = None
        log.info("relay: CDP client {id} sent nothing for {s:.0f} s; disconnected",
                 id=client.client_id, s=self.client_idle_timeout)
        self._close_client(client, 4408, f"Idle for {self.client_idle_timeout:.0f} s "
                           "(no command): disconnected; reconnect to continue")

    def client_lost(self, client: CDPClient) -> None:
        """The client's connection closed: release its sessions and close the tabs it created."""
        if self.clients.get(client.client_id) is not client:
            return
        client.closed = True
        timer, client.idle_timer = client.idle_timer, None
        if timer is not None and timer.active():
            timer.cancel()
        del self.clients[client.client_id]
        for session in [s for s in client.sessions.values() if s.parent is None]:
            self._detach_session(client, session, chrome=True, notify=False)
        for target_id in list(client.created):
            target = self.targets.get(target_id)
            if target is not None:
                self._fire_and_forget("closeTab", {"tabId": target.tab_id})
        client.created.clear()
        self._notify_extension_clients()

    def _close_client(self, client: CDPClient, code: int, reason: str) -> None:
        peer = client.peer
        self.client_lost(client)
        peer.close(code, reason)

    def client_text(self, client: CDPClient, text: str | bytes) -> None:
        """One WebSocket text message from a CDP client: parse it, answer malformed input.

        A message with more JSON values than an HTTP body may carry
        (L{gasoline.core.validate.MAX_JSON_TOKENS}) is refused before it is decoded."""
        client.last_active = self.clock.seconds()
        raw = text.encode() if isinstance(text, str) else text
        if isinstance(raw, (bytes, bytearray, memoryview)) and json_tokens(raw) > MAX_JSON_TOKENS:
            self.counts["commands"] += 1
            self.counts["command_errors"] += 1
            client.send({"id": None, "error": {
                "code": INVALID_REQUEST, "message": f"Message has more than {MAX_JSON_TOKENS} "
                "JSON values (the same limit as HTTP request bodies)"}})
            return
        try:
            message = orjson.loads(text)
        except (orjson.JSONDecodeError, TypeError):
            self.counts["commands"] += 1
            self.counts["command_errors"] += 1
            client.send({"id": None, "error": {"code": PARSE_ERROR,
                                               "message": "Message must be a valid JSON"}})
            return
        self.client_message(client, message)

    def client_message(self, client: CDPClient, message: Any) -> None:
        """One parsed command from C{client}; the answer is sent to it when ready."""
        if client.closed:
            return
        client.last_active = self.clock.seconds()
        self.counts["commands"] += 1
        if not isinstance(message, dict):
            self.counts["command_errors"] += 1
            client.send({"id": None, "error": {"code": INVALID_REQUEST,
                                               "message": "Message must be an object"}})
            return
        msg_id = message.get("id")
        if not _is_int(msg_id):
            self.counts["command_errors"] += 1
            client.send({"id": None, "error": {"code": INVALID_REQUEST,
                                               "message": "Message must have integer 'id' property"}})
            return
        method = message.get("method")
        session_id = message.get("sessionId")
        params = message.get("params", {})
        reply_session = {"sessionId": session_id} if isinstance(session_id, str) else {}
        if not isinstance(method, str) or not method:
            self.counts["command_errors"] += 1
            client.send({"id": msg_id, **reply_session, "error": {
                "code": INVALID_REQUEST, "message": "Message must have string 'method' property"}})
            return
        if params is None:
            params = {}
        if not isinstance(params, dict):
            self.counts["command_errors"] += 1
            client.send({"id": msg_id, **reply_session, "error": {
                "code": INVALID_PARAMS, "message": "Invalid parameters: params must be an object"}})
            return
        client.commands += 1

        def answer(result):
            client.send({"id": msg_id, **reply_session,
                         "result": result if isinstance(result, dict) else {}})

        def failed(failure: Failure):
            self.counts["command_errors"] += 1
            if failure.check(CDPError):
                error = failure.value.to_json()
            else:
                log.failure("relay: {method} failed", failure, method=method)
                error = {"code": SERVER_ERROR, "message": "Internal relay error"}
            client.send({"id": msg_id, **reply_session, "error": error})

        try:
            if session_id is None:
                d = self._root_command(client, method, params)
            elif not isinstance(session_id, str) or session_id not in client.sessions:
                raise CDPError("Session with given id not found.", SESSION_NOT_FOUND)
            else:
                d = self._session_command(client, client.sessions[session_id], method, params)
        except CDPError as e:
            self.counts["command_errors"] += 1
            client.send({"id": msg_id, **reply_session, "error": e.to_json()})
            return
        if not isinstance(d, Deferred):
            answer(d)
            return
        d.addCallbacks(answer, failed)

    # ----------------------------------------------------------------- root (browser) methods

    def _root_command(self, client: CDPClient, method: str, params: dict):
        handler = _ROOT_METHODS.get(method)
        if handler is None:
            raise CDPError(f"'{method}' wasn't found", METHOD_NOT_FOUND)
        return handler(self, client, params)

    def _browser_get_version(self, client, params):
        return self.version_info()

    def _ok(self, client, params):
        return {}

    def _browser_close(self, client: CDPClient, params):
        """Closes only this client's connection and the tabs it created (after the answer)."""
        self.clock.callLater(0, self._close_client, client, 1000, "Browser.close")
        return {}

    def _get_window_for_target(self, client, params):
        return {"windowId": 1, "bounds": {"left": 0, "top": 0, "width": 1280, "height": 900,
                                          "windowState": "normal"}}

    def _get_browser_contexts(self, client, params):
        return {"browserContextIds": []}

    def _set_discover_targets(self, client: CDPClient, params):
        discover = params.get("discover")
        if not isinstance(discover, bool):
            raise CDPError("Invalid parameters: discover: boolean value expected", INVALID_PARAMS)
        was = client.discover
        client.discover = discover
        client.discover_filter = params.get("filter") if isinstance(params.get("filter"), list) else None
        if discover and not was:
            for target in self.visible_targets(client):
                for kind in ("tab", "page"):
                    if filter_matches(client.discover_filter, kind):
                        client.send({"method": "Target.targetCreated", "params": {
                            "targetInfo": target.info(self._attached(client, target), kind)}})
        return {}

    def _get_targets(self, client: CDPClient, params):
        filters = params.get("filter") if isinstance(params.get("filter"), list) else None
        infos = []
        for target in self.visible_targets(client):
            for kind in ("tab", "page"):
                if filter_matches(filters, kind):
                    infos.append(target.info(self._attached(client, target), kind))
        return {"targetInfos": infos}

    def _get_target_info(self, client: CDPClient, params):
        target_id = params.get("targetId")
        if target_id is None:
            return {"targetInfo": {"targetId": BROWSER_TARGET_ID, "type": "browser", "title": "",
                                   "url": "", "attached": True, "canAccessOpener": False}}
        target, kind = self._visible_target(client, target_id)
        return {"targetInfo": target.info(self._attached(client, target), kind)}

    def _visible_target(self, client: CDPClient, target_id: Any) -> tuple[Target, str]:
        if isinstance(target_id, str):
            for target in self.visible_targets(client):
                if target.target_id == target_id:
                    return target, "page"
                if target.tab_target_id == target_id:
                    return target, "tab"
        raise CDPError("No target with given id found", INVALID_PARAMS)

    def _set_auto_attach(self, client: CDPClient, params, parent: Session | None = None):
        auto = _auto_attach_flag(params)
        if parent is None:
            was = client.auto_attach
            client.auto_attach = dict(params) if auto else None
            if not auto or was is not None:
                return {}
            targets = self.visible_targets(client)
        else:  # a tab target's session: auto-attach its page
            was = parent.auto_attach
            parent.auto_attach = dict(params) if auto else None
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
                session = Session(session_id=_session_id(), client=client, kind="tab",
                                  target=target)
                client.sessions[session.session_id] = session
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
            client.attaching[key] = waiters
            first = _waiter(waiters)

            def done(result):
                client.attaching.pop(key, None)
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
        d = self._send_extension("attach", {"tabId": target.tab_id})

        def attached(_):
            if client.closed or self.targets.get(target.target_id) is not target:
                self._fire_and_forget("detach", {"tabId": target.tab_id})
                raise CDPError("Target closed while attaching")
            session = Session(session_id=_session_id(), client=client, kind="page",
                              target=target, parent=parent, holds_tab=True)
            client.sessions[session.session_id] = session
            event: dict[str, Any] = {"method": "Target.attachedToTarget", "params": {
                "sessionId": session.session_id, "targetInfo": target.info(True),
                "waitingForDebugger": False}}
            if parent is not None:
                parent.children.add(session.session_id)
                event["sessionId"] = parent.session_id
            client.send(event)
            return session

        return d.addCallback(attached)

    def _attach_to_target(self, client: CDPClient, params):
        if params.get("flatten") is not True:
            raise CDPError("Only flatten sessions are supported by the Gasoline relay "
                           "(Target.attachToTarget needs flatten: true)", INVALID_PARAMS)
        target, kind = self._visible_target(client, params.get("targetId"))
        if kind == "tab":
            session = Session(session_id=_session_id(), client=client, kind="tab", target=target)
            client.sessions[session.session_id] = session
            client.send({"method": "Target.attachedToTarget", "params": {
                "sessionId": session.session_id, "targetInfo": target.info(True, "tab"),
                "waitingForDebugger": False}})
            return {"sessionId": session.session_id}
        return self._attach_page(client, target, None).addCallback(
            lambda session: {"sessionId": session.session_id})

    def _attach_to_browser_target(self, client: CDPClient, params):
        session = Session(session_id=_session_id(), client=client, kind="browser")
        client.sessions[session.session_id] = session
        client.send({"method": "Target.attachedToTarget", "params": {
            "sessionId": session.session_id,
            "targetInfo": self._get_target_info(client, {})["targetInfo"],
            "waitingForDebugger": False}})
        return {"sessionId": session.session_id}

    def _detach_from_target(self, client: CDPClient, params, parent: Session | None = None):
        session = client.sessions.get(params.get("sessionId"))
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
            others = [s for s in self._sessions_on(session.target, session.chrome_session)
                      if s is not session]
            self._detach_session(client, session, chrome=False)
            if not others:
                self._fire_and_forget("send", {
                    "tabId": session.target.tab_id, "sessionId": session.parent.chrome_session,
                    "method": "Target.detachFromTarget",
                    "params": {"sessionId": session.chrome_session}})
            return {}
        self._detach_session(client, session, chrome=True)
        return {}

    def _create_target(self, client: CDPClient, params):
        url = params.get("url", "about:blank")
        if not isinstance(url, str):
            raise CDPError("Invalid parameters: url: string value expected", INVALID_PARAMS)
        d = self._send_extension("createTab", {"url": url or "about:blank",
                                               "background": params.get("background") is True,
                                               "owner": client.owner_key})

        def created(result: dict):
            target_id, tab_id = result.get("targetId"), result.get("tabId")
            if not isinstance(target_id, str) or not _is_int(tab_id):
                raise CDPError("The extension could not create the tab")
            if client.closed:
                self._fire_and_forget("closeTab", {"tabId": tab_id})
                raise CDPError("Client closed")
            client.created.add(target_id)
            target = self.targets.get(target_id)
            if target is None:
                # Only its owner can see it: announce it to the owner and answer after the
                # owner's auto-attach, as Chrome does.
                target = Target(target_id=target_id, tab_id=tab_id, url=str(result.get("url") or url),
                                title=str(result.get("title") or ""), owner=client.owner_key)
                self.targets[target_id] = target
                pending = self._announce(client, target)
            else:  # the extension's announcement came first (and announced it)
                target.owner = client.owner_key
                in_flight = client.attaching.get((target_id, None))
                pending = _waiter(in_flight) if in_flight is not None else _succeed(None)
            return pending.addBoth(lambda _: {"targetId": target_id})

        return d.addCallback(created)

    def _close_target(self, client: CDPClient, params):
        target, _kind = self._visible_target(client, params.get("targetId"))
        if target.owner != client.owner_key:
            raise CDPError("Gasoline relay: a client may close only the tabs it created "
                           "(Target.createTarget); this is one of the user's tabs")
        d = self._send_extension("closeTab", {"tabId": target.tab_id})
        return d.addCallback(lambda _: {"success": True})

    def _activate_target(self, client: CDPClient, params):
        target, _kind = self._visible_target(client, params.get("targetId"))
        return self._send_extension("activateTab", {"tabId": target.tab_id}).addCallback(
            lambda _: {})

    # ----------------------------------------------------------------- session methods

    def _session_command(self, client: CDPClient, session: Session, method: str, params: dict):
        if session.kind == "browser":
            return self._root_command(client, method, params)
        target = session.target
        assert target is not None  # every session but the browser's has a target
        if session.kind == "tab":
            if method == "Target.setAutoAttach":
                return self._set_auto_attach(client, params, parent=session)
            if method == "Runtime.runIfWaitingForDebugger":
                return {}
            if method == "Target.getTargetInfo":
                return {"targetInfo": target.info(True, "tab")}
            if method == "Target.detachFromTarget":
                return self._detach_from_target(client, params, parent=session)
            raise CDPError(f"'{method}' wasn't found", METHOD_NOT_FOUND)
        domain, _, name = method.partition(".")
        if method == "Target.getTargetInfo" and params.get("targetId") in (None, target.target_id) \
                and session.kind == "page":
            return {"targetInfo": target.info(True)}
        if domain == "Browser" or method in _BROWSER_ONLY_TARGET_METHODS:
            return self._root_command(client, method, params)
        if method == "Target.detachFromTarget":
            return self._detach_from_target(client, params, parent=session)
        if method == "Target.setAutoAttach":
            return self._child_auto_attach(session, params)
        if name == "disable" and domain in GATED_DOMAINS:
            session.enabled.discard(domain)
            if any(domain in s.enabled for s in self._sessions_on(target, session.chrome_session)):
                return {}  # another client still relies on it: Chrome keeps it on
        late_runtime = False
        if name == "enable" and domain in GATED_DOMAINS:
            others = [s for s in self._sessions_on(target, session.chrome_session)
                      if s is not session and domain in s.enabled]
            if domain == "Fetch" and others:
                raise CDPError("Gasoline relay: Fetch interception on this target is held by "
                               "another client (one Fetch client per tab)")
            late_runtime = domain == "Runtime" and bool(others) and domain not in session.enabled
            session.enabled.add(domain)  # before the answer: Chrome's first events precede it
        d = self._forward(session, method, params)
        if name == "enable" and domain in GATED_DOMAINS:
            def enable_failed(failure):
                session.enabled.discard(domain)
                return failure
            d.addErrback(enable_failed)
        if late_runtime:
            def replay(result):
                for ctx in list(target.contexts.get(session.chrome_session, {}).values()):
                    client.send({"method": "Runtime.executionContextCreated",
                                 "params": {"context": ctx}, "sessionId": session.session_id})
                return result
            d.addCallback(replay)
        return d

    def _child_auto_attach(self, session: Session, params: dict):
        """C{Target.setAutoAttach} on a page (or child) session: Chrome's child targets."""
        auto = _auto_attach_flag(params)
        was = session.auto_attach
        assert session.target is not None  # a page or child session
        session.auto_attach = dict(params) if auto else None
        others = [s for s in self._sessions_on(session.target, session.chrome_session)
                  if s is not session and s.auto_attach is not None]
        if not auto and others:
            return {}
        d = self._forward(session, "Target.setAutoAttach", params)
        if auto and was is None:
            def replay(result):
                for child, (announced_on, child_params) in list(session.target.children.items()):
                    if announced_on == session.chrome_session and not any(
                            session.client.sessions.get(c) is not None
                            and session.client.sessions[c].chrome_session == child
                            for c in session.children):
                        self._announce_child(session, child, child_params)
                return result
            d.addCallback(replay)
        return d

    def _forward(self, session: Session, method: str, params: dict) -> Deferred:
        assert session.target is not None  # only a target's session forwards
        request: dict[str, Any] = {"tabId": session.target.tab_id, "method": method,
                                   "params": params}
        if session.chrome_session is not None:
            request["sessionId"] = session.chrome_session
        return self._send_extension("send", request)

    def _detach_session(self, client: CDPClient, session: Session, chrome: bool,
                        notify: bool = True) -> None:
        """Drop C{session} (and the sessions announced on it) for C{client}.

        C{chrome}: undo in Chrome what only this session needed (domains nobody else has on,
        Fetch interception, the tab hold). C{notify}: tell the client (C{detachedFromTarget}).
        """
        if client.sessions.pop(session.session_id, None) is None:
            return
        for child_id in list(session.children):
            child = client.sessions.get(child_id)
            if child is not None:
                self._detach_session(client, child, chrome=chrome, notify=notify)
        if session.parent is not None:
            session.parent.children.discard(session.session_id)
        target = session.target
        if chrome and target is not None and session.kind in ("page", "child") \
                and self.targets.get(target.target_id) is target:
            others = self._sessions_on(target, session.chrome_session)
            for domain in sorted(session.enabled):
                if not any(domain in s.enabled for s in others):
                    request: dict[str, Any] = {"tabId": target.tab_id,
                                               "method": f"{domain}.disable", "params": {}}
                    if session.chrome_session is not None:
                        request["sessionId"] = session.chrome_session
                    self._fire_and_forget("send", request)
        if session.holds_tab and target is not None:
            session.holds_tab = False
            if self.targets.get(target.target_id) is target:
                self._fire_and_forget("detach", {"tabId": target.tab_id})
        if notify and not client.closed and target is not None:
            event: dict[str, Any] = {"method": "Target.detachedFromTarget", "params": {
                "sessionId": session.session_id,
                "targetId": target.tab_target_id if session.kind == "tab" else target.target_id}}
            if session.parent is not None:
                event["sessionId"] = session.parent.session_id
            client.send(event)


#: Browser-level Target methods; sent on a page session they are answered as on the root.
_BROWSER_ONLY_TARGET_METHODS = frozenset({
    "Target.attachToBrowserTarget", "Target.createTarget", "Target.closeTarget",
    "Target.setDiscoverTargets", "Target.getTargets", "Target.activateTarget",
    "Target.getBrowserContexts", "Target.attachToTarget",
})


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _waiter(waiters: list[Deferred]) -> Deferred:
    """A new Deferred, added to C{waiters} (fired by whoever owns the list)."""
    d: Deferred = Deferred()
    waiters.append(d)
    return d


def _succeed(value) -> Deferred:
    d: Deferred = Deferred()
    d.callback(value)
    return d


_ROOT_METHODS: dict[str, Callable[..., Any]] = {
    "Browser.getVersion": Relay._browser_get_version,
    "Browser.setDownloadBehavior": Relay._ok,
    "Browser.close": Relay._browser_close,
    "Browser.getWindowForTarget": Relay._get_window_for_target,
    "Target.getBrowserContexts": Relay._get_browser_contexts,
    "Target.setDiscoverTargets": Relay._set_discover_targets,
    "Target.getTargets": Relay._get_targets,
    "Target.getTargetInfo": Relay._get_target_info,
    "Target.setAutoAttach": Relay._set_auto_attach,
    "Target.attachToTarget": Relay._attach_to_target,
    "Target.attachToBrowserTarget": Relay._attach_to_browser_target,
    "Target.detachFromTarget": Relay._detach_from_target,
    "Target.createTarget": Relay._create_target,
    "Target.closeTarget": Relay._close_target,
    "Target.activateTarget": Relay._activate_target,
}

"""
The CDP hub: many DevTools-protocol clients, one extension, the user's real tabs.

Every CDP client (Playwright, puppeteer-core, chrome-devtools-mcp, ...) talks to the relay as if it
were a browser's browser-level DevTools endpoint; the relay forwards what a tab can answer to the
extension, which runs it with C{chrome.debugger}, and emulates what it cannot (the C{Browser}
domain and the browser-level C{Target} methods). See docs/relay.md for the whole contract.

L{Relay} is the relay's front: the HTTP layer hands it each connection's messages. It keeps the
client table (ids, slots, the idle reaper), parses and checks every client command, routes it,
answers the C{Browser} domain, and dispatches the extension's messages. The rest is in its parts,
built by the relay and given what they need by name:

 - L{gasoline.relay.link}: requests to the extension, their ids, answers and timeouts;
 - L{gasoline.relay.targets}: the Target domain, emulated (the target table, visibility,
   discovery, attaching, created tabs);
 - L{gasoline.relay.sessions}: sessions on a tab (forwarding, event fan-out, shared domain state);
 - L{gasoline.relay.model}: the records they share (clients, sessions, targets) and the errors.

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
 - B{Visibility}: a client sees the user's exposed tabs plus the tabs it created itself; a
   created tab belongs to the client's connection (L{gasoline.relay.targets}).

Shared state on one tab (counted enables, one C{Fetch} holder, replay to late joiners) is
L{gasoline.relay.sessions}'.

The extension link
==================
One extension connection at a time; a new one replaces the old (closed with code 1000). Requests
to the extension fail with a CDP error after C{request_timeout} seconds, and at once when the link
goes away: no client command waits forever. When the link goes, every client session is detached
(C{Target.detachedFromTarget}, C{Target.targetDestroyed}); when a link comes back the extension
announces its tabs again and clients that auto-attach get them re-attached.
"""

from __future__ import annotations

import re
import secrets
from typing import Any, Callable

import attrs
import orjson
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline.common import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
)
from gasoline.core.validate import MAX_JSON_TOKENS, json_tokens
from gasoline.relay.link import DEFAULT_REQUEST_TIMEOUT, RelayLink
from gasoline.relay.model import CDPClient, CDPError, IRelayPeer, RelayRefused, Session, Target, is_int
from gasoline.relay.sessions import TabSessions
from gasoline.relay.targets import BROWSER_ONLY_METHODS, Handler, TargetDomain

log = Logger()

#: Chrome's code for a command on an unknown session id.
SESSION_NOT_FOUND = -32001

#: CDP clients connected at once.
DEFAULT_MAX_CLIENTS = 16
#: Seconds a CDP client may send no command before it is disconnected (close code 4408), so idle
#: connections cannot hold the relay's slots.
DEFAULT_CLIENT_IDLE_TIMEOUT = 300.0
#: A client id in a C{/cdp/<id>} path.
CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


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

    #: The connected CDP clients by id.
    clients: dict[str, CDPClient] = attrs.field(init=False, factory=dict)
    #: The targets the relay knows by id (L{target_domain} keeps it).
    targets: dict[str, Target] = attrs.field(init=False, factory=dict)
    #: What the extension said about the browser in its C{hello}.
    browser: dict[str, str] = attrs.field(init=False, factory=dict)
    #: The extension's connection and the requests sent on it.
    link: RelayLink = attrs.field(init=False, default=attrs.Factory(
        lambda self: RelayLink(self.clock, request_timeout=self.request_timeout,
                               not_connected_why=self.not_connected_why), takes_self=True))
    #: Sessions on tabs: forwarding, event fan-out, shared domain state.
    tab_sessions: TabSessions = attrs.field(init=False, default=attrs.Factory(
        lambda self: TabSessions(clients=self.clients, targets=self.targets, link=self.link),
        takes_self=True))
    #: The Target domain: the target table, visibility, discovery, attaching, created tabs.
    target_domain: TargetDomain = attrs.field(init=False, default=attrs.Factory(
        lambda self: TargetDomain(clients=self.clients, targets=self.targets, link=self.link,
                                  sessions=self.tab_sessions), takes_self=True))
    #: The methods the relay answers itself on the root (and a browser) session, by name.
    root_methods: dict[str, Handler] = attrs.field(init=False, default=attrs.Factory(
        lambda self: {**self._browser_methods(), **self.target_domain.methods()}, takes_self=True))
    _commands: int = attrs.field(init=False, default=0)
    _command_errors: int = attrs.field(init=False, default=0)

    # ------------------------------------------------------------------------- status

    @property
    def extension(self) -> IRelayPeer | None:
        """The extension's connection (C{None}: not connected)."""
        return self.link.peer

    @property
    def extension_connected(self) -> bool:
        return self.link.peer is not None

    @property
    def counts(self) -> dict[str, int]:
        """Running totals read by C{/metrics} (L{gasoline.relay.metrics}): C{commands} from CDP
        clients, C{command_errors} answered with an error, C{events} fanned out to client
        sessions, C{extension_requests} sent to the extension, C{extension_links} it opened."""
        return {"commands": self._commands, "command_errors": self._command_errors,
                "events": self.tab_sessions.events, "extension_requests": self.link.requests,
                "extension_links": self.link.links}

    def status(self) -> dict[str, Any]:
        return {
            "extension_connected": self.extension_connected,
            "clients": len(self.clients),
            "client_ids": sorted(self.clients),
            "targets": len(self.targets),
            "pending": self.link.pending,
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
        return self.target_domain.visible(client)

    # ------------------------------------------------------------------------- extension side

    def extension_attached(self, peer: IRelayPeer) -> None:
        """A new extension connection: it replaces any previous one (closed with code 1000)."""
        old = self.link.peer
        if old is not None:
            self._link_lost("Gasoline extension connection replaced")
            old.close(1000, "Replaced by a new extension connection")
        self.link.open(peer)
        self._notify_extension_clients()

    def extension_lost(self, peer: IRelayPeer) -> None:
        """The extension connection C{peer} closed (a replaced connection is ignored)."""
        if peer is self.link.peer:
            self._link_lost("Gasoline extension disconnected")

    def _link_lost(self, why: str) -> None:
        self.link.drop(why)
        for target in list(self.targets.values()):
            self.target_domain.gone(target)

    def extension_message(self, peer: IRelayPeer, message: Any) -> None:
        """One parsed JSON message from the extension connection C{peer}."""
        if peer is not self.link.peer or not isinstance(message, dict):
            return
        if "id" in message and "method" not in message:
            self.link.answer(message)
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
            self.target_domain.announced(params.get("targets"))
        elif method == "targets":
            self.target_domain.announced(params.get("targets"))
        elif method == "event":
            target = self.target_domain.by_tab(params.get("tabId"))
            if target is not None:
                self.tab_sessions.chrome_event(target, params)
        elif method == "detached":
            self.target_domain.chrome_detached(params)
        elif method == "disconnectClients":
            for client in list(self.clients.values()):
                self._close_client(client, 1000, "Disconnected from the Gasoline popup")

    def _notify_extension_clients(self) -> None:
        if self.link.peer is not None:
            self.link.peer.send({"method": "clients", "params": {
                "count": len(self.clients), "ids": sorted(self.clients)}})
        if self.on_clients_changed is not None:
            self.on_clients_changed(len(self.clients))

    # ------------------------------------------------------------------------- client side

    def new_client_id(self) -> str:
        return "c" + secrets.token_hex(8)

    def client_connected(self, client_id: str | None, peer: IRelayPeer) -> CDPClient:
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
            client.arm_idle(self.clock.callLater(due, self._watch_idle, client))
            return
        client.arm_idle(None)
        log.info("relay: CDP client {id} sent nothing for {s:.0f} s; disconnected",
                 id=client.client_id, s=self.client_idle_timeout)
        self._close_client(client, 4408, f"Idle for {self.client_idle_timeout:.0f} s "
                           "(no command): disconnected; reconnect to continue")

    def client_lost(self, client: CDPClient) -> None:
        """The client's connection closed: release its sessions and close the tabs it created."""
        if self.clients.get(client.client_id) is not client:
            return
        client.close()
        del self.clients[client.client_id]
        for session in [s for s in client.sessions.values() if s.parent is None]:
            self.tab_sessions.detach(client, session, chrome=True, notify=False)
        self.target_domain.close_created(client)
        self._notify_extension_clients()

    def _close_client(self, client: CDPClient, code: int, reason: str) -> None:
        peer = client.peer
        self.client_lost(client)
        peer.close(code, reason)

    def client_text(self, client: CDPClient, text: str | bytes) -> None:
        """One WebSocket text message from a CDP client: parse it, answer malformed input.

        A message with more JSON values than an HTTP body may carry
        (L{gasoline.core.validate.MAX_JSON_TOKENS}) is refused before it is decoded."""
        client.active(self.clock.seconds())
        raw = text.encode() if isinstance(text, str) else text
        if isinstance(raw, (bytes, bytearray, memoryview)) and json_tokens(raw) > MAX_JSON_TOKENS:
            self._commands += 1
            self._command_errors += 1
            client.send({"id": None, "error": {
                "code": INVALID_REQUEST, "message": f"Message has more than {MAX_JSON_TOKENS} "
                "JSON values (the same limit as HTTP request bodies)"}})
            return
        try:
            message = orjson.loads(text)
        except (orjson.JSONDecodeError, TypeError):
            self._commands += 1
            self._command_errors += 1
            client.send({"id": None, "error": {"code": PARSE_ERROR,
                                               "message": "Message must be a valid JSON"}})
            return
        self.client_message(client, message)

    def client_message(self, client: CDPClient, message: Any) -> None:
        """One parsed command from C{client}; the answer is sent to it when ready."""
        if client.closed:
            return
        client.active(self.clock.seconds())
        self._commands += 1
        if not isinstance(message, dict):
            self._command_errors += 1
            client.send({"id": None, "error": {"code": INVALID_REQUEST,
                                               "message": "Message must be an object"}})
            return
        msg_id = message.get("id")
        if not is_int(msg_id):
            self._command_errors += 1
            client.send({"id": None, "error": {"code": INVALID_REQUEST,
                                               "message": "Message must have integer 'id' property"}})
            return
        method = message.get("method")
        session_id = message.get("sessionId")
        params = message.get("params", {})
        reply_session = {"sessionId": session_id} if isinstance(session_id, str) else {}
        if not isinstance(method, str) or not method:
            self._command_errors += 1
            client.send({"id": msg_id, **reply_session, "error": {
                "code": INVALID_REQUEST, "message": "Message must have string 'method' property"}})
            return
        if params is None:
            params = {}
        if not isinstance(params, dict):
            self._command_errors += 1
            client.send({"id": msg_id, **reply_session, "error": {
                "code": INVALID_PARAMS, "message": "Invalid parameters: params must be an object"}})
            return
        client.count_command()

        def answer(result: Any) -> None:
            client.send({"id": msg_id, **reply_session,
                         "result": result if isinstance(result, dict) else {}})

        def failed(failure: Failure) -> None:
            self._command_errors += 1
            if isinstance(failure.value, CDPError):
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
            self._command_errors += 1
            client.send({"id": msg_id, **reply_session, "error": e.to_json()})
            return
        except Exception:  # a defect: one answer to this command, never an error out of the relay
            failed(Failure())
            return
        if not isinstance(d, Deferred):
            answer(d)
            return
        d.addCallbacks(answer, failed)

    # ----------------------------------------------------------------- routing

    def _root_command(self, client: CDPClient, method: str, params: dict) -> Any:
        """A command on the root (or a browser) session: answered by the relay itself."""
        handler = self.root_methods.get(method)
        if handler is None:
            raise CDPError(f"'{method}' wasn't found", METHOD_NOT_FOUND)
        return handler(client, params)

    def _session_command(self, client: CDPClient, session: Session, method: str,
                         params: dict) -> Any:
        """A command on one of C{client}'s sessions: emulated, or forwarded to the tab."""
        if session.kind == "browser":
            return self._root_command(client, method, params)
        target = session.target
        assert target is not None  # every session but the browser's has a target
        if session.kind == "tab":
            return self.target_domain.tab_command(client, session, method, params)
        domain = method.partition(".")[0]
        if method == "Target.getTargetInfo" and params.get("targetId") in (None, target.target_id) \
                and session.kind == "page":
            return {"targetInfo": target.info(True)}
        if domain == "Browser" or method in BROWSER_ONLY_METHODS:
            return self._root_command(client, method, params)
        if method == "Target.detachFromTarget":
            return self.target_domain.detach_from_target(client, params, parent=session)
        if method == "Target.setAutoAttach":
            return self.tab_sessions.child_auto_attach(session, params)
        return self.tab_sessions.command(session, method, params)

    # ----------------------------------------------------------------- the Browser domain

    def _browser_methods(self) -> dict[str, Handler]:
        """The C{Browser} methods the relay answers (C{chrome.debugger} has no such domain)."""
        return {
            "Browser.getVersion": lambda client, params: self.version_info(),
            "Browser.setDownloadBehavior": lambda client, params: {},
            "Browser.close": self._browser_close,
            "Browser.getWindowForTarget": _window_for_target,
        }

    def _browser_close(self, client: CDPClient, params: dict) -> dict:
        """Closes only this client's connection and the tabs it created (after the answer)."""
        self.clock.callLater(0, self._close_client, client, 1000, "Browser.close")
        return {}


def _window_for_target(client: CDPClient, params: dict) -> dict:
    return {"windowId": 1, "bounds": {"left": 0, "top": 0, "width": 1280, "height": 900,
                                      "windowState": "normal"}}

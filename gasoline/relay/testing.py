"""
In-memory doubles for the CDP relay: a recording peer (a CDP client's connection) and a fake
extension link that answers the relay's requests the way the extension's C{lib/cdp.js} does.
Tests and C{bench/relay.py} share them; nothing here opens a socket or reads a clock.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
from zope.interface import implementer

from gasoline.relay.hub import Relay
from gasoline.relay.model import IRelayPeer


@implementer(IRelayPeer)
@attrs.define(eq=False)
class RecordingPeer:
    """A connection that keeps what the relay sent it."""

    sent: list[dict] = attrs.Factory(list)
    closed: tuple[int, str] | None = None

    def send(self, message: dict) -> None:
        self.sent.append(message)

    def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)

    def responses(self) -> dict[int, dict]:
        return {m["id"]: m for m in self.sent if "id" in m}

    def events(self, method: str | None = None) -> list[dict]:
        return [m for m in self.sent if "method" in m and (method is None or m["method"] == method)]

    def take(self) -> list[dict]:
        out, self.sent = self.sent, []
        return out


@attrs.define(eq=False)
class FakeTab:
    tab_id: int
    target_id: str
    url: str = "about:blank"
    title: str = ""
    owner: str | None = None


@implementer(IRelayPeer)
@attrs.define(eq=False)
class FakeExtensionLink:
    """The extension end of the relay's CDP link, answering at once (C{auto}) or on demand.

    C{send_handler(tab_id, session_id, method, params)} returns a command's result (a dict) or
    raises L{FakeCDPFailure}; the default answers C{Runtime.evaluate} of C{"1+1"}-style input
    with the expression echoed back and everything else with C{{}}.
    """

    relay: Relay
    auto: bool = True
    tabs: dict[int, FakeTab] = attrs.Factory(dict)
    #: Holders per tab id (the extension attaches once per tab and counts).
    holders: dict[int, int] = attrs.Factory(dict)
    requests: list[dict] = attrs.Factory(list)
    unanswered: list[dict] = attrs.Factory(list)
    #: Notifications the relay sent (no id): C{pong}, C{clients}.
    notes: list[dict] = attrs.Factory(list)
    closed: tuple[int, str] | None = None
    send_handler: Callable[[int, str | None, str, dict], dict] | None = None
    _next_tab: int = 100

    # -- IRelayPeer
    def send(self, message: dict) -> None:
        if "id" not in message:
            self.notes.append(message)  # notifications (pong, client counts)
            return
        self.requests.append(message)
        if self.auto:
            self.answer(message)
        else:
            self.unanswered.append(message)

    def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)

    # -- driving it
    def connect(self, product: str = "Chrome/142.0.0.0") -> "FakeExtensionLink":
        self.relay.extension_attached(self)
        self.relay.extension_message(self, {"method": "hello", "params": {
            "product": product, "userAgent": f"Mozilla/5.0 {product}", "targets": self.targets()}})
        return self

    def targets(self) -> list[dict]:
        return [{"tabId": t.tab_id, "targetId": t.target_id, "url": t.url, "title": t.title,
                 **({"owner": t.owner} if t.owner else {})} for t in self.tabs.values()]

    def add_tab(self, url: str = "https://example.test/", owner: str | None = None) -> FakeTab:
        self._next_tab += 1
        tab = FakeTab(self._next_tab, f"{self._next_tab:032X}", url, f"tab {self._next_tab}", owner)
        self.tabs[tab.tab_id] = tab
        self.announce()
        return tab

    def remove_tab(self, tab_id: int) -> None:
        self.tabs.pop(tab_id, None)
        self.holders.pop(tab_id, None)
        self.announce()

    def announce(self) -> None:
        self.relay.extension_message(self, {"method": "targets", "params": {"targets": self.targets()}})

    def event(self, tab: FakeTab, method: str, params: dict | None = None,
              session_id: str | None = None) -> None:
        body: dict[str, Any] = {"tabId": tab.tab_id, "method": method, "params": params or {}}
        if session_id is not None:
            body["sessionId"] = session_id
        self.relay.extension_message(self, {"method": "event", "params": body})

    def sent_methods(self) -> list[str]:
        """The CDP methods forwarded to Chrome (C{send} requests), in order."""
        return [r["params"]["method"] for r in self.requests if r["method"] == "send"]

    def answer(self, message: dict, result: Any = None, error: dict | None = None) -> None:
        if message in self.unanswered:
            self.unanswered.remove(message)
        if error is None and result is None:
            try:
                result = self._result(message["method"], message.get("params") or {})
            except FakeCDPFailure as e:
                error = {"code": -32000, "message": str(e)}
        reply: dict[str, Any] = {"id": message["id"]}
        if error is not None:
            reply["error"] = error
        else:
            reply["result"] = result
        self.relay.extension_message(self, reply)

    def _result(self, method: str, params: dict) -> dict:
        if method == "attach":
            self.holders[params["tabId"]] = self.holders.get(params["tabId"], 0) + 1
            return {}
        if method == "detach":
            left = self.holders.get(params["tabId"], 0) - 1
            if left > 0:
                self.holders[params["tabId"]] = left
            else:
                self.holders.pop(params["tabId"], None)
            return {}
        if method == "createTab":
            self._next_tab += 1
            tab = FakeTab(self._next_tab, f"{self._next_tab:032X}", params.get("url", ""), "",
                          params.get("owner"))
            self.tabs[tab.tab_id] = tab
            return {"tabId": tab.tab_id, "targetId": tab.target_id, "url": tab.url}
        if method == "closeTab":
            self.remove_tab(params["tabId"])
            return {}
        if method == "activateTab":
            return {}
        if method == "send":
            if params["tabId"] not in self.tabs:
                raise FakeCDPFailure("No tab with given id")
            if self.send_handler is not None:
                return self.send_handler(params["tabId"], params.get("sessionId"),
                                         params["method"], params.get("params") or {})
            if params["method"] == "Runtime.evaluate":
                expr = (params.get("params") or {}).get("expression")
                return {"result": {"type": "string", "value": f"{params['tabId']}:{expr}"}}
            return {}
        raise FakeCDPFailure(f"unknown request {method}")


class FakeCDPFailure(Exception):
    """Raised by a C{send_handler} to answer with a CDP error."""

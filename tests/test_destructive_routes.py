"""Every destructive route is behind the same caller class and key as C{/clear}
(docs/security.md, "Destructive routes").

The class is enumerated from the route table (L{gasoline.http.routes.destructive}: every
C{DELETE}, and every route marked C{destroys}): each member is either an admin route with
C{/clear}'s policy (no browser origin at all, the extension's included; the key when one is set;
the extension header gate), or an agent route that ends only the caller's own session or
registration (its owner's proof: tests/test_session_binding.py, tests/test_client_proof.py).
Then each admin member is tried through Twisted's real HTTP parser and the daemon's root, with and
without the key, from the extension's origin (pinned or not) and from a web page: only the key
holder destroys anything.
"""

from __future__ import annotations

import json

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE
from gasoline.http.request import GasolineSite
from gasoline.http.routes import ROUTES, Caller, Key, Origins, Route, destructive

KEY = "k" * 32
EXT_ORIGIN = "chrome-extension://abcdefghijklmnop"
#: Agent routes that destroy only what the caller owns, and the tests that prove the ownership.
OWNED = {"/mcp": "test_session_binding", "/session/{session}": "test_session_binding",
         "/session/{session}/destroy": "test_session_binding",
         "/clients/{client}": "test_client_proof"}
CLEAR = next(r for r in ROUTES if r.pattern == "/clear")


def members() -> list[tuple[Route, str]]:
    return destructive()


def admin_members() -> list[tuple[Route, str]]:
    return [(r, m) for r, m in members() if r.caller is not Caller.AGENT]


def test_the_class_is_enumerated_from_the_table_and_holds_the_known_members():
    found = {(r.pattern, m) for r, m in members()}
    assert {("/logs", "DELETE"), ("/clear", "POST"), ("/clear", "DELETE"),
            ("/shutdown", "POST")} <= found
    # POST /logs (capture) is not destructive; DELETE /logs is a route of its own.
    assert ("/logs", "POST") not in found


@pytest.mark.parametrize("route,method", members(), ids=[f"{m} {r.pattern}" for r, m in members()])
def test_every_destructive_route_has_clears_policy_or_acts_on_the_callers_own(route, method):
    if route.caller is Caller.AGENT:
        assert route.pattern in OWNED, f"{method} {route.pattern}: an agent route that destroys " \
                                       "must be bound to its owner and listed in OWNED"
        return
    assert (route.caller, route.origins, route.key, route.browser) == \
        (CLEAR.caller, CLEAR.origins, CLEAR.key, CLEAR.browser) == \
        (Caller.ADMIN, Origins.NONE, Key.ALWAYS, False), f"{method} {route.pattern}"


class World:
    def __init__(self, tmp_path, api_key: str | None = None) -> None:
        self.clock = Clock()
        self.app = build(Config(state_dir=tmp_path / "state", persist=False, api_key=api_key),
                         self.clock)
        self.site = GasolineSite(self.app.resource, reactor=self.clock)
        self.app.store.add(CONSOLE, [{"level": "error", "message": "keep me", "ts": 1}])

    def console(self) -> int:
        return len(self.app.store.buffers[CONSOLE])

    def send(self, method: str, path: str, headers: dict[str, str]) -> int:
        channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
        transport = StringTransport()
        channel.makeConnection(transport)
        body = b"{}" if method == "POST" else b""
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1",
                 "X-Gasoline-Client: gasoline-extension/0.7.9", "Content-Type: application/json",
                 f"Content-Length: {len(body)}"] + [f"{k}: {v}" for k, v in headers.items()]
        channel.dataReceived(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        self.clock.advance(0)
        status = transport.value().split(b" ", 2)[1]
        return int(status)


#: The callers that must not destroy anything: (name, headers, the daemon has a key).
INTRUDERS = [
    ("no key", {}, True),
    ("a wrong key", {"X-Gasoline-Key": "x" * 32}, True),
    ("the extension's origin", {"Origin": EXT_ORIGIN}, False),
    ("the extension's origin, with the key", {"Origin": EXT_ORIGIN, "X-Gasoline-Key": KEY}, True),
    ("a web page", {"Origin": "http://localhost:3000"}, False),
    ("a form post", {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate",
                     "Sec-Fetch-Dest": "document"}, False),
]


@pytest.mark.parametrize("route,method", [(r, m) for r, m in admin_members() if r.pattern != "/shutdown"],
                         ids=[f"{m} {r.pattern}" for r, m in admin_members()
                              if r.pattern != "/shutdown"])
def test_only_the_key_holder_destroys(tmp_path, route, method):
    for name, headers, keyed in INTRUDERS:
        w = World(tmp_path / name.replace(" ", "_"), api_key=KEY if keyed else None)
        code = w.send(method, route.pattern, headers)
        assert code in (401, 403) and w.console() == 1, (name, code)
    w = World(tmp_path / "owner", api_key=KEY)
    assert w.send(method, route.pattern, {"X-Gasoline-Key": KEY}) == 200 and w.console() == 0


@pytest.mark.parametrize("headers,keyed", [(h, k) for _, h, k in INTRUDERS],
                         ids=[n for n, _, _ in INTRUDERS])
def test_shutdown_is_refused_to_every_intruder(tmp_path, headers, keyed):
    w = World(tmp_path, api_key=KEY if keyed else None)
    assert w.send("POST", "/shutdown", headers) in (401, 403)


def test_delete_logs_needs_the_key_like_clear(tmp_path):
    """The reproduction: DELETE /logs used to clear the console with no key."""
    w = World(tmp_path, api_key=KEY)
    assert w.send("DELETE", "/logs", {}) == 401 and w.console() == 1
    assert w.send("DELETE", "/clear", {}) == 401 and w.console() == 1
    assert w.send("DELETE", "/logs", {"Authorization": f"Bearer {KEY}"}) == 200
    assert w.console() == 0


def test_a_pinned_extension_cannot_clear_either(tmp_path):
    """Once an extension is pinned its requests are sealed; a destructive route is not one of
    its routes at all: from its origin, sealed or not, it is refused before any seal is read."""
    from test_extension_pinning import paired
    from test_identity import Daemon

    d = Daemon(tmp_path)
    ext = paired(d)
    d.app.store.add(CONSOLE, [{"level": "error", "message": "keep me", "ts": 1}])
    site = GasolineSite(d.app.resource, reactor=d.clock)
    for method, path in [(m, r.pattern) for r, m in admin_members() if r.pattern != "/shutdown"]:
        headers, data, _ = ext.seal(method, path, b"{}")
        channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
        transport = StringTransport()
        channel.makeConnection(transport)
        head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Origin: {EXT_ORIGIN}",
                f"Content-Length: {len(data)}"] + [f"{k}: {v}" for k, v in headers.items()]
        channel.dataReceived(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        d.clock.advance(0)
        assert transport.value().startswith(b"HTTP/1.1 403 "), (method, path, transport.value()[:80])
        assert len(d.app.store.buffers[CONSOLE]) == 1
    assert json.loads(d.call("GET", "/health")[1])["capture"]["pairing"]["extension_fingerprint"]

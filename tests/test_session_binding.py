"""A session id is not a credential on its own (docs/security.md, "Sessions belong to who opened them").

Every route that takes a session id (C{Mcp-Session-Id} on C{/mcp}, the legacy
C{/mcp/messages/<id>}, C{/session/<id>[/destroy]}, and C{X-Gasoline-Proxy-Session} on a
connector's initialize) is enumerated from the route table and tried, on the real HTTP stack (the
daemon's own C{GasolineSite} on 127.0.0.1:0, treq), against sessions opened by a proven client A
and by an anonymous caller, as the owner and as every other caller (no proof at all, A's id with a
wrong proof, client B's proof): only the owner is served. Nothing the daemon shows (C{/ui/state},
C{/health}, C{/metrics}, its log, the audit) carries a usable session id.
C{test_the_matrix_fails_with_the_binding_disabled} runs the same matrix with the owner check
turned off and requires it to find the hole.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import pytest_twisted
import treq
from twisted.internet import defer, reactor
from twisted.internet.protocol import Protocol
from twisted.logger import globalLogPublisher
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from _proxy_harness import Daemon, fake_server
from gasoline.core.clients.session_ids import session_label
from gasoline.http import client_proof, mcp_http, proxy_api
from gasoline.http.routes import ROUTES
from gasoline.testing import client_headers

A, B = "agent-a", "agent-b"
JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def msg(rid: int, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def call(rid: int, name: str, **arguments: Any) -> dict[str, Any]:
    return msg(rid, "tools/call", name=name, arguments=arguments)


#: The routes of the table that take a session id, and the header route (/mcp). A new one fails
#: test_every_session_route_is_in_the_matrix until it is added to USES below.
SESSION_ROUTES = {r.pattern for r in ROUTES if "{session}" in r.pattern} | {"/mcp"}


class Stack:
    """The daemon on the real reactor, with a connection pool closed at the end."""

    def __init__(self, tmp_path) -> None:
        self.daemon = Daemon(tmp_path, {"fake": fake_server()}).start()
        self.pool = HTTPConnectionPool(reactor, persistent=False)
        self.agent = Agent(reactor, pool=self.pool)
        self.proof = {A: client_headers(self.daemon.app, A), B: client_headers(self.daemon.app, B)}
        self.wd = tmp_path

    async def request(self, method: str, path: str, body: Any = None,
                      headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
        h = {**JSON, **(headers or {})}
        resp = await treq.request(method, self.daemon.url + path, headers=h, pool=self.pool,
                                  data=None if body is None else json.dumps(body).encode())
        raw = await resp.content()
        try:
            value = json.loads(raw) if raw else None
        except ValueError:
            value = raw.decode("utf-8", "replace")
        return resp.code, value, resp.headers

    async def stream_status(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        """Open a streaming GET, read its first chunk (if it is a 200), abort it: status, chunk."""
        h = Headers({k: [v] for k, v in {"Accept": "text/event-stream", **headers}.items()})
        resp = await self.agent.request(b"GET", (self.daemon.url + path).encode(), h)
        first: defer.Deferred[bytes] = defer.Deferred()

        class Reader(Protocol):
            def dataReceived(self, data: bytes) -> None:
                if not first.called:
                    first.callback(data)
                    self.transport.stopProducing()

            def connectionLost(self, reason=None) -> None:
                if not first.called:
                    first.callback(b"")

        resp.deliverBody(Reader())
        return resp.code, await first

    async def stop(self) -> None:
        await self.pool.closeCachedConnections()
        await self.daemon.stop()

    # -- sessions of each kind; each returns (session id, the owner's headers)

    async def proxy_session(self, owner: str | None) -> tuple[str, dict[str, str]]:
        h = dict(self.proof[owner]) if owner else {}
        code, body, _ = await self.request("POST", "/session/init",
                                           {"workingDirectory": str(self.wd)}, h)
        assert code == 200, body
        sid = body["sessionId"]
        code, body, _ = await self.request("POST", "/mcp", INIT, {**h, "Mcp-Session-Id": sid})
        assert code == 200, body
        return sid, h

    async def streamable_session(self) -> tuple[str, dict[str, str]]:
        code, body, headers = await self.request("POST", "/mcp", INIT)
        assert code == 200, body
        return headers.getRawHeaders(b"mcp-session-id")[0].decode(), {}

    async def legacy_session(self, owner: str | None) -> tuple[str, dict[str, str]]:
        h = dict(self.proof[owner]) if owner else {}
        code, chunk = await self.stream_status("/mcp/sse", h)
        assert code == 200
        found = re.search(rb"/mcp/messages/([0-9a-f]+)", chunk)
        assert found, chunk
        # The legacy session ends with its stream: keep one open for the matrix instead.
        return found.group(1).decode(), h


# -- what each route does with a session id; (status, served) -------------------------------

async def use_mcp_initialize(s: Stack, sid: str, h: dict[str, str]):
    code, body, _ = await s.request("POST", "/mcp", INIT, {**h, "Mcp-Session-Id": sid})
    # The session answers (an initialized one with a JSON-RPC error of its own): it was reached.
    return code, code == 200 and ("result" in (body or {}) or "error" in (body or {}))


async def use_mcp_list(s: Stack, sid: str, h: dict[str, str]):
    code, body, _ = await s.request("POST", "/mcp", msg(2, "tools/list"),
                                    {**h, "Mcp-Session-Id": sid})
    return code, code == 200 and bool((body or {}).get("result", {}).get("tools"))


async def use_mcp_observe_events(s: Stack, sid: str, h: dict[str, str]):
    code, body, _ = await s.request("POST", "/mcp", call(3, "observe", what="events"),
                                    {**h, "Mcp-Session-Id": sid})
    return code, code == 200 and "result" in (body or {})


async def use_mcp_add_noise(s: Stack, sid: str, h: dict[str, str]):
    code, body, _ = await s.request(
        "POST", "/mcp", call(4, "configure", what="noise_rule", noise_action="add",
                             pattern="zzz-intruder", field="message"), {**h, "Mcp-Session-Id": sid})
    return code, code == 200 and (body or {}).get("result", {}).get("isError") is False


async def use_mcp_get_stream(s: Stack, sid: str, h: dict[str, str]):
    code, _ = await s.stream_status("/mcp", {**h, "Mcp-Session-Id": sid})
    return code, code == 200


async def use_session_get(s: Stack, sid: str, h: dict[str, str]):
    code, body, _ = await s.request("GET", f"/session/{sid}", None, h)
    return code, code == 200 and (body or {}).get("sessionId") == sid


async def use_connector_bind(s: Stack, sid: str, h: dict[str, str]):
    """A connector's initialize naming the proxy session: it would see (and call) its tools."""
    caller = h or s.proof[B]  # a connector always names its (proven) client id
    code, body, _ = await s.request("POST", "/mcp", INIT, {
        **caller, "X-Gasoline-Connection": "intruder", "X-Gasoline-Proxy-Session": sid})
    return code, code == 200 and "result" in (body or {})


async def use_legacy_post(s: Stack, sid: str, h: dict[str, str]):
    code, _, _ = await s.request("POST", f"/mcp/messages/{sid}", msg(5, "tools/list"), h)
    return code, code == 202


# Destructive: each owner case runs on a fresh session.
async def end_mcp_delete(s: Stack, sid: str, h: dict[str, str]):
    code, _, _ = await s.request("DELETE", "/mcp", None, {**h, "Mcp-Session-Id": sid})
    return code, code == 204


async def end_session_delete(s: Stack, sid: str, h: dict[str, str]):
    code, body, _ = await s.request("DELETE", f"/session/{sid}", None, h)
    return code, code == 200 and (body or {}).get("ended") is True


async def end_session_destroy_post(s: Stack, sid: str, h: dict[str, str]):
    code, body, _ = await s.request("POST", f"/session/{sid}/destroy", None, h)
    return code, code == 200 and (body or {}).get("ended") is True


async def end_session_destroy_delete(s: Stack, sid: str, h: dict[str, str]):
    code, body, _ = await s.request("DELETE", f"/session/{sid}/destroy", None, h)
    return code, code == 200 and (body or {}).get("ended") is True


#: use -> (route pattern, session kinds it applies to, destructive)
USES = {
    use_mcp_initialize: ("/mcp", ("proxy", "streamable"), False),
    use_mcp_list: ("/mcp", ("proxy", "streamable"), False),
    use_mcp_observe_events: ("/mcp", ("proxy", "streamable"), False),
    use_mcp_add_noise: ("/mcp", ("proxy", "streamable"), False),
    use_mcp_get_stream: ("/mcp", ("proxy", "streamable"), False),
    use_session_get: ("/session/{session}", ("proxy",), False),
    use_connector_bind: ("/mcp", ("proxy",), False),
    use_legacy_post: ("/mcp/messages/{session}", ("legacy",), False),
    end_mcp_delete: ("/mcp", ("proxy", "streamable"), True),
    end_session_delete: ("/session/{session}", ("proxy",), True),
    end_session_destroy_post: ("/session/{session}/destroy", ("proxy",), True),
    end_session_destroy_delete: ("/session/{session}/destroy", ("proxy",), True),
}
#: (kind, owner): every kind of session, opened by a proven client and by an anonymous caller
#: (a streamable session opened with a client id is the connector form, which has no id).
KINDS = (("proxy", A), ("proxy", None), ("streamable", None), ("legacy", A), ("legacy", None))


def intruders(s: Stack, owner: str | None) -> dict[str, dict[str, str]]:
    """Every caller but the owner."""
    wrong = {"X-Gasoline-Client": A, "X-Gasoline-Client-Proof": "AAAA" + "x" * 39}
    out = {"B's proof": dict(s.proof[B]), "A's id, a wrong proof": wrong}
    if owner is not None:
        out["no proof"] = {}
    else:
        out["A's proof"] = dict(s.proof[A])
    return out


async def open_kind(s: Stack, kind: str, owner: str | None):
    if kind == "proxy":
        return await s.proxy_session(owner)
    if kind == "streamable":
        return await s.streamable_session()
    return await s.legacy_session(owner)


async def legacy_open(s: Stack, owner: str | None):
    """A legacy session whose stream stays open while it is used: (sid, headers, closer)."""
    h = dict(s.proof[owner]) if owner else {}
    hdrs = Headers({k: [v] for k, v in {"Accept": "text/event-stream", **h}.items()})
    resp = await s.agent.request(b"GET", (s.daemon.url + "/mcp/sse").encode(), hdrs)
    first: defer.Deferred[bytes] = defer.Deferred()
    holder: list = []

    class Reader(Protocol):
        def connectionMade(self) -> None:
            holder.append(self.transport)

        def dataReceived(self, data: bytes) -> None:
            if not first.called:
                first.callback(data)

    resp.deliverBody(Reader())
    chunk = await first
    sid = re.search(rb"/mcp/messages/([0-9a-f]+)", chunk).group(1).decode()
    return sid, h, holder[0].stopProducing


async def matrix(s: Stack) -> list[str]:
    """Run every use x every session kind x every caller; the list of violations."""
    bad: list[str] = []
    for kind, owner in KINDS:
        uses = [u for u, (_, kinds, _) in USES.items() if kind in kinds]
        closer = None
        if kind == "legacy":
            sid, owner_h, closer = await legacy_open(s, owner)
        else:
            sid, owner_h = await open_kind(s, kind, owner)
        if owner is None:
            # A connector always names its (proven) client id: an anonymous proxy session has no
            # connector of its own to bind.
            uses = [u for u in uses if u is not use_connector_bind]
        for use in uses:
            for who, h in intruders(s, owner).items():
                target = sid
                if USES[use][2]:  # destructive: each try on a session of its own
                    target, target_h = await open_kind(s, kind, owner)
                code, served = await use(s, target, h)
                if USES[use][2]:  # ended by its owner (the proxy keeps at most 16 sessions)
                    await end_mcp_delete(s, target, target_h)
                if served or code not in (403, 404):
                    bad.append(f"{use.__name__} on a {kind} session of {owner or 'anonymous'} "
                               f"as {who}: {code} served={served}")
        for use in uses:
            if USES[use][2]:
                continue
            code, served = await use(s, sid, owner_h)
            if not served:
                bad.append(f"{use.__name__}: the owner of a {kind} session of "
                           f"{owner or 'anonymous'} was refused ({code})")
        if closer is not None:
            closer()
        for use in uses:
            if not USES[use][2]:
                continue
            fresh, fresh_h = await open_kind(s, kind, owner)
            code, served = await use(s, fresh, fresh_h)
            if not served:
                bad.append(f"{use.__name__}: the owner of a {kind} session was refused ({code})")
    return bad


def test_every_session_route_is_in_the_matrix():
    covered = {route for route, _, _ in USES.values()}
    assert covered == SESSION_ROUTES, SESSION_ROUTES ^ covered


@pytest_twisted.ensureDeferred
async def test_only_the_owner_of_a_session_uses_it_on_every_session_route(tmp_path):
    s = Stack(tmp_path)
    try:
        bad = await matrix(s)
        assert not bad, "\n".join(bad)
        # The intruders added nothing to A's noise rules (the owner's one is there).
        state = s.daemon.app.registry.get(A)
        assert state is not None and "zzz-intruder" in json.dumps(state.noise_rules, default=str)
    finally:
        await s.stop()


@pytest_twisted.ensureDeferred
async def test_the_matrix_fails_with_the_binding_disabled(tmp_path, monkeypatch):
    def no_check(*_args, **_kwargs) -> None:
        return None

    monkeypatch.setattr(mcp_http, "require_owner", no_check)
    monkeypatch.setattr(proxy_api, "require_owner", no_check)
    s = Stack(tmp_path)
    try:
        bad = await matrix(s)
    finally:
        await s.stop()
    holes = {line.split(":")[0].split(" on a ")[0] for line in bad if " as " in line}
    # Every route checked by require_owner is a hole without it (binding a proxy session to a
    # connector is checked by the proxy manager itself, and stays closed).
    assert holes >= {u.__name__ for u in USES} - {"use_connector_bind"}, sorted(holes)


@pytest_twisted.ensureDeferred
async def test_the_reproduction_the_status_page_id_opens_nothing(tmp_path):
    """The id /ui/state shows is a label: as Mcp-Session-Id or in /session/<id> it names no
    session; the real id with no proof is refused on every route; A's session still lives."""
    s = Stack(tmp_path)
    try:
        sid, owner_h = await s.proxy_session(A)
        code, state, _ = await s.request("GET", "/ui/state", None, {})
        assert code == 200
        [shown] = state["proxy"]["sessions"]
        assert shown["id"] == session_label(sid) and sid not in json.dumps(state)
        for target in (shown["id"], sid):
            for use in (use_mcp_initialize, use_mcp_list, use_mcp_observe_events,
                        use_mcp_add_noise, use_session_get, end_session_delete, end_mcp_delete):
                code, served = await use(s, target, {})
                assert not served and code in (403, 404), (use.__name__, target, code)
        assert sid in s.daemon.app.proxy.sessions
        code, served = await use_mcp_list(s, sid, owner_h)
        assert served
    finally:
        await s.stop()


@pytest_twisted.ensureDeferred
async def test_nothing_the_daemon_shows_holds_a_usable_session_id(tmp_path):
    logged: list[str] = []

    def observer(event: dict[str, Any]) -> None:
        from twisted.logger import formatEvent
        logged.append(formatEvent(event) or "")

    globalLogPublisher.addObserver(observer)
    s = Stack(tmp_path)
    try:
        ids = [(await s.proxy_session(A))[0], (await s.proxy_session(None))[0],
               (await s.streamable_session())[0]]
        legacy, _, close_legacy = await legacy_open(s, A)
        ids.append(legacy)
        for sid in ids[:3]:
            await use_mcp_list(s, sid, s.proof[A] if sid == ids[0] else {})
        await use_mcp_list(s, ids[0], {})  # a refusal is logged too
        shown = []
        for path, h in (("/ui/state", {}), ("/health", {}), ("/metrics", {}),
                        ("/health", s.proof[A])):
            code, body, _ = await s.request("GET", path, None, h)
            assert code == 200, (path, code)
            shown.append(json.dumps(body))
        code, body, _ = await s.request("POST", "/mcp", call(9, "configure", what="health"),
                                        {**s.proof[A], "Mcp-Session-Id": ids[0]})
        assert code == 200 and session_label(ids[0]) in json.dumps(body), body
        shown.append(json.dumps(body))
        shown.append(json.dumps(s.daemon.app.mcp.tools.audit_log(A)))
        close_legacy()
        await s.request("DELETE", f"/session/{ids[0]}", None, s.proof[A])
        shown.extend(logged)
        everything = "\n".join(shown)
        for sid in ids:
            assert sid not in everything and sid[:16] not in everything, sid
        assert any(session_label(ids[0]) in line for line in logged)
    finally:
        globalLogPublisher.removeObserver(observer)
        await s.stop()


def test_session_labels_are_not_ids_and_owner_rules():
    from gasoline.core.clients.session_ids import session_owner

    assert session_label("ab" * 16) != "ab" * 16 and session_label("x").startswith("s-")
    assert session_owner("anon-0123456789ab") is None and session_owner("stateless") is None
    assert session_owner(A) == A
    assert client_proof.require_owner.__module__ == "gasoline.http.client_proof"


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])

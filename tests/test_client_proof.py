"""Who may act as a client id (docs/security.md, "Who may act as a client id").

A caller that names a client id must prove it (C{X-Gasoline-Client-Proof}, an HMAC of the id
under the daemon's C{<state-dir>/client-key}). The class is enumerated: every agent route of the
route table is classified here (a new one fails until it is), and every route and MCP form that
takes a client id from the caller is tried with no id, the right proof, a wrong proof, another
id's proof and no proof; only the proven caller acts as that id. A source scan fails when any
module of the daemon but L{gasoline.http.client_proof} reads C{X-Gasoline-Client} for an agent.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
import treq
from twisted.internet.task import Clock

import gasoline
from gasoline.http.mcp_http import McpHTTP
from gasoline.app import Config, build
from gasoline.common import (
    client_id_for_cwd,
    client_key_path,
    client_proof,
    decode_client_key,
    read_client_key,
)
from gasoline.core.trust.clientkey import ClientKey, ClientKeyError
from gasoline.core.storage.store import CONSOLE
from gasoline.http.routes import ROUTES, Caller
from gasoline.testing import client_headers
from treq.testing import StubTreq

BASE_URL = "http://127.0.0.1:7890"
MCP = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
STATELESS = {"MCP-Protocol-Version": "2026-07-28"}


def init_msg(rid=1):
    return {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}


def tool(rid, name, **arguments):
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}


class World:
    """A daemon (with a proxy servers file, so C{/session/init} is served) on a Clock where
    agent A (the connector's id for C{dir_a}) is registered, connected, subscribed to errors and
    has one unread event in its inbox; agent B (id of C{dir_b}) holds its own proof."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir_a = tmp_path / "repo-a"
        self.dir_b = tmp_path / "repo-b"
        self.dir_a.mkdir()
        self.dir_b.mkdir()
        servers = tmp_path / "servers.json"
        servers.write_text(json.dumps({"mcpServers": {"fs": {"command": "fs-server"}}}))
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.app = build(Config(state_dir=tmp_path / "state", persist=False,
                                proxy_config=servers), self.clock)
        self.stub = StubTreq(self.app.resource)
        self.a = client_id_for_cwd(str(self.dir_a))
        self.b = client_id_for_cwd(str(self.dir_b))
        a = client_headers(self.app, self.a)
        assert self.call("POST", "/clients", {"client_id": self.a, "cwd": str(self.dir_a)},
                         a)[0] == 200
        self.a_conn = {**a, "X-Gasoline-Connection": "a-conn"}
        assert self.call("POST", "/mcp", init_msg(), self.a_conn)[0] == 200
        code, answer = self.call("POST", "/mcp", tool(2, "configure", what="streaming",
                                                      subscribe=["error"]), self.a_conn)
        assert code == 200 and answer["result"]["isError"] is False, answer
        self.app.store.add(CONSOLE, [{"level": "error", "type": "console", "message": "A's secret",
                                      "url": "https://a.example/", "tabId": 1}])
        self.clock.advance(0)
        assert len(self.inbox_a()) == 1

    def inbox_a(self) -> list:
        agent = self.app.streaming.agents.get(self.a)
        return agent.inbox.unread() if agent is not None else []

    def a_session(self):
        return self.app.resource.handlers.api(McpHTTP).connections.get((self.a, "a-conn"))

    def call(self, method, path, body=None, headers=None):
        d = self.stub.request(method, BASE_URL + path, headers={**MCP, **(headers or {})},
                              data=None if body is None else json.dumps(body).encode())
        self.stub.flush()
        response = d.result
        content = self.stub.content(response)
        self.stub.flush()
        text = content.result
        return response.code, (json.loads(text) if text else None)

    def open(self, path, headers):
        """Open a streaming GET; its status and the chunks so far."""
        out: list = []
        self.stub.request("GET", BASE_URL + path, headers={
            "Accept": "text/event-stream", **headers}).addCallback(out.append)
        self.stub.flush()
        chunks: list = []
        if out[0].code == 200:
            treq.collect(out[0], chunks.append)
            self.stub.flush()
        return out[0].code, chunks


def _read_events(world: World, code: int, answer) -> bool:
    """Did an C{observe {what:"events"}} answer hand out A's event?"""
    return code == 200 and "A's secret" in json.dumps(answer)


# Each form: (world, variant headers) -> (status, acted as A). "Acted as A" is what the form
# would let a caller do to A: read A's inbox, take A's stream, end A's session, change A's
# registration (its file sandbox), unregister A, open a proxy session as A.

def form_connector_initialize_then_observe(w: World, h: dict):
    conn = {**h, "X-Gasoline-Connection": "b-conn"}
    code, _ = w.call("POST", "/mcp", init_msg(), conn)
    sid = None
    if code == 200 and "X-Gasoline-Client" not in h:
        sid = w.app.resource.handlers.api(McpHTTP).server.sessions  # plain form: find its session id
        sid = next(s.session_id for s in sid.values() if s.transport == "streamable")
    extra = {"Mcp-Session-Id": sid} if sid else {}
    code2, answer = w.call("POST", "/mcp", tool(2, "observe", what="events"), {**conn, **extra})
    return code, _read_events(w, code2, answer)


def form_connector_on_a_connection(w: World, h: dict):
    """A's own connection id guessed (or read from a process list): X-Gasoline-Connection a-conn."""
    code, answer = w.call("POST", "/mcp", tool(3, "observe", what="events"),
                          {**h, "X-Gasoline-Connection": "a-conn"})
    return code, _read_events(w, code, answer)


def form_connector_stateless(w: World, h: dict):
    code, answer = w.call("POST", "/mcp", tool(4, "observe", what="events"),
                          {**h, **STATELESS, "X-Gasoline-Connection": "b-conn"})
    return code, _read_events(w, code, answer)


def form_plain_initialize_with_header(w: World, h: dict):
    """Plain /mcp (no X-Gasoline-Connection) that names a client id: its session is A's."""
    before = set(w.app.mcp.sessions)
    code, _ = w.call("POST", "/mcp", init_msg(), h)
    new = [s for sid, s in w.app.mcp.sessions.items() if sid not in before]
    return code, any(s.client_id == w.a for s in new)


def form_get_stream(w: World, h: dict):
    code, _ = w.open("/mcp", {**h, "X-Gasoline-Connection": "a-conn"})
    return code, code == 200


def form_delete_session(w: World, h: dict):
    session = w.a_session()
    code, _ = w.call("DELETE", "/mcp", None, {**h, "X-Gasoline-Connection": "a-conn"})
    return code, session.closed


def form_legacy_sse(w: World, h: dict):
    before = set(w.app.mcp.sessions)
    code, _ = w.open("/mcp/sse", h)
    new = [s for sid, s in w.app.mcp.sessions.items() if sid not in before]
    return code, any(s.client_id == w.a for s in new)


def form_register_with_client_id(w: World, h: dict):
    code, _ = w.call("POST", "/clients", {"client_id": w.a, "cwd": str(w.dir_b)}, h)
    return code, w.app.registry.get(w.a).cwd == os.path.realpath(w.dir_b)


def form_register_with_cwd(w: World, h: dict):
    code, body = w.call("POST", "/clients", {"cwd": str(w.dir_a)}, h)
    return code, code == 200 and body["client_id"] == w.a


def form_register_with_header_only(w: World, h: dict):
    code, body = w.call("POST", "/clients", {}, h)
    return code, code == 200 and body["client_id"] == w.a


def form_unregister(w: World, h: dict):
    w.app.mcp.close_session(w.a_session())  # A has no connection left ...
    w.app.registry.register(w.a)  # ... but is registered (live) until it unregisters
    assert w.app.registry.get(w.a).live
    code, _ = w.call("DELETE", f"/clients/{w.a}", None, h)
    return code, not w.app.registry.get(w.a).live


def form_proxy_session_init(w: World, h: dict):
    code, body = w.call("POST", "/session/init", {"workingDirectory": str(w.dir_a)}, h)
    return code, code == 200 and w.app.proxy.sessions[body["sessionId"]].client_id == w.a


def form_cursor_read_logs(w: World, h: dict):
    code, body = w.call("GET", "/logs", None, h)
    return code, w.app.registry.get(w.a).cursors.get("console", 0) > 0 \
        and "A's secret" in json.dumps(body)


#: form -> (its route and method, does a caller without X-Gasoline-Client still get served?)
FORMS = {
    form_connector_initialize_then_observe: (("/mcp", "POST"), True),
    form_connector_on_a_connection: (("/mcp", "POST"), True),  # plain: the "stateless" client
    form_connector_stateless: (("/mcp", "POST"), True),
    form_plain_initialize_with_header: (("/mcp", "POST"), True),
    form_get_stream: (("/mcp", "GET"), False),
    form_delete_session: (("/mcp", "DELETE"), False),
    form_legacy_sse: (("/mcp/sse", "GET"), True),
    form_register_with_client_id: (("/clients", "POST"), False),  # the body names A
    form_register_with_cwd: (("/clients", "POST"), False),  # the body's cwd names A
    form_register_with_header_only: (("/clients", "POST"), True),
    form_unregister: (("/clients/{client}", "DELETE"), False),  # the path names A
    form_proxy_session_init: (("/session/init", "POST"), True),
    form_cursor_read_logs: (("/logs", "GET"), False),  # no id: no cursor to read through (400)
}

#: Every agent route of the table, with how it comes to a client id. "forms": the caller picks
#: the id (X-Gasoline-Client, the body, the path), tried in FORMS; anything else says why the
#: caller cannot pick another agent's id there.
AGENT_ROUTES = {
    ("/mcp", "POST"): "forms",
    ("/mcp", "GET"): "forms",
    ("/mcp", "DELETE"): "forms",
    ("/mcp/sse", "GET"): "forms",
    ("/mcp/messages/{session}", "POST"): "bearer: the random session id only the SSE stream that "
                                         "opened the session was told",
    ("/clients", "POST"): "forms",
    ("/clients", "GET"): "read-only: the list of ids and their connection counts (the key guards "
                         "it, test_health); acts as no id",
    ("/clients/{client}", "GET"): "read-only: one id's entry of that same list; acts as no id",
    ("/clients/{client}", "DELETE"): "forms",
    ("/events", "GET"): "its own proof, given only to the subscribing agent "
                        "(test_streaming::test_events_route_opens_only_with_the_token_...)",
    ("/session/init", "POST"): "forms",
    ("/logs", "GET"): "forms",
    ("/session/{session}", "GET"): "bearer: the random proxy session id",
    ("/session/{session}", "DELETE"): "bearer: the random proxy session id",
    ("/session/{session}/destroy", "POST"): "bearer: the random proxy session id",
    ("/session/{session}/destroy", "DELETE"): "bearer: the random proxy session id",
}


def test_every_agent_route_of_the_table_is_classified_and_every_form_is_tried():
    table = {(r.pattern, m) for r in ROUTES if r.caller is Caller.AGENT for m in r.methods}
    assert table == set(AGENT_ROUTES), "classify the new agent route here (and try its forms)"
    tried = {route for route, _ in FORMS.values()}
    assert tried == {k for k, v in AGENT_ROUTES.items() if v == "forms"}


def variants(w: World) -> dict[str, dict]:
    right = client_headers(w.app, w.a)
    return {
        "no id": {},
        "right proof": right,
        "wrong proof": {"X-Gasoline-Client": w.a, "X-Gasoline-Client-Proof": "A" * 43},
        "another id's proof": {"X-Gasoline-Client": w.a, "X-Gasoline-Client-Proof":
                               client_headers(w.app, w.b)["X-Gasoline-Client-Proof"]},
        "no proof": {"X-Gasoline-Client": w.a},
    }


@pytest.mark.parametrize("variant", ["no id", "right proof", "wrong proof", "another id's proof",
                                     "no proof"])
@pytest.mark.parametrize("form", list(FORMS), ids=lambda f: f.__name__[5:])
def test_only_the_proven_caller_acts_as_the_client_id(tmp_path, form, variant):
    w = World(tmp_path)
    code, acted = form(w, variants(w)[variant])
    _, served_without_id = FORMS[form]
    if variant == "right proof":
        assert code in (200, 202, 204) and acted, (code, acted)
        return
    assert not acted, f"{variant}: acted as A (HTTP {code})"
    if variant == "no id":
        # Plain callers keep working, as a client of their own; where the id is in the body or
        # the path (or needs a connection's session), they are refused or not found.
        assert (code in (200, 202)) if served_without_id else code in (400, 403, 404), code
    else:
        assert code == 403, code
    if form in (form_connector_initialize_then_observe, form_connector_on_a_connection,
                form_connector_stateless):
        assert len(w.inbox_a()) == 1  # A's event is still A's, unread


def test_agent_b_cannot_read_acknowledge_or_unregister_agent_a(tmp_path):
    """B, with its own proof, names A: refused everywhere; as itself it sees nothing of A's."""
    w = World(tmp_path)
    b_as_a = {"X-Gasoline-Client": w.a,
              "X-Gasoline-Client-Proof": client_headers(w.app, w.b)["X-Gasoline-Client-Proof"]}
    for _ in range(2):  # a read, then the read that would acknowledge it
        code, answer = w.call("POST", "/mcp", tool(5, "observe", what="events"),
                              {**b_as_a, **STATELESS})
        assert code == 403 and answer["error"]["data"]["error"] == "client_proof"
        assert "gasoline client-proof" in answer["error"]["data"]["retry"]
    assert w.call("DELETE", f"/clients/{w.a}", None, b_as_a)[0] == 403
    assert w.call("DELETE", f"/clients/{w.a}", None, client_headers(w.app, w.b))[0] == 403
    b = {**client_headers(w.app, w.b), "X-Gasoline-Connection": "b-conn"}
    assert w.call("POST", "/mcp", init_msg(), b)[0] == 200
    code, answer = w.call("POST", "/mcp", tool(6, "observe", what="events"), b)
    assert code == 200 and "A's secret" not in json.dumps(answer)
    assert w.app.registry.get(w.a).live and len(w.inbox_a()) == 1
    # A itself still reads its event.
    code, answer = w.call("POST", "/mcp", tool(7, "observe", what="events"), w.a_conn)
    assert code == 200 and "A's secret" in json.dumps(answer)


def test_a_caller_without_an_id_gets_one_no_one_can_name_and_reserved_ids_are_refused(tmp_path):
    w = World(tmp_path)
    code, _ = w.call("POST", "/mcp", init_msg(), {})
    assert code == 200
    anonymous = [s for s in w.app.mcp.sessions.values() if s.transport == "streamable"]
    assert len(anonymous) == 1 and anonymous[0].client_id not in (w.a, w.b)
    # A stateless request without an id is the shared "stateless" client, which no header names;
    # nor does any agent name itself as the extension, even with a valid proof.
    assert anonymous[0].client_id.startswith("anon-")
    for reserved in ("stateless", "gasoline-extension", "gasoline-extension-offscreen",
                     anonymous[0].client_id):
        code, answer = w.call("POST", "/mcp", init_msg(), client_headers(w.app, reserved))
        assert code == 400 and "reserves" in answer["error"]["message"], reserved
    code, _ = w.call("POST", "/mcp", init_msg(), {"X-Gasoline-Client": "gasoline-extension/0.7.9"})
    assert code == 400
    # A proxy session opened without a proof is anonymous too.
    code, body = w.call("POST", "/session/init", {"workingDirectory": str(w.dir_a)}, {})
    assert code == 200 and w.app.proxy.sessions[body["sessionId"]].client_id.startswith("anon-")
    # The random ids handed out avoid ids with state on disk as well as live ones.
    registry = w.app.registry
    assert registry.dir is not None
    registry.dir.mkdir(parents=True, exist_ok=True)
    import gasoline.core.clients.registry as clients_module

    ids = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    (registry.dir / "aaaaaaaaaaaa.json").write_text("{}")
    real = clients_module.new_client_id
    clients_module.new_client_id = lambda: next(ids)
    try:
        assert registry.new_client_id() == "bbbbbbbbbbbb"
    finally:
        clients_module.new_client_id = real


def test_the_client_key_is_made_once_private_and_kept_across_restarts(tmp_path):
    state = tmp_path / "state"
    first = ClientKey.from_state_dir(state)
    path = client_key_path(state)
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in state.iterdir()] == ["client-key"]  # no temporary file left
    again = ClientKey.from_state_dir(state)
    assert again.proof("x") == first.proof("x") == client_proof(read_client_key(state), "x")
    assert again.verify("x", first.proof("x")) and not again.verify("y", first.proof("x"))
    assert not again.verify("x", None) and not again.verify("x", b"") and not again.verify(
        "x", first.proof("x")[:-1])
    assert "client-key" not in repr(decode_client_key(path.read_bytes()))
    # Another state dir, another key.
    assert ClientKey.from_state_dir(tmp_path / "other").proof("x") != first.proof("x")
    path.write_text("not a key\n")
    with pytest.raises(ClientKeyError, match="remove it"):
        ClientKey.from_state_dir(state)
    path.unlink()
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(ClientKeyError, match="symbolic link"):
        ClientKey.from_state_dir(state)


def test_the_daemon_keeps_its_key_across_a_rebuild_and_says_where_it_is(tmp_path):
    clock = Clock()
    one = build(Config(state_dir=tmp_path, persist=False), clock)
    two = build(Config(state_dir=tmp_path, persist=False), clock)
    assert client_headers(one, "x") == client_headers(two, "x") == client_headers(tmp_path, "x")
    code, health = World.call(_Bare(two), "GET", "/health")
    assert code == 200 and health["state_dir"] == str(tmp_path)


class _Bare:
    def __init__(self, app) -> None:
        self.stub = StubTreq(app.resource)


# -- the one reader of X-Gasoline-Client --------------------------------------------------------

#: (module, function) allowed to read X-Gasoline-Client, and why.
ALLOWED_READERS = {
    ("gasoline/http/client_proof.py", "claimed_client"): "the one reader for agent ids",
    ("gasoline/http/ingest.py", "extension_only.gated"): "the extension's header gate on its own "
                                                           "routes (not an agent id)",
    ("gasoline/http/ingest.py", "IngestAPI.post_screenshot"): "the extension's screenshot rate-limit "
                                                          "key, on an extension route",
}


def header_reads(source: str, module: str) -> set[tuple[str, str]]:
    """(module, enclosing function) of every call that passes the header name
    C{x-gasoline-client} (any case, bytes or str) to a request-header accessor."""
    tree = ast.parse(source)
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, scope + [child.name])
                continue
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                    and child.func.attr in ("getHeader", "getRawHeaders", "hasHeader", "get") \
                    and child.args and isinstance(child.args[0], ast.Constant):
                value = child.args[0].value
                if isinstance(value, bytes):
                    value = value.decode("latin-1")
                if isinstance(value, str) and value.lower() == "x-gasoline-client":
                    found.add((module, ".".join(scope)))
            visit(child, scope)

    visit(tree, [])
    return found


def test_no_module_but_client_proof_reads_the_client_header_for_an_agent():
    root = Path(gasoline.__file__).parent
    reads: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root.parent).as_posix()
        reads |= header_reads(path.read_text(), module)
    assert reads - set(ALLOWED_READERS) == set(), "read the agent id with claimed_client()"
    assert ("gasoline/http/client_proof.py", "claimed_client") in reads
    # The scan finds what it is meant to find.
    probe = "def f(request):\n    return request.getHeader(b'X-Gasoline-Client')\n"
    assert header_reads(probe, "m.py") == {("m.py", "f")}


# -- gasoline client-proof -----------------------------------------------------------------------


def test_the_client_proof_command_prints_the_headers_the_daemon_accepts(tmp_path, capsys):
    from gasoline.cli import main

    state = tmp_path / "state"
    assert main(["client-proof", "my-app", "--state-dir", str(state)]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and "first start" in err  # it never makes a key itself
    assert not state.exists()
    clock = Clock()
    app = build(Config(state_dir=state, persist=False), clock)
    assert main(["client-proof", "my-app", "--state-dir", str(state)]) == 0
    out = capsys.readouterr().out
    headers = dict(line.split(": ", 1) for line in out.splitlines())
    assert headers == client_headers(app, "my-app")
    assert main(["client-proof", "my-app", "--state-dir", str(state), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == headers
    # What it printed is what the daemon serves as my-app.
    w = _Bare(app)
    code, _ = World.call(w, "POST", "/mcp", init_msg(), headers)
    assert code == 200 and any(s.client_id == "my-app" for s in app.mcp.sessions.values())
    for bad in ("../x", "stateless", "gasoline-extension", "anon-123", ""):
        assert main(["client-proof", bad, "--state-dir", str(state)]) == 2, bad
        assert "client id" in capsys.readouterr().err
    (state / "client-key").write_text("short\n")
    assert main(["client-proof", "my-app", "--state-dir", str(state)]) == 1
    assert "cannot read" in capsys.readouterr().err

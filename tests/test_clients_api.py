"""The /clients routes, through the whole HTTP surface built by app.build (StubTreq, Clock)."""

from __future__ import annotations

import json

from treq.testing import StubTreq
from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.core.clients.registry import client_id_for_cwd
from gasoline.testing import client_headers


def make(tmp_path, **config):
    clock = Clock()
    app = build(Config(state_dir=tmp_path, **config), clock)
    _APP[:] = [app]
    return clock, app, StubTreq(app.resource)


_APP: list = []


def _acting_as(method, path, body):
    """The client id a request acts as (it proves it, as the connector does)."""
    if method == "DELETE" and path.startswith("/clients/"):
        return path.rsplit("/", 1)[1]
    if method == "POST" and isinstance(body, dict):
        if isinstance(body.get("client_id"), str):
            return body["client_id"]
        if isinstance(body.get("cwd"), str):
            return client_id_for_cwd(body["cwd"])
    return None


def call(treq, method, path, body=None, raw=None, prove=True):
    kwargs = {}
    if body is not None:
        kwargs["data"] = json.dumps(body).encode()
    if raw is not None:
        kwargs["data"] = raw
    headers = {"Content-Type": "application/json"}
    acting = _acting_as(method, path, body) if prove else None
    if acting:
        headers.update(client_headers(_APP[0], acting))
    d = treq.request(method, "http://127.0.0.1:7890" + path, headers=headers, **kwargs)
    treq.flush()
    response = d.result if not hasattr(d.result, "raiseException") else d.result.raiseException()
    content = treq.content(response)
    treq.flush()
    text = content.result
    return response.code, (json.loads(text) if text else None)


def test_build_wires_registry_and_expiry_service(tmp_path):
    _, app, _ = make(tmp_path, client_ttl=30, max_clients=4)
    assert app.registry.ttl == 30 and app.registry.max_clients == 4
    assert app.registry.expiry_service in list(app.services)


def test_post_clients_registers_with_explicit_id(tmp_path):
    clock, app, treq = make(tmp_path)
    clock.advance(12)
    code, body = call(treq, "POST", "/clients", {"client_id": "project-a"})
    assert code == 200
    assert body == {"client_id": "project-a", "connected_at": 12.0, "inherited": False}
    assert app.registry.get("project-a").live


def test_post_clients_derives_id_from_cwd(tmp_path):
    _, _, treq = make(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    code, body = call(treq, "POST", "/clients", {"cwd": str(repo)})
    assert code == 200 and body["client_id"] == client_id_for_cwd(str(repo))


def test_post_clients_with_empty_body_gets_a_random_id(tmp_path):
    _, app, treq = make(tmp_path)
    code, body = call(treq, "POST", "/clients", raw=b"")
    assert code == 200 and len(body["client_id"]) == 12
    assert app.registry.get(body["client_id"]) is not None


def test_reregistering_reports_inherited_state(tmp_path):
    _, app, treq = make(tmp_path)
    call(treq, "POST", "/clients", {"client_id": "a"})
    app.registry.get("a").cursors["console"] = 9
    assert call(treq, "DELETE", "/clients/a")[0] == 200
    code, body = call(treq, "POST", "/clients", {"client_id": "a"})
    assert code == 200 and body["inherited"] is True
    assert app.registry.get("a").cursors == {"console": 9}


def test_post_clients_past_max_answers_429_too_many_clients(tmp_path):
    _, app, treq = make(tmp_path, max_clients=2)
    call(treq, "POST", "/clients", {"client_id": "a"})
    call(treq, "POST", "/clients", {"client_id": "b"})
    app.registry.connect("a")  # both hold live connections (a registration alone gives way)
    app.registry.connect("b")
    code, body = call(treq, "POST", "/clients", {"client_id": "c"})
    assert code == 429
    assert body["error"] == "too_many_clients" and "retry" in body


def test_post_clients_bad_input_answers_400(tmp_path):
    _, app, treq = make(tmp_path)
    assert call(treq, "POST", "/clients", raw=b"{nope")[1]["error"] == "bad_json"
    assert call(treq, "POST", "/clients", raw=b"[1]")[0] == 400
    assert call(treq, "POST", "/clients", {"client_id": 5})[1]["error"] == "invalid_param"
    assert call(treq, "POST", "/clients", {"client_id": "../../etc/passwd"})[0] == 400
    assert call(treq, "POST", "/clients", raw=b"x" * (70 * 1024))[1]["error"] == "body_too_large"
    assert app.registry.list() == []


def test_get_clients_returns_the_summary(tmp_path):
    _, _, treq = make(tmp_path)
    call(treq, "POST", "/clients", {"client_id": "a"})
    call(treq, "POST", "/clients", {"client_id": "b"})
    call(treq, "DELETE", "/clients/b")
    code, body = call(treq, "GET", "/clients")
    assert code == 200
    assert body["active"] == 1 and body["total"] == 2
    assert {c["id"]: c["connected"] for c in body["list"]} == {"a": True, "b": False}


def test_get_one_client_or_404(tmp_path):
    _, _, treq = make(tmp_path)
    call(treq, "POST", "/clients", {"client_id": "a"})
    assert call(treq, "GET", "/clients/a")[1]["id"] == "a"
    assert call(treq, "GET", "/clients/zzz")[0] == 404


def test_delete_unknown_client_answers_404(tmp_path):
    _, _, treq = make(tmp_path)
    code, body = call(treq, "DELETE", "/clients/ghost")
    assert code == 404 and body["error"] == "unknown_client"


def test_delete_keeps_state_for_the_ttl_then_expiry_drops_it(tmp_path):
    clock, app, treq = make(tmp_path, client_ttl=10)
    app.services.startService()
    call(treq, "POST", "/clients", {"client_id": "a"})
    code, body = call(treq, "DELETE", "/clients/a")
    assert code == 200 and body == {"client_id": "a", "gone": True, "connections": 0, "ttl": 10.0}
    clock.pump([1.0] * 9)
    assert app.registry.get("a") is not None
    clock.pump([1.0] * 2)
    assert app.registry.get("a") is None
    assert call(treq, "GET", "/clients")[1]["total"] == 0
    app.services.stopService()


def test_delete_while_a_session_is_connected_reports_not_gone(tmp_path):
    _, app, treq = make(tmp_path)
    app.registry.connect("a")
    code, body = call(treq, "DELETE", "/clients/a")
    assert code == 200 and body["gone"] is False and body["connections"] == 1

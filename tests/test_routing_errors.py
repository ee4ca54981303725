"""Every Klein app of the daemon answers a path it does not serve (404) and a method a route does
not take (405) the same way: the one handler of L{gasoline.http.json.json_app}."""

from __future__ import annotations

import importlib
import json
import pkgutil

import pytest
from klein import Klein
from treq.testing import StubTreq

import gasoline.http
from gasoline.http.json import json_app


def _klein_apis() -> list[type]:
    """Every class in gasoline.http that carries a Klein app (found, not listed)."""
    found = []
    for info in pkgutil.iter_modules(gasoline.http.__path__):
        module = importlib.import_module(f"gasoline.http.{info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and value.__module__ == module.__name__
                    and isinstance(vars(value).get("app"), Klein)):
                found.append(value)
    return sorted(found, key=lambda cls: cls.__qualname__)


APIS = _klein_apis()


def test_the_daemon_has_its_klein_apis():
    names = {cls.__name__ for cls in APIS}
    assert {"HealthAPI", "IngestAPI", "PairingAPI", "RelayDiscoveryAPI", "StatusPage",
            "ProxyAPI", "ClientsAPI"} <= names, names


def _stub(cls: type) -> StubTreq:
    # Routing fails before any route runs, so an instance without collaborators answers it.
    return StubTreq(object.__new__(cls).app.resource())


def _answer(treq: StubTreq, method: str, url: str) -> tuple[int, dict, list[bytes]]:
    d = treq.request(method, url)
    treq.flush()
    out: list = []
    d.addCallback(lambda r: treq.content(r).addCallback(lambda b: out.append((r, b))))
    treq.flush()
    assert out, f"no answer to {method} {url}"
    response, body = out[0]
    assert response.headers.getRawHeaders(b"content-type") == [b"application/json"]
    return response.code, json.loads(body), response.headers.getRawHeaders(b"allow") or []


@pytest.mark.parametrize("cls", APIS, ids=lambda cls: cls.__name__)
def test_an_unknown_path_is_the_same_404_in_every_app(cls):
    status, body, _ = _answer(_stub(cls), "GET", "http://127.0.0.1/no/such/route")
    assert (status, body) == (404, {"error": "not found", "path": "/no/such/route"})


@pytest.mark.parametrize("cls", APIS, ids=lambda cls: cls.__name__)
def test_a_method_a_route_does_not_take_is_the_same_405_in_every_app(cls):
    rules = list(cls.app.url_map.iter_rules())
    assert rules, cls
    rule = min(rules, key=lambda r: (len(r.arguments), r.rule))
    _, path = rule.build({name: "x" for name in rule.arguments})
    taken = {m for r in rules if r.rule == rule.rule for m in (r.methods or ())}
    method = next(m for m in ("PATCH", "PUT", "DELETE", "POST", "GET") if m not in taken)
    status, body, allow = _answer(_stub(cls), method, "http://127.0.0.1" + path)
    assert status == 405
    assert body["error"] == f"method {method} not allowed here"
    assert set(body["allowed"]) >= taken and method not in body["allowed"]
    assert allow == [", ".join(body["allowed"]).encode()]


def test_an_apps_own_error_handlers_come_after_the_routing_ones():
    app = json_app()

    @app.handle_errors(Exception)
    def everything(request, failure):  # pragma: no cover - must not be reached for routing
        raise AssertionError("the catch-all answered a routing error")

    # Unbound (not a class attribute): Klein passes no instance to the handlers.
    status, body, _ = _answer(StubTreq(app.resource()), "GET", "http://127.0.0.1/nothing")
    assert (status, body) == (404, {"error": "not found", "path": "/nothing"})

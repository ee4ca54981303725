"""Every API of the daemon answers a path it does not serve (404) and a method a route does not
take (405) the same way: the root's one answer (L{gasoline.http.json.not_found},
L{gasoline.http.json.method_not_allowed}); no API carries routing or error handlers of its own."""

from __future__ import annotations

import importlib
import json
import pkgutil

import pytest
from _stub_daemon import StubDaemon
from klein import Klein

import gasoline.http
from gasoline.http.routes import ROUTES
from gasoline.testing import stub_request


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


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    return StubDaemon(tmp_path_factory.mktemp("routing"))


def _answer(d: StubDaemon, method: str, path: str) -> tuple[int, dict, list[bytes]]:
    r, raw = stub_request(d.treq, method, "http://127.0.0.1:7890" + path, clock=d.clock)
    assert r.headers.getRawHeaders(b"content-type") == [b"application/json"], raw
    return r.code, json.loads(raw), r.headers.getRawHeaders(b"allow") or []


def _first_route(d: StubDaemon, cls: type):
    routes = sorted((route for (route, _), h in d.app.resource.handlers.handlers.items()
                     if isinstance(h.api, cls)), key=lambda r: (r.pattern.count("{"), r.pattern))
    assert routes, f"{cls.__name__} serves no route"
    return routes[0]


def test_every_klein_api_of_the_package_is_served_by_the_root(daemon):
    assert {"HealthAPI", "IngestAPI", "PairingAPI", "RelayDiscoveryAPI", "StatusPage",
            "ProxyAPI", "ClientsAPI", "McpHTTP", "EventsAPI", "CursorReads", "MetricsAPI",
            "RelaySockets"} <= {cls.__name__ for cls in APIS}
    served = {type(api) for api in daemon.app.resource.handlers.apis}
    assert set(APIS) <= served


@pytest.mark.parametrize("cls", APIS, ids=lambda cls: cls.__name__)
def test_an_unknown_path_is_the_same_404_under_every_api(daemon, cls):
    route = _first_route(daemon, cls)
    path = route.pattern.replace("{*}", "a/b").replace("{", "").replace("}", "")
    path = path.rstrip("/") + "/no!such-route"  # "!": canonical, but no id matches it
    status, body, _ = _answer(daemon, "GET", path)
    assert (status, body) == (404, {"error": "not found", "path": path})


@pytest.mark.parametrize("cls", APIS, ids=lambda cls: cls.__name__)
def test_a_method_a_route_does_not_take_is_the_same_405_under_every_api(daemon, cls):
    route = _first_route(daemon, cls)
    path = route.pattern.replace("{*}", "a/b").replace("{", "").replace("}", "")
    taken = {m for r in ROUTES if r.pattern == route.pattern for m in r.methods}
    method = next(m for m in ("PATCH", "PUT", "DELETE", "POST", "GET") if m not in taken)
    status, body, allow = _answer(daemon, method, path)
    assert status in (405, 403), body  # 403: the policy refuses the caller before the method
    if status == 405:
        assert body["error"] == f"method {method} not allowed here"
        assert method not in body["allowed"]
        assert allow == [", ".join(body["allowed"]).encode()]

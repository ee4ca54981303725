"""The core's client-state interfaces: both implementations of each (the real one and the
in-memory fake of gasoline.testing_fakes) provide it, and the layers above (tools, MCP) run on
the fakes."""

from __future__ import annotations

import json

import attrs
import pytest
from twisted.internet.task import Clock
from zope.interface.exceptions import BrokenImplementation, Invalid
from zope.interface.verify import verifyClass, verifyObject

from gasoline.core.clients.registry import ClientRegistry, ClientState
from gasoline.core.errors import GasolineError, TooManyClients
from gasoline.core.interfaces import IClientRegistry, IClientState, IQueryRouter, ITelemetryStore
from gasoline.core.storage.ring import RingBuffer
from gasoline.core.extension.router import QueryRouter
from gasoline.core.storage.store import CONSOLE, TelemetryStore
from gasoline.mcp.resources import ResourceRegistry
from gasoline.mcp.server import McpServer
from gasoline.mcp.tools import ToolRegistry
from gasoline.testing_fakes import (
    FakeQueryRouter,
    MemoryClientRegistry,
    MemoryClientState,
    MemoryLog,
    MemoryTelemetryStore,
)
from gasoline.tools.context import ToolContext
from gasoline.tools.observe import MODES as OBSERVE

PAIRS = [
    (IClientState, ClientState, MemoryClientState),
    (IClientRegistry, ClientRegistry, MemoryClientRegistry),
    (ITelemetryStore, TelemetryStore, MemoryTelemetryStore),
    (IQueryRouter, QueryRouter, FakeQueryRouter),
]


@pytest.mark.parametrize("iface, real, fake", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_both_classes_of_each_interface_implement_it(iface, real, fake):
    assert iface.implementedBy(real) and iface.implementedBy(fake)
    assert verifyClass(iface, real) and verifyClass(iface, fake)


def test_the_daemons_real_components_provide_their_interfaces(app):
    """The objects the composition root builds, attributes included (verifyObject checks them
    on instances, not classes)."""
    assert verifyObject(ITelemetryStore, app.daemon.store)
    assert verifyObject(IClientRegistry, app.daemon.registry)
    assert verifyObject(IQueryRouter, app.daemon.router)
    assert verifyObject(IClientState, app.daemon.registry.register("real-one"))


def test_the_fakes_provide_their_interfaces():
    clock = Clock()
    registry = MemoryClientRegistry()
    assert verifyObject(IClientRegistry, registry)
    assert verifyObject(IClientState, registry.register("fake-one"))
    assert verifyObject(ITelemetryStore, MemoryTelemetryStore(clock))
    assert verifyObject(IQueryRouter, FakeQueryRouter())


def test_verification_fails_for_an_object_missing_part_of_an_interface():
    """The checks above can fail: a registry without C{add_reclaimer}, a state without C{kv}."""

    class NoReclaimers(MemoryClientRegistry):
        add_reclaimer = None  # type: ignore[assignment]

    with pytest.raises(Invalid):
        verifyObject(IClientRegistry, NoReclaimers())
    state = MemoryClientState("x")
    assert verifyObject(IClientState, state)
    del state.kv
    with pytest.raises(BrokenImplementation):
        verifyObject(IClientState, state)


def test_a_memory_log_reads_as_a_ring_buffer_that_has_evicted_nothing():
    ring: RingBuffer[bytes] = RingBuffer(100)
    log = MemoryLog()
    items = [str(i).encode() for i in range(30)]
    assert ring.extend(items[:10]) == log.extend(items[:10])
    assert ring.extend(items[10:]) == log.extend(items[10:])
    for cursor, limit in [(0, None), (5, 3), (28, None), (30, None), (29, 10), (0, 0)]:
        assert ring.read(cursor, limit) == log.read(cursor, limit)
    assert ring.read_last(4) == log.read_last(4)
    assert (ring.head, ring.tail, len(ring)) == (log.head, log.tail, len(log))
    assert ring.clear() == log.clear() and ring.read(3) == log.read(3)


# -- the tools' layer on the fakes -------------------------------------------------------------

@attrs.define
class FakeCore:
    store: MemoryTelemetryStore
    registry: MemoryClientRegistry
    router: FakeQueryRouter
    daemon: object

    def ctx(self, app, client_id: str, mode: str) -> ToolContext:
        state = self.registry.get(client_id) or self.registry.register(client_id)
        return ToolContext(app=self.daemon, request=None, state=state, client_id=client_id,
                           tool="observe", mode=mode, tools=app.tools)


@pytest.fixture
def core(app, clock):
    """The daemon's tools over the in-memory store, registry and router."""
    store = MemoryTelemetryStore(clock)
    registry = MemoryClientRegistry(clock=clock)
    router = FakeQueryRouter()
    daemon = attrs.evolve(app.daemon, store=store, registry=registry, router=router)
    return FakeCore(store, registry, router, daemon)


def body(result):
    text = result["content"][0]["text"]
    return json.loads(text.split("\n", 1)[1])


def test_observe_logs_reads_the_store_and_keeps_each_clients_cursor_in_its_own_state(app, core):
    core.store.add(CONSOLE, [{"level": "log", "message": f"m{i}"} for i in range(3)])
    first = body(OBSERVE["logs"](core.ctx(app, "A", "logs"), {"what": "logs"}))
    assert [e["message"] for e in first["entries"]] == ["m0", "m1", "m2"]
    assert core.store.reads == [CONSOLE]
    assert core.registry.get("A").cursors == {CONSOLE: 3} and core.registry.get("B") is None
    core.store.add(CONSOLE, [{"level": "log", "message": "m3"}])
    again = body(OBSERVE["logs"](core.ctx(app, "A", "logs"), {"what": "logs"}))
    assert [e["message"] for e in again["entries"]] == ["m3"]
    # B has its own state: it starts from the beginning, and A's cursor is not B's.
    b = body(OBSERVE["logs"](core.ctx(app, "B", "logs"), {"what": "logs"}))
    assert [e["message"] for e in b["entries"]] == ["m0", "m1", "m2", "m3"]
    assert core.registry.get("A").cursors == core.registry.get("B").cursors == {CONSOLE: 4}


def test_an_extension_bound_mode_sends_its_command_as_the_caller(app, core):
    d = OBSERVE["storage"](core.ctx(app, "A", "storage"), {"what": "storage", "tab_id": 4})
    (command,) = core.router.waiting()
    assert (command.owner, command.type, command.tab_id) == ("A", "state_capture", 4)
    got = []
    d.addCallback(got.append)
    core.router.answer({"localStorage": {"k": "v"}, "cookies": []})
    assert body(got[0])["storage"]["localStorage"] == {"k": "v"}


def test_command_results_and_pending_commands_are_the_callers_own(app, core):
    cid = core.router.submit("A", "dom_query", {"selector": "h1"})
    mine = body(OBSERVE["pending_commands"](core.ctx(app, "A", "pending_commands"), {}))
    theirs = body(OBSERVE["pending_commands"](core.ctx(app, "B", "pending_commands"), {}))
    assert mine["count"] == 1 and theirs["count"] == 0
    with pytest.raises(GasolineError) as refused:
        OBSERVE["command_result"](core.ctx(app, "B", "command_result"), {"correlation_id": cid})
    assert refused.value.code == "no_data"
    core.router.answer({"found": 1})
    done = body(OBSERVE["command_result"](core.ctx(app, "A", "command_result"),
                                          {"correlation_id": cid}))
    assert done["status"] == "complete" and done["result"] == {"found": 1}


# -- the MCP layer on the fake registry -------------------------------------------------------

def _server(clock, registry):
    return McpServer(clock, registry, ToolRegistry(clock), ResourceRegistry())


def test_mcp_sessions_count_as_connections_of_their_client():
    clock = Clock()
    registry = MemoryClientRegistry(clock=clock)
    server = _server(clock, registry)
    one = server.open_session("A", "streamable")
    two = server.open_session("A", "streamable")
    assert one.state is two.state is registry.get("A")
    assert registry.get("A").connections == 2
    server.close_session(one)
    assert registry.get("A").live and registry.get("A").connections == 1
    server.close_session(two)
    assert not registry.get("A").live
    server.close_all()


def test_at_the_client_limit_the_registry_asks_the_mcp_server_to_close_a_quiet_session():
    clock = Clock()
    registry = MemoryClientRegistry(max_clients=1, clock=clock)
    server = _server(clock, registry)
    assert registry.reclaimers == [server.reclaim_idle]
    quiet = server.open_session(None, "streamable")
    clock.advance(5)
    newcomer = server.open_session("B", "streamable")
    assert quiet.closed and not newcomer.closed
    assert not registry.get(quiet.client_id).live and registry.get("B").live
    server.close_all()


def test_with_nothing_to_reclaim_the_limit_refuses_the_newcomer():
    clock = Clock()
    registry = MemoryClientRegistry(max_clients=1, clock=clock)
    server = _server(clock, registry)
    busy = server.open_session("A", "streamable")
    busy.in_flight["1"] = None  # a request in flight: not quiet
    with pytest.raises(TooManyClients):
        server.open_session("B", "streamable")
    busy.in_flight.clear()
    server.close_all()


# -- the HTTP layer on the fake registry ------------------------------------------------------

def test_the_clients_api_registers_and_releases_clients_in_the_registry_it_is_given():
    from treq.testing import StubTreq

    from gasoline.http.clients_api import ClientsAPI
    from gasoline.http.guards import Guard
    from gasoline.http.site import GasolineRoot
    from gasoline.testing import client_headers

    registry = MemoryClientRegistry()
    treq = StubTreq(GasolineRoot(Guard(), [ClientsAPI(registry)]))

    def call(method, path, body=None, headers=None):
        d = treq.request(method, "http://127.0.0.1/" + path, headers=headers or {},
                         data=json.dumps(body).encode() if body is not None else None)
        treq.flush()
        out = []
        d.addCallback(lambda r: r.json().addCallback(lambda j: out.append((r.code, j))))
        treq.flush()
        return out[0]

    code, answer = call("POST", "clients", {"client_id": "A"}, client_headers(registry, "A"))
    assert code == 200 and answer["client_id"] == "A" and registry.get("A").live
    code, refused = call("POST", "clients", {"client_id": "B"})  # no proof of holding "B"
    assert code >= 400 and registry.get("B") is None
    assert call("GET", "clients")[1]["list"] == [registry.get("A").summary()]
    code, gone = call("DELETE", "clients/A", headers=client_headers(registry, "A"))
    assert code == 200 and gone["gone"] is True and not registry.get("A").live


def test_configure_store_says_so_when_the_registry_could_not_write_the_state(app, core):
    from gasoline.tools.configure import MODES as CONFIGURE

    ctx = core.ctx(app, "A", "store")
    stored = body(CONFIGURE["store"](ctx, {"what": "store", "key": "k", "value": 1}))
    assert stored and core.registry.saved == ["A"]
    core.registry.save_error = "disk full"
    with pytest.raises(GasolineError) as refused:
        CONFIGURE["store"](ctx, {"what": "store", "key": "k", "value": 2})
    assert refused.value.code == "not_persisted" and "disk full" in refused.value.message
    assert core.registry.saved == ["A", "A"]
    assert core.registry.get("A").kv["default"]["k"] == 2  # kept in memory all the same

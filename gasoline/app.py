"""
The composition root: builds every daemon component from a L{Config} and a clock.

Tests build a L{Gasoline} with a C{task.Clock} and talk to C{gasoline.resource} through
C{treq.testing.StubTreq}; C{tap.makeService} builds the same object with the real reactor and puts
it behind a listening endpoint. Nothing here touches the global reactor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import platformdirs
from twisted.application.service import MultiService
from twisted.internet.interfaces import IReactorTime

from gasoline.core.clients import ClientRegistry
from gasoline.core.commands import CommandQueue
from gasoline.core.documents import JsonDocument
from gasoline.core.extension import ExtensionLink
from gasoline.core.noise import NoiseRules
from gasoline.core.notify import Notifier
from gasoline.core.persist import ConsoleJournal, thread_runner
from gasoline.core.redact import Redactor
from gasoline.core.router import QueryRouter
from gasoline.core.store import CONSOLE, DEFAULT_BUFFERS, BufferSpec, TelemetryStore
from gasoline.http.admin import HealthAPI
from gasoline.http.clients_api import ClientsAPI
from gasoline.http.guards import Guard
from gasoline.http.ingest import IngestAPI
from gasoline.http.mcp_http import McpHTTP
from gasoline.http.site import GasolineRoot
from gasoline.mcp.fixtures import register_fixtures
from gasoline.mcp.resources import PromptRegistry
from gasoline.mcp.server import McpServer
from gasoline.mcp.tools import ToolRegistry
from gasoline.tools import GasolineTools
from gasoline.tools.resources import gasoline_resources

DEFAULT_LISTEN = "tcp:7890:interface=127.0.0.1"
DEFAULT_CLIENT_TTL = 3600.0
DEFAULT_MAX_CLIENTS = 10


def default_state_dir() -> Path:
    """C{$GASOLINE_STATE_DIR}, else the platform's user state dir for ``gasoline``."""
    env = os.environ.get("GASOLINE_STATE_DIR")
    if env:
        return Path(env)
    return Path(platformdirs.user_state_dir("gasoline", appauthor=False))


@attrs.frozen
class Config:
    """Everything the daemon is configured with (the validated command-line options)."""

    listen: str = DEFAULT_LISTEN
    state_dir: Path = attrs.field(factory=default_state_dir, converter=Path)
    max_entries: int = DEFAULT_BUFFERS[CONSOLE].entries
    client_ttl: float = DEFAULT_CLIENT_TTL
    max_clients: int = DEFAULT_MAX_CLIENTS
    log_dir: Path | None = None
    #: Pinned extension ids allowed as ``chrome-extension://<id>`` origins (empty: any id).
    extension_ids: tuple[str, ...] = ()
    #: Optional key guarding MCP and admin routes (never the extension routes).
    api_key: str | None = None
    #: Persist the console buffer to the state dir.
    persist: bool = True
    #: Register the official MCP conformance suite's fixture tools/resources/prompts.
    conformance_fixtures: bool = False
    #: MCP tool calls allowed per minute per client (seed 001); 0 disables the limit.
    tool_rate_limit: int = 100

    def buffer_specs(self) -> dict[str, BufferSpec]:
        spec = DEFAULT_BUFFERS[CONSOLE]
        return {CONSOLE: BufferSpec(self.max_entries, spec.max_bytes)}


@attrs.define
class Gasoline:
    """Every component of one daemon, wired together."""

    config: Config
    clock: IReactorTime
    store: TelemetryStore
    #: Services with a lifecycle (timers, persistence); C{tap} adds the listening endpoint.
    services: MultiService
    started_at: float
    #: The browser extension link: liveness, settings, command queue (gasoline.core.extension).
    extension: Any = None
    #: Client identity and per-client state (gasoline.core.clients.ClientRegistry).
    registry: Any = None
    #: The MCP server shared by every transport (gasoline.mcp.server).
    mcp: Any = None
    #: The console buffer's append-only journal (gasoline.core.persist).
    journal: Any = None
    #: Extension-bound calls routed to the client that asked (gasoline.core.router.QueryRouter).
    router: Any = None
    extras: dict[str, Any] = attrs.field(factory=dict)

    @property
    def resource(self):
        """The root twisted.web resource of the whole HTTP surface."""
        return self.extras["resource"]


def build(config: Config, clock: IReactorTime) -> Gasoline:
    """Build the daemon's components on C{clock}; no sockets are opened here.

    Start-up only: with persistence on, the console journal's newest entries are read from disk
    here, a blocking read before the reactor runs.
    """
    notifier = Notifier(clock)
    store = TelemetryStore(clock, config.buffer_specs(), notifier)
    services = MultiService()
    app = Gasoline(
        config=config, clock=clock, store=store, services=services, started_at=clock.seconds()
    )

    # Client identity and per-client state; TTL expiry and state files on a timer.
    app.registry = ClientRegistry(clock, config.client_ttl, config.max_clients, config.state_dir)
    app.registry.expiry_service.setName("client-registry")
    app.registry.expiry_service.setServiceParent(services)

    # Console persistence: reload the newest entries, then journal every write.
    if config.persist:
        console = store.buffers[CONSOLE]
        journal = ConsoleJournal(
            config.state_dir, clock, lambda: list(console), max_entries=config.max_entries,
            max_file_bytes=max(2 * console.max_bytes, 16 * 1024 * 1024),
            run_in_thread=thread_runner(clock),
        )
        # The console's sequence numbers continue across restarts (clients' saved cursors are
        # sequence numbers): its head is kept in <state_dir>/sequence.json by a timer.
        heads = JsonDocument(Path(config.state_dir) / "sequence.json",
                             lambda: {CONSOLE: console.head}, poll=True)
        saved = heads.load()
        end_seq = saved.get(CONSOLE) if isinstance(saved, dict) else None
        if isinstance(end_seq, bool) or not isinstance(end_seq, int) or end_seq < 0:
            end_seq = None
        store.restore(CONSOLE, journal.load(config.max_entries), end_seq=end_seq)
        heads.service(clock).setServiceParent(services)
        store.journals[CONSOLE] = journal
        app.journal = journal
        journal.setServiceParent(services)

    # The daemon-wide ("global") noise rules; each client's NoiseRules consults them after its own.
    # Kept in <state_dir>/noise-global.json like client states: read now, written by a timer.
    noise_file = JsonDocument(Path(config.state_dir) / "noise-global.json",
                              lambda: app.extras["noise_global"].to_json())
    stored = noise_file.load()
    restored = NoiseRules.from_json(stored) if stored is not None else None
    app.extras["noise_global"] = (restored if restored is not None and restored.scope == "global"
                                  else NoiseRules(scope="global"))
    app.extras["noise_global_file"] = noise_file
    noise_file.service(clock).setServiceParent(services)

    # The extension: liveness, settings, the /sync command channel; and the query router that
    # owns extension-bound calls (q-<n>, one owner each).
    app.extension = ExtensionLink(clock, store, CommandQueue(clock), redactor=Redactor().redact_value)
    app.extension.service().setServiceParent(services)
    app.router = QueryRouter(clock, app.extension, registry=app.registry)
    app.router.service().setServiceParent(services)

    # The MCP server shared by every transport.
    app.mcp = build_mcp(app)
    app.mcp.service.setServiceParent(services)

    # The HTTP surface: guards for every request, then one API per first path segment; the
    # extension ingest API takes every other path.
    ingest = IngestAPI(clock, store, app.extension, config.state_dir)
    app.extras["ingest"] = ingest  # tap sets ingest.stop (POST /shutdown)
    mcp_http = McpHTTP(app.mcp)
    mcp_http.keepalive_service.setServiceParent(services)
    root = GasolineRoot(guard=Guard.from_config(config), fallback=ingest.resource())
    root.mounts[b"health"] = HealthAPI(app).resource()
    root.mounts[b"clients"] = ClientsAPI(app.registry).resource()
    root.mounts[b"mcp"] = mcp_http
    app.extras["resource"] = root
    return app


def build_mcp(app: Gasoline) -> McpServer:
    """The daemon's MCP server: Gasoline's tools and resources, plus the conformance fixtures
    when C{app.config.conformance_fixtures} is set."""
    # Rate limit: tool calls per minute per client (seed 001; Config.tool_rate_limit, 0 = off).
    tools = ToolRegistry(app.clock, rate_limit=app.config.tool_rate_limit)
    gasoline_tools = GasolineTools(app)
    gasoline_tools.register(tools)
    app.extras["tools"] = gasoline_tools
    resources = gasoline_resources(tools, gasoline_tools)
    prompts = PromptRegistry()
    if app.config.conformance_fixtures:
        register_fixtures(tools, resources, prompts)
    return McpServer(app.clock, app.registry, tools, resources, prompts)

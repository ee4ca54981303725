"""
The composition root: builds every daemon component from a L{Config} and a clock.

Each part is built once, here, and handed to the next by name: the domain
(L{gasoline.core.daemon.Daemon}), the tools (L{gasoline.tools.GasolineTools}), the MCP server
every transport shares, and the HTTP surface. Tests build a L{Gasoline} with a C{task.Clock} and
talk to C{gasoline.resource} through C{treq.testing.StubTreq}; C{tap.makeService} builds the same
object with the real reactor and puts it behind a listening endpoint. Nothing here touches the
global reactor.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import attrs
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from twisted.application.service import MultiService
from twisted.internet.interfaces import IReactorProcess, IReactorTime

from gasoline.config import (  # noqa: F401  (re-exported: the tac file and tests import them here)
    DEFAULT_CLIENT_TTL,
    DEFAULT_LISTEN,
    DEFAULT_MAX_CLIENTS,
    Config,
    default_state_dir,
)
from gasoline.core.trust.clientkey import ClientKey
from gasoline.core.clients.registry import ClientRegistry
from gasoline.core.extension.commands import CommandQueue
from gasoline.core.daemon import Daemon
from gasoline.core.storage.documents import JsonDocument
from gasoline.core.extension.link import PAIR_FIX, WAITING_FOR_PAIRING, ExtensionLink
from gasoline.core.trust.pairing import DaemonIdentity
from gasoline.core.lifecycle import Shutdown
from gasoline.core.clients.noise import NoiseRules
from gasoline.core.storage.notify import Notifier
from gasoline.core.storage.files import DiskHealth
from gasoline.core.storage.atrest import AtRest, load_state_key, refuse_clear_start
from gasoline.core.storage.persist import wire_journals
from gasoline.core.redaction.redactor import Redactor
from gasoline.core.extension.router import QueryRouter
from gasoline.core.storage.screenshots import ScreenshotStore
from gasoline.core.redaction.once import Offload
from gasoline.core.workers import WorkerPool
from gasoline.core.storage.store import CONSOLE, TelemetryStore
from gasoline.http.admin import HealthAPI, MetricsAPI
from gasoline.http.clients_api import ClientsAPI
from gasoline.http.dispatch import HasRoutes
from gasoline.http.events import EventsAPI
from gasoline.http.guards import Guard
from gasoline.http.ingest import IngestAPI
from gasoline.http.mcp_http import McpHTTP
from gasoline.http.pairing import PairingAPI
from gasoline.core.inflight import InFlight
from gasoline.http.relay import RelayDiscoveryAPI, RelaySockets
from gasoline.http.proxy_api import ProxyAPI
from gasoline.http.reads import CursorReads
from gasoline.http.site import GasolineRoot
from gasoline.http.status_page import StatusPage
from gasoline.logs import ClientLogs, LogFiles
from gasoline.mcp.resources import PromptRegistry, ResourceRegistry
from gasoline.mcp.server import McpServer
from gasoline.mcp.session import McpSession
from gasoline.mcp.tools import ToolRegistry
from gasoline.metrics import DaemonCollector, Metrics
from gasoline.relay.hub import Relay
from gasoline.relay.metrics import register as register_relay_metrics
from gasoline.streaming.hub import Streaming
from gasoline.streaming.metrics import latency_observer as streaming_latency
from gasoline.streaming.metrics import register as register_streaming_metrics
from gasoline.tools import GasolineTools
from gasoline.tools._launch import BrowserLauncher
from gasoline.tools.resources import gasoline_resources

#: Minimum spacing of the store notifier's flushes under a burst (seconds; see
#: L{gasoline.core.storage.notify}). 0: each write goes to the subscribers on the next reactor turn.
#: Spacing flushes 2 ms apart handed the streaming hub a few writes per turn and saved
#: instructions, but cost more CPU time than it saved (bench/streaming.py, docs/streaming.md).
NOTIFY_INTERVAL = 0.0

if TYPE_CHECKING:  # the session proxy is imported only with --proxy-config (build_proxy)
    from gasoline.proxy.session import ProxyManager


@attrs.frozen(eq=False)
class Gasoline:
    """Every component of one daemon, wired together."""

    #: The domain: telemetry store, clients, extension link, router, noise rules, ...
    daemon: Daemon
    #: The five tools and their runtime state.
    tools: GasolineTools
    #: The MCP server shared by every transport.
    mcp: McpServer
    #: The root twisted.web resource of the whole HTTP surface.
    resource: GasolineRoot
    #: Services with a lifecycle (timers, persistence); C{tap} adds the listening endpoint.
    services: MultiService
    #: The daemon's metric registry, served at C{GET /metrics}; features add their series to it.
    metrics: Metrics
    #: Context streaming: per-agent subscriptions, event inboxes, delivery.
    streaming: Streaming
    #: The CDP hub relay (docs/relay.md), mounted on the HTTP surface.
    relay: Relay
    #: The session proxy (docs/proxy.md), or None without C{--proxy-config}.
    proxy: ProxyManager | None = None

    # The domain's parts, for callers that hold the whole daemon (tests, benchmarks, tap).
    config = property(lambda self: self.daemon.config)
    clock = property(lambda self: self.daemon.clock)
    started_at = property(lambda self: self.daemon.started_at)
    store = property(lambda self: self.daemon.store)
    registry = property(lambda self: self.daemon.registry)
    extension = property(lambda self: self.daemon.extension)
    router = property(lambda self: self.daemon.router)
    journal = property(lambda self: self.daemon.journal)
    persistence = property(lambda self: self.daemon.persistence)
    noise_global = property(lambda self: self.daemon.noise_global)
    shutdown = property(lambda self: self.daemon.shutdown)


def _at_rest(config: Config) -> AtRest | None:
    """The sealing of the state dir (C{--state-key-file}), its key checked against the state
    dir; without a key, a state dir that holds encrypted state is refused.

    @raise gasoline.core.storage.atrest.StateKeyError: the one line to show."""
    if config.state_key_file is None:
        refuse_clear_start(config.state_dir)
        return None
    at_rest = AtRest(load_state_key(config.state_key_file))
    at_rest.check_state_dir(config.state_dir)
    return at_rest


def _global_noise(config: Config, clock: IReactorTime, services: MultiService,
                  health: DiskHealth, at_rest: AtRest | None = None
                  ) -> tuple[NoiseRules, JsonDocument]:
    """The daemon-wide ("global") noise rules, kept in C{<state_dir>/noise-global.json} like
    client states: read now, written by a timer."""
    holder: list[NoiseRules] = []
    noise_file = JsonDocument(Path(config.state_dir) / "noise-global.json",
                              lambda: holder[0].to_json(), health=health, at_rest=at_rest,
                              what="the daemon-wide noise rules it held")
    stored = noise_file.load()
    restored = NoiseRules.from_json(stored) if stored is not None else None
    if stored is not None and (restored is None or restored.scope != "global"):
        noise_file.unusable("not a set of daemon-wide noise rules")
    rules = (restored if restored is not None and restored.scope == "global"
             else NoiseRules(scope="global"))
    holder.append(rules)
    noise_file.service(clock).setServiceParent(services)
    return rules, noise_file


def build_daemon(config: Config, clock: IReactorTime, services: MultiService,
                 stop: Callable[[], Any] | None = None, *,
                 on_latency: Callable[[str, float], None] | None = None) -> Daemon:
    """The domain collaborators, their timers added to C{services}.

    @param stop: stops the whole daemon (C{POST /shutdown}, C{configure restart}); C{None}
        when the daemon cannot stop itself (unit tests, embedding).
    @param on_latency: called as C{on_latency(type, seconds)} for each extension answer
        (L{Metrics.observe_query}).
    """
    # Each write reaches the subscribers (streaming hub, shared logs) on the next reactor turn
    # (NOTIFY_INTERVAL, above).
    notifier = Notifier(clock, interval=NOTIFY_INTERVAL)
    workers = _worker_pool(clock, services)
    store = TelemetryStore(clock, config.buffer_specs(), notifier,
                           offload=Offload(workers) if workers is not None else None)

    # Durability (gasoline.core.storage.persist): the state dir (0700, warned about when loose), disk
    # health for every state write, and one journal per telemetry buffer, reloaded here (a
    # blocking read before the reactor runs) with the entries' old sequence numbers.
    at_rest = _at_rest(config)
    persistence = wire_journals(config.state_dir, clock, store, services, persist=config.persist,
                                at_rest=at_rest)

    # Client identity and per-client state; TTL expiry and state files on a timer.
    # The client key (<state-dir>/client-key, kept across restarts): a caller that names a
    # client id proves it holds it (docs/security.md, "Who may act as a client id").
    registry = ClientRegistry(clock, config.client_ttl, config.max_clients, config.state_dir,
                              health=persistence.health,
                              client_key=ClientKey.from_state_dir(config.state_dir),
                              at_rest=at_rest)
    registry.expiry_service.setName("client-registry")
    registry.expiry_service.setServiceParent(services)

    noise_global, noise_file = _global_noise(config, clock, services, persistence.health,
                                             at_rest)

    # The daemon identity the extension pins and challenges (docs/extension.md, "Pairing"); the
    # extension link reports its pairing state (/health, configure health).
    identity = DaemonIdentity.from_state_dir(config.state_dir, clock)

    # The extension: liveness, settings, the /sync command channel; and the query router that
    # owns extension-bound calls (q-<n>, one owner each).
    extension = ExtensionLink(clock, store, CommandQueue(clock), redactor=Redactor().redact_value,
                              identity=identity)
    extension.service().setServiceParent(services)
    router = QueryRouter(clock, extension, registry=registry, on_latency=on_latency)
    router.service().setServiceParent(services)

    return Daemon(
        config=config, clock=clock, started_at=clock.seconds(), store=store, registry=registry,
        extension=extension, router=router, noise_global=noise_global, noise_file=noise_file,
        screenshots=ScreenshotStore(config.state_dir, health=persistence.health),
        shutdown=Shutdown(clock, stop), journal=persistence.journals.get(CONSOLE),
        persistence=persistence, workers=workers,
    )


def _worker_pool(clock: IReactorTime, services: MultiService) -> WorkerPool | None:
    """The process pool for CPU-heavy work (one worker per core, started on first use), on a
    reactor that can start processes; C{None} otherwise (a test's clock: the work runs
    inline)."""
    if not IReactorProcess.providedBy(clock):
        return None
    pool = WorkerPool(clock)
    pool.service().setServiceParent(services)
    return pool


#: Adds tools, resources and prompts to the daemon's MCP registries (the test suite's
#: conformance fixtures use it; the daemon itself registers only Gasoline's own).
ExtendMcp = Callable[[ToolRegistry, ResourceRegistry, PromptRegistry], None]


def build_streaming(daemon: Daemon, sessions: dict[str, McpSession],
                    services: MultiService,
                    on_latency: Callable[[float], None] | None = None) -> Streaming:
    """Context streaming: the store's notifier feeds each subscribed agent's inbox (off the
    ingest path); the inbox drains to the agent's own MCP session in C{sessions} (the MCP
    server's table), to C{observe events} and to C{GET /events}.

    @param on_latency: observes each write's notification latency (C{/metrics})."""
    streaming = Streaming(daemon.clock, daemon.store.notifier, daemon.registry, sessions,
                          redact_text=Redactor().redact_value, on_latency=on_latency,
                          extension=daemon.extension)
    streaming.service().setServiceParent(services)
    return streaming


def build_mcp(daemon: Daemon, tools: GasolineTools, extend: ExtendMcp | None = None,
              sessions: dict[str, McpSession] | None = None,
              client_logs: ClientLogs | None = None) -> McpServer:
    """The daemon's MCP server: Gasoline's tools and resources, plus what C{extend} adds.

    @param client_logs: the C{--log-dir} client logs, told of every tool call and session end.
    """
    config = daemon.config
    observers = [client_logs] if client_logs is not None else []
    # Rate limit: tool calls per minute per client (Config.tool_rate_limit, 0 = off).
    registry = ToolRegistry(daemon.clock, rate_limit=config.tool_rate_limit, observers=observers)
    tools.register(registry)
    resources = gasoline_resources(registry, tools)
    prompts = PromptRegistry()
    if extend is not None:
        extend(registry, resources, prompts)
    return McpServer(daemon.clock, daemon.registry, registry, resources, prompts,
                     sessions=sessions, session_observers=observers)


def build_http(daemon: Daemon, mcp: McpServer, services: MultiService,
               metrics: Metrics | None = None, streaming: Streaming | None = None,
               relay: Relay | None = None, proxy: ProxyManager | None = None) -> GasolineRoot:
    """The HTTP surface: the root (the route policy and its guards for every request, then the
    route's handler) over every API, each declaring its routes with Klein. With C{metrics},
    C{GET /metrics} too; with C{streaming}, C{GET /events}; with C{relay}, the CDP hub relay's
    routes (without them those routes of the policy answer 404).

    Every API is built first and the root last, with all of them: nothing is set on a
    component after it is built. The daemon identity is the one L{build_daemon} gave the
    extension link.
    """
    config = daemon.config
    identity = daemon.extension.identity
    assert identity is not None  # build_daemon gives the link the daemon's identity
    ingest = IngestAPI(daemon.clock, daemon.store, daemon.extension, daemon.screenshots,
                       daemon.shutdown, identity=identity)
    mcp_http = McpHTTP(mcp, session_binder=proxy.bind if proxy is not None else None)
    mcp_http.keepalive_service.setServiceParent(services)
    #: One budget for bytes in flight (request bodies, unfinished WebSocket messages).
    inflight = InFlight(config.in_flight_limit)
    apis: list[HasRoutes] = [
        ingest,
        HealthAPI(daemon),
        ClientsAPI(daemon.registry),
        mcp_http,
        PairingAPI(identity, on_offer=daemon.extension.pairing_offered),
        ProxyAPI(proxy),
        # GET /logs: a cursor read for agents; POST and DELETE /logs are the ingest API's.
        CursorReads(mcp),
    ]
    if proxy is not None and metrics is not None:
        from gasoline.proxy.metrics import register as register_proxy_metrics

        register_proxy_metrics(metrics, proxy)
    if metrics is not None:
        apis.append(MetricsAPI(_metrics_resource(daemon, mcp, metrics, mcp_http, ingest)))
    if streaming is not None:
        events = EventsAPI(streaming, daemon.clock)
        events.keepalive_service.setServiceParent(services)
        apis.append(events)
    if relay is not None:
        # The CDP hub relay (docs/relay.md): discovery, /cdp/<client-id>, the extension's link.
        apis.append(RelayDiscoveryAPI(relay))
        apis.append(RelaySockets(relay, daemon.clock, identity, inflight))
    apis.append(_status_page(daemon, mcp, services, identity, streaming, relay, proxy))
    if metrics is not None:
        metrics.add_collector(lambda: _inflight_series(inflight))
    return GasolineRoot(guard=Guard.from_config(config), apis=apis, inflight=inflight,
                        on_response=metrics.request_done if metrics is not None else None)


def _inflight_series(inflight: InFlight) -> Any:
    """C{/metrics}: the in-flight budget (docs/operations.md)."""
    held = GaugeMetricFamily("gasoline_inflight_bytes", "Bytes of request bodies and unfinished "
                             "WebSocket messages held now.")
    held.add_metric([], inflight.held)
    limit = GaugeMetricFamily("gasoline_inflight_limit_bytes", "The in-flight budget.")
    limit.add_metric([], inflight.limit)
    refused = CounterMetricFamily("gasoline_inflight_refused", "Requests and WebSocket "
                                  "connections refused or cut at the in-flight budget.")
    refused.add_metric([], inflight.refused)
    return (held, limit, refused)


def _status_page(daemon: Daemon, mcp: McpServer, services: MultiService,
                 identity: DaemonIdentity, streaming: Streaming | None, relay: Relay | None,
                 proxy: ProxyManager | None) -> StatusPage:
    """The live status page (docs/status-page.md): C{GET /} and C{/ui/...}."""
    status = StatusPage(daemon, identity=identity, tools=mcp.tools, streaming=streaming,
                        relay=relay, proxy=proxy, api_key=daemon.config.api_key)
    status.timer.setServiceParent(services)
    return status


def _metrics_resource(daemon: Daemon, mcp: McpServer, metrics: Metrics, mcp_http: McpHTTP,
                      ingest: IngestAPI) -> Any:
    """Register the daemon's collector with C{metrics}; the C{GET /metrics} resource (see
    gasoline.metrics). The router's latency hook and the root's response hook are passed to
    them at construction (L{build}, L{build_http})."""
    metrics.registry.register(DaemonCollector(
        metrics, store=daemon.store, registry=daemon.registry, tools=mcp.tools,
        router=daemon.router, extension=daemon.extension, sse=mcp_http, ingest=ingest,
        journals=daemon.persistence.journals if daemon.persistence is not None else None,
    ))
    return metrics.resource()


def build_proxy(daemon: Daemon, mcp: McpServer, services: MultiService,
                metrics: Metrics | None = None) -> ProxyManager | None:
    """The session proxy: child MCP servers per agent session, behind C{/session};
    None without C{config.proxy_config}.

    Start-up only: the servers file and the saved sessions are read here (blocking reads before
    the reactor runs).
    """
    config = daemon.config
    if config.proxy_config is None:
        return None
    from gasoline.proxy.config import load as load_proxy_config  # only when used
    from gasoline.proxy.metrics import call_observer
    from gasoline.proxy.session import ProxyManager

    proxy = ProxyManager(daemon.clock, load_proxy_config(config.proxy_config), mcp,
                         state_dir=config.state_dir if config.persist else None,
                         at_rest=daemon.persistence.at_rest if daemon.persistence is not None else None,
                         on_call=call_observer(metrics) if metrics is not None else None)
    proxy.service.setServiceParent(services)
    proxy.restore()
    return proxy


def _browser_launcher(config: Config, clock: IReactorTime) -> BrowserLauncher | None:
    """What runs C{interact launch_browser} (docs/browser.md): only with
    C{--allow-launch-browser}, and only on a reactor that can start processes."""
    if not config.allow_launch_browser or not IReactorProcess.providedBy(clock):
        return None
    return BrowserLauncher(clock, config.state_dir)


def _client_logs(daemon: Daemon, files: LogFiles | None) -> ClientLogs | None:
    """The C{--log-dir} client logs (None without one); the shared logs get the store's writes."""
    if files is None:
        return None
    daemon.store.notifier.subscribe(files.buffer_written)
    return ClientLogs(files, daemon.registry)


def build(config: Config, clock: IReactorTime, stop: Callable[[], Any] | None = None, *,
          metrics: Metrics | None = None, extend_mcp: ExtendMcp | None = None,
          log_files: LogFiles | None = None) -> Gasoline:
    """Build the daemon's components on C{clock}; no sockets are opened here.

    @param stop: stops the whole daemon (C{tap} passes one that stops the reactor).
    @param metrics: gets every series of the daemon, served at C{GET /metrics} (a fresh
        L{Metrics} when not given).
    @param extend_mcp: adds tools, resources and prompts to the MCP server (tests only).
    @param log_files: the C{--log-dir} files (L{gasoline.logs.LogService}'s): fed the store's
        writes (the shared logs), and each client's tool calls and session ends.
    """
    services = MultiService()
    # Built in dependency order, each collaborator passed at construction: the metric registry
    # first (the query router reports latencies to it), then the domain, streaming, the MCP
    # server, the relay, the proxy and the HTTP surface over all of them.
    metrics = metrics if metrics is not None else Metrics()
    daemon = build_daemon(config, clock, services, stop, on_latency=metrics.observe_query)
    sessions: dict[str, McpSession] = {}
    streaming = build_streaming(daemon, sessions, services, streaming_latency(metrics))
    tools = GasolineTools(daemon, streaming=streaming, launcher=_browser_launcher(config, clock))
    mcp = build_mcp(daemon, tools, extend_mcp, sessions, _client_logs(daemon, log_files))
    mcp.service.setServiceParent(services)
    register_streaming_metrics(metrics, streaming)
    relay = Relay(clock, not_connected_why=lambda: (
        f"{WAITING_FOR_PAIRING}. {PAIR_FIX}" if daemon.extension.waiting_for_pairing else None))
    register_relay_metrics(metrics, relay)
    proxy = build_proxy(daemon, mcp, services, metrics)
    resource = build_http(daemon, mcp, services, metrics, streaming, relay, proxy)
    return Gasoline(daemon=daemon, tools=tools, mcp=mcp, resource=resource, services=services,
                    metrics=metrics, streaming=streaming, relay=relay, proxy=proxy)

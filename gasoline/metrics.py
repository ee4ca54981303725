"""
C{GET /metrics}: the daemon's state in the Prometheus text format.

One L{Metrics} per daemon, with its own C{CollectorRegistry} (no process-global state, so two
daemons in one test process never share series). Most series are read from the components' own
counters and sizes when the page is scraped (L{DaemonCollector}), so the request paths pay nothing
for them: the ring buffers already count every write (C{head}), the tool registry counts calls and
errors, the router counts its commands. Only what has no natural home elsewhere is recorded as it
happens (the extension round-trip histogram, HTTP requests and rejects by route and reason), and
that costs one dict increment per request.

Features that land later (context streaming, the session proxy, the CDP relay) add their own series
without touching this module: either create them through L{Metrics.counter} or
L{Metrics.histogram} (all prefixed C{gasoline_}, in this registry), or hand L{Metrics.add_collector}
a function that yields metric families at scrape time::

    def build(config, clock, *, metrics):
        relayed = metrics.counter("relay_messages_total", "CDP messages relayed.", ["direction"])
        ...
        relayed.labels("to_browser").inc()

The full list of series, with their types and labels, is in C{docs/operations.md}.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sized
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from twisted.web.resource import Resource

from gasoline.http.routes import ROUTES

if TYPE_CHECKING:
    from twisted.web.server import Request
    from gasoline.core.extension.link import ExtensionLink
    from gasoline.core.storage.journal import BufferJournal
    from gasoline.core.interfaces import IClientRegistry, IQueryRouter, ITelemetryStore
    from gasoline.http.ingest import IngestAPI
    from gasoline.mcp.tools import ToolRegistry


class OpenStreams(Protocol):
    """What the collector reads of the MCP HTTP transport (L{gasoline.http.mcp_http.McpHTTP})."""

    @property
    def open_streams(self) -> Sized: ...

PREFIX = "gasoline_"

#: Buckets of the extension round-trip histogram: a DOM query is tens of milliseconds, a
#: screenshot or a page load several seconds, the router's timeout 30 s.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

#: HTTP status -> reject reason (the guards' and the body cap's refusals).
REJECT_REASONS = {
    400: "bad_request", 401: "api_key", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 413: "too_large", 415: "unsupported_media_type",
    421: "misdirected", 429: "rate_limited", 503: "unavailable",
}
#: Route labels: the first path segment when it is one of these, else C{other} (the label set
#: must not grow with whatever paths a scanner tries). The first segment of every route of the
#: route table (L{gasoline.http.routes.ROUTES}); C{/} itself is C{root}.
KNOWN_ROUTES = frozenset(route.segments[0] for route in ROUTES if route.segments)


def route_label(path: bytes) -> str:
    """The C{route} label of a request path: its first segment if known, else C{other}."""
    segment = path.split(b"?", 1)[0].lstrip(b"/").split(b"/", 1)[0]
    try:
        name = segment.decode("ascii")
    except UnicodeDecodeError:
        return "other"
    if name == "":
        return "root"
    return name if name in KNOWN_ROUTES else "other"


class Metrics:
    """The daemon's metric registry; see the module docstring.

    @ivar registry: this daemon's own C{CollectorRegistry}.
    @ivar requests: C{(route, status code) -> count} of every HTTP request answered.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests: dict[tuple[str, int], int] = {}
        self.query_latency = self.histogram(
            "query_latency_seconds",
            "Round trip of extension-bound commands (DOM queries, screenshots, execute, ...), "
            "from queueing to the extension's answer.",
            ["type"], buckets=LATENCY_BUCKETS,
        )

    # -- adding series (for every feature) -------------------------------------------------------

    def counter(self, name: str, documentation: str, labels: Iterable[str] = ()) -> Counter:
        """A counter C{gasoline_<name>} in this registry (C{_total} is added if missing)."""
        return Counter(self._name(name), documentation, list(labels), registry=self.registry)

    def histogram(self, name: str, documentation: str, labels: Iterable[str] = (),
                  buckets: Iterable[float] = LATENCY_BUCKETS) -> Histogram:
        """A histogram C{gasoline_<name>} in this registry."""
        return Histogram(self._name(name), documentation, list(labels), buckets=tuple(buckets),
                         registry=self.registry)

    def add_collector(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Add series computed at scrape time: C{collect()} yields metric families
        (C{prometheus_client.core.GaugeMetricFamily}, ...) named C{gasoline_*}."""
        self.registry.register(_FunctionCollector(collect))

    @staticmethod
    def _name(name: str) -> str:
        return name if name.startswith(PREFIX) else PREFIX + name

    # -- recording -------------------------------------------------------------------------------

    def observe_query(self, type: str, seconds: float) -> None:
        """One extension round trip of command C{type} took C{seconds}."""
        self.query_latency.labels(type if len(type) <= 32 else "other").observe(seconds)

    def request_done(self, path: bytes, code: int) -> None:
        """An HTTP request to C{path} was answered with C{code} (one dict increment)."""
        key = (route_label(path), code)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1

    # -- exposition ------------------------------------------------------------------------------

    def render(self) -> bytes:
        """The text exposition of every series."""
        return generate_latest(self.registry)

    def resource(self) -> Resource:
        """C{GET /metrics}."""
        return _MetricsResource(self)

    def http_families(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(
            "gasoline_http_requests", "HTTP requests answered, by route and status code.",
            labels=["route", "code"])
        rejects = CounterMetricFamily(
            "gasoline_http_rejects", "HTTP requests refused (guards, body caps, bad payloads, "
            "unknown routes), by route and reason.", labels=["route", "reason"])
        by_reason: dict[tuple[str, str], int] = {}
        for (route, code), n in list(self.requests.items()):
            requests.add_metric([route, str(code)], n)
            if 400 <= code < 500:
                key = (route, REJECT_REASONS.get(code, f"http_{code}"))
                by_reason[key] = by_reason.get(key, 0) + n
        for (route, reason), n in by_reason.items():
            rejects.add_metric([route, reason], n)
        return (requests, rejects)


class _FunctionCollector:
    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()


class _MetricsResource(Resource):
    isLeaf = True

    def __init__(self, metrics: Metrics) -> None:
        super().__init__()
        self._metrics = metrics

    def render_GET(self, request: Request) -> bytes:
        request.setHeader(b"content-type", CONTENT_TYPE_LATEST.encode())
        request.setHeader(b"cache-control", b"no-store")
        return self._metrics.render()

    def render_HEAD(self, request: Request) -> bytes:
        return self.render_GET(request)


class DaemonCollector:
    """Series read from the daemon's components at scrape time (see the module docstring).

    Every source is optional: a component that is not built (no journal with C{--no-persist})
    simply contributes no series.
    """

    def __init__(self, metrics: Metrics, *, store: ITelemetryStore,
                 registry: IClientRegistry | None = None, tools: ToolRegistry | None = None,
                 router: IQueryRouter | None = None, extension: ExtensionLink | None = None,
                 journals: Mapping[str, BufferJournal] | None = None,
                 sse: OpenStreams | None = None, ingest: IngestAPI | None = None) -> None:
        self.metrics = metrics
        self.store = store
        self.registry = registry
        self.tools = tools
        self.router = router
        self.extension = extension
        #: C{buffer name -> journal} (L{gasoline.core.storage.persist.Persistence}'s C{journals}: none
        #: with C{--no-persist}).
        self.journals: Mapping[str, BufferJournal] = journals if journals is not None else {}
        self.sse = sse
        self.ingest = ingest
        #: Each buffer's C{head} when the daemon started: writes before a restart are not ours.
        self._start_heads = {name: ring.head for name, ring in store.buffers.items()}

    def collect(self) -> Iterable[Metric]:
        yield from self._buffers()
        yield from self._clients()
        yield from self._tools()
        yield from self._extension()
        yield from self._journals()
        yield from self.metrics.http_families()
        if self.ingest is not None:
            rejected = CounterMetricFamily(
                "gasoline_ingest_rejected_entries", "Entries refused inside accepted ingest "
                "batches (invalid, oversized, not encodable), by buffer.", labels=["type"])
            for name, n in list(self.ingest.rejected_entries.items()):
                rejected.add_metric([name], n)
            yield rejected

    def _buffers(self) -> Iterable[Metric]:
        store = self.store
        entries = GaugeMetricFamily("gasoline_buffer_entries", "Entries in each ring buffer.",
                                    labels=["type"])
        size = GaugeMetricFamily("gasoline_buffer_bytes", "Bytes held by each ring buffer.",
                                 labels=["type"])
        capacity = GaugeMetricFamily("gasoline_buffer_capacity_entries",
                                     "Entry capacity of each ring buffer.", labels=["type"])
        writes = CounterMetricFamily("gasoline_buffer_writes", "Entries written to each ring "
                                     "buffer since the daemon started.", labels=["type"])
        for name, ring in store.buffers.items():
            entries.add_metric([name], ring.head - ring.tail)
            size.add_metric([name], ring.bytes_used)
            capacity.add_metric([name], ring.capacity)
            writes.add_metric([name], ring.head - self._start_heads.get(name, 0))
        entries.add_metric(["performance"], len(store.performance))
        yield from (entries, size, capacity, writes)
        reads = CounterMetricFamily("gasoline_client_reads", "Buffer reads by clients (MCP "
                                    "tools and resources), by buffer.", labels=["type"])
        for name, n in store.read_counts().items():
            reads.add_metric([name], n)
        yield reads
        ws = GaugeMetricFamily("gasoline_websocket_connections", "WebSocket connections the "
                               "page has open, as seen by the extension.")
        ws.add_metric([], len(store.websocket_status()["active"]))
        yield ws

    def _clients(self) -> Iterable[Metric]:
        if self.registry is not None:
            active = GaugeMetricFamily("gasoline_clients_active", "Clients with a live connection "
                                       "(MCP session or SSE stream).")
            active.add_metric([], self.registry.live_count())
            yield active
        if self.sse is not None:
            sse = GaugeMetricFamily("gasoline_sse_connections", "Open MCP SSE streams.")
            sse.add_metric([], len(self.sse.open_streams))
            yield sse

    def _tools(self) -> Iterable[Metric]:
        tools = self.tools
        if tools is None:
            return
        calls = CounterMetricFamily("gasoline_tool_calls", "MCP tool calls, by tool.",
                                    labels=["tool"])
        for name, n in list(tools.calls.items()):
            calls.add_metric([name], n)
        errors = CounterMetricFamily("gasoline_tool_errors", "MCP tool calls that answered "
                                     "isError, by tool and error code.", labels=["tool", "code"])
        for (name, code), n in list(tools.tool_errors.items()):
            errors.add_metric([name, code], n)
        limited = CounterMetricFamily("gasoline_rate_limited_calls", "MCP tool calls refused by "
                                      "the per-client rate limit.")
        limited.add_metric([], tools.errors.get("rate_limited", 0))
        yield from (calls, errors, limited)

    def _extension(self) -> Iterable[Metric]:
        if self.extension is not None:
            connected = GaugeMetricFamily("gasoline_extension_connected",
                                          "1 while the browser extension syncs, else 0.")
            connected.add_metric([], 1 if self.extension.connected else 0)
            syncs = CounterMetricFamily("gasoline_extension_syncs", "Extension /sync requests.")
            syncs.add_metric([], self.extension.syncs)
            yield from (connected, syncs)
        if self.router is not None:
            stats = dict(self.router.stats)
            started = CounterMetricFamily("gasoline_extension_commands_started",
                                          "Extension-bound commands queued for the extension.")
            started.add_metric([], stats.pop("calls", 0))
            commands = CounterMetricFamily("gasoline_extension_commands", "Extension-bound "
                                           "commands by outcome (queue_full and disconnected "
                                           "count refusals too).", labels=["outcome"])
            for outcome, n in stats.items():
                commands.add_metric([outcome], n)
            yield from (started, commands)

    def _journals(self) -> Iterable[Metric]:
        size = GaugeMetricFamily("gasoline_journal_bytes", "Size of each buffer's journal file.",
                                 labels=["type"])
        compactions = CounterMetricFamily("gasoline_journal_compactions", "Journal compactions "
                                          "since the daemon started.", labels=["type"])
        for name, journal in list(self.journals.items()):
            size.add_metric([name], journal.size)
            compactions.add_metric([name], journal.compactions)
        yield from (size, compactions)

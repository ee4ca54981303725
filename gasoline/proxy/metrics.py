"""
The session proxy's series in C{GET /metrics} (listed in docs/operations.md).

Counts live in the L{gasoline.proxy.session.ProxyManager} as plain integers (a dict increment per
proxied call, per restart); L{register} turns them into metric families at scrape time, and adds
the one series that must be recorded as it happens: the call latency histogram, fed by the
C{on_call} hook the manager is built with (L{call_observer}).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from gasoline.metrics import Metrics
    from gasoline.proxy.session import ProxyManager

#: Buckets of the proxied call latency: a local child answers in about a millisecond, a remote
#: server or a long tool in seconds; the default request timeout is 60 s.
CALL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0)

#: States a server instance is counted in by C{gasoline_proxy_children}.
STATES = ("starting", "ready", "down")


def call_observer(metrics: Metrics) -> Callable[[str, float, bool], None]:
    """The proxy manager's C{on_call} hook: each proxied call's latency, by server, in
    C{metrics}'s C{proxy_call_seconds} histogram."""
    latency = metrics.histogram(
        "proxy_call_seconds", "Proxied tools/call round trips (daemon to server and back), by "
        "server.", ["server"], buckets=CALL_BUCKETS)

    children: dict[str, Any] = {}

    def on_call(server: str, seconds: float, ok: bool) -> None:
        child = children.get(server)
        if child is None:
            child = children[server] = latency.labels(server)
        child.observe(seconds)

    return on_call


def register(metrics: Metrics, manager: ProxyManager) -> None:
    """Add the proxy's counts to C{metrics} for C{manager} (read at scrape time)."""
    metrics.add_collector(lambda: collect(manager))


def collect(manager: ProxyManager) -> Iterable[Metric]:
    sessions = GaugeMetricFamily("gasoline_proxy_sessions", "Open proxy sessions.")
    sessions.add_metric([], len(manager.sessions))
    children = GaugeMetricFamily(
        "gasoline_proxy_children", "Server instances by server, execution context and state "
        "(local: one per session; remote: one shared).", labels=["server", "context", "state"])
    counts: dict[tuple[str, str, str], int] = {}
    for server, context, child in manager.instances():
        if child.state in STATES:
            key = (server, context, child.state)
            counts[key] = counts.get(key, 0) + 1
    for key, n in sorted(counts.items()):
        children.add_metric(list(key), n)
    restarts = CounterMetricFamily(
        "gasoline_proxy_restarts", "Server instances restarted after a crash, a lost connection "
        "or a forgotten session, by server.", labels=["server"])
    for server, n in sorted(manager.restart_counts.items()):
        restarts.add_metric([server], n)
    calls = CounterMetricFamily(
        "gasoline_proxy_calls", "Proxied tools/call requests by server and outcome (ok, error: "
        "an error answer, a refused path, a server down or timed out).",
        labels=["server", "outcome"])
    for (server, outcome), n in sorted(manager.call_counts.items()):
        calls.add_metric([server, outcome], n)
    return (sessions, children, restarts, calls)

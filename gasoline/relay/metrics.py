"""
The CDP relay's series in C{GET /metrics}, read from the hub when the page is scraped (the relay's
paths pay one dict increment per command, event or extension request: L{Relay.counts}). Registered once per daemon::

    register(metrics, relay)   # gasoline.app, once per daemon

The series (listed in docs/operations.md):

  - C{gasoline_relay_clients}: CDP clients connected now (gauge);
  - C{gasoline_relay_extension_connected}: 1 while the extension's CDP link is up (gauge);
  - C{gasoline_relay_extension_links_total}: CDP links the extension opened (a replaced or
    re-opened link counts again);
  - C{gasoline_relay_targets}: tabs the extension exposes to CDP clients now (gauge);
  - C{gasoline_relay_commands_total}: messages CDP clients sent (every one, malformed included);
  - C{gasoline_relay_command_errors_total}: those answered with a CDP error (malformed, unknown
    session or method, refused, the extension failed or timed out, no extension);
  - C{gasoline_relay_events_total}: browser events fanned out to client sessions (one per
    session that received it);
  - C{gasoline_relay_extension_requests_total}: requests the relay sent to the extension
    (commands forwarded to Chrome plus attach/detach/createTab/... bookkeeping);
  - C{gasoline_relay_pending_requests}: requests to the extension awaiting an answer (gauge).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gasoline.relay.hub import Relay

if TYPE_CHECKING:
    from gasoline.metrics import Metrics

#: C{Relay.counts} key -> (counter name without C{_total}, help text).
_COUNTERS = {
    "extension_links": ("gasoline_relay_extension_links",
                        "CDP links the extension opened (a replacement counts again)."),
    "commands": ("gasoline_relay_commands", "Messages CDP clients sent to the relay."),
    "command_errors": ("gasoline_relay_command_errors",
                       "CDP client messages answered with an error."),
    "events": ("gasoline_relay_events",
               "Browser events fanned out to CDP client sessions (one per receiving session)."),
    "extension_requests": ("gasoline_relay_extension_requests",
                           "Requests the relay sent to the extension."),
}


def families(relay: Relay) -> Iterable[Metric]:
    """The relay's metric families, as they are now."""
    clients = GaugeMetricFamily("gasoline_relay_clients", "CDP clients connected to the relay.")
    clients.add_metric([], len(relay.clients))
    link = GaugeMetricFamily("gasoline_relay_extension_connected",
                             "1 while the extension's CDP link is up, else 0.")
    link.add_metric([], 1 if relay.extension_connected else 0)
    targets = GaugeMetricFamily("gasoline_relay_targets",
                                "Tabs the extension exposes to CDP clients.")
    targets.add_metric([], len(relay.targets))
    pending = GaugeMetricFamily("gasoline_relay_pending_requests",
                                "Requests to the extension awaiting an answer.")
    pending.add_metric([], relay.status()["pending"])
    yield from (clients, link, targets, pending)
    counts = relay.counts
    for key, (name, documentation) in _COUNTERS.items():
        counter = CounterMetricFamily(name, documentation)
        counter.add_metric([], counts.get(key, 0))
        yield counter


def register(metrics: Metrics, relay: Relay) -> None:
    """Add the relay's series to C{metrics}."""
    metrics.add_collector(lambda: families(relay))

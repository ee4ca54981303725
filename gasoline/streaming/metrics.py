"""
Context streaming's series on C{GET /metrics} (the table is in docs/operations.md).

Counters and gauges are read from the hub's own counters when the page is scraped, so matching and
delivery pay nothing for them; the one series recorded as it happens is the notification latency
histogram, observed once per buffer write that produced a notification (not once per event).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from gasoline.metrics import Metrics
    from gasoline.streaming.hub import Streaming

#: Seconds from a buffer write to its first notification written to a stream: the hub runs on the
#: reactor turn after the write (target p99 < 10 ms, docs/streaming.md).
NOTIFICATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


def latency_observer(metrics: Metrics) -> Callable[[float], None]:
    """The notification latency histogram, added to C{metrics}: what the hub is built with as its
    C{on_latency}."""
    latency = metrics.histogram(
        "streaming_notification_latency_seconds",
        "From a telemetry write to the first notification it produced being written to an "
        "agent's stream (one observation per write).",
        buckets=NOTIFICATION_BUCKETS)
    observe: Callable[[float], None] = latency.observe
    return observe


def register(metrics: Metrics, streaming: Streaming) -> None:
    """Add C{streaming}'s scrape-time series to C{metrics}."""
    metrics.add_collector(lambda: families(streaming))


def families(streaming: Streaming) -> Iterable[Metric]:
    """The scrape-time series of C{streaming}."""
    agents = list(streaming.agents.values())
    yield GaugeMetricFamily(
        "gasoline_streaming_agents", "Agents subscribed to context streaming.",
        value=len(agents))
    yield GaugeMetricFamily(
        "gasoline_streaming_inbox_items",
        "Unread events in the agents' inboxes, all agents together.",
        value=sum(len(agent.inbox) for agent in agents))
    yield GaugeMetricFamily(
        "gasoline_streaming_inbox_max_items",
        "Unread events in the fullest agent inbox (each holds at most 100).",
        value=max((len(agent.inbox) for agent in agents), default=0))
    yield CounterMetricFamily(
        "gasoline_streaming_events_classified",
        "Stream events of a subscribed type found in telemetry writes (once per event, whatever "
        "the agents; writes only agents with a full rate window see: when their tally is folded).",
        value=streaming.events_classified)
    yield CounterMetricFamily(
        "gasoline_streaming_events_matched",
        "Events that matched an agent's filters and entered its inbox (once per agent).",
        value=streaming.matched)
    yield CounterMetricFamily(
        "gasoline_streaming_notifications",
        "notifications/message written to agents' streams.",
        value=streaming.notifications)
    dropped = CounterMetricFamily(
        "gasoline_streaming_events_dropped",
        "Matched events that did not stay in an inbox, by reason: rate_limit (over the agent's "
        "rate limit, summarised in a rate_limit_exceeded notice), inbox_full (pushed out of a "
        "full inbox, summarised in a buffer_full notice).",
        labels=["reason"])
    dropped.add_metric(["rate_limit"], streaming.throttled)
    dropped.add_metric(["inbox_full"], streaming.overflowed)
    yield dropped


__all__ = ["latency_observer", "register", "families", "NOTIFICATION_BUCKETS"]

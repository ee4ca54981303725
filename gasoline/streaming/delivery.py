"""
The ways out of an agent's inbox as it fills: its own MCP stream, C{gasoline://events}
subscribers, long-polls and C{GET /events} listeners.

L{Delivery.deliver} is called once per item an inbox takes:

 - C{notifications/message} on the agent's own MCP stream: the standalone stream (connector GET,
   streamable-HTTP GET, legacy SSE) of the agent's most recently active session that has a writer
   attached: one stream per agent, never two; nothing for a session whose stream is gone, and the
   session's C{logging/setLevel} (if it set one) still filters by level. Pushing does not
   acknowledge: the event stays in the inbox. An event's JSON is encoded once and shared by every
   agent (L{message_with_seq}: only C{seq} is the agent's own);
 - one C{notifications/resources/updated} for the agent's most recently active session subscribed
   to C{gasoline://events}, until the resource is read or events are acknowledged;
 - the agent's C{observe events} long-polls fire, and its C{GET /events} listeners get the item.
"""

from __future__ import annotations

from typing import Any, Mapping

import orjson
from twisted.logger import Logger

from gasoline.streaming.inbox import AgentStream

log = Logger()

EVENTS_URI = "gasoline://events"


def encode(message: dict[str, Any]) -> bytes:
    """The JSON bytes of C{message} as the MCP streams send them."""
    return orjson.dumps(message, option=orjson.OPT_NON_STR_KEYS, default=str)


#: The bytes of a C{notifications/message} before its C{data}, per MCP log level.
_MESSAGE_HEAD: dict[str, bytes] = {}


def message_with_seq(level: str, data: bytes, seq: int) -> bytes:
    """L{encode} of the C{notifications/message} whose data is C{data} (the JSON object of an
    event, from L{encode}) with C{"seq": seq} added last, as
    L{Inbox.append<gasoline.streaming.inbox.Inbox.append>} adds it, built from the shared bytes
    instead of encoding the whole message again for every agent."""
    head = _MESSAGE_HEAD.get(level)
    if head is None:
        head = encode({"jsonrpc": "2.0", "method": "notifications/message",
                       "params": {"level": level, "logger": "gasoline", "data": None}})
        head = _MESSAGE_HEAD[level] = head[: -len(b"null}}")]
    return b"".join((head, data[:-1], b',"seq":', str(seq).encode(), b"}}}"))


RESOURCE_UPDATED = encode({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                           "params": {"uri": EVENTS_URI}})


class Delivery:
    """Lets inbox items out to the agents' sessions. Runs on the reactor thread."""

    def __init__(self, sessions: Mapping[str, Any]) -> None:
        #: The MCP server's session table (session id -> L{gasoline.mcp.session.McpSession}):
        #: the agents' streams.
        self.sessions = sessions
        #: C{notifications/message} written to agents' streams, in all (C{/metrics}).
        self.notifications = 0

    def targets(self, client_id: str) -> tuple[Any, Any]:
        """One pass over the sessions: (the session whose standalone stream carries
        C{client_id}'s notifications, the session to tell about C{gasoline://events}). Each is
        the most recently active live one (initialized, a writer attached), or None."""
        stream = resource = None
        for s in self.sessions.values():
            if s.client_id != client_id or s.closed or s.standalone.writer is None:
                continue
            if s.initialized and (stream is None or s.last_seen > stream.last_seen):
                stream = s
            if EVENTS_URI in s.subscriptions and (resource is None
                                                  or s.last_seen > resource.last_seen):
                resource = s
        return stream, resource

    def stream_session(self, client_id: str) -> Any:
        """The one session whose standalone stream carries C{client_id}'s notifications: the most
        recently active initialized session with a writer attached (None: no live stream)."""
        return self.targets(client_id)[0]

    def deliver(self, agent: AgentStream, item: dict[str, Any], level: str,
                targets: tuple[Any, Any] | None = None, encoded: dict[int, bytes] | None = None,
                key: int = -1, data: dict[str, Any] | None = None) -> None:
        """Let C{item} (just appended to C{agent}'s inbox) out by every way.

        @param targets: C{agent}'s L{targets}, if known.
        @param encoded: where the shared JSON of the events of one write is (or goes), by
            C{key}; with C{data} (the event's data, C{item} without its C{seq}).
        """
        session, subscriber = targets if targets is not None else self.targets(agent.client_id)
        if session is not None and (session.log_level is None or session.wants_log(level)):
            if encoded is not None and data is not None:
                # The event's JSON is encoded once and shared: only ``seq`` is the agent's own.
                body = encoded.get(key)
                if body is None:
                    body = encoded[key] = encode(data)
                message = message_with_seq(level, body, item["seq"])
            else:
                message = encode({"jsonrpc": "2.0", "method": "notifications/message",
                                  "params": {"level": level, "logger": "gasoline",
                                             "data": item}})
            session.send(message)
            agent.pushed_one()
            self.notifications += 1
        if subscriber is not None and not agent.resource_told:
            # ``notifications/resources/updated``: once, until the resource is read or events
            # are acknowledged.
            subscriber.send(RESOURCE_UPDATED)
            agent.tell_resource(True)
        if agent.waiters:
            agent.wake()
        if agent.listeners:
            for listener in list(agent.listeners):
                try:
                    listener(item)
                except Exception:
                    log.failure("events listener failed")
                    agent.unlisten(listener)

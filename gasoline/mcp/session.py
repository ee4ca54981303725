"""
MCP sessions and their server→client event streams.

One L{McpSession} exists per MCP connection: a streamable-HTTP session (C{Mcp-Session-Id}), a
connector connection (client id + connection id) or a legacy HTTP+SSE stream. It holds what the MCP
protocol negotiates per connection (protocol version, log level, resource subscriptions, requests in
flight); everything that belongs to the *agent* lives in its client state (C{session.state}), which
several sessions may share.

Server→client messages travel on L{EventStream}s: the session's I{standalone} stream (drained by
C{GET /mcp}, the legacy SSE stream, or the connector's GET) and one stream per C{POST} answered
with SSE. Every event gets an id C{<stream>-<n>}; a bounded log of recent events lets a client that
reconnects with C{Last-Event-ID} receive what it missed. A stream with no writer attached keeps
its events until one attaches (bounded: the oldest are dropped first).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable

import attrs

from gasoline.mcp.jsonrpc import encode
from gasoline.mcp.outgoing import redact_outgoing

if TYPE_CHECKING:
    from twisted.internet.interfaces import IDelayedCall

    from gasoline.core.interfaces import IClientState
    from gasoline.interfaces import ISessionTools

#: RFC 5424 severities as MCP names them, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_LEVEL_RANK = {name: i for i, name in enumerate(LOG_LEVELS)}

#: How many recent events each stream keeps for replay.
MAX_REPLAY_EVENTS = 256
#: How many finished POST streams a session keeps for C{Last-Event-ID} replay.
MAX_FINISHED_STREAMS = 16

#: C{writer(event_id, payload_bytes)} puts one event on the wire.
Writer = Callable[[str, bytes], None]


class EventStream:
    """The server→client events of one SSE stream, with ids and a bounded replay log."""

    __slots__ = ("stream_id", "_log", "_n", "writer", "closer", "delivered", "done", "dropped")

    def __init__(self, stream_id: str, max_events: int = MAX_REPLAY_EVENTS) -> None:
        self.stream_id = stream_id
        self._log: deque[tuple[int, str, bytes]] = deque(maxlen=max_events)
        self._n = 0
        self.writer: Writer | None = None
        #: Ends the HTTP response the writer belongs to (set by the transport), or None.
        self.closer: Callable[[], None] | None = None
        #: Number of the newest event handed to a writer.
        self.delivered = 0
        #: True once the stream's last event (a POST's response) has been pushed.
        self.done = False
        #: Events that left the replay log before any writer saw them.
        self.dropped = 0

    def push(self, payload: bytes) -> str:
        """Record one event and write it to the attached writer, if any. Return its id."""
        self._n += 1
        event_id = f"{self.stream_id}-{self._n}"
        log = self._log
        if len(log) == log.maxlen and log[0][0] > self.delivered:
            self.dropped += 1
        log.append((self._n, event_id, payload))
        writer = self.writer
        if writer is not None:
            self.delivered = self._n
            writer(event_id, payload)
        return event_id

    def attach(self, writer: Writer, last_event_id: str | None = None,
               closer: Callable[[], None] | None = None) -> int:
        """Make C{writer} receive this stream's events; first replay what it has not seen.

        With C{last_event_id}, every logged event after that one is replayed; without it, the
        events no writer has received yet. C{closer} ends the HTTP response C{writer} belongs to
        (L{closer}; without it, the stream's closer stays as it is). Return how many were
        replayed.
        """
        if closer is not None:
            self.closer = closer
        after = self.delivered
        if last_event_id is not None:
            after = event_number(last_event_id)
        self.writer = writer
        replayed = 0
        for n, event_id, payload in list(self._log):
            if n > after:
                writer(event_id, payload)
                replayed += 1
                self.delivered = max(self.delivered, n)
        return replayed

    def detach(self, writer: Writer | None = None) -> None:
        if writer is None or self.writer is writer:
            self.writer = None

    def end(self) -> Callable[[], None] | None:
        """Detach the writer and forget the closer of its response: the closer, for the caller
        to call (or C{None})."""
        closer = self.closer
        self.writer = None
        self.closer = None
        return closer

    def complete(self) -> None:
        """The stream's last event (a POST's response) was pushed: the stream is done, its
        writer detached and its response ended."""
        self.done = True
        closer = self.end()
        if closer is not None:
            closer()

    def forget_closer(self, closer: Callable[[], None]) -> None:
        """C{closer}'s response is gone: forget it, if it is still this stream's closer."""
        if self.closer == closer:
            self.closer = None

    def __len__(self) -> int:
        return len(self._log)


def event_number(event_id: str) -> int:
    """The sequence number in an event id C{<stream>-<n>} (0 if malformed)."""
    _, _, n = event_id.rpartition("-")
    try:
        return int(n)
    except ValueError:
        return 0


def stream_of(event_id: str) -> str:
    """The stream id in an event id C{<stream>-<n>}."""
    return event_id.rpartition("-")[0]


@attrs.define(eq=False)
class McpSession:
    """One MCP connection's protocol state. The agent's own state is C{state} (shared)."""

    session_id: str
    client_id: str
    #: The agent's own state (shared by its sessions).
    state: IClientState
    #: C{"streamable"}, C{"connector"} or C{"sse"}.
    transport: str
    created_at: float
    last_seen: float
    protocol_version: str | None = None
    #: C{initialize} was answered.
    initialized: bool = False
    #: C{notifications/initialized} arrived.
    ready: bool = False
    client_info: dict[str, Any] = attrs.field(factory=dict)
    client_capabilities: dict[str, Any] = attrs.field(factory=dict)
    #: Minimum level of C{notifications/message} to send; None until C{logging/setLevel}.
    log_level: str | None = None
    subscriptions: set[str] = attrs.field(factory=set)
    #: Requests being handled: request id -> Deferred (cancelled by C{notifications/cancelled}).
    in_flight: dict[Any, Any] = attrs.field(factory=dict)
    #: Requests this server sent the client (sampling, elicitation): id -> Deferred.
    outgoing: dict[Any, Any] = attrs.field(factory=dict)
    streams: dict[str, EventStream] = attrs.field(factory=dict)
    standalone: EventStream = attrs.field(factory=lambda: EventStream("0"))
    closed: bool = False
    #: Opened without a client id (its client id is a fresh random one nobody can reuse).
    anonymous: bool = False
    #: The transport connection the latest request came on (a rate-limit key beside the client
    #: id; set by the HTTP transport, None elsewhere).
    transport_key: str | None = None
    #: The idle deadline, reset on every request.
    idle_call: IDelayedCall | None = None
    #: Called once when the session ends (transport cleanup).
    on_close: list[Callable[["McpSession"], None]] = attrs.field(factory=list)
    #: Tools this session sees beside the server's own (e.g. a proxy session's aggregated
    #: tools), or None.
    extra_tools: ISessionTools | None = None
    #: The page tools whose results already carried the untrusted-content note in this session
    #: (gasoline.tools.context.ToolContext.untrusted_note_due).
    untrusted_told: set[str] = attrs.field(factory=set)
    _next_stream: int = 0
    _next_request: int = 0

    def __attrs_post_init__(self) -> None:
        self.streams[self.standalone.stream_id] = self.standalone

    def when_closed(self, hook: Callable[["McpSession"], None]) -> None:
        """Call C{hook(self)} once when this session ends (L{on_close})."""
        self.on_close.append(hook)

    def arrived_on(self, transport_key: str | None) -> None:
        """The latest request came on the transport connection C{transport_key}
        (L{transport_key})."""
        self.transport_key = transport_key

    def show_tools(self, tools: ISessionTools,
                   on_close: Callable[["McpSession"], None]) -> None:
        """Show C{tools} beside the server's own from now on, and call C{on_close(self)} when
        this session ends (a proxy session binding this connection)."""
        self.extra_tools = tools
        self.on_close.append(on_close)

    def initialize(self, version: str, capabilities: dict[str, Any],
                   client_info: dict[str, Any], *, ready: bool = False) -> None:
        """C{initialize} was answered with protocol C{version} (C{ready}: and its
        C{notifications/initialized} is already known, a restored session's)."""
        self.protocol_version = version
        self.client_capabilities = capabilities
        self.client_info = client_info
        self.initialized = True
        if ready:
            self.ready = True

    def mark_ready(self) -> None:
        """C{notifications/initialized} arrived."""
        self.ready = True

    def set_log_level(self, level: str) -> None:
        """C{logging/setLevel}: the least severe C{notifications/message} to send."""
        self.log_level = level

    def expect_answer(self, request_id: Any, answer: Any) -> None:
        """This server sent the client the request C{request_id}; C{answer} (a Deferred) fires
        with the client's response (L{outgoing})."""
        self.outgoing[request_id] = answer

    def take_answer(self, request_id: Any) -> Any:
        """The Deferred waiting for the client's response to C{request_id} (no longer
        waiting), or None."""
        try:
            return self.outgoing.pop(request_id, None)
        except TypeError:  # an unhashable id
            return None

    def take_in_flight(self, request_id: Any) -> Any:
        """The Deferred of the request C{request_id} being handled (no longer tracked here),
        or None."""
        try:
            return self.in_flight.pop(request_id, None)
        except TypeError:  # an unhashable requestId
            return None

    def subscribe(self, uri: str) -> None:
        """C{resources/subscribe}: C{notifications/resources/updated} for C{uri}."""
        self.subscriptions.add(uri)

    def unsubscribe(self, uri: str) -> None:
        """C{resources/unsubscribe}."""
        self.subscriptions.discard(uri)

    def arm_idle(self, call: IDelayedCall | None) -> None:
        """C{call} closes the session when it stays idle (C{None}: the idle deadline fired)."""
        self.idle_call = call

    def seen(self, now: float, idle_timeout: float) -> None:
        """A request at clock time C{now}: the idle deadline moves to C{idle_timeout} seconds
        from now, and the agent's state is touched."""
        self.last_seen = now
        self.state.touch(now)
        call = self.idle_call
        if call is not None and call.active():
            call.reset(idle_timeout)

    def close(self) -> list[Callable[["McpSession"], None]]:
        """End the session: its idle deadline, requests in flight and requests to the client
        are cancelled. The close hooks (L{on_close}) to run, now taken from the session."""
        self.closed = True
        call, self.idle_call = self.idle_call, None
        if call is not None and call.active():
            call.cancel()
        for d in list(self.in_flight.values()) + list(self.outgoing.values()):
            d.cancel()
        self.in_flight.clear()
        self.outgoing.clear()
        hooks, self.on_close = self.on_close, []
        return hooks

    def hide_tools(self, tools: ISessionTools) -> None:
        """Stop showing C{tools} (if they are the ones shown)."""
        if self.extra_tools is tools:
            self.extra_tools = None

    def new_stream(self) -> EventStream:
        """A stream for one POST answered with SSE (finished ones are pruned, oldest first)."""
        self._next_stream += 1
        stream = EventStream(str(self._next_stream))
        self.streams[stream.stream_id] = stream
        finished = [s for s in self.streams.values() if s.done]
        for old in finished[: max(0, len(finished) - MAX_FINISHED_STREAMS)]:
            del self.streams[old.stream_id]
        return stream

    def stream_for_event(self, event_id: str) -> EventStream | None:
        return self.streams.get(stream_of(event_id))

    def send(self, message: dict[str, Any] | bytes) -> str:
        """Queue a message on the standalone stream (GET / legacy SSE / connector stream)."""
        # Dicts pass the outgoing redaction; bytes were encoded (and redacted) by their sender.
        payload = message if isinstance(message, bytes) else encode(redact_outgoing(message))
        return self.standalone.push(payload)

    def next_request_id(self) -> str:
        self._next_request += 1
        return f"gasoline-{self._next_request}"

    def wants_log(self, level: str) -> bool:
        """Should a C{notifications/message} at C{level} be sent to this session?"""
        if self.log_level is None:
            return False
        return _LEVEL_RANK.get(level, 0) >= _LEVEL_RANK[self.log_level]

"""
C{GET /events?client=<id>}: one agent's event inbox as server-sent events, for consumers that do
not speak MCP (a full-duplex route for each agent's streaming inbox).

Each inbox item is one SSE event: C{id: <seq>}, C{event: <event_type>}, C{data: <JSON>}. On
connect the unread items are replayed (only those after C{Last-Event-ID} / C{?since=<seq>} when
given), then new ones follow as they arrive; reading here never acknowledges (C{observe
{what:"events"}} does). Errors: 400 without a well-formed C{client}, 404 for a client the daemon
does not know, 409 when that client has no streaming subscription (C{configure
{what:"streaming"}}), 406 when C{Accept} excludes C{text/event-stream}, 403 without the
C{proof} that C{configure {what:"streaming"}} gave the subscribing agent (its C{events_url}):
a client id alone does not open another agent's stream. The root's guard (Host,
Origin, the optional API key: C{events} is a keyed segment) runs first, as for every route.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any

import orjson
from klein import Klein
from twisted.logger import Logger
from twisted.web.server import NOT_DONE_YET

from gasoline.core.clients.registry import CLIENT_ID_RE
from gasoline.http.json import json_error
from gasoline.http.keepalive import keepalive_service, start_sse
from gasoline.stream import SSE_LIMIT, request_writer, sse_notice

if TYPE_CHECKING:
    from twisted.web.server import Request
    from twisted.internet.interfaces import IReactorTime

    from gasoline.streaming.hub import Streaming

log = Logger()

def sse_item(item: dict[str, Any]) -> bytes:
    kind = str(item.get("event_type", "event")).encode("ascii", "replace")
    return (b"id: %d\nevent: " % item["seq"]) + kind + b"\ndata: " + orjson.dumps(
        item, option=orjson.OPT_NON_STR_KEYS, default=str) + b"\n\n"


def _notice(dropped: int) -> bytes:
    return sse_notice(dropped, "events (they stay unread in the inbox; reconnect with "
                      "Last-Event-ID to replay them)")


class EventsAPI:
    """C{GET /events} of one daemon's streaming hub."""

    app = Klein()

    def __init__(self, streaming: Streaming, clock: IReactorTime, limit: int = SSE_LIMIT) -> None:
        self.streaming = streaming
        self.clock = clock
        #: Bytes a paused stream keeps (L{gasoline.stream.BoundedWriter}); the events past it
        #: stay in the agent's inbox (reconnect with C{Last-Event-ID} to read them).
        self.limit = limit
        #: Open streams (their L{gasoline.stream.BoundedWriter}); each gets an SSE comment every
        #: L{gasoline.http.keepalive.KEEPALIVE_SECONDS}.
        self.open: set[Any] = set()
        self.keepalive_service = keepalive_service(clock, self.open, "events-sse-keepalive",
                                                   "/events")

    @app.route("/events", methods=["GET"])
    def stream(self, request: Request) -> Any:  # bytes, or NOT_DONE_YET: the stream is open
        accept = (request.getHeader(b"accept") or b"").lower()
        if accept and b"text/event-stream" not in accept and b"*/*" not in accept:
            return json_error(request, 406, "GET /events answers text/event-stream")
        raw = (request.args.get(b"client") or [b""])[0].decode("utf-8", "replace")
        if not CLIENT_ID_RE.match(raw):
            return json_error(request, 400, "client=<client id> is required")
        # Who may open the stream: the agent that subscribed, which alone got the proof (in
        # configure {what:"streaming"}'s events_url). Checked before the client is looked up,
        # so the answer says nothing about which client ids exist.
        token = (request.args.get(b"proof") or [request.getHeader(b"x-gasoline-events-proof")
                                                  or b""])[0]
        if not hmac.compare_digest(token, self.streaming.events_token(raw).encode()):
            return json_error(request, 403, "forbidden: proof=<p> from configure "
                              "{what:\"streaming\"}'s events_url is required")
        since = 0
        last = request.getHeader(b"last-event-id") or (request.args.get(b"since") or [None])[0]
        if last is not None:
            try:
                since = max(0, int(last))
            except ValueError:
                return json_error(request, 400, "since / Last-Event-ID must be a sequence number")
        state = self.streaming.registry.get(raw)
        if state is None:
            return json_error(request, 404, f"unknown client {raw!r}")
        gone = [False]
        stream: list[Any] = []

        def listener(item: dict[str, Any]) -> None:
            if not gone[0]:
                stream[0].send(sse_item(item))

        def end() -> None:
            if not gone[0]:
                gone[0] = True
                stream[0].close()
                request.finish()

        agent = self.streaming.listen(raw, listener, end)
        if agent is None:
            return json_error(request, 409, f"client {raw!r} has no streaming subscription; "
                              "subscribe with configure {what:\"streaming\"}")
        start_sse(request)
        writer = request_writer(request, self.clock, limit=self.limit, notice=_notice)
        stream.append(writer)
        writer.send(b"retry: 1000\n\n")
        for item in agent.inbox.unread():
            if item["seq"] > since:
                writer.send(sse_item(item))
        self.open.add(writer)

        def finished(_: Any) -> None:
            gone[0] = True
            self.open.discard(writer)
            self.streaming.unlisten(raw, listener)

        request.notifyFinish().addBoth(finished)
        return NOT_DONE_YET

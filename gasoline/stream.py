"""
One bounded writer for every stream the daemon (and the connector) writes: SSE responses
(C{GET /events}, C{GET /mcp}, C{POST /mcp} answers upgraded to SSE, the legacy C{/mcp/sse}), the
relay's WebSockets (CDP clients, the extension link) and the connector's stdout.

A L{BoundedWriter} is an C{IPushProducer} registered with the stream's consumer (a twisted.web
C{Request}, the TCP transport under an autobahn protocol, C{StandardIO}). The consumer pauses it
when its own buffer is full (Twisted's transports do at C{bufferSize}, 64 KiB) and resumes it when
the reader has taken the data. While it is paused, units (SSE events, WebSocket messages, lines)
wait in a send buffer of at most C{limit} bytes; past that they are dropped and counted, and when
the consumer drains, the buffer is written, then one notice (C{notice(dropped)}: a
C{streaming_paused} SSE event, a C{Gasoline.streamingPaused} CDP event, ...). A stream that stays
paused for C{stall} seconds (its reader takes nothing at all) is disconnected with
C{disconnect()} (an abort: the transport's buffer is freed with the connection).

So one stream holds at most the transport's buffer, C{limit} bytes and one unit (a unit is written
whole when the stream is not paused). L{close} (at the stream's end, before C{finish()}) unregisters
the producer and frees the buffer. The waiting units are kept in one C{bytearray} (and their
lengths), not as thousands of small objects: small objects kept for long among the reactor's
short-lived ones pin the allocator's arenas (a paused CDP client holding 4 MB of events in 10 000
messages raised the daemon's RSS by 38 MiB), while one large buffer is one allocation, returned to
the system when the stream drains or closes.

Twisted, zope.interface and the standard library only: the connector imports this module.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IConsumer, IDelayedCall, IPushProducer, IReactorTime
from zope.interface import implementer

#: Bytes a paused stream keeps for its reader, per kind of stream (docs/operations.md, "Streams").
SSE_LIMIT = 1024 * 1024
MESSAGE_LIMIT = 16 * 1024 * 1024
#: Seconds a stream may stay paused (its reader taking nothing) before it is disconnected.
STALL_SECONDS = 30.0


@implementer(IPushProducer)
class BoundedWriter:
    """A bounded send buffer for one stream; see the module docstring.

    @ivar paused: the consumer asked us to stop writing.
    @ivar closed: the stream ended (L{close}, C{stopProducing}, or a stall).
    @ivar dropped: units refused since the last notice (written when the stream drains).
    @ivar dropped_total: units refused over the stream's life.
    @ivar pending_bytes: bytes waiting in the send buffer.
    """

    def __init__(self, clock: IReactorTime, write: Callable[[bytes], None],
                 disconnect: Callable[[], None], *, limit: int = SSE_LIMIT,
                 stall: float = STALL_SECONDS, notice: Callable[[int], bytes] | None = None,
                 size: Callable[[bytes], int] = len, on_stall: Callable[[], None] | None = None,
                 ) -> None:
        self.clock = clock
        self._write = write
        self._disconnect = disconnect
        self.limit = limit
        self.stall = stall
        self._notice = notice
        self._size = size
        self._on_stall = on_stall
        #: The waiting units, back to back, and their lengths (see the module docstring).
        self._buffer = bytearray()
        self._lengths = array("Q")
        self._first = 0  # index in _lengths of the next unit to write
        self._offset = 0  # its offset in _buffer
        self.pending_bytes = 0
        self.paused = False
        self.closed = False
        self.dropped = 0
        self.dropped_total = 0
        self.stalled = False
        self._consumer: IConsumer | None = None
        self._timer: IDelayedCall | None = None

    # -- the stream's side ---------------------------------------------------------------------

    def attach(self, consumer: IConsumer, paused: bool = False) -> BoundedWriter:
        """Register with C{consumer} (C{registerProducer(self, True)}); C{paused}: the consumer's
        buffer is already full (no C{pauseProducing} will come for it). Returns C{self}."""
        consumer.registerProducer(self, True)
        self._consumer = consumer
        if paused:
            self.pauseProducing()
        return self

    @property
    def pending_units(self) -> int:
        """Units waiting in the send buffer."""
        return len(self._lengths) - self._first

    def send(self, unit: bytes) -> bool:
        """Write C{unit} now, keep it for when the reader drains, or drop it (C{False})."""
        if self.closed:
            return False
        if not self.paused and not self.pending_units:
            self._write(unit)
            return True
        n = self._size(unit)
        if self.pending_bytes + n > self.limit:
            self.dropped += 1
            self.dropped_total += 1
            return False
        self._buffer += unit
        self._lengths.append(len(unit))
        self.pending_bytes += n
        return True

    #: The keep-alive services call C{write}.
    write = send

    def close(self) -> None:
        """The stream ends: unregister from the consumer and free the send buffer."""
        if self.closed:
            return
        self._release()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.unregisterProducer()
            except Exception:  # the consumer is already gone
                pass

    # -- IPushProducer (the consumer's side) ------------------------------------------------------

    def pauseProducing(self) -> None:
        if self.closed or self.paused:
            return
        self.paused = True
        self._timer = self.clock.callLater(self.stall, self._stall)

    def resumeProducing(self) -> None:
        if self.closed:
            return
        self.paused = False
        self._cancel_timer()
        while self.pending_units and not self.paused and not self.closed:
            length = self._lengths[self._first]
            unit = bytes(self._buffer[self._offset:self._offset + length])
            self._first += 1
            self._offset += length
            self.pending_bytes -= self._size(unit)
            self._write(unit)
        if self.closed:
            return
        if not self.pending_units:
            self._clear()
        elif self._offset > len(self._buffer) // 2:  # compact now and then, not per unit
            del self._buffer[:self._offset]
            del self._lengths[:self._first]
            self._first = self._offset = 0
        if not self.pending_units and not self.paused and self.dropped:
            dropped, self.dropped = self.dropped, 0
            if self._notice is not None:
                self._write(self._notice(dropped))

    def stopProducing(self) -> None:
        self._release()
        self._consumer = None

    # -- internals --------------------------------------------------------------------------------

    def _stall(self) -> None:
        self._timer = None
        if self.closed:
            return
        self.stalled = True
        self.close()
        if self._on_stall is not None:
            self._on_stall()
        self._disconnect()

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def _clear(self) -> None:
        self._buffer = bytearray()
        self._lengths = array("Q")
        self._first = self._offset = 0
        self.pending_bytes = 0

    def _release(self) -> None:
        self.closed = True
        self._cancel_timer()
        self._clear()


def abort_transport(transport: Any) -> None:
    """Drop a connection now, its unsent buffer with it (C{abortConnection} where the transport
    has one, C{loseConnection} otherwise)."""
    if transport is None:
        return
    abort = getattr(transport, "abortConnection", None)
    if abort is not None:
        abort()
    else:
        transport.loseConnection()


def request_writer(request: Any, clock: IReactorTime, *, limit: int = SSE_LIMIT,
                   stall: float = STALL_SECONDS,
                   notice: Callable[[int], bytes] | None = None) -> BoundedWriter:
    """A L{BoundedWriter} for one streaming twisted.web response (an SSE stream).

    Call C{writer.close()} before C{request.finish()}; the writer closes itself when the client
    goes away. On a L{gasoline.http.request.GasolineChannel} (the daemon's), a writer registered
    while the connection's transport buffer is full starts paused.
    """
    def disconnect() -> None:
        channel = getattr(request, "channel", None)
        abort_transport(getattr(channel, "transport", None))

    writer = BoundedWriter(clock, request.write, disconnect, limit=limit, stall=stall,
                           notice=notice)
    writer.attach(request)
    request.notifyFinish().addBoth(lambda _: writer.close())
    return writer


def sse_notice(dropped: int, what: str = "events") -> bytes:
    """The SSE event written once a paused stream drains (clients ignore unknown event types)."""
    return (b'event: streaming_paused\ndata: {"dropped":%d,"message":"the reader was too slow: '
            b'%d %s were not written (the stream was paused at its buffer limit)"}\n\n'
            % (dropped, dropped, what.encode("ascii", "replace")))

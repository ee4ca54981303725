"""
The connector's stdio side: newline-delimited JSON-RPC on stdin/stdout.

L{StdioLines} is a C{LineReceiver} for C{twisted.internet.stdio.StandardIO}. Its C{MAX_LENGTH} is
raised well above the 16 KiB default, and a longer line does not drop the connection (which would
end the agent's whole session): the line is discarded up to its newline and answered with a
JSON-RPC error, and the lines after it are read normally. Stdin EOF and stdout closing are reported
separately (C{IHalfCloseableProtocol}) so answers still pending can be written after EOF.

Stdout is written through a L{gasoline.stream.BoundedWriter} (given a clock): an agent that stops
reading makes the connector keep at most L{STDOUT_LIMIT} bytes of lines (later ones are dropped,
and one C{notifications/message} warning says how many once it reads again); an agent that reads
nothing for L{STDOUT_STALL_SECONDS} is treated as gone (stdin EOF).
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IConsumer, IHalfCloseableProtocol, IReactorTime
from twisted.protocols.basic import LineReceiver
from twisted.python.failure import Failure
from zope.interface import implementer

from gasoline.stream import MESSAGE_LIMIT, BoundedWriter

#: Default longest stdin line (bytes). Bigger requests get a JSON-RPC error.
DEFAULT_MAX_LINE = 8 * 1024 * 1024
#: Bytes of stdout lines kept while the agent does not read.
STDOUT_LIMIT = MESSAGE_LIMIT
#: Seconds the agent may read nothing of stdout (while lines wait) before it counts as gone.
STDOUT_STALL_SECONDS = 120.0


def _notice(dropped: int) -> bytes:
    return (b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"warning",'
            b'"logger":"gasoline","data":"gasoline connect: stdout was not read: %d messages '
            b'were dropped"}}' % dropped)


@implementer(IHalfCloseableProtocol)
class StdioLines(LineReceiver):
    delimiter = b"\n"
    MAX_LENGTH = DEFAULT_MAX_LINE

    def __init__(
        self,
        on_line: Callable[[bytes], None],
        on_too_long: Callable[[bytes, int], None],
        on_eof: Callable[[], None],
        max_length: int | None = None,
        *,
        clock: IReactorTime,
    ) -> None:
        self.on_line = on_line
        self.on_too_long = on_too_long
        self.on_eof = on_eof
        if max_length is not None:
            self.MAX_LENGTH = max_length
        self._discarding = False
        self._leftover: bytes | None = None
        self._eof_reported = False
        self.lost = False
        self._lost_waiters: list[Deferred] = []
        self.clock = clock
        #: Stdout's bounded writer (set when the transport connects).
        self.writer: BoundedWriter | None = None

    def connectionMade(self) -> None:
        transport = self.transport
        assert transport is not None  # connectionMade: the transport is set
        delimiter = self.delimiter
        self.writer = BoundedWriter(
            self.clock, lambda line: transport.write(line + delimiter),
            transport.loseConnection, limit=STDOUT_LIMIT, stall=STDOUT_STALL_SECONDS,
            notice=_notice, size=lambda line: len(line) + 1, on_stall=self._report_eof,
        ).attach(IConsumer(transport))  # stdio is a consumer (ITransport does not say so)

    # -- reading ----------------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self._discarding:
            end = data.find(self.delimiter)
            if end < 0:
                return
            self._discarding = False
            data = data[end + len(self.delimiter):]
            if not data:
                return
        super().dataReceived(data)
        # Lines that arrived together with an over-long one are read now (LineReceiver hands
        # the whole buffer to lineLengthExceeded).
        while self._leftover is not None and not self._discarding:
            rest, self._leftover = self._leftover, None
            super().dataReceived(rest)

    def lineReceived(self, line: bytes) -> None:
        self.on_line(line)

    def lineLengthExceeded(self, line: bytes) -> None:
        end = line.find(self.delimiter)
        if end >= 0:
            head, rest = line[:end], line[end + len(self.delimiter):]
            self._leftover = rest or None
        else:
            head = line
            self._discarding = True
        self.on_too_long(head, self.MAX_LENGTH)

    def readConnectionLost(self) -> None:
        self._report_eof()

    def writeConnectionLost(self) -> None:
        # Nobody reads our answers any more: same as the agent going away.
        self._report_eof()

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.lost = True
        if self.writer is not None:
            self.writer.stopProducing()
        self._report_eof()
        waiters, self._lost_waiters = self._lost_waiters, []
        for d in waiters:
            d.callback(None)

    def when_lost(self) -> Deferred:
        """A Deferred that fires once stdin and stdout are both closed (stdout flushed)."""
        if self.lost:
            return succeed(None)
        d: Deferred = Deferred()
        self._lost_waiters.append(d)
        return d

    def _report_eof(self) -> None:
        if not self._eof_reported:
            self._eof_reported = True
            self.on_eof()

    # -- writing ----------------------------------------------------------------------------------

    def write_line(self, data: bytes) -> None:
        """Write one protocol line (C{data} must not contain a newline)."""
        if self.writer is not None and not self.lost:
            self.writer.send(data)

"""
C{gasoline connect}: the stdio MCP connector an agent's MCP configuration spawns::

    gasoline connect [--client-id ID] [--port 7890 | --url http://127.0.0.1:7890]
                     [--state-dir DIR] [--no-autostart] [--bound 30] [--max-line BYTES]
                     [--api-key KEY]

Identity: C{--client-id}, else the first 12 hex chars of SHA-256 of the working directory, else a
random id; every request that acts as it carries its proof, made with the daemon's client key
(C{<state-dir>/client-key}: C{--state-dir}, else the default, else the state dir the daemon's
C{/health} names; L{gasoline.connect.proof}). Nothing but JSON-RPC lines is ever written to stdout: Twisted's log goes to stderr, and
C{sys.stdout} itself points at stderr so a stray C{print} cannot corrupt the protocol.

This is a separate program, so (unlike library code) it resolves the global reactor itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treq.client import HTTPClient
from twisted.internet import stdio
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import react
from twisted.logger import (
    FilteringLogObserver,
    ILogFilterPredicate,
    LogEvent,
    Logger,
    LogLevel,
    LogLevelFilterPredicate,
    PredicateResult,
    globalLogBeginner,
    textFileLogObserver,
)
from twisted.python import usage
from twisted.web.client import Agent, HTTPConnectionPool
from zope.interface import implementer

from gasoline import __version__
from gasoline.common import (
    client_id_for_cwd,
    default_state_dir,
    is_factory_chatter,
    positive_duration,
    tcp_port,
)
from gasoline.connect.bridge import DEFAULT_BOUND, Bridge
from gasoline.connect.client import DaemonHTTP
from gasoline.connect.discovery import Discovery, Spawner, loopback_port
from gasoline.connect.fast import resend
from gasoline.connect.options import DEFAULT_PORT, FLAGS, VALUE_OPTIONS
from gasoline.connect.proof import ClientKeyFile
from gasoline.connect.protocol import DEFAULT_MAX_LINE, StdioLines

if TYPE_CHECKING:
    from gasoline.connect.fast import Prelude


def _line_length(value: str) -> int:
    n = int(value)
    if n < 1024:
        raise ValueError("must be at least 1024")
    return n


#: What L{ConnectOptions} adds to the options declared in L{gasoline.connect.options}.
_DEFAULTS = {"bound": DEFAULT_BOUND, "max-line": DEFAULT_MAX_LINE}
_COERCE = {"port": tcp_port, "bound": positive_duration, "max-line": _line_length}


class ConnectOptions(usage.Options):
    synopsis = "Usage: gasoline connect [options]"
    longdesc = (
        "Forward an MCP client's stdio session to the shared Gasoline daemon, starting the daemon "
        "if none runs. Only JSON-RPC lines are written to stdout; logs go to stderr."
    )
    # The names and help are gasoline.connect.options' (the first exchange parses the same ones);
    # the defaults and the checks are added here.
    optParameters = [[name, short, _DEFAULTS.get(name), doc, _COERCE.get(name)]
                     for name, short, doc in VALUE_OPTIONS]
    optFlags = [[name, short, doc] for name, short, doc in FLAGS]

    def opt_version(self) -> None:
        sys.stderr.write(f"gasoline {__version__}\n")
        raise SystemExit(0)

    def postOptions(self) -> None:
        if self["api-key"] is None:
            self["api-key"] = os.environ.get("GASOLINE_API_KEY") or None
        if self["url"] and self["port"]:
            raise usage.UsageError("give --port or --url, not both")
        if self["url"]:
            if not self["url"].startswith(("http://", "https://")):
                raise usage.UsageError("--url must be an http:// URL")
            self["base-url"] = self["url"].rstrip("/")
        else:
            self["base-url"] = f"http://127.0.0.1:{self['port'] or DEFAULT_PORT}"
        cid = self["client-id"]
        if cid is not None:
            if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$", cid):
                raise usage.UsageError(
                    "--client-id must be 1-64 characters of letters, digits, '.', '_' or '-'")


def resolve_client_id(explicit: str | None) -> tuple[str, str | None]:
    """C{(client_id, cwd)}: --client-id, else the working directory's hash, else random."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    if explicit:
        return explicit, cwd
    if cwd:
        return client_id_for_cwd(cwd), cwd
    return secrets.token_hex(6), None


def _log_to_stderr() -> None:
    level = LogLevel.levelWithName(os.environ.get("GASOLINE_CONNECT_LOG_LEVEL", "info"))
    observer = FilteringLogObserver(
        textFileLogObserver(sys.stderr),
        [LogLevelFilterPredicate(defaultLogLevel=level), _NoFactoryChatter()])
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)


@implementer(ILogFilterPredicate)
class _NoFactoryChatter:
    """No "Starting factory" line per HTTP connection on stderr (L{is_factory_chatter})."""

    def __call__(self, event: LogEvent) -> PredicateResult:
        return PredicateResult.no if is_factory_chatter(event) else PredicateResult.maybe




def main(argv: list[str] | None = None, prelude: Prelude | None = None) -> int:
    """Run the connector. C{prelude} (a L{gasoline.connect.fast.Prelude}) is what the first
    exchange already did: stdin bytes still to handle, and the session it initialized."""
    options = ConnectOptions()
    try:
        options.parseOptions(list(sys.argv[1:] if argv is None else argv))
    except usage.UsageError as e:
        sys.stderr.write(f"gasoline connect: {e} (see gasoline connect --help)\n")
        return 2
    # Protocol lines are written to fd 1 by StandardIO; everything Python-level goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        _log_to_stderr()
        options["prelude"] = prelude
        return _run(options)


def _run(options: ConnectOptions) -> int:
    """Run the connector until stdin closes (exit 0) or the process is told to stop.

    C{task.react} resolves the reactor and hands it in; nothing here reads the global one.
    """
    try:
        react(_connect, (options,))
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def _connect(reactor: Any, options: ConnectOptions) -> Deferred[None]:
    log = Logger(namespace="gasoline.connect")
    client_id, cwd = resolve_client_id(options["client-id"])
    prelude = options.get("prelude")
    init_message = prelude.init_message if prelude is not None else None
    adopted_id = prelude.connection_id if prelude is not None and init_message is not None else None
    connection_id = adopted_id or secrets.token_hex(8)
    base_url = options["base-url"]

    class Pool(HTTPConnectionPool):
        #: Idle connections kept open to the daemon (Twisted's default is 2).
        maxPersistentPerHost = 4

    pool = Pool(reactor, persistent=True)
    http = HTTPClient(Agent(reactor, pool=pool))
    # The state dir this connector starts daemons with, where it reads the daemon's client key
    # (its client id's proof) until a daemon's /health names another (gasoline.connect.proof).
    state_dir = Path(options["state-dir"]) if options["state-dir"] else default_state_dir()
    daemon = DaemonHTTP(http, base_url, reactor, client_id, connection_id, options["api-key"],
                        key_file=ClientKeyFile(state_dir))
    spawner = None
    port = loopback_port(base_url)
    if not options["no-autostart"] and port is not None:
        spawner = Spawner(reactor, port, state_dir, api_key=options["api-key"])
    discovery = Discovery(reactor, daemon, spawner)

    lines: StdioLines | None = None

    def write(data: bytes) -> None:
        if lines is not None:
            lines.write_line(data)

    #: Why the connector gave up for good (a permanent problem), if it did.
    gave_up: list[str] = []

    def permanent(problem: str) -> None:
        gave_up.append(problem)
        sys.stderr.write(f"gasoline connect: {problem}\n")
        stop()

    bridge = Bridge(reactor, daemon, discovery, write, cwd=cwd, bound=options["bound"],
                    on_permanent=permanent)
    if init_message is not None:
        bridge.adopt_initialize(init_message)
        resend(reactor)  # a SIGTERM/SIGINT that came while Twisted was loading
    done: Deferred = Deferred()
    stopping = [False]

    def stop(_: object = None) -> None:
        if stopping[0]:
            return
        stopping[0] = True
        waits = [pool.closeCachedConnections()]
        if lines is not None and lines.transport is not None and not lines.lost:
            # loseConnection writes what is buffered for stdout first; stop once it has.
            lost = lines.when_lost()
            lines.transport.loseConnection()
            waits.append(lost.addTimeout(5, reactor))
        def ended(_: object) -> None:
            if gave_up:
                done.errback(SystemExit(1))  # react exits with this code, no traceback
            else:
                done.callback(None)

        DeferredList(waits, consumeErrors=True).addBoth(ended)

    def eof() -> None:
        log.info("stdin closed; unregistering {client_id}", client_id=client_id)
        bridge.stdin_closed().addBoth(stop)

    lines = StdioLines(bridge.line_received, bridge.line_too_long, eof, options["max-line"],
                       clock=reactor)
    log.info("gasoline connect {version}: client {client_id} (connection {connection_id}) -> "
             "{url}", version=__version__, client_id=client_id, connection_id=connection_id,
             url=base_url)
    reactor.addSystemEventTrigger("before", "shutdown", bridge.shutdown)
    stdio.StandardIO(lines, reactor=reactor)
    bridge.start()
    if prelude is not None and prelude.leftover:
        lines.dataReceived(prelude.leftover)  # read from stdin before Twisted took it over
    return done

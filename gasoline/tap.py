"""
C{twistd gasoline}: command-line options and the service they build.

This is the only module that resolves the global reactor (lazily, inside L{makeService}) and the
only one that turns endpoint strings into listening services.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Callable, NamedTuple

from twisted.application.service import IService, MultiService, Service
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.endpoints import serverFromString
from twisted.internet.error import CannotListenError, ReactorNotRunning
from twisted.internet.interfaces import (
    IListeningPort,
    IProtocolFactory,
    IReactorCore,
    IStreamServerEndpoint,
)
from twisted.internet.protocol import Factory
from twisted.logger import Logger, globalLogPublisher
from twisted.python import usage
from twisted.python.failure import Failure

from gasoline import __version__
from gasoline.app import (
    DEFAULT_CLIENT_TTL,
    DEFAULT_LISTEN,
    DEFAULT_MAX_CLIENTS,
    Config,
    ExtendMcp,
    Gasoline,
    build,
    default_state_dir,
)
from gasoline.common import positive_duration, positive_int
from gasoline.core.storage.atrest import (
    AtRest,
    StateKeyError,
    load_state_key,
    refuse_clear_start,
)
from gasoline.core.storage.files import StateFileError, make_private_dir, write_atomic
from gasoline.core.storage.store import CONSOLE, DEFAULT_BUFFERS
from gasoline.durations import parse_duration, parse_size
from gasoline.http.guards import normalize_origin
from gasoline.http.request import MAX_CONNECTIONS, GasolineSite
from gasoline.logs import LogLimits, LogService

log = Logger()
_LIMITS = LogLimits()
_SIZE_FIX = "give a positive size: bytes, or 512k, 10MB, 10MiB"
_AGE_FIX = "give a positive duration: seconds, or 15m, 1h, 7d"


class OptionError(SystemExit):
    """A start-up setting the daemon cannot use: one line naming the option (or environment
    variable) and the fix, printed by the interpreter instead of a traceback or twistd's whole
    help; exit status 1."""

    def __init__(self, message: str) -> None:
        super().__init__(f"gasoline: {message}")
        self.message = message


class _Named:
    """A coercer: C{coerce}, whose error names C{--option}, the value and the fix (twistd reports
    a coercion's ValueError as "Parameter type enforcement failed: <its text>"). Its
    C{coerceDoc} and docstring are C{coerce}'s, for twistd's help."""

    def __init__(self, option: str, coerce: Callable[[str], object], fix: str) -> None:
        self.option = option
        self.coerce = coerce
        self.fix = fix
        self.__doc__ = coerce.__doc__
        self.coerceDoc = getattr(coerce, "coerceDoc", "")

    def __call__(self, value: str) -> object:
        try:
            return self.coerce(value)
        except (ValueError, TypeError, OverflowError) as e:
            reason = str(e) or "not a valid value"
            if reason.startswith("invalid literal for int()"):
                reason = "not a whole number"
            raise ValueError(f"--{self.option} {value!r}: {reason}; {self.fix}") from None



def non_negative_int(value: str) -> int:
    """A whole number of at least 0."""
    n = int(value)
    if n < 0:
        raise ValueError("must be 0 or more")
    return n


class ListenAddress(NamedTuple):
    """Where an endpoint string listens (L{listen_address})."""

    #: C{"tcp"} (also C{tcp6:}), C{"ssl"}, C{"unix"}, or C{"other"} (an endpoint plugin's).
    kind: str
    #: The TCP port (0: any free port); C{None} for other kinds.
    port: int | None = None
    #: The interface (C{""}: every interface); C{None} where there is none (C{unix:}).
    interface: str | None = None


#: Errors Twisted's endpoint parser raises for a bad description (an ssl: endpoint reads its
#: certificate files while it is parsed; systemd: looks up its inherited descriptor).
ENDPOINT_ERRORS = (ValueError, LookupError, TypeError, OSError)


class _ListenRecorder:
    """A stand-in reactor for L{listen_address}: it records the one listen an endpoint asks of
    it (C{IReactorTCP.listenTCP}, C{IReactorSSL.listenSSL}, C{IReactorUNIX.listenUNIX}) and
    opens nothing. (Twisted's C{MemoryReactor} does the same, but importing it loads trial,
    unittest, pdb and doctest into the daemon.)"""

    def __init__(self) -> None:
        self.address = ListenAddress("other")

    def listenTCP(self, port: int, factory: object, backlog: int = 50,
                  interface: str = "") -> None:
        self.address = ListenAddress("tcp", int(port), str(interface))

    def listenSSL(self, port: int, factory: object, contextFactory: object, backlog: int = 50,
                  interface: str = "") -> None:
        self.address = ListenAddress("ssl", int(port), str(interface))

    def listenUNIX(self, address: str, factory: object, backlog: int = 50, mode: int = 0o666,
                   wantPID: int = 0) -> None:
        self.address = ListenAddress("unix")


def _bad_port(description: str) -> str | None:
    """The port field of a C{tcp:} / C{tcp6:} / C{ssl:} endpoint string when it is not a port
    number (positional, or C{port=}), else None: said in words, not as C{int()}'s error."""
    kind, _, rest = description.partition(":")
    if kind.strip().lower() not in ("tcp", "tcp6", "ssl") or not rest:
        return None
    fields = rest.split(":")
    named = [f.partition("=")[2] for f in fields if f.partition("=")[0].strip() == "port"]
    value = named[0] if named else fields[0] if "=" not in fields[0] else None
    if value is None:
        return None
    ok = value.strip().isascii() and value.strip().isdigit() and int(value) <= 65535
    return None if ok else value


def listen_address(description: str) -> ListenAddress:
    """Where endpoint C{description} would listen, by Twisted's public API: C{serverFromString}
    builds the endpoint against a L{_ListenRecorder}, and the endpoint's C{listen} tells it the
    port and interface (nothing is opened). An endpoint that asks anything else of the reactor
    (a plugin's, C{systemd:}) is C{"other"}.

    @raise ValueError: (or another of L{ENDPOINT_ERRORS}) C{description} is not a valid endpoint.
    """
    recorder = _ListenRecorder()
    endpoint = serverFromString(recorder, description)
    endpoint.listen(Factory()).addErrback(lambda _: None)  # fired already: nothing waits
    return recorder.address


def _loopback(interface: str) -> bool:
    if interface.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(interface.strip("[]")).is_loopback
    except ValueError:
        return False


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = (
        "Run the Gasoline daemon: the browser extension streams telemetry into it and many MCP "
        "agents read it, each with its own cursors, checkpoints, noise rules and results."
    )

    optParameters = [
        ["listen", "l", DEFAULT_LISTEN, "Endpoint to listen on (a Twisted endpoint string)."],
        [
            "state-dir",
            None,
            None,
            "Where persistent state lives (default: $GASOLINE_STATE_DIR, else the platform's "
            f"user state dir, here {default_state_dir()}).",
        ],
        [
            "max-entries",
            None,
            DEFAULT_BUFFERS[CONSOLE].entries,
            "Capacity of the console log buffer, in entries.",
            _Named("max-entries", positive_int, "give a whole number of entries, at least 1 "
                   f"(default {DEFAULT_BUFFERS[CONSOLE].entries})"),
        ],
        [
            "client-ttl",
            None,
            DEFAULT_CLIENT_TTL,
            "How long a disconnected client's state is kept for a reconnect (seconds, or 90s, "
            "15m, 1h).",
            _Named("client-ttl", positive_duration, "give a positive duration: seconds, or "
                   "90s, 15m, 1h"),
        ],
        [
            "max-clients",
            None,
            DEFAULT_MAX_CLIENTS,
            "Maximum number of live clients.",
            _Named("max-clients", positive_int, "give a whole number, at least 1 (default "
                   f"{DEFAULT_MAX_CLIENTS})"),
        ],
        ["state-key-file", None, None, "File holding a 256-bit key (64 hex characters, mode "
         "0600): journals, client state and the daemon's JSON documents are encrypted at rest "
         "with AES-GCM under it (docs/persistence.md, \"Encryption at rest\")."],
        ["log-dir", None, None, "Directory for the daemon's logs: server.log, clients/<id>.log, "
         "shared/{console,network,websocket}.log (default: none)."],
        ["log-client-max-bytes", None, _LIMITS.client_max_bytes, "A client log rotates at "
         "this size (bytes, or 512k, 10MB, 10MiB), and when the client disconnects.",
         _Named("log-client-max-bytes", parse_size, _SIZE_FIX)],
        ["log-shared-max-bytes", None, _LIMITS.shared_max_bytes, "A shared log rotates at this "
         "size.", _Named("log-shared-max-bytes", parse_size, _SIZE_FIX)],
        ["log-shared-max-age", None, _LIMITS.shared_max_age, "A shared log rotates this often "
         "(seconds, or 15m, 1h).", _Named("log-shared-max-age", parse_duration, _AGE_FIX)],
        ["log-server-max-bytes", None, _LIMITS.server_max_bytes, "server.log rotates at this "
         "size.", _Named("log-server-max-bytes", parse_size, _SIZE_FIX)],
        ["log-retention", None, _LIMITS.retention, "Rotated logs older than this are deleted "
         "(seconds, or 12h, 7d).", _Named("log-retention", parse_duration, _AGE_FIX)],
        [
            "extension-id",
            None,
            None,
            "Comma-separated browser extension ids allowed as origins "
            "(default: $GASOLINE_EXTENSION_IDS, else any id).",
        ],
        ["api-key", None, None, "Key required on MCP and admin routes (X-Gasoline-Key)."],
        ["tool-rate-limit", None, 100, "MCP tool calls allowed per minute per client (0: no "
         "limit).", _Named("tool-rate-limit", non_negative_int, "give a whole number of calls "
                           "per minute, or 0 for no limit (default 100)")],
        ["proxy-config", None, None, "Servers file for the session proxy ({\"mcpServers\": ...}, "
         "docs/proxy.md; default: $GASOLINE_PROXY_CONFIG, else no proxy)."],
    ]
    optFlags = [
        ["no-persist", None, "Do not persist the console buffer to the state dir."],
        ["allow-launch-browser", None, "Let agents start a browser paired with this daemon "
         "(interact {what:\"launch_browser\"} runs `gasoline browser --detach`; docs/browser.md)."],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["allow-origin"] = []

    def opt_allow_origin(self, value: str) -> None:
        """Let a browser page at this origin (http(s)://host[:port]) call the daemon: CORS and
        every route but /shutdown. Repeatable. Default: only the extension's origin."""
        try:
            self["allow-origin"].append(normalize_origin(value))
        except ValueError as e:
            raise usage.UsageError(f"--allow-origin: {e}")

    def opt_version(self) -> None:
        """Print the version and exit."""
        print(f"gasoline {__version__}")
        raise SystemExit(0)

    def parseOptions(self, options: list[str] | None = None) -> None:
        """Parse; a setting the daemon cannot use is one line naming it and the fix
        (L{OptionError}), never twistd's whole help."""
        try:
            super().parseOptions(options)
        except usage.UsageError as e:
            text = str(e).removeprefix("Parameter type enforcement failed: ")
            raise OptionError(f"{text} (gasoline serve --help lists the options)") from None

    def postOptions(self) -> None:
        bad_port = _bad_port(self["listen"])
        if bad_port is not None:
            raise usage.UsageError(
                f"--listen {self['listen']!r}: the port {bad_port!r} is not a number from 0 to "
                "65535; e.g. tcp:7890:interface=127.0.0.1")
        try:
            interface = listen_address(self["listen"]).interface
        except ENDPOINT_ERRORS as e:
            raise usage.UsageError(f"--listen {self['listen']!r} is not a valid endpoint: {e}; "
                                   "e.g. tcp:7890:interface=127.0.0.1")
        if interface is not None and not _loopback(interface):
            raise usage.UsageError(
                f"--listen {self['listen']!r} listens on "
                f"{'every interface' if interface in ('', '0.0.0.0', '::') else interface}, but "
                "Gasoline answers only requests addressed to this machine's loopback (a request "
                "from elsewhere is refused), and its routes are not meant for a network: add "
                ":interface=127.0.0.1 (or ::1); to reach it from elsewhere use an SSH tunnel")
        ids = self["extension-id"]
        if ids is None:
            ids = os.environ.get("GASOLINE_EXTENSION_IDS", "")
        self["extension-ids"] = tuple(i.strip() for i in ids.split(",") if i.strip())
        proxy = self["proxy-config"] or os.environ.get("GASOLINE_PROXY_CONFIG") or None
        if proxy is not None:
            from gasoline.proxy.config import ProxyConfigError, load

            try:
                # Refuse to start on an invalid file (unknown fields included), or on a network
                # policy this machine cannot enforce.
                from gasoline.proxy.netpolicy import check as check_network

                check_network(load(proxy))
            except ProxyConfigError as e:
                raise usage.UsageError(f"--proxy-config: {e}")
        self["proxy-config"] = proxy
        if self["state-key-file"]:
            if self["log-dir"]:
                raise usage.UsageError(
                    "--log-dir writes plain-text logs (tool arguments, page text): it cannot be "
                    "combined with --state-key-file, which promises nothing is written in clear")
            try:
                AtRest(load_state_key(self["state-key-file"])).check_state_dir(
                    self.config().state_dir)
            except (StateKeyError, OSError) as e:
                raise usage.UsageError(str(e))
        else:
            try:
                refuse_clear_start(self.config().state_dir)
            except StateKeyError as e:
                raise usage.UsageError(str(e))

    def config(self) -> Config:
        kwargs = dict(
            listen=self["listen"],
            max_entries=self["max-entries"],
            client_ttl=self["client-ttl"],
            max_clients=self["max-clients"],
            log_dir=Path(self["log-dir"]) if self["log-dir"] else None,
            extension_ids=self["extension-ids"],
            api_key=self["api-key"],
            persist=not self["no-persist"],
            tool_rate_limit=self["tool-rate-limit"],
            allowed_origins=tuple(self["allow-origin"]),
            proxy_config=Path(self["proxy-config"]) if self["proxy-config"] else None,
            allow_launch_browser=bool(self["allow-launch-browser"]),
            state_key_file=Path(self["state-key-file"]) if self["state-key-file"] else None,
        )
        if self["state-dir"]:
            kwargs["state_dir"] = Path(self["state-dir"])
        return Config(**kwargs)


def _probe_gasoline(host: str, port: int) -> str:
    """Say whether a Gasoline daemon answers C{GET /health} at host:port.

    Only called when listening failed at start-up, before the reactor runs, so a short blocking
    request is harmless here (and only here).
    """
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=1.5) as resp:
            body = json.loads(resp.read(65536) or b"{}")
    except Exception:
        return "something else is using it (no Gasoline daemon answers /health there)"
    if isinstance(body, dict) and body.get("service-name") == "gasoline":
        return f"a Gasoline daemon (version {body.get('version', '?')}) is already running there"
    return "something else is using it (it answers /health, but not as Gasoline)"


def port_in_use(host: str, port: int, spec: str, who: str) -> str:
    """The one line for a taken port: which, who holds it, what to do."""
    fix = "choose another port (--listen tcp:PORT:interface=127.0.0.1)."
    if who.startswith("a Gasoline daemon"):
        fix = f"stop it (gasoline stop --port {port}) or {fix}"
    return f"gasoline: cannot listen on {host}:{port} ({spec}): port {port} is in use; {who}; {fix}"


def check_port_free(spec: str, probe: Callable[[str, int], str]) -> None:
    """Before anything is built (journals replayed) or the process daemonizes (when the
    daemonized child's error would reach the user as a truncated repr): a TCP port that is
    already taken is one L{ListenFailed} line. Binding a throwaway socket is the test; the real
    listen still reports any other failure."""
    try:
        where = listen_address(spec)
    except ENDPOINT_ERRORS:
        return
    port = where.port
    if where.kind not in ("tcp", "ssl") or not port:
        return
    host = where.interface or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            who = probe(host if host not in ("", "0.0.0.0", "::") else "127.0.0.1", port)
            raise ListenFailed(port_in_use(host, port, spec, who)) from None
    finally:
        sock.close()


def check_state_dir(path: Path, named: str) -> None:
    """The state dir is a directory the daemon can create and write, else one L{OptionError}
    line naming where it came from (C{named}: the option or environment variable)."""
    fix = "point it at a directory this user can write"
    if path.exists() and not path.is_dir():
        raise OptionError(f"{named} {str(path)!r} is not a directory; {fix}")
    try:
        make_private_dir(path)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".gasoline-write-check-"):
            pass
    except OSError as e:
        raise OptionError(f"{named} {str(path)!r} cannot be used as the state directory "
                          f"({e.strerror or e}); {fix}") from None


class ListenFailed(SystemExit, Exception):
    """The daemon cannot listen: one line for the user, and a non-zero exit.

    An C{Exception} so that twistd's start-up (C{postApplication}) reports it through the
    daemonizing parent's status pipe and removes the pid file; a C{SystemExit} so that in the
    foreground the interpreter prints the one line, not a traceback.
    """


class GasolineEndpointService(Service):
    """Listen on C{--listen}: C{endpoint.listen(factory)} when the service starts (privileged
    start, as Twisted's C{StreamServerEndpointService} does), C{stopListening} when it stops.

    Written here, over the endpoint's public C{listen}, rather than subclassing Twisted's
    endpoint service, whose listen result and "fail at once" switch are private: a listen
    failure at start-up becomes one L{ListenFailed} line that names the port and says whether a
    Gasoline daemon answers there; a pending listen is cancelled on stop; L{when_listening}
    gives the listening port to whoever needs it (L{DaemonInfoService}).
    """

    def __init__(self, endpoint: IStreamServerEndpoint, factory: IProtocolFactory, spec: str,
                 probe: Callable[[str, int], str]) -> None:
        self._endpoint = endpoint
        self._factory = factory
        self._spec = spec
        self._probe = probe
        #: The endpoint's listen result while the port is not yet listening.
        self._pending: Deferred | None = None
        self._port: IListeningPort | None = None
        self._observers: list[Deferred] = []
        #: The endpoint was asked to listen (by the privileged start, or by the start).
        self._listen_called = False
        #: Why the last listen failed (for a L{when_listening} asked afterwards).
        self._failure: Failure | None = None

    def when_listening(self) -> Deferred:
        """A Deferred that fires with the listening port (C{IListeningPort}) once the endpoint
        listens, fails if listening fails, and is cancelled if the service stops first."""
        if self._port is not None:
            return succeed(self._port)
        if self._failure is not None:
            return fail(self._failure)
        d: Deferred = Deferred()
        self._observers.append(d)
        return d

    def _notify(self, outcome: IListeningPort | Failure) -> None:
        self._failure = outcome if isinstance(outcome, Failure) else None
        observers, self._observers = self._observers, []
        for d in observers:
            if isinstance(outcome, Failure):
                d.errback(outcome)
            else:
                d.callback(outcome)

    def privilegedStartService(self) -> None:
        if self._listen_called:
            return
        self._listen_called = True
        self._failure = None
        super().privilegedStartService()
        result: list = []
        pending = self._endpoint.listen(self._factory)
        pending.addBoth(result.append)  # consumes a failure: handled below or logged
        if result and isinstance(result[0], Failure):
            # Listening failed at once (a taken port): fail start-up with one line.
            self._notify(result[0])
            err = result[0].value
            if isinstance(err, CannotListenError):
                host = err.interface or "127.0.0.1"
                who = self._probe(host if host not in ("", "0.0.0.0", "::") else "127.0.0.1",
                                  err.port)
                raise ListenFailed(port_in_use(host, err.port, self._spec, who))
            result[0].raiseException()
        if result:
            self._listened(result[0])
            return
        self._pending = pending
        pending.addCallback(lambda _: self._listened(result[0]))

    def _listened(self, outcome: IListeningPort | Failure) -> None:
        self._pending = None
        if isinstance(outcome, Failure):
            if not outcome.check(CancelledError):
                log.failure("listening on {spec}", outcome, spec=self._spec)
            self._notify(outcome)
            return
        self._port = outcome
        self._notify(outcome)

    def startService(self) -> None:
        self.privilegedStartService()  # once: a no-op after twistd's privileged start
        super().startService()

    def stopService(self) -> Deferred | None:
        super().stopService()
        self._listen_called = False
        if self._pending is not None:
            self._pending.cancel()
        port, self._port = self._port, None
        if port is not None:
            return port.stopListening()
        return None


class DaemonInfoService(Service):
    """Writes C{<state-dir>/daemon.json} (pid, port, url) once the port listens; removes it on
    stop if it is still this process's."""

    def __init__(self, listening: GasolineEndpointService | None, state_dir: Path,
                 spec: str) -> None:
        self._listening = listening
        self._state_dir = state_dir
        self._spec = spec

    @property
    def info_path(self) -> Path:
        return self._state_dir / "daemon.json"

    def startService(self) -> None:
        super().startService()
        if self._listening is not None:
            self._listening.when_listening().addCallback(self._write).addErrback(
                lambda f: None if f.check(CancelledError) else log.failure("daemon.json", f))

    def _write(self, port: IListeningPort) -> IListeningPort:
        address = port.getHost()
        # A TCP port has a host and a port number; another endpoint (a UNIX socket) has neither.
        host, number = "127.0.0.1", None
        if isinstance(address, (IPv4Address, IPv6Address)):
            host, number = address.host, address.port
        info = {
            "pid": os.getpid(),
            "port": number,
            "host": host,
            "url": f"http://{host}:{number if number is not None else ''}",
            "version": __version__,
            "listen": self._spec,
        }
        # Private like every state file (0600, atomic, a symlink there is refused).
        make_private_dir(self._state_dir)
        write_atomic(self.info_path, json.dumps(info).encode())
        return port

    def stopService(self) -> None:
        super().stopService()
        try:
            if json.loads(self.info_path.read_text()).get("pid") == os.getpid():
                self.info_path.unlink()
        except (OSError, ValueError):
            pass


def _reactor_stopper(reactor: IReactorCore) -> Callable[[], None]:
    """A graceful stop for C{POST /shutdown}: stop the reactor (services stop in order)."""

    def stop() -> None:
        try:
            reactor.stop()
        except ReactorNotRunning:
            pass

    return stop


def log_limits(options: Options) -> LogLimits:
    """The C{--log-*} rotation and retention options."""
    return LogLimits(
        client_max_bytes=options["log-client-max-bytes"],
        shared_max_bytes=options["log-shared-max-bytes"],
        shared_max_age=options["log-shared-max-age"],
        server_max_bytes=options["log-server-max-bytes"],
        retention=options["log-retention"],
    )


def raise_nofile_limit() -> tuple[int, int] | None:
    """Raise the soft file-descriptor limit to the hard limit (at 1,024, a thousand
    idle sockets made the daemon refuse everything). Returns the (soft, hard) limits now in force,
    or C{None} where there is no such limit (Windows)."""
    try:
        import resource  # POSIX only
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft, hard


class GasolineService(MultiService):
    """The whole daemon under twistd: its components and the listening endpoint."""

    def __init__(self, gasoline: Gasoline) -> None:
        super().__init__()
        #: The components (what tests and embedders talk to).
        self.gasoline = gasoline


def makeService(options: Options, reactor: Any = None, extend_mcp: ExtendMcp | None = None) -> IService:
    """Build the daemon from its parsed command line: L{build_service} with the options'
    L{Config} and log limits.

    Without C{reactor} (twistd, the tac files: the process that runs the daemon), the global
    reactor is the clock. With a C{reactor} (tests, benchmarks on a memory reactor or a
    C{task.Clock}), nothing process-wide is touched.

    @param extend_mcp: adds tools, resources and prompts to the MCP server (the test suite's
        conformance fixtures, through C{tests/conformance.tac}).
    """
    daemon_process = reactor is None
    if reactor is None:
        from twisted.internet import (
            reactor,  # the one place this is allowed
        )
    config = options.config()
    named = ("--state-dir" if options["state-dir"] else "GASOLINE_STATE_DIR"
             if os.environ.get("GASOLINE_STATE_DIR") else "the default state dir")
    check_state_dir(Path(config.state_dir), named)
    if daemon_process:
        check_port_free(config.listen, _probe_gasoline)
    try:
        top = build_service(config, reactor, limits=log_limits(options),
                            extend_mcp=extend_mcp)
    except StateFileError as e:  # a corrupt identity, pin file or client key: one line
        raise OptionError(str(e)) from None
    return top


def build_service(config: Config, reactor: Any, *, limits: LogLimits | None = None,
                  extend_mcp: ExtendMcp | None = None) -> GasolineService:
    """The daemon built from C{config} on C{reactor} (its clock and the reactor its endpoint
    listens with), behind C{config.listen}; nothing process-wide is changed beyond the
    file-descriptor limit (L{raise_nofile_limit}).

    @param limits: the C{--log-dir} rotation and retention limits (the defaults if not given).
    @param extend_mcp: as L{makeService}'s.
    """
    logs = LogService(config.log_dir, reactor, limits=limits or LogLimits(),
                      publisher=globalLogPublisher) if config.log_dir is not None else None
    gasoline = build(config, reactor, stop=_reactor_stopper(reactor), extend_mcp=extend_mcp,
                     log_files=logs.files if logs is not None else None)
    top = GasolineService(gasoline)
    if logs is not None:
        # Started first and stopped last: server.log sees the whole lifecycle.
        logs.setServiceParent(top)
    gasoline.services.setServiceParent(top)
    fds = raise_nofile_limit()
    # Caps buffered request bodies, idle connections and open connections (gasoline.http.request);
    # the connection cap stays well below the file-descriptor limit.
    cap = MAX_CONNECTIONS if fds is None or fds[0] < 0 else \
        max(16, min(MAX_CONNECTIONS, fds[0] - 128))
    site = GasolineSite(gasoline.resource, max_connections=cap)
    listening = GasolineEndpointService(serverFromString(reactor, config.listen), site,
                                        config.listen, _probe_gasoline)
    listening.setServiceParent(top)
    DaemonInfoService(listening, config.state_dir, config.listen).setServiceParent(top)
    return top

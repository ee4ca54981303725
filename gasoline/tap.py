"""
``twistd gasoline``: command-line options and the service they build.

This is the only module that resolves the global reactor (lazily, inside L{makeService}) and the
only one that turns endpoint strings into listening services.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

from twisted.application.service import IService, MultiService, Service
from twisted.internet.error import CannotListenError
from twisted.logger import globalLogPublisher, jsonFileLogObserver
from twisted.internet.endpoints import serverFromString
from twisted.python import usage

from gasoline import __version__
from gasoline.app import (
    DEFAULT_CLIENT_TTL,
    DEFAULT_LISTEN,
    DEFAULT_MAX_CLIENTS,
    Config,
    build,
    default_state_dir,
)
from gasoline.core.store import CONSOLE, DEFAULT_BUFFERS
from gasoline.http.request import GasolineSite


def _positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise ValueError("must be a positive integer")
    return n


def _positive_float(value: str) -> float:
    n = float(value)
    if not n > 0 or n == float("inf"):
        raise ValueError("must be a positive number of seconds")
    return n


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
            _positive_int,
        ],
        [
            "client-ttl",
            None,
            DEFAULT_CLIENT_TTL,
            "Seconds a disconnected client's state is kept for a reconnect.",
            _positive_float,
        ],
        [
            "max-clients",
            None,
            DEFAULT_MAX_CLIENTS,
            "Maximum number of live clients.",
            _positive_int,
        ],
        ["log-dir", None, None, "Directory for the daemon's JSON-lines logs (default: none)."],
        [
            "extension-id",
            None,
            None,
            "Comma-separated browser extension ids allowed as origins "
            "(default: $GASOLINE_EXTENSION_IDS, else any id).",
        ],
        ["api-key", None, None, "Key required on MCP and admin routes (X-Gasoline-Key)."],
        ["tool-rate-limit", None, 100, "MCP tool calls allowed per minute per client (0: no "
         "limit).", int],
    ]
    optFlags = [
        ["no-persist", None, "Do not persist the console buffer to the state dir."],
        [
            "conformance-fixtures",
            None,
            "Register the MCP conformance suite's fixture tools, prompts and resources.",
        ],
    ]

    def opt_version(self) -> None:
        """Print the version and exit."""
        print(f"gasoline {__version__}")
        raise SystemExit(0)

    def postOptions(self) -> None:
        from twisted.internet.endpoints import _parseServer  # noqa: PLC0415  (validation only)

        try:
            _parseServer(self["listen"], None)
        except (ValueError, KeyError, TypeError) as e:
            raise usage.UsageError(f"--listen {self['listen']!r} is not a valid endpoint: {e}")
        ids = self["extension-id"]
        if ids is None:
            import os  # noqa: PLC0415

            ids = os.environ.get("GASOLINE_EXTENSION_IDS", "")
        self["extension-ids"] = tuple(i.strip() for i in ids.split(",") if i.strip())

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
            conformance_fixtures=bool(self["conformance-fixtures"]),
            tool_rate_limit=self["tool-rate-limit"],
        )
        if self["state-dir"]:
            kwargs["state_dir"] = Path(self["state-dir"])
        return Config(**kwargs)


def _probe_gasoline(host: str, port: int) -> str:
    """Say whether a Gasoline daemon answers C{GET /health} at host:port.

    Only called when listening failed at start-up, before the reactor runs, so a short blocking
    request is harmless here (and only here).
    """
    import urllib.request  # noqa: PLC0415

    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=1.5) as resp:
            body = json.loads(resp.read(65536) or b"{}")
    except Exception:
        return "something else is using it (no Gasoline daemon answers /health there)"
    if isinstance(body, dict) and body.get("service-name") == "gasoline":
        return f"a Gasoline daemon (version {body.get('version', '?')}) is already running there"
    return "something else is using it (it answers /health, but not as Gasoline)"


class GasolineListener(Service):
    """Listen on C{--listen}; write C{daemon.json} (pid, port, url) to the state dir once listening.

    If the address is taken, exit with one clear line naming the port and saying whether a Gasoline
    daemon answers there, instead of a traceback.
    """

    def __init__(self, reactor, spec: str, factory, state_dir: Path) -> None:
        self._reactor = reactor
        self._spec = spec
        self._factory = factory
        self._state_dir = state_dir
        self.port = None

    @property
    def info_path(self) -> Path:
        return self._state_dir / "daemon.json"

    def startService(self) -> None:
        super().startService()
        endpoint = serverFromString(self._reactor, self._spec)
        failures: list = []
        d = endpoint.listen(self._factory)
        d.addCallbacks(self._listening, failures.append)
        if failures:
            failure = failures[0]
            if failure.check(CannotListenError):
                err = failure.value
                host = err.interface or "127.0.0.1"
                who = _probe_gasoline(host if host not in ("", "0.0.0.0", "::") else "127.0.0.1",
                                      err.port)
                raise SystemExit(
                    f"gasoline: cannot listen on {host}:{err.port} ({self._spec}): "
                    f"port {err.port} is in use; {who}."
                )
            failure.raiseException()

    def _listening(self, port) -> None:
        self.port = port
        address = port.getHost()
        host = getattr(address, "host", "127.0.0.1")
        info = {
            "pid": os.getpid(),
            "port": getattr(address, "port", None),
            "host": host,
            "url": f"http://{host}:{getattr(address, 'port', '')}",
            "version": __version__,
            "listen": self._spec,
        }
        self._state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.info_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(info))
        tmp.replace(self.info_path)

    def stopService(self):
        super().stopService()
        try:
            if json.loads(self.info_path.read_text()).get("pid") == os.getpid():
                self.info_path.unlink()
        except (OSError, ValueError):
            pass
        if self.port is not None:
            return self.port.stopListening()
        return None


def _reactor_stopper(reactor):
    """A graceful stop for C{POST /shutdown}: stop the reactor (services stop in order)."""

    def stop() -> None:
        from twisted.internet.error import ReactorNotRunning  # noqa: PLC0415

        try:
            reactor.stop()
        except ReactorNotRunning:
            pass

    return stop


class JSONLogService(Service):
    """C{--log-dir}: the daemon's own log events as JSON lines in C{<log-dir>/gasoline.jsonl}.

    Added beside whatever twistd logs to (stdout with C{-n}, C{twistd.log} otherwise); the file
    is created 0600 because events can name URLs and client ids.
    """

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / "gasoline.jsonl"
        self._file = None
        self._observer = None

    def startService(self) -> None:
        super().startService()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._observer = jsonFileLogObserver(self._file)
        globalLogPublisher.addObserver(self._observer)

    def stopService(self):
        super().stopService()
        if self._observer is not None:
            globalLogPublisher.removeObserver(self._observer)
            self._observer = None
        if self._file is not None:
            self._file.close()
            self._file = None


def makeService(options: Options, reactor=None) -> IService:
    """Build the daemon: its components on the reactor's clock, behind C{--listen}."""
    if reactor is None:
        from twisted.internet import reactor  # noqa: PLC0415  (the one place this is allowed)
    config = options.config() if isinstance(options, Options) else options
    gasoline = build(config, reactor)
    top = MultiService()
    if config.log_dir is not None:
        JSONLogService(config.log_dir).setServiceParent(top)
    gasoline.services.setServiceParent(top)
    site = GasolineSite(gasoline.resource)  # caps buffered request bodies (gasoline.http.request)
    gasoline.extras["ingest"].stop = _reactor_stopper(reactor)  # POST /shutdown
    site.displayTracebacks = False
    GasolineListener(reactor, config.listen, site, config.state_dir).setServiceParent(top)
    top.gasoline = gasoline  # type: ignore[attr-defined]
    # Everything built so far (modules, classes, the object graph) lives as long as the process.
    # Moving it out of the collector's generations keeps full collections from rescanning it:
    # ~26 ms per full collection otherwise, which showed up as tail latency in every benchmark.
    gc.freeze()
    return top

"""
Finding Chromium and Gasoline's extension, starting the browser, and the DevTools protocol over the
browser's private pipe.

The browser is started with C{--remote-debugging-pipe}: it reads DevTools commands on its fd 3 and
writes answers and events on its fd 4 (NUL-separated JSON). Only this process holds the other ends,
so no other local process or web page can drive the browser (a C{--remote-debugging-port} would
let any of them). Closing the pipe makes Chromium quit, so the launcher keeps it open for the
browser's life (C{--detach} hands it to a background copy of the command).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()

#: Looked up on C{PATH} in this order when C{--chromium} is not given.
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
#: Longest DevTools message kept while waiting for its terminating NUL.
MAX_MESSAGE = 64 * 1024 * 1024


class LaunchError(RuntimeError):
    """The browser could not be found, started or prepared (the message says why)."""


def known_locations(platform: str = sys.platform,
                    env: dict[str, str] | None = None) -> list[Path]:
    """Where Chromium and Chrome install themselves off C{PATH}: the app bundles on macOS, the
    program folders on Windows; none on Linux (the package manager puts them on C{PATH})."""
    env = dict(os.environ) if env is None else env
    if platform == "darwin":
        bundles = [("Chromium.app", "Chromium"), ("Google Chrome.app", "Google Chrome"),
                   ("Google Chrome for Testing.app", "Google Chrome for Testing")]
        roots = [Path("/Applications"), Path(env.get("HOME", "~")).expanduser() / "Applications"]
        return [root / app / "Contents" / "MacOS" / exe for root in roots for app, exe in bundles]
    if platform == "win32":
        folders = [env.get(k) or "" for k in ("PROGRAMFILES", "PROGRAMFILES(X86)",
                                               "LOCALAPPDATA")]
        return [Path(root) / vendor / "Application" / exe for root in folders if root
                for vendor, exe in (("Chromium", "chrome.exe"),
                                    (os.path.join("Google", "Chrome"), "chrome.exe"))]
    return []


def pipe_supported(platform: str = sys.platform) -> bool:
    """Whether this platform can hand the browser the DevTools pipe (its fds 3 and 4): POSIX
    (Linux, macOS) can; Twisted's process support on Windows passes only stdin, stdout and
    stderr."""
    return platform != "win32"


def find_chromium(explicit: str | None = None, locations: list[Path] | None = None) -> str:
    """The browser executable: C{explicit} (a path or a name on C{PATH}), else the first of
    L{BROWSER_NAMES} on C{PATH}, else the first of L{known_locations} that exists (macOS app
    bundles, Windows program folders). @raise LaunchError: none found."""
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise LaunchError(f"--chromium {explicit!r}: no such executable")
        return found
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    for path in known_locations() if locations is None else locations:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise LaunchError("no Chromium or Chrome on PATH (looked for " + ", ".join(BROWSER_NAMES)
                      + ") nor where they install themselves; install one or pass "
                      "--chromium PATH")


def extension_dir() -> Path:
    """Gasoline's unpacked extension: C{gasoline/_extension} in an installed wheel (package data),
    else C{extension/} beside the package in a source checkout. @raise LaunchError: neither."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_extension", package.parent / "extension"):
        if (candidate / "manifest.json").is_file():
            return candidate
    raise LaunchError(f"Gasoline's extension is not installed beside {package} (no "
                      "_extension/manifest.json): reinstall gasoline")


def unpacked_extension_id(path: Path) -> str:
    """The id Chromium gives an extension loaded from C{path} (SHA-256 of its real path, the first
    16 bytes as letters a-p)."""
    digest = hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:32]
    return "".join(chr(ord("a") + int(c, 16)) for c in digest)


def chromium_argv(executable: str, profile: Path, extension: Path, *, headless: bool,
                  root: bool | None = None) -> list[str]:
    """The command line: the profile, the extension, the DevTools pipe, a blank first tab."""
    argv = [
        executable,
        f"--user-data-dir={profile}",
        f"--load-extension={extension}",
        # Google Chrome 137+ ignores --load-extension unless this feature is off.
        "--disable-features=DisableLoadExtensionCommandLineSwitch",
        "--remote-debugging-pipe",
        "--no-first-run", "--no-default-browser-check", "--disable-sync",
        "--disable-component-update", "--disable-background-networking",
    ]
    if headless:
        argv += ["--headless=new", "--disable-gpu", "--window-size=1280,900"]
    if os.geteuid() == 0 if root is None else root:
        argv.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    return argv + ["about:blank"]


class CDPError(RuntimeError):
    pass


class BrowserProcess(ProcessProtocol):
    """A Chromium child started with C{--remote-debugging-pipe}, and a DevTools client on it.

    Start it with C{reactor.spawnProcess(proto, argv[0], argv, childFDs=BrowserProcess.CHILD_FDS)}.
    """

    #: stdin closed; stdout/stderr read (kept as a short tail for error messages); 3 and 4 the pipe.
    CHILD_FDS = {0: "w", 1: "r", 2: "r", 3: "w", 4: "r"}

    def __init__(self, clock: IReactorTime) -> None:
        self.clock = clock
        self.ended: Deferred = Deferred()
        self.exit_code: int | None = None
        self.running = False
        self.output = b""
        self._buffer = b""
        self._ids = itertools.count(1)
        self._waiting: dict[int, Deferred] = {}

    # -- process ---------------------------------------------------------------------------------

    def connectionMade(self) -> None:
        self.running = True
        assert self.transport is not None
        self.transport.closeChildFD(0)

    def childDataReceived(self, fd: int, data: bytes) -> None:
        if fd != 4:
            self.output = (self.output + data)[-4096:]
            return
        self._buffer += data
        while b"\0" in self._buffer:
            message, self._buffer = self._buffer.split(b"\0", 1)
            self._message(message)
        if len(self._buffer) > MAX_MESSAGE:
            log.warn("a DevTools message over {n} bytes: dropped", n=MAX_MESSAGE)
            self._buffer = b""

    def processEnded(self, reason: Failure) -> None:
        self.running = False
        self.exit_code = 0 if reason.check(ProcessDone) else reason.value.exitCode \
            if isinstance(reason.value, ProcessTerminated) else None
        waiting, self._waiting = self._waiting, {}
        for d in waiting.values():
            d.errback(CDPError("the browser exited"))
        self.ended.callback(self.exit_code)

    @property
    def pid(self) -> int | None:
        return self.transport.pid if self.transport is not None else None

    def terminate(self, grace: float = 10.0) -> Deferred:
        """SIGTERM, then SIGKILL after C{grace} seconds; fires when the process has ended."""
        if self.running:
            self._signal("TERM")
            kill = self.clock.callLater(grace, self._signal, "KILL")

            def ended(result: object) -> object:
                if kill.active():
                    kill.cancel()
                return result

            self.ended.addBoth(ended)
        done: Deferred = Deferred()
        if not self.running:
            done.callback(self.exit_code)
        else:

            def fire(result: object) -> object:
                done.callback(self.exit_code)
                return result

            self.ended.addBoth(fire)
        return done

    def _signal(self, name: str) -> None:
        assert self.transport is not None  # spawned
        try:
            self.transport.signalProcess(name)
        except Exception:
            pass

    # -- DevTools --------------------------------------------------------------------------------

    def _message(self, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            return
        if not isinstance(message, dict) or "id" not in message:
            return  # an event: the launcher subscribes to none
        d = self._waiting.pop(message["id"], None)
        if d is None:
            return
        if "error" in message:
            d.errback(CDPError(f"{message['error'].get('message', message['error'])}"))
        else:
            d.callback(message.get("result", {}))

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 15.0) -> Deferred:
        """Send one DevTools command; fires with its result (L{CDPError} on an error answer)."""
        if not self.running:
            raise CDPError("the browser is not running")
        msg_id = next(self._ids)
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session

        def cancel(_: Deferred) -> None:
            self._waiting.pop(msg_id, None)

        d: Deferred = Deferred(cancel)
        self._waiting[msg_id] = d
        assert self.transport is not None  # running
        self.transport.writeToChild(3, json.dumps(message).encode() + b"\0")
        return d.addTimeout(timeout, self.clock)

    async def evaluate(self, session: str, expression: str, timeout: float = 15.0) -> Any:
        """Evaluate C{expression} (awaiting a promise) in a target; its JSON value."""
        result = await self.call("Runtime.evaluate", {
            "expression": expression, "awaitPromise": True, "returnByValue": True,
        }, session=session, timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise CDPError(f"evaluate failed: {text}")
        return result.get("result", {}).get("value")

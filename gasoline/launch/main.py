"""
C{gasoline browser}: start Chromium with Gasoline's extension, paired with the daemon and tracking
the opened tab (docs/browser.md)::

    gasoline browser [URL] [--headless] [--pilot] [--track-all] [--profile DIR]
                     [--chromium PATH] [--port N] [--state-dir DIR] [--api-key KEY] [--detach]

 1. find the daemon on C{--port} (C{GET /health}); start one if none runs, exactly as
    C{gasoline connect} does (L{gasoline.connect.discovery});
 2. start the browser on a fresh temporary profile (or C{--profile}) with the extension loaded and
    a private DevTools pipe (L{gasoline.launch.chromium});
 3. pre-pair the extension through that pipe (L{gasoline.launch.prepair}: the daemon's identity
    from its state dir, the tracked tab, the pilot; the extension's own key granted to the daemon
    for this launch, beside the key the daemon pins), wait until the extension has proved the
    daemon and connected, then open C{URL} in the tracked tab;
 4. wait for the browser to exit, or for Ctrl-C / SIGTERM, then end the browser and remove the
    launch grant and the temporary profile. With C{--detach} a background copy of this command does step 4 and this
    one returns once the browser is ready.

This is a separate program, so (unlike library code) it resolves the global reactor itself.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import treq
from treq.client import HTTPClient
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.defer import TimeoutError as StepTimeout
from twisted.internet.task import deferLater, react
from twisted.python import usage
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from gasoline import __version__
from gasoline.common import (
    default_state_dir,
    make_private_dir,
    make_private_file,
    tcp_port,
)
from gasoline.connect.client import DaemonHTTP
from gasoline.connect.discovery import (
    DEFAULT_PORT,
    UP,
    Discovery,
    Spawner,
    loopback_port,
)
from gasoline.daemon_dir import checked_state_dir
from gasoline.launch import prepair
from gasoline.launch.chromium import (
    BrowserProcess,
    CDPError,
    LaunchError,
    chromium_argv,
    extension_dir,
    find_chromium,
    pipe_supported,
    unpacked_extension_id,
)
from gasoline.launch.prepair import IdentityMismatch

#: Seconds each start-up step may take (daemon, browser, extension) before the launch gives up.
STEP_TIMEOUT = 45.0


class BrowserOptions(usage.Options):
    synopsis = "[URL] [options]"
    longdesc = (
        "Start Chromium with Gasoline's extension already paired with the daemon (started if none "
        "runs), tracking the opened tab. The browser ends with this command (Ctrl-C), unless "
        "--detach.")
    optParameters: list[list[Any]] = [
        ["port", "p", None, f"Daemon port on 127.0.0.1 (default {DEFAULT_PORT}).", tcp_port],
        ["state-dir", None, None,
         "The daemon's state dir (default: the one the running daemon names, its identity "
         "checked; for a daemon this command starts: $GASOLINE_STATE_DIR, else the platform's "
         "user state dir); its identity is what the browser pins."],
        ["profile", None, None,
         "Browser profile directory to use and keep (default: a temporary one, removed at exit)."],
        ["chromium", None, None, "Browser executable (default: chromium, chromium-browser or "
         "google-chrome on PATH)."],
        ["api-key", None, None, "Key of a daemon started with --api-key (default: "
         "$GASOLINE_API_KEY); given to a daemon this command starts."],
        ["ready-file", None, None, "(internal, --detach) write the launch result here as JSON."],
    ]
    optFlags = [
        ["headless", None, "Run the browser headless (CI, servers)."],
        ["pilot", None, "Let agents act in the browser (navigate, click, type, execute)."],
        ["track-all", None, "Capture every tab, not only the opened one."],
        ["detach", None, "Return once the browser is ready; it keeps running (a background "
         "process ends it and removes its profile when it is closed)."],
    ]

    def opt_version(self) -> None:
        """Print Gasoline's version and exit."""
        print(f"gasoline {__version__}")
        raise SystemExit(0)

    def parseOptions(self, options: list[str] | None = None) -> None:
        """As usual, but the URL may come before the options too (C{gasoline browser URL
        --headless}): Twisted's parser stops at the first non-option, so the rest is moved
        behind them."""
        args = list(options if options is not None else sys.argv[1:])
        takes_value = {f"--{row[0]}" for row in self.optParameters} | {"-p"}
        flags_and_values: list[str] = []
        positional: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                positional += args[i + 1:]
                break
            if arg.startswith("-") and arg != "-":
                flags_and_values.append(arg)
                if arg in takes_value and i + 1 < len(args):
                    flags_and_values.append(args[i + 1])
                    i += 1
            else:
                positional.append(arg)
            i += 1
        return super().parseOptions(flags_and_values + positional)

    def parseArgs(self, url: str = "about:blank") -> None:
        self["url"] = url

    def postOptions(self) -> None:
        if self["api-key"] is None:
            self["api-key"] = os.environ.get("GASOLINE_API_KEY") or None
        url = self["url"]
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):(?!\d)", url)
        if url != "about:blank" and scheme is None:
            self["url"] = url = "http://" + url  # example.test/x, localhost:3000/x
        if not (url == "about:blank" or url.startswith(("http://", "https://", "file://"))):
            raise usage.UsageError("URL must be http://, https:// or file:// (or host[:port]/path)")
        #: --state-dir as given (None: the daemon's /health names it, checked against its
        #: identity; L{gasoline.daemon_dir}). "state-dir" is where a daemon is started when none
        #: runs, then the checked state dir of the daemon found.
        self["state-dir-given"] = Path(self["state-dir"]) if self["state-dir"] else None
        self["state-dir"] = self["state-dir-given"] or default_state_dir()
        self["base-url"] = f"http://127.0.0.1:{self['port'] or DEFAULT_PORT}"


def main(argv: list[str]) -> int:
    options = BrowserOptions()
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        sys.stderr.write(f"gasoline browser: {e}\n\n{options}\n")
        return 2
    if not pipe_supported():
        sys.stderr.write("gasoline browser: this platform cannot hand the browser its private "
                         "DevTools pipe (Windows): load the extension unpacked in Chrome and pair "
                         "it in its popup instead (README, \"The browser extension\")\n")
        return 1
    if options["detach"]:
        return _detach(argv, options)
    try:
        react(_react, (options,))
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def _react(reactor: Any, options: BrowserOptions) -> Deferred[None]:
    return ensureDeferred(Launch(reactor, options).run())


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Launch:
    """One run of the command: the daemon, the browser, its profile, and their clean-up."""

    def __init__(self, reactor: Any, options: BrowserOptions) -> None:
        self.reactor = reactor
        self.options = options
        self.browser: BrowserProcess | None = None
        self.profile: Path | None = None
        self.temporary_profile = False
        self._cleaned: Deferred[None] | None = None
        self._http: HTTPClient | None = None
        #: The launch grant of the extension's key in the daemon's state dir (removed at clean-up).
        self.grant: Path | None = None

    async def run(self) -> None:
        self.reactor.addSystemEventTrigger("before", "shutdown", self.cleanup)
        try:
            tab = await self.start()
        except (LaunchError, IdentityMismatch, CDPError, StepTimeout) as e:
            await self.cleanup()
            self._ready({"error": str(e)})
            sys.stderr.write(f"gasoline browser: {e}\n")
            raise SystemExit(1) from None
        except BaseException as e:
            await self.cleanup()
            self._ready({"error": f"{type(e).__name__}: {e}"})
            raise
        assert self.browser is not None  # start() spawned it
        base = self.options["base-url"]
        _say(f"gasoline browser: {self.options['url']} in tab {tab} (browser pid "
             f"{self.browser.pid}, profile {self.profile}); daemon {base}; status page {base}/")
        self._ready({"pid": os.getpid(), "browser_pid": self.browser.pid, "tab": tab,
                     "daemon": base, "profile": str(self.profile),
                     "temporary_profile": self.temporary_profile})
        if not self.options["ready-file"]:
            _say("Ctrl-C ends the browser" + (" and removes its profile"
                                             if self.temporary_profile else ""))
        code = await self.browser.ended
        await self.cleanup()
        _say("gasoline browser: the browser ended" + (f" (exit status {code})" if code else "")
             + (", its profile removed" if self.temporary_profile else ""))

    def _ready(self, result: dict[str, Any]) -> None:
        path = self.options["ready-file"]
        if path:
            tmp = Path(path + ".tmp")
            tmp.write_text(json.dumps(result))
            tmp.replace(path)

    async def start(self) -> int:
        """Steps 1-3 of the module docstring; the tracked tab's id."""
        options = self.options
        executable = find_chromium(options["chromium"])
        extension = extension_dir()
        base = options["base-url"]
        health, offered = await self._daemon()
        # The daemon's own state dir (as the connector finds it), its identity checked.
        options["state-dir"] = checked_state_dir(base, health, offered,
                                                 options["state-dir-given"])
        identity = prepair.pinned_identity(options["state-dir"], offered, base)

        if options["profile"]:
            self.profile = Path(options["profile"]).resolve()
            make_private_dir(self.profile)
        else:
            self.profile = Path(tempfile.mkdtemp(prefix="gasoline-browser-"))
            self.temporary_profile = True
        argv = chromium_argv(executable, self.profile, extension, headless=options["headless"])
        self.browser = BrowserProcess(self.reactor)
        self.reactor.spawnProcess(self.browser, argv[0], argv, env=dict(os.environ),
                                  childFDs=BrowserProcess.CHILD_FDS)
        try:
            await self.browser.call("Browser.getVersion", timeout=STEP_TIMEOUT)
        except Exception as e:
            raise LaunchError(f"{executable} did not start ({e}): "
                              + self.browser.output.decode("utf-8", "replace")[-800:]) from None
        worker = await self._worker(extension)
        tabs = await self.browser.evaluate(
            worker, "chrome.tabs.query({}).then(ts => ts.map(t => ({id: t.id, url: t.url})))")
        if not tabs:
            raise LaunchError("the browser opened no tab")
        tab = int(tabs[0]["id"])
        self.grant = await prepair.grant_extension(self.browser, worker, options["state-dir"],
                                                   os.getpid())
        settings = prepair.prepaired_settings(
            base, identity, tab, options["url"], pilot=options["pilot"],
            track_all=options["track-all"], headless=options["headless"])
        await prepair.apply(self.browser, worker, settings)
        await self._until_connected(worker, tab)
        await self.browser.evaluate(
            worker, f"chrome.tabs.update({tab}, {{url: {json.dumps(options['url'])}}})"
                    ".then(() => true)")
        await self.browser.call("Target.detachFromTarget", {"sessionId": worker})
        return tab

    async def _daemon(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Find (or start) the daemon; its C{GET /health} and C{GET /pairing} answers."""
        options = self.options
        base = options["base-url"]
        http = self._http = HTTPClient(Agent(self.reactor, pool=HTTPConnectionPool(
            self.reactor, persistent=False)))
        daemon = DaemonHTTP(http, base, self.reactor, "gasoline-browser", secrets.token_hex(8),
                            options["api-key"])
        port = loopback_port(base)
        assert port is not None  # Options builds base-url as http://127.0.0.1:<port>
        spawner = Spawner(self.reactor, port, options["state-dir"],
                          api_key=options["api-key"])
        discovery = Discovery(self.reactor, daemon, spawner)
        deadline = self.reactor.seconds() + STEP_TIMEOUT
        while (state := await discovery.check()) != UP:
            if discovery.problem.startswith("something that is not"):
                raise LaunchError(discovery.problem)
            if self.reactor.seconds() > deadline:
                raise LaunchError(f"no daemon ({state}): {discovery.problem}")
            await self._sleep(0.25)
        if discovery.spawns:
            _say(f"gasoline browser: started a daemon at {base} (state dir {options['state-dir']})")
        health = await daemon.health()
        # The daemon's public identity, read as a local caller (with the key when there is one).
        key = options["api-key"]
        response = await http.get(base + "/pairing",
                                  headers=Headers({"X-Gasoline-Key": [key]} if key else {}))
        body = await treq.content(response)
        try:
            offered = json.loads(body) if response.code == 200 else None
        except ValueError:
            offered = None
        return health, offered

    async def _worker(self, extension: Path) -> str:
        """Attach to the extension's service worker once its APIs are up; the session id."""
        assert self.browser is not None  # spawned
        wanted = f"chrome-extension://{unpacked_extension_id(extension)}/background.js"
        deadline = self.reactor.seconds() + STEP_TIMEOUT
        target = None
        while target is None:
            infos = (await self.browser.call("Target.getTargets"))["targetInfos"]
            target = next((t for t in infos if t["type"] == "service_worker"
                           and t["url"] == wanted), None)
            if target is None:
                if self.reactor.seconds() > deadline:
                    raise LaunchError(f"the extension's service worker ({wanted}) did not start")
                await self._sleep(0.2)
        session = (await self.browser.call("Target.attachToTarget", {
            "targetId": target["targetId"], "flatten": True}))["sessionId"]
        await self.browser.call("Runtime.enable", session=session)
        while not await self._try(session, "typeof chrome === 'object' && !!chrome.storage"):
            if self.reactor.seconds() > deadline:
                raise LaunchError("the extension's service worker has no chrome.storage")
            await self._sleep(0.2)
        return session

    async def _until_connected(self, worker: str, tab: int) -> None:
        """Wait until the daemon has had a C{/sync} from this extension: its settings name our
        tab. The extension sends no C{/sync} before it has proved the daemon's identity, so this
        also says the pairing holds (waiting for the worker's own status would cost a long poll)."""
        assert self._http is not None  # _daemon() made it
        expr = "chrome.storage.session.get('gasolineStatus').then(r => r.gasolineStatus || {})"
        deadline = self.reactor.seconds() + STEP_TIMEOUT
        while True:
            try:
                response = await self._http.get(self.options["base-url"] + "/health")
                capture = json.loads(await treq.content(response)).get("capture") or {}
            except Exception:
                capture = {}
            if capture.get("extension_connected") and capture.get("tracked_tab_id") == tab:
                return
            status = await self._try(worker, expr) or {}
            pairing = status.get("pairing") or {}
            if pairing.get("state") in ("mismatch", "unsupported"):
                raise LaunchError(f"the extension refused the daemon: {pairing.get('message')}")
            if self.reactor.seconds() > deadline:
                raise LaunchError(f"the extension did not connect to the daemon: {status!r}")
            await self._sleep(0.2)

    async def _try(self, session: str, expression: str) -> Any:
        assert self.browser is not None  # spawned
        try:
            return await self.browser.evaluate(session, expression)
        except CDPError:
            return None

    def _sleep(self, seconds: float) -> Deferred[None]:
        return deferLater(self.reactor, seconds, lambda: None)

    def cleanup(self) -> Deferred[None]:
        """End the browser (if it runs) and remove a temporary profile; once."""
        if self._cleaned is None:
            self._cleaned = ensureDeferred(self._cleanup())
        return self._cleaned

    async def _cleanup(self) -> None:
        if self.browser is not None and self.browser.running:
            await self.browser.terminate()
        prepair.revoke_extension(self.grant)
        self.grant = None
        if self.temporary_profile and self.profile is not None:
            shutil.rmtree(self.profile, ignore_errors=True)


def _detach(argv: list[str], options: BrowserOptions) -> int:
    """Run this command again in the background (its own session, output to a log in the state
    dir) and return once it reports the browser ready, or its error."""
    state_dir: Path = options["state-dir"]
    make_private_dir(state_dir)
    ready = Path(tempfile.mkdtemp(prefix="gasoline-browser-ready-")) / "ready.json"
    log_path = state_dir / "browser.log"
    args = ["--ready-file", str(ready)] + [a for a in argv if a != "--detach"]
    with open(make_private_file(log_path), "ab") as log_file:
        child = subprocess.Popen(
            [sys.executable, "-m", "gasoline", "browser", *args], stdin=subprocess.DEVNULL,
            stdout=log_file, stderr=log_file, start_new_session=True)
    deadline = time.monotonic() + 4 * STEP_TIMEOUT
    try:
        while not ready.exists():
            if child.poll() is not None or time.monotonic() > deadline:
                sys.stderr.write(f"gasoline browser: the background launch ended without a "
                                 f"result (see {log_path})\n")
                return 1
            time.sleep(0.1)
        result = json.loads(ready.read_text())
    finally:
        shutil.rmtree(ready.parent, ignore_errors=True)
    if "error" in result:
        sys.stderr.write(f"gasoline browser: {result['error']}\n")
        return 1
    _say(f"gasoline browser: detached (pid {result['pid']}, browser pid {result['browser_pid']},"
         f" tab {result['tab']}); daemon {result['daemon']}; status page {result['daemon']}/;"
         f" log {log_path}")
    return 0

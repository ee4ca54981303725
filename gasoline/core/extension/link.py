"""
The daemon's link to the browser extension: liveness, settings and the C{/sync} command channel.

One L{ExtensionLink} handles every SyncRequest (extension-protocol.md §3):

 1. every sync marks the extension alive and (re)arms a C{callLater} of C{disconnect_after}
    seconds (10); when it fires the extension counts as disconnected: every outstanding command
    fails at once with L{ExtensionDisconnected} and the C{on_disconnect} hooks run;
 2. C{settings} replaces the tracked tab / pilot / capture state;
 3. C{command_results} resolve their commands (idempotent; unknown ids ignored);
 4. C{last_command_ack} acknowledges that command and every command queued before it;
 5. with nothing to hand out the request is held up to C{long_poll} seconds (5); a newly queued
    command answers it at once; cancelling the returned Deferred (Klein does so when the client
    goes away) removes the waiter and its timer. Since the next poll is held the same way, an
    answer without commands says C{next_poll_ms} 0: the extension comes back at once, so one poll
    is always waiting and a queued command goes out the moment it is queued (a pause between
    polls would be a quantum every command waits out). After handing out commands the answer says
    200 ms (the published extension reports a result on its next poll, which must not be held),
    or 0 to an extension that says C{command_push} (it sends each result, and each settings change,
    the moment it is ready on a sync of its own marked C{hold: false}, answered at once, so its
    next poll can be held at once);
 6. commands are re-sent on every sync until acknowledged or expired; one sync hands out at most
    C{max_commands} (the oldest; C{next_poll_ms} 0 says more are waiting), so every sync, and
    the batch of results the extension answers it with, stays a short reactor turn: one agent's
    burst of 1,000 calls cannot hold the reactor for tens of milliseconds while every other
    agent's answer and the page's telemetry wait behind it;
 7. C{extension_logs} are redacted and kept in the C{extension_logs} buffer.
"""

from __future__ import annotations

import secrets

from typing import TYPE_CHECKING, Any, Callable

import attrs
import orjson
from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from gasoline._version import EXTENSION_COMPAT_VERSION
from gasoline.common import rfc3339  # re-exported
from gasoline.core.extension.commands import CommandQueue
from gasoline.core.errors import ExtensionDisconnected
from gasoline.core.hooks import add_hook
from gasoline.core.lifecycle import StopHook
from gasoline.core.redaction.redactor import Redactor
from gasoline.core.storage.store import EXTENSION_LOGS
from gasoline.core.validate import encodable

if TYPE_CHECKING:
    from gasoline.core.trust.pairing import DaemonIdentity
    from gasoline.core.storage.store import TelemetryStore

log = Logger()

DISCONNECT_AFTER = 10.0
LONG_POLL = 5.0
#: The wait an answer asks for when the next poll would not be held (long polls switched off).
NEXT_POLL_MS = 1000
#: The wait after handing out commands to an extension that reports results on its next poll.
NEXT_POLL_BUSY_MS = 200
#: Most commands handed out by one sync (see rule 6 above).
MAX_COMMANDS_PER_SYNC = 50
#: Keep at most this many extension log entries from one sync (the extension sends a few).
MAX_EXTENSION_LOGS_PER_SYNC = 500


#: What every surface (doctor, configure health, agents' errors) says while the extension waits.
WAITING_FOR_PAIRING = ("the browser extension is waiting for the user to pair it with this "
                       "daemon (it asks for the daemon's identity but sends nothing until paired)")
PAIR_FIX = ("Open the Gasoline popup in the browser: it shows this daemon's fingerprint; check it "
            "matches what `gasoline identity` prints, then click \"Pair with this daemon\". "
            "Capture starts within a few seconds.")
NOT_CONNECTED_FIX = ("Open the browser with the Gasoline extension and make sure its options "
                     "point at this daemon's port.")


@attrs.define(eq=False)
class ExtensionLink:
    """See the module docstring. C{store} is the telemetry store (for C{extension_logs})."""

    clock: IReactorTime
    store: TelemetryStore
    commands: CommandQueue
    disconnect_after: float = DISCONNECT_AFTER
    long_poll: float = LONG_POLL
    max_commands: int = MAX_COMMANDS_PER_SYNC
    #: Applied to C{extension_logs} entries before they are kept (the daemon's redactor).
    redactor: Callable[[Any], Any] = attrs.field(factory=lambda: Redactor().redact_value)
    connected: bool = attrs.field(default=False, init=False)
    last_sync: float | None = attrs.field(default=None, init=False)
    settings: dict[str, Any] = attrs.field(factory=dict, init=False)
    session_id: str | None = attrs.field(default=None, init=False)
    extension_version: str | None = attrs.field(default=None, init=False)
    in_progress: list[Any] = attrs.field(factory=list, init=False)
    #: The latest C{POST /api/extension-status} body and when it came.
    status: dict[str, Any] = attrs.field(factory=dict, init=False)
    status_at: float | None = attrs.field(default=None, init=False)
    syncs: int = attrs.field(default=0, init=False)
    #: The daemon identity (gasoline.core.trust.pairing.DaemonIdentity, passed by C{app.build}):
    #: pairing state for C{/health} and C{configure health}.
    identity: DaemonIdentity | None = attrs.field(default=None, kw_only=True)
    #: Names this daemon process in every SyncResponse (C{daemon_instance}): command ids restart at
    #: C{q-1} with the process, so the extension forgets the ids it has seen when this changes.
    instance: str = attrs.field(factory=lambda: secrets.token_hex(8), init=False)
    #: When the extension last asked for the daemon's identity (C{GET /pairing}): an extension
    #: that does so without syncing is waiting for the user to pair it (L{waiting_for_pairing}).
    pairing_offered_at: float | None = attrs.field(default=None, init=False)
    #: (client id, tabs) pairs already told that those tracked tabs loaded before tracking.
    _told_reload: set = attrs.field(factory=set, init=False, repr=False)
    #: The agents' DOM watches (L{gasoline.streaming.domwatch}) every sync answer carries, and
    #: their version (it changes with the list).
    dom_watches: list[dict[str, Any]] = attrs.field(factory=list, init=False)
    dom_version: int = attrs.field(default=0, init=False)
    #: Called with each C{POST /dom-changes} body (the streaming hub's C{publish_dom}).
    _dom_hooks: list[Callable[[dict[str, Any]], int]] = attrs.field(factory=list, init=False)
    _timer: IDelayedCall | None = attrs.field(default=None, init=False)
    _disconnect_hooks: list[Callable[[], None]] = attrs.field(factory=list, init=False)

    # -- liveness --------------------------------------------------------------------------------

    def touch(self) -> None:
        """The extension talked to us (a sync or a legacy poll): it is alive for 10 s more."""
        self.last_sync = self.clock.seconds()
        if not self.connected:
            log.info("browser extension connected")
        self.connected = True
        if self._timer is not None and self._timer.active():
            self._timer.reset(self.disconnect_after)
        else:
            self._timer = self.clock.callLater(self.disconnect_after, self._went_away)

    def _went_away(self) -> None:
        self._timer = None
        self.connected = False
        error = ExtensionDisconnected(
            f"the browser extension has not synced for {self.disconnect_after:g} s"
        )
        failed = self.commands.fail_all(error)
        log.info("browser extension went away (no sync for {t:g} s); failed {n} pending commands",
                 t=self.disconnect_after, n=len(failed))
        for hook in list(self._disconnect_hooks):
            try:
                hook()
            except Exception:
                log.failure("on_disconnect hook {hook!r} failed", hook=hook)

    def on_disconnect(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call C{hook()} each time the extension goes from connected to disconnected."""
        return add_hook(self._disconnect_hooks, hook)

    def loaded_before_tracking(self) -> list[int]:
        """Tracked tabs that had already loaded when tracking began (the extension's
        C{settings.loaded_before_tracking}): their load-time errors were not captured."""
        tabs = self.settings.get("loaded_before_tracking")
        if not isinstance(tabs, list):
            return []
        return [t for t in tabs if isinstance(t, int) and not isinstance(t, bool)][:50]

    def reload_note(self, client_id: str) -> str | None:
        """Once per client (and set of such tabs): the sentence telling an agent to reload."""
        tabs = self.loaded_before_tracking()
        if not tabs:
            return None
        key = (client_id, tuple(sorted(tabs)))
        if key in self._told_reload:
            return None
        if len(self._told_reload) > 1000:
            self._told_reload.clear()
        self._told_reload.add(key)
        which = ", ".join(str(t) for t in tabs)
        return (f"tracked tab {which} had already loaded when tracking began, so the errors and "
                "requests of its load were not captured: reload it (interact {what:\"refresh\"}, "
                "or \"Reload it\" in the Gasoline popup) to capture them")

    def pairing_offered(self) -> None:
        """The extension asked for the daemon's identity (C{GET /pairing} from its origin)."""
        self.pairing_offered_at = self.clock.seconds()

    @property
    def waiting_for_pairing(self) -> bool:
        """Not syncing, but asking for the daemon's identity within the last 10 s: the
        extension has not been paired with this daemon yet and waits for the user to confirm
        the fingerprint in its popup."""
        at = self.pairing_offered_at
        return (not self.connected and at is not None
                and self.clock.seconds() - at < self.disconnect_after
                and (self.last_sync is None or self.last_sync <= at))

    @property
    def state(self) -> str:
        """C{connected}, C{waiting_for_pairing} or C{not_connected}."""
        if self.connected:
            return "connected"
        return "waiting_for_pairing" if self.waiting_for_pairing else "not_connected"

    def require_connected(self) -> None:
        """@raise ExtensionDisconnected: when no sync came within the last 10 s (saying so when
        the extension waits for the user to pair it)."""
        if self.connected:
            return
        if self.waiting_for_pairing:
            raise ExtensionDisconnected(WAITING_FOR_PAIRING, retry=PAIR_FIX,
                                        extension_state="waiting_for_pairing")
        raise ExtensionDisconnected("the browser extension is not connected to this daemon")

    def stop(self) -> None:
        """Cancel the liveness timer (service shutdown; keeps tests free of leaked timers)."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def service(self) -> Service:
        """A service whose stop cancels this link's timer (add it to the daemon's services)."""
        return StopHook(self.stop)

    def pairing(self) -> dict[str, Any] | None:
        """Both fingerprints (daemon, pinned extension) and the pairing counters, or C{None}."""
        return self.identity.summary() if self.identity is not None else None

    def health(self) -> dict[str, Any]:
        """C{{connected, last_poll}} for C{/health}."""
        return {"connected": self.connected, "last_poll": rfc3339(self.last_sync)}

    # -- /sync -----------------------------------------------------------------------------------

    def sync(self, request: dict[str, Any]) -> Deferred:
        """Handle one SyncRequest dict; a Deferred firing with the SyncResponse dict."""
        self.touch()
        self.syncs += 1
        session = request.get("ext_session_id")
        if isinstance(session, str):
            self.session_id = session[:200]
        version = request.get("extension_version")
        if isinstance(version, str):
            self.extension_version = version[:50]
        settings = request.get("settings")
        if isinstance(settings, dict):
            self.settings = settings
        in_progress = request.get("in_progress")
        if isinstance(in_progress, list):
            self.in_progress = in_progress
        logs = request.get("extension_logs")
        if isinstance(logs, list) and logs:
            self.add_extension_logs(logs)
        results = request.get("command_results")
        reported = isinstance(results, list) and bool(results)
        if reported and isinstance(results, list):
            for result in results:
                self.commands.resolve(result)
        ack = request.get("last_command_ack")
        if isinstance(ack, str):
            self.commands.ack(ack)
        push = request.get("command_push") is True
        # A push (C{hold: false}): the extension tells something now (a result, a settings change)
        # while its poll is held; it is answered at once.
        now = request.get("hold") is False

        commands = self.commands.deliverable()
        # A sync that reports results is answered at once: the published extension has one sync
        # in flight at a time, so holding it would delay its next result by up to 5 s.
        if commands or reported or now or self.long_poll <= 0:
            return succeed(self._response(commands, push))
        d = self.commands.wait(self.long_poll)
        d.addCallback(lambda _: self._response(self.commands.deliverable(), push))
        return d

    def _next_poll_ms(self, handed_out: bool, more: bool, push: bool) -> int:
        """The wait the answer asks for (rule 5 of the module docstring)."""
        if more:
            return 0
        if self.long_poll <= 0:
            return NEXT_POLL_BUSY_MS if handed_out else NEXT_POLL_MS
        return NEXT_POLL_BUSY_MS if handed_out and not push else 0

    def _response(self, commands: list, push: bool = False) -> dict[str, Any]:
        more = len(commands) > self.max_commands
        if more:
            commands = commands[: self.max_commands]
        answer = {
            "ack": True,
            "commands": [c.to_json() for c in commands],
            "next_poll_ms": self._next_poll_ms(bool(commands), more, push),
            "server_time": rfc3339(self.clock.seconds()),
            "server_version": EXTENSION_COMPAT_VERSION,
            "capture_overrides": {},
            "daemon_instance": self.instance,
        }
        if self.dom_version:
            # Once any agent watched the DOM (an absent field means no watch at all).
            answer["dom_watches"] = {"version": self.dom_version, "watches": self.dom_watches}
        return answer

    def set_dom_watches(self, watches: list[dict[str, Any]]) -> None:
        """A new list of DOM watches: the next sync answer carries it (a held one at once)."""
        self.dom_watches = list(watches)
        self.dom_version += 1
        self.commands.wake()

    def on_dom_changes(self, hook: Callable[[dict[str, Any]], int]) -> Callable[[], None]:
        """Call C{hook(report)} with each report of DOM watches met (it returns the events made)."""
        return add_hook(self._dom_hooks, hook)

    def dom_changes(self, report: dict[str, Any]) -> int:
        """The extension reports DOM watches met; return how many events they made."""
        return sum(hook(report) for hook in list(self._dom_hooks))

    def add_extension_logs(self, logs: list[Any]) -> tuple[int, str | None]:
        """Redact and keep extension debug log entries (dicts only); return how many were kept
        and why they are not on disk (None: persisted, or nothing to persist)."""
        kept = [self.redactor(e) for e in logs[:MAX_EXTENSION_LOGS_PER_SYNC] if isinstance(e, dict)]
        error = None
        if kept:
            try:
                error = self.store.add(EXTENSION_LOGS, kept).persist_error
            except orjson.JSONEncodeError:  # nested deeper than orjson encodes: drop those
                kept = encodable(kept)[0]
                error = self.store.add(EXTENSION_LOGS, kept).persist_error
        return len(kept), error

    def set_status(self, status: dict[str, Any]) -> None:
        """Record a C{POST /api/extension-status} ping."""
        self.status = status
        self.status_at = self.clock.seconds()



"""
Client identity and per-client state.

Every agent has a client id: C{--client-id} if given, else L{client_id_for_cwd} of its working
directory, else L{new_client_id}. Everything that belongs to one agent (read cursors per buffer,
checkpoints, noise rules, key-value store, tab filters, subscriptions, pending command ids) lives in
its L{ClientState}; no other client ever sees it.

Lifecycle, all on the injected clock:

 - C{register(id)} makes a client *live* (creating its state, or inheriting the state it had within
   the TTL, in memory or persisted on disk). Past C{max_clients} live clients it raises
   L{TooManyClients}.
 - C{connect(id)} / C{disconnect(id)} count live connections (an MCP session, an SSE stream);
   when the last one ends the client is *gone* and its TTL starts.
 - C{unregister(id)} says the client is leaving (C{DELETE /clients/<id>}): gone now and the TTL
   starts, unless another connection still uses the id (then its last C{disconnect} starts it).
 - C{expire(now)} drops every client without live connections whose latest activity (last request,
   or going away) is older than the TTL. It is pure (reads only C{now}); the registry's
   C{expiry_service} (a C{TimerService} on the clock) calls it and then flushes to disk.

Persistence: the persistent parts (L{ClientState.to_json}) are written to
C{<state_dir>/clients/<id>.json} (mode 0600, atomic replace) by the timer, never in a request:
C{touch} marks a state dirty (it is called on every request, before the request mutates the state),
and the next tick writes the dirty states whose serialized form changed. The files are written again
on service stop, and removed when a client expires.
"""

from __future__ import annotations

import builtins
import os
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

import attrs
import orjson
from twisted.application.internet import TimerService
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from gasoline.common import client_id_for_cwd, read_nofollow
from gasoline.core.storage.atrest import MAGIC
from gasoline.core.trust.clientkey import ClientKey
from gasoline.core.errors import InvalidParam, TooManyClients, UnknownClient
from gasoline.core.storage.files import (
    DiskHealth,
    describe,
    make_private_dir,
    set_aside,
    unreadable,
    write_atomic,
)
from gasoline.core.interfaces import IClientRegistry, IClientState

log = Logger()

#: Client ids name files in the state dir, so they are restricted to a safe alphabet.
CLIENT_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
#: The ids given to callers that name none start with this (L{ClientRegistry.anonymous_client_id}).
ANONYMOUS_PREFIX = "anon-"
#: A registered client with no connection this long is the first to give up its slot at the limit.
QUIET_AFTER = 60.0
#: Seconds between timer ticks (persistence flush + expiry).
DEFAULT_TICK = 1.0
#: Client state files one flush tick writes at most (the rest on the next ticks).
WRITES_PER_TICK = 10
STATE_VERSION = 1


def usable_cwd(path: str | None) -> str | None:
    """C{path} if it can serve as an agent's working directory: an absolute path to an existing
    directory other than the filesystem root (which would let C{save_to} write anywhere)."""
    if not isinstance(path, str) or not path or "\x00" in path or not os.path.isabs(path):
        return None
    real = os.path.realpath(path)
    if real == os.path.sep or not os.path.isdir(real):
        return None
    return real


def new_client_id() -> str:
    """A random client id (12 hex chars)."""
    return secrets.token_hex(6)


def validate_client_id(client_id: Any) -> str:
    """Return C{client_id} if it is a well-formed id, else raise L{InvalidParam}."""
    if not isinstance(client_id, str) or not CLIENT_ID_RE.match(client_id):
        raise InvalidParam(
            "client_id must be 1-64 characters of letters, digits, '.', '_' or '-' "
            "(not starting with '.' or '-')",
            client_id=client_id if isinstance(client_id, str) else None,
        )
    return client_id


class ClientStateEdits:
    """How a client's state changes, the one definition for the daemon's L{ClientState} and the
    testing package's in-memory one: each change to what is persisted marks the state for
    writing (C{mark_dirty}, the class's own)."""

    pending_commands: set[str]
    cursors: dict[str, int]
    kv: dict[str, Any]
    checkpoints: dict[str, Any]
    noise_rules: list[Any]
    tab_filters: list[str]
    subscriptions: dict[str, Any]

    def mark_dirty(self) -> None:
        raise NotImplementedError

    def command_queued(self, command_id: str) -> None:
        self.pending_commands.add(command_id)

    def command_ended(self, command_id: str) -> None:
        self.pending_commands.discard(command_id)

    def set_cursor(self, name: str, seq: int) -> None:
        self.cursors[name] = seq

    def put(self, key: str, value: Any) -> None:
        self.kv[key] = value
        self.mark_dirty()

    def drop(self, key: str) -> None:
        self.kv.pop(key, None)
        self.mark_dirty()

    def store_value(self, namespace: str, key: str, value: Any) -> None:
        space = self.kv.get(namespace)
        if not isinstance(space, dict):
            space = self.kv[namespace] = {}
        space[key] = value
        self.mark_dirty()

    def delete_value(self, namespace: str, key: str) -> bool:
        space = self.kv.get(namespace)
        existed = isinstance(space, dict) and space.pop(key, None) is not None
        if isinstance(space, dict) and not space:
            del self.kv[namespace]
        self.mark_dirty()
        return existed

    def set_checkpoint(self, name: str, checkpoint: dict[str, Any]) -> None:
        self.checkpoints[name] = checkpoint
        self.mark_dirty()

    def delete_checkpoint(self, name: str) -> bool:
        existed = self.checkpoints.pop(name, None) is not None
        if existed:
            self.mark_dirty()
        return existed

    def set_noise_rules(self, rules: Any) -> None:
        self.noise_rules = rules
        self.mark_dirty()

    def set_tab_filters(self, patterns: list[str]) -> None:
        self.tab_filters = list(patterns)
        self.mark_dirty()

    def set_subscription(self, key: str, raw: Any) -> None:
        self.subscriptions[key] = raw
        self.mark_dirty()

    def drop_subscription(self, key: str) -> None:
        self.subscriptions.pop(key, None)
        self.mark_dirty()


@implementer(IClientState)
@attrs.define
class ClientState(ClientStateEdits):
    """Everything that belongs to one agent: never visible to another."""

    client_id: str
    connected_at: float
    last_seen: float
    cursors: dict[str, int] = attrs.field(factory=dict)
    checkpoints: dict[str, Any] = attrs.field(factory=dict)
    noise_rules: list[Any] = attrs.field(factory=list)
    kv: dict[str, Any] = attrs.field(factory=dict)
    tab_filters: list[str] = attrs.field(factory=list)
    subscriptions: dict[str, Any] = attrs.field(factory=dict)
    pending_commands: set[str] = attrs.field(factory=set)
    #: Live connections (MCP sessions, SSE streams) using this client id right now.
    connections: int = 0
    #: Clock seconds when the client went away (last connection ended / unregistered), else None.
    gone_at: float | None = None
    #: True when the latest C{register} found earlier state (in memory or on disk) and kept it.
    inherited: bool = False
    #: The agent's working directory as its connector reported it (see L{usable_cwd}); bounds where
    #: C{generate save_to} may write. Not persisted: every registration reports it again.
    cwd: str | None = None
    _dirty: bool = attrs.field(default=False, repr=False, eq=False)

    @property
    def live(self) -> bool:
        """Registered and not gone (it counts towards C{max_clients})."""
        return self.gone_at is None

    def touch(self, now: float) -> None:
        self.last_seen = now
        self._dirty = True

    def mark_dirty(self) -> None:
        """Ask for the persistent parts to be written on the next tick."""
        self._dirty = True

    @property
    def dirty(self) -> bool:
        """The persistent parts changed since they were last written."""
        return self._dirty

    def mark_clean(self) -> None:
        """The persistent parts were written (or are about to be: L{mark_dirty} again if that
        fails)."""
        self._dirty = False

    def inherit(self) -> None:
        """This registration found earlier state (in memory or on disk) and keeps it."""
        self.inherited = True

    def rejoin(self, now: float, cwd: str | None) -> None:
        """Registered again: a client that had gone inherits its state; a live one keeps it as
        its own (its connector's first MCP request may come before its registration). C{cwd}
        replaces the known working directory when usable (L{usable_cwd})."""
        if not self.live:
            self.inherited = True
        self.gone_at = None
        self.touch(now)
        self.cwd = usable_cwd(cwd) or self.cwd

    def evict(self, now: float) -> None:
        """Give up the client's slot (at the client limit): it is gone from C{now}, its state
        kept for the TTL."""
        self.gone_at = now
        self._dirty = True

    def connection_opened(self) -> None:
        """One more live connection (an MCP session, an SSE stream) uses this client id."""
        self.connections += 1

    def connection_closed(self, now: float) -> None:
        """One connection ended; when none remain the client is gone from C{now}."""
        self.connections = max(0, self.connections - 1)
        self.leave(now)

    def leave(self, now: float) -> None:
        """The client is gone from C{now} (its TTL starts) unless a connection still uses it or
        it has already gone."""
        if self.connections == 0 and self.gone_at is None:
            self.gone_at = now

    def to_json(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "cursors": dict(self.cursors),
            "checkpoints": self.checkpoints,
            "noise_rules": self.noise_rules,
            "kv": self.kv,
            "tab_filters": list(self.tab_filters),
            "subscriptions": self.subscriptions,
        }

    def load_json(self, data: dict[str, Any]) -> None:
        """Restore the persistent parts from L{to_json} output (ignoring malformed fields)."""
        cursors = data.get("cursors")
        if isinstance(cursors, dict):
            self.cursors = {
                str(k): int(v)
                for k, v in cursors.items()
                if isinstance(v, int) and not isinstance(v, bool) and v >= 0
            }
        for name, kind in (
            ("checkpoints", dict),
            ("noise_rules", (list, dict)),  # dict: NoiseRules.to_json() (configure noise_rule)
            ("kv", dict),
            ("subscriptions", dict),
        ):
            value = data.get(name)
            if isinstance(value, kind):
                setattr(self, name, value)
        tabs = data.get("tab_filters")
        if isinstance(tabs, list):
            self.tab_filters = [t for t in tabs if isinstance(t, str)]

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.client_id,
            "connected_at": self.connected_at,
            "last_seen": self.last_seen,
            "connected": self.live,
            "connections": self.connections,
        }


class _RegistryTimer(TimerService):
    """The expiry/flush timer; writes every client's state once more when the daemon stops."""

    def __init__(self, registry: "ClientRegistry", period: float) -> None:
        super().__init__(period, registry.tick)
        self.clock = registry.clock
        self._registry = registry

    def startService(self) -> None:
        self._registry.sweep_disk()
        super().startService()

    def stopService(self) -> Deferred[None] | None:
        d = super().stopService()
        self._registry.flush(force=True)
        return d


@implementer(IClientRegistry)
class ClientRegistry:
    """Client ids -> L{ClientState}, with TTL expiry, a live-client limit and disk persistence."""

    def __init__(
        self,
        clock: IReactorTime,
        ttl: float,
        max_clients: int,
        state_dir: Path | None = None,
        tick: float = DEFAULT_TICK,
        health: DiskHealth | None = None,
        client_key: ClientKey | None = None,
        at_rest: Any = None,
    ) -> None:
        self.clock = clock
        #: C{--state-key-file}: state files are sealed (L{gasoline.core.storage.atrest}).
        self.at_rest = at_rest
        #: Who may act as a client id: a caller naming one proves it with this key
        #: (L{gasoline.http.client_proof}); an in-memory one when none is given.
        self.client_key = client_key if client_key is not None else ClientKey.random()
        #: Where failing state writes are reported (gasoline.core.storage.files.DiskHealth).
        self.health = health if health is not None else DiskHealth(clock)
        self.ttl = float(ttl)
        self.max_clients = int(max_clients)
        self.dir = Path(state_dir) / "clients" if state_dir is not None else None
        self._clients: dict[str, ClientState] = {}
        #: Serialized state last written per client (skip rewriting unchanged files).
        self._written: dict[str, bytes] = {}
        #: When each client's file was last written by L{flush} (least recent goes first).
        self._written_at: dict[str, float] = {}
        self._to_delete: set[str] = set()
        #: Clients whose state file was read in clear while a state key is set.
        self._clear_files: set[str] = set()
        self.expiry_service = _RegistryTimer(self, tick)
        #: At the limit, called in turn until one frees a slot (returns True): the MCP server
        #: closes its least recently used quiet session (L{gasoline.mcp.server}).
        self.reclaimers: list[Callable[[], bool]] = []

    def add_reclaimer(self, reclaim: Callable[[], bool]) -> None:
        """At the limit, C{reclaim()} is asked (after the registrations without a connection) to
        free a slot; it returns True when it did."""
        self.reclaimers.append(reclaim)

    # -- identity and lifecycle ------------------------------------------------------------------

    def new_client_id(self, prefix: str = "") -> str:
        """A random id no client has, in memory or on disk (it must not land on state another
        client may come back for): C{POST /clients} without an id gives one to its caller."""
        while True:
            cid = prefix + new_client_id()
            if cid not in self._clients and (self.dir is None
                                             or not self._path(cid).exists()):
                return cid

    def anonymous_client_id(self) -> str:
        """The id of a caller that names none (an MCP session without C{X-Gasoline-Client}, a
        proxy session opened without a proof): L{new_client_id} under L{ANONYMOUS_PREFIX}, which
        no caller may name (gasoline.http.client_proof), so no one else can act as it."""
        return self.new_client_id(ANONYMOUS_PREFIX)

    def live_count(self) -> int:
        return sum(1 for s in self._clients.values() if s.live)

    def register(
        self, client_id: str | None = None, now: float | None = None, *, cwd: str | None = None
    ) -> ClientState:
        if now is None:
            now = self.clock.seconds()
        if client_id is None:
            client_id = client_id_for_cwd(cwd) if cwd else self.new_client_id()
        validate_client_id(client_id)
        state = self._clients.get(client_id)
        if state is None or not state.live:
            if self.live_count() >= self.max_clients and not self._make_room(now, client_id):
                log.info("client limit hit: {cid} refused, {n} clients already connected",
                         cid=client_id, n=self.max_clients)
                raise TooManyClients(
                    f"{self.max_clients} clients are already connected and none is idle "
                    f"(--max-clients {self.max_clients}: the daemon's option)",
                    max_clients=self.max_clients,
                )
        if state is not None:
            # A brand-new client is not reported as inheriting anything (ClientState.rejoin).
            state.rejoin(now, cwd)
            return state
        state = ClientState(client_id=client_id, connected_at=now, last_seen=now,
                            cwd=usable_cwd(cwd))
        self._to_delete.discard(client_id)
        if self._load(state, now):
            state.inherit()
        state.mark_dirty()
        self._clients[client_id] = state
        return state

    def _make_room(self, now: float, for_id: str) -> bool:
        """Only live clients hold slots. At the limit, free one: first a client
        registered but with no connection for L{QUIET_AFTER} seconds (a connector that died
        without unregistering), then a quiet MCP session (the reclaimers), then any client with
        no connection; least recently seen first. The freed client's state stays inheritable for
        the TTL. True when a slot was freed."""
        def idle_registrations(min_quiet: float) -> list[ClientState]:
            return [s for s in self._clients.values()
                    if s.live and s.connections == 0 and s.client_id != for_id
                    and now - s.last_seen >= min_quiet]

        for attempt in (QUIET_AFTER, None, 0.0):
            if attempt is None:
                for reclaim in list(self.reclaimers):
                    try:
                        if reclaim() and self.live_count() < self.max_clients:
                            return True
                    except Exception:
                        log.failure("client slot reclaimer failed")
                continue
            candidates = idle_registrations(attempt)
            if candidates:
                victim = min(candidates, key=lambda s: s.last_seen)
                victim.evict(now)
                log.info("client limit reached: client {cid} had no connection; its slot goes "
                         "to {new} (state kept for the TTL)", cid=victim.client_id, new=for_id)
                return True
        return self.live_count() < self.max_clients

    def get(self, client_id: str) -> ClientState | None:
        return self._clients.get(client_id)

    def connect(self, client_id: str, now: float | None = None) -> ClientState:
        """Register-or-get C{client_id} and count one more live connection."""
        if now is None:
            now = self.clock.seconds()
        state = self._clients.get(client_id)
        if state is None or not state.live:
            state = self.register(client_id, now)
        else:
            state.touch(now)
        state.connection_opened()
        return state

    def disconnect(self, client_id: str, now: float | None = None) -> None:
        """One connection of C{client_id} ended; when none remain the client is gone (TTL starts)."""
        state = self._clients.get(client_id)
        if state is None:
            return
        if now is None:
            now = self.clock.seconds()
        state.connection_closed(now)

    def unregister(self, client_id: str, now: float | None = None) -> ClientState:
        """The client says it is leaving: keep its state for the TTL.

        If other connections still use the same id (a second terminal in the same repo), the
        client stays live and its TTL starts when the last of them disconnects.

        @raise UnknownClient: no state is known for C{client_id}.
        """
        state = self._clients.get(client_id)
        if state is None:
            raise UnknownClient(f"no client {client_id!r}", client_id=client_id)
        if now is None:
            now = self.clock.seconds()
        state.leave(now)
        state.mark_dirty()
        return state

    def _last_activity(self, state: ClientState) -> float:
        if state.gone_at is None:
            return state.last_seen
        return max(state.gone_at, state.last_seen)

    def expire(self, now: float) -> list[str]:
        """Drop clients with no live connection whose last activity is older than the TTL."""
        dropped = [
            cid
            for cid, s in self._clients.items()
            if s.connections == 0 and now - self._last_activity(s) >= self.ttl
        ]
        for cid in dropped:
            del self._clients[cid]
            self._written.pop(cid, None)
            self._written_at.pop(cid, None)
            self._to_delete.add(cid)
        if dropped:
            log.info("client state expired: {ids}", ids=dropped)
        return dropped

    def list(self) -> list[ClientState]:
        return list(self._clients.values())

    def summary(self) -> dict[str, Any]:
        states = sorted(self._clients.values(), key=lambda s: (s.connected_at, s.client_id))
        return {
            "active": sum(1 for s in states if s.live),
            "total": len(states),
            "max": self.max_clients,
            "list": [s.summary() for s in states],
        }

    # -- timer ----------------------------------------------------------------------------------

    def tick(self) -> None:
        """Expire, then flush. Never raises (a TimerService stops for good on an exception)."""
        try:
            self.expire(self.clock.seconds())
            self.flush()
        except Exception:
            log.failure("client registry tick failed")

    # -- persistence ----------------------------------------------------------------------------

    def _path(self, client_id: str) -> Path:
        assert self.dir is not None
        return self.dir / f"{client_id}.json"

    def _encode(self, state: ClientState) -> bytes:
        return orjson.dumps(state.to_json(), option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS)

    def flush(self, force: bool = False) -> int:
        """Write dirty states whose persistent parts changed, remove expired ones' files.

        @param force: consider every state, dirty or not.
        @return: the number of files written.
        """
        if self.dir is None:
            for s in self._clients.values():
                s.mark_clean()
            self._to_delete.clear()
            return 0
        for cid in sorted(self._to_delete):
            try:
                self._path(cid).unlink()
            except FileNotFoundError:
                pass
            except OSError:
                log.failure("could not remove state of expired client {client_id}", client_id=cid)
        self._to_delete.clear()
        written = 0
        # Least recently written first, at most WRITES_PER_TICK files per tick (all of them when
        # forced, at stop): with fifty agents whose cursors move every second, a tick writing
        # every file held the reactor for ~100 ms on a busy disk; the rest wait for the next
        # ticks, still dirty.
        order = sorted(self._clients.items(),
                       key=lambda item: self._written_at.get(item[0], float("-inf")))
        for cid, state in order:
            if not (force or state.dirty):
                continue
            if not force and written >= WRITES_PER_TICK:
                break
            state.mark_clean()
            try:
                body = self._encode(state)
            except (TypeError, orjson.JSONEncodeError):
                log.failure("client {client_id} state is not JSON-serializable", client_id=cid)
                continue
            if self._written.get(cid) == body:
                continue
            now = self.clock.seconds()
            try:
                self._write(cid, body, now)
            except OSError as e:
                self.health.failed("client state", self._path(cid), e)
                state.mark_dirty()  # try again on the next tick
                continue
            self._written[cid] = body
            self._written_at[cid] = now
            written += 1
        if written:
            self.health.succeeded("client state")
        return written

    def save_now(self, client_id: str) -> str | None:
        """Write C{client_id}'s state now (a small file, as the timer does); return why it could
        not be written, else C{None}. For answers that promise persistence (C{configure store})."""
        state = self._clients.get(client_id)
        if state is None or self.dir is None:
            return None
        try:
            body = self._encode(state)
        except (TypeError, orjson.JSONEncodeError):
            return "the state is not JSON-serializable"
        try:
            self._write(client_id, body, self.clock.seconds())
        except OSError as e:
            state.mark_dirty()
            return self.health.failed("client state", self._path(client_id), e)
        state.mark_clean()
        self._written[client_id] = body
        self.health.succeeded("client state")
        return None

    def _write(self, client_id: str, body: bytes, now: float) -> None:
        assert self.dir is not None
        make_private_dir(self.dir)
        payload = b'{"version":%d,"saved_at":%s,"state":%s}' % (
            STATE_VERSION,
            repr(float(now)).encode(),
            body,
        )
        if self.at_rest is not None:
            payload = self.at_rest.seal_blob(payload, b"client")
        write_atomic(self._path(client_id), payload)

    def _read(self, client_id: str) -> dict[str, Any] | None:
        try:
            raw = read_nofollow(self._path(client_id))
            if raw.startswith(MAGIC):
                opened = self.at_rest.open_blob(raw, b"client") if self.at_rest else None
                if opened is None:
                    raise orjson.JSONDecodeError("sealed state that does not open", "", 0)
                raw = opened
            elif self.at_rest is not None:
                self._clear_files.add(client_id)  # written before the key: rewrite it sealed
            data = orjson.loads(raw)
        except FileNotFoundError:
            return None
        except OSError as e:
            unreadable(self._path(client_id), describe(e), self._lost(client_id))
            return None
        except orjson.JSONDecodeError:
            set_aside(self._path(client_id), "not valid JSON", self._lost(client_id))
            return None
        if not isinstance(data, dict) or not isinstance(data.get("state"), dict):
            set_aside(self._path(client_id), "not a client state", self._lost(client_id))
            return None
        return data

    @staticmethod
    def _lost(client_id: str) -> str:
        return f"the saved state of client {client_id} (its cursors, noise rules, checkpoints)"

    def _load(self, state: ClientState, now: float) -> bool:
        """Restore C{state} from disk if its file exists and is younger than the TTL."""
        if self.dir is None:
            return False
        data = self._read(state.client_id)
        if data is None:
            return False
        saved_at = data.get("saved_at")
        if isinstance(saved_at, (int, float)) and now - saved_at >= self.ttl:
            self._to_delete.add(state.client_id)
            return False
        state.load_json(data["state"])
        if state.client_id in self._clear_files:
            self._clear_files.discard(state.client_id)
            state.mark_dirty()  # rewritten sealed at the next tick
        else:
            self._written[state.client_id] = self._encode(state)
        return True

    def sweep_disk(self) -> builtins.list[str]:
        """Remove persisted states older than the TTL (at start-up). Return their ids."""
        if self.dir is None or not self.dir.is_dir():
            return []
        now = self.clock.seconds()
        removed = []
        for path in self.dir.glob("*.json"):
            cid = path.stem
            if not CLIENT_ID_RE.match(cid) or cid in self._clients:
                continue
            data = self._read(cid)
            saved_at = data.get("saved_at") if data else None
            if data is None or not isinstance(saved_at, (int, float)) or now - saved_at >= self.ttl:
                try:
                    path.unlink()
                    removed.append(cid)
                except OSError:
                    pass
        return removed

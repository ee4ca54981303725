"""
The interfaces the layers above the core hold client state through.

Four components keep what the daemon knows about its clients and their browser: the client
registry (L{IClientRegistry}), each client's own state (L{IClientState}: cursors, checkpoints,
noise rules, key-value store), the shared telemetry store (L{ITelemetryStore}) and the query router
(L{IQueryRouter}), which routes extension-bound commands to the client that asked. Each has two
implementations: the real one in this package (L{gasoline.core.clients.registry.ClientRegistry},
L{gasoline.core.clients.registry.ClientState}, L{gasoline.core.storage.store.TelemetryStore},
L{gasoline.core.extension.router.QueryRouter}) and an in-memory fake in L{gasoline.testing_fakes}, which tests
of the layers above (tools, MCP) use to test their own layer; C{tests/test_interfaces.py} checks
both with C{verifyObject}.

Each interface lists what its callers use (the tools, the MCP server, the HTTP APIs, context
streaming), not every method of its real implementation: persistence, expiry timers and counters
for C{/metrics} are the real class's own business. Attributes are declared with L{attribute}, which
gives mypy their type and zope.interface an C{Attribute} to verify.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from zope.interface import Attribute, Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from gasoline.core.storage.boundaries import TestBoundaries
    from gasoline.core.trust.clientkey import ClientKey
    from gasoline.core.storage.notify import Notifier
    from gasoline.core.storage.ring import ReadResult
    from gasoline.core.storage.store import Added


def attribute(doc: str) -> Any:
    """An interface attribute: C{name: type = attribute("what it is")} in an interface body
    types the attribute for mypy and declares it to zope.interface (C{verifyObject} checks that
    an implementation has it)."""
    return Attribute(doc)


class IClientState(Interface):
    """Everything that belongs to one agent, never visible to another."""

    client_id: str = attribute("The client's id.")
    connected_at: float = attribute("Clock seconds when this state was created.")
    last_seen: float = attribute("Clock seconds of the client's latest request.")
    cursors: dict[str, int] = attribute(
        "Read cursors by name (a buffer's, or a tool's own): the next sequence number unread.")
    checkpoints: dict[str, Any] = attribute("Named checkpoints (C{configure checkpoint}).")
    noise_rules: Any = attribute(
        "The client's noise rules: a list, or the L{gasoline.core.clients.noise.NoiseRules} JSON dict.")
    kv: dict[str, Any] = attribute("The client's key-value store (C{configure store}).")
    tab_filters: list[str] = attribute("Tab filters the client set.")
    subscriptions: dict[str, Any] = attribute("Context-streaming subscriptions, by key.")
    pending_commands: set[str] = attribute("Ids of the client's commands waiting for the "
                                           "extension (kept by the query router).")
    connections: int = attribute("Live connections (MCP sessions, SSE streams) using this id.")
    inherited: bool = attribute(
        "True when the latest registration found earlier state for the id and kept it.")
    cwd: str | None = attribute("The agent's working directory, as its connector reported it.")
    live: bool = attribute("Registered and not gone (it counts towards the client limit).")

    def touch(now: float) -> None:
        """A request of this client at clock time C{now} (before it mutates the state)."""

    def mark_dirty() -> None:
        """The persistent parts changed: write them on the next persistence tick."""

    def command_queued(command_id: str) -> None:
        """One of the client's commands waits for the extension (L{pending_commands})."""

    def command_ended(command_id: str) -> None:
        """That command no longer waits (answered, failed, expired or cancelled)."""

    def set_cursor(name: str, seq: int) -> None:
        """Move the read cursor C{name} to C{seq} (written with the next change of the state)."""

    def put(key: str, value: Any) -> None:
        """Keep C{value} under C{key} of the key-value store, and have the state written."""

    def drop(key: str) -> None:
        """Remove C{key} from the key-value store (if there), and have the state written."""

    def store_value(namespace: str, key: str, value: Any) -> None:
        """Keep C{value} under C{key} in C{namespace} of the key-value store (C{configure
        store}), and have the state written."""

    def delete_value(namespace: str, key: str) -> bool:
        """Remove C{key} from C{namespace} (the namespace too once empty), and have the state
        written; whether it was there."""

    def set_checkpoint(name: str, checkpoint: dict[str, Any]) -> None:
        """Keep the checkpoint C{name} (replacing one of that name), and have the state
        written."""

    def delete_checkpoint(name: str) -> bool:
        """Remove the checkpoint C{name}, and have the state written; whether it was there."""

    def set_noise_rules(rules: Any) -> None:
        """Replace the noise rules (the L{gasoline.core.clients.noise.NoiseRules} JSON dict), and have
        the state written."""

    def set_tab_filters(patterns: list[str]) -> None:
        """Replace the tab filters, and have the state written."""

    def set_subscription(key: str, raw: Any) -> None:
        """Keep the context-streaming subscription C{raw} under C{key}, and have the state
        written."""

    def drop_subscription(key: str) -> None:
        """Remove the context-streaming subscription under C{key}, and have the state
        written."""

    def to_json() -> dict[str, Any]:
        """The persistent parts, as JSON-serializable values."""

    def summary() -> dict[str, Any]:
        """C{id}, C{connected_at}, C{last_seen}, C{connected}, C{connections} (C{/clients})."""


class IClientRegistry(Interface):
    """Client ids -> L{IClientState}, with a limit on live clients and a TTL for gone ones."""

    client_key: ClientKey = attribute(
        "The key a caller naming a client id proves it holds (L{gasoline.http.client_proof}).")
    ttl: float = attribute("Seconds a gone client's state is kept.")
    max_clients: int = attribute("How many clients may be live at once (C{--max-clients}).")

    def anonymous_client_id() -> str:
        """A fresh id for a caller that names none, one no caller may name."""

    def register(client_id: str | None = None, now: float | None = None, *,
                 cwd: str | None = None) -> IClientState:
        """Make C{client_id} live (creating or inheriting its state) and return its state.

        @raise gasoline.core.errors.TooManyClients: at the live-client limit, with no slot freed.
        @raise gasoline.core.errors.InvalidParam: a malformed id.
        """

    def get(client_id: str) -> IClientState | None:
        """The state of C{client_id}, or None."""

    def connect(client_id: str, now: float | None = None) -> IClientState:
        """Register-or-get C{client_id} and count one more live connection."""

    def disconnect(client_id: str, now: float | None = None) -> None:
        """One connection of C{client_id} ended; with none left its TTL starts."""

    def unregister(client_id: str, now: float | None = None) -> IClientState:
        """The client is leaving: keep its state for the TTL.

        @raise gasoline.core.errors.UnknownClient: no state is known for C{client_id}.
        """

    def add_reclaimer(reclaim: Callable[[], bool]) -> None:
        """At the limit, C{reclaim()} is asked in turn (with the others) to free a slot; it
        returns True when it did (the MCP server closes a quiet session)."""

    def save_now(client_id: str) -> str | None:
        """Write C{client_id}'s state now; why it could not be written, else None."""

    def live_count() -> int:
        """How many clients are live."""

    def list() -> Sequence[IClientState]:
        """Every known client's state."""

    def summary() -> dict[str, Any]:
        """C{active}, C{total}, C{max} and C{list} (each state's L{IClientState.summary})."""


class ITelemetryStore(Interface):
    """The shared telemetry buffers every client reads (entries are JSON objects)."""

    buffers: dict[str, Any] = attribute(
        "Buffer name -> its ring of encoded entries (C{head}, C{tail}, C{read(cursor, limit)} "
        "with C{items} as JSON bytes, C{len()}, C{stats()}): see L{gasoline.core.storage.ring}.")
    performance: Any = attribute(
        "URL -> the latest performance snapshot for it, oldest first (an ordered dict).")
    test_boundaries: TestBoundaries = attribute("CI test boundaries (C{configure test_*}).")
    notifier: Notifier = attribute("Receives one C{BufferWrite} per batch written.")
    last_write: dict[str, float | None] = attribute(
        "Buffer name -> clock seconds of its latest write, or None.")

    def add(buffer_name: str, entries: list[dict[str, Any]]) -> Added:
        """Append C{entries} to C{buffer_name}; the first sequence number written, the head, and
        why the batch could not be persisted (or None)."""

    def add_performance(snapshots: list[dict[str, Any]]) -> int:
        """Keep the latest snapshot per URL; how many were given."""

    def read(buffer_name: str, cursor: int = 0,
             limit: int | None = None) -> ReadResult[dict[str, Any]]:
        """Decoded entries of C{buffer_name} from C{cursor} (see L{gasoline.core.storage.ring})."""

    def read_cache(buffer_name: str) -> Any:
        """The L{gasoline.core.redaction.once.ReadCache} of C{buffer_name}: each entry's redacted form
        and noise verdicts, kept so an entry is redacted once, not once per agent and read."""

    def note_read(buffer_name: str) -> None:
        """A client read C{buffer_name} (tools that read a ring directly say so here)."""

    def read_counts() -> dict[str, int]:
        """Buffer name -> how many client reads it had since the daemon started (C{/metrics})."""

    def websocket_status() -> dict[str, Any]:
        """C{active} and C{closed} WebSocket connections, as JSON."""

    def clear(buffer_name: str | None = None) -> int:
        """Empty one buffer (or all, and the performance view); how many entries went."""

    def clear_performance() -> int:
        """Empty the performance view only; how many snapshots went."""

    def stats() -> dict[str, dict[str, int]]:
        """Per buffer: capacity, used, head, ... (C{/health})."""


class IQueryRouter(Interface):
    """Extension-bound commands, each owned by the client that asked: only it gets the result."""

    stats: dict[str, int] = attribute("Counters: calls, complete, error, timeout, ...")
    per_client_limit: int = attribute("How many commands one client may have waiting.")

    def call(owner: str, type: str, params: dict[str, Any] | None = None,
             tab_id: int | None = None, timeout: float | None = None) -> Deferred[Any]:
        """Run one command for C{owner}; a Deferred firing with the extension's result, or
        failing with a C{GasolineError} (disconnected, queue full, timeout, the extension's
        error). Cancelling it removes the command."""

    def submit(owner: str, type: str, params: dict[str, Any] | None = None,
               tab_id: int | None = None, timeout: float | None = None) -> str:
        """Queue one command for C{owner} and return its correlation id at once (async mode).

        @raise gasoline.core.errors.ExtensionDisconnected: the extension is not connected.
        @raise gasoline.core.errors.QueueFull: past the per-client or total limit.
        """

    def cancel(owner: str, command_id: str) -> bool:
        """C{owner} gave up on one of its commands; True if one was cancelled."""

    def client_gone(owner: str) -> int:
        """Cancel every command C{owner} waits for; how many."""

    def command_result(owner: str, correlation_id: str) -> dict[str, Any]:
        """The outcome of C{owner}'s async command (C{status}, C{result} or C{error}).

        @raise gasoline.core.errors.GasolineError: C{no_data}, for an unknown id and for
            another client's id alike.
        """

    def pending_commands(owner: str) -> list[dict[str, Any]]:
        """C{owner}'s commands still waiting for the extension."""

    def failed_commands(owner: str) -> list[dict[str, Any]]:
        """C{owner}'s recently failed commands, newest last."""

    def pending_count(owner: str | None = None) -> int:
        """Commands waiting: of C{owner}, or of everyone."""

    def health() -> dict[str, Any]:
        """Counters for C{/health} (no client's data)."""

"""
The interfaces the layers talk through.

C{core} implements them; C{mcp} and C{http} depend on them rather than on the classes, so each
piece can be replaced by an in-memory fake from L{gasoline.testing} in tests.
"""

from __future__ import annotations

from zope.interface import Attribute, Interface


class INotifier(Interface):
    """In-process fan-out of telemetry events to subscribers.

    Publishing never blocks the publisher and never raises into it: delivery happens on a later
    reactor turn, and a subscriber that raises is logged and skipped (it stays subscribed).
    """

    def subscribe(callback):
        """Call C{callback(event)} for every event published from now on.

        @return: a zero-argument callable that unsubscribes.
        """

    def publish(event):
        """Queue C{event} for delivery to every subscriber. Returns at once."""


class ITelemetryStore(Interface):
    """The shared telemetry buffers every client reads.

    Entries are JSON objects. They are stored as compact JSON C{bytes} in ring buffers (see
    L{gasoline.core.ring.RingBuffer}) and decoded on read.
    """

    buffers = Attribute("dict of buffer name -> RingBuffer (console, network_bodies, ...)")
    notifier = Attribute("the L{INotifier} every write publishes a L{BufferWrite} to")

    def add(buffer_name, entries):
        """Append already-validated entry dicts to a buffer; publish one event for the batch.

        @return: C{(first_seq, head)} of the written range.
        """

    def read(buffer_name, cursor=0, limit=None):
        """Decode entries from C{cursor}: a L{gasoline.core.ring.ReadResult} of dicts."""

    def clear(buffer_name=None):
        """Empty one buffer, or all when C{None}. Return the number of entries removed."""

    def stats():
        """C{{name: {capacity, used, head, ...}}} for C{/health}."""


class IExtensionLink(Interface):
    """What the daemon knows about the browser extension: liveness, settings, the command channel."""

    connected = Attribute("True while the last /sync is less than the disconnect timeout old")
    last_sync = Attribute("clock seconds of the last /sync, or None")
    settings = Attribute("the latest SyncRequest.settings dict")
    commands = Attribute("the L{ICommandQueue} delivered through /sync")

    def sync(request):
        """Handle one SyncRequest dict; return a Deferred firing with the SyncResponse dict."""


class ICommandQueue(Interface):
    """Commands for the extension, delivered through /sync until acknowledged or expired."""

    def enqueue(type, params, owner, tab_id=None, correlation_id=None):
        """Queue a command; wake any waiting long-poll. @return: the L{Command} (id C{q-<n>})."""

    def deliverable():
        """The commands to hand out on the next sync (every unacked, unexpired command)."""

    def ack(command_id):
        """Mark C{command_id} and every command queued before it as delivered."""

    def resolve(result):
        """A command result arrived (dict with C{id}): hand it to the result listener; idempotent."""

    def wait(timeout):
        """A Deferred that fires (with None) when a command is queued, or after C{timeout}."""


class IClientState(Interface):
    """Everything that belongs to one agent: never visible to another."""

    client_id = Attribute("the client's id (str)")
    connected_at = Attribute("clock seconds when first registered")
    last_seen = Attribute("clock seconds of the client's latest request")
    cursors = Attribute("dict buffer name -> next sequence number to read")
    checkpoints = Attribute("dict name -> checkpoint dict (names unqualified)")
    noise_rules = Attribute("list of this client's noise rule dicts")
    kv = Attribute("dict key -> JSON value")
    tab_filters = Attribute("list of URL patterns (empty: every tab)")
    subscriptions = Attribute("dict of streaming subscription settings")
    pending_commands = Attribute("set of command ids this client owns")

    def touch(now):
        """Record activity at clock time C{now}."""

    def to_json():
        """A JSON-able dict of the persistent parts (cursors, checkpoints, noise rules, kv, tabs)."""


class IClientRegistry(Interface):
    """Client identity and per-client state, with a TTL after a client goes away."""

    def register(client_id=None, now=None):
        """Return the L{IClientState} for C{client_id} (created, or inherited within the TTL).

        @raise gasoline.core.errors.TooManyClients: past the maximum number of live clients.
        """

    def get(client_id):
        """The state for C{client_id} or C{None}."""

    def connect(client_id, now=None):
        """Register-or-get C{client_id} and count one more live connection (session, stream)."""

    def disconnect(client_id, now=None):
        """One connection of C{client_id} ended; when none remain, its TTL starts."""

    def unregister(client_id, now=None):
        """The client went away: keep its state for the TTL, then drop it."""

    def new_client_id():
        """A fresh random client id (12 hex characters)."""

    def summary():
        """C{{active, total, max, list: [{id, connected_at, last_seen, connected, ...}]}}."""

    def expire(now):
        """Drop state of clients gone longer than the TTL. Pure: reads only C{now}."""

    def list():
        """All known client states."""


class IQueryRouter(Interface):
    """Extension-bound requests of many agents, each answered to the agent that asked and no other.

    Every call becomes a command C{q-<n>} owned by the calling client (its client id), delivered
    to the extension through C{/sync}; its result is routed strictly by command id to the owner's
    Deferred (or async outcome). Errors are L{gasoline.core.errors.GasolineError} subclasses.
    """

    def call(owner, type, params, tab_id=None, timeout=None):
        """Ask the extension to run one command for C{owner}; wait for its result.

        @return: a Deferred firing with the extension's C{result} value; failing with
            C{ExtensionDisconnected} at once when the extension is not connected (and later, if it
            goes away), C{QueueFull} past the per-client or total limit, C{ExtensionTimeout} after
            C{timeout} seconds, or a C{GasolineError} carrying the extension's error text.
            Cancelling it removes the command (it is not delivered any more).
        """

    def submit(owner, type, params, tab_id=None, timeout=None):
        """Async mode: queue the command and return its correlation id at once.

        @raise ExtensionDisconnected: the extension is not connected.
        @raise QueueFull: past the per-client or total limit.
        """

    def command_result(owner, correlation_id):
        """The outcome of C{owner}'s async command: a dict with C{status} (pending, complete,
        error, timeout, expired, cancelled) and C{result} or C{error}.

        @raise GasolineError: code C{no_data} for an unknown id *and* for another client's id
            (the same answer, so ids cannot be probed).
        """

    def pending_commands(owner):
        """The caller's own commands still waiting for the extension (list of dicts)."""

    def failed_commands(owner):
        """The caller's own recently failed commands (list of dicts, newest last)."""

    def cancel(owner, command_id):
        """The owner gave up on one command (C{notifications/cancelled}); C{command_id} may also
        be an async correlation id. Another client's id is ignored.

        @return: True if one of C{owner}'s commands was cancelled.
        """

    def client_gone(owner):
        """The client went away: cancel every command it is waiting for. @return: how many."""


class ISessionTools(Interface):
    """Tools one MCP session sees beside the server's own (C{McpSession.extra_tools}).

    The MCP layer knows nothing of where they come from (a proxy session's child servers, say):
    it lists their definitions after its own and looks a name up here when its own registry has
    no tool by that name. Calls go through the same registry processing (rate limit, redaction,
    audit) as the server's own tools.
    """

    def definitions():
        """The tools' MCP definitions (C{name}, C{description}, C{inputSchema}, ...), a list."""

    def get(name):
        """The L{gasoline.mcp.tools.Tool} called C{name}, or None."""

    def progress(params):
        """The agent sent C{notifications/progress} with C{params} (for a request the session's
        tools made of it, such as a relayed C{sampling/createMessage}); pass it on or drop it."""

"""
The daemon's domain collaborators, by name: what every tool call and HTTP API is given.

L{gasoline.app.build} makes one L{Daemon}; nothing here opens sockets or reads the global reactor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
from twisted.internet.interfaces import IReactorTime

from gasoline.core.storage.documents import JsonDocument
from gasoline.core.extension.link import ExtensionLink
from gasoline.core.interfaces import IClientRegistry, IQueryRouter, ITelemetryStore
from gasoline.core.lifecycle import Shutdown
from gasoline.core.clients.noise import NoiseRules
from gasoline.core.storage.journal import BufferJournal
from gasoline.core.storage.persist import Persistence
from gasoline.core.storage.screenshots import ScreenshotStore
from gasoline.core.workers import WorkerPool

if TYPE_CHECKING:  # the configuration imports the domain (buffer specs): no cycle at run time
    from gasoline.config import Config


@attrs.frozen(eq=False)
class Daemon:
    """The shared domain of one daemon; each field has one owner and one lifecycle."""

    config: Config
    clock: IReactorTime
    #: When the daemon was built (C{clock.seconds()}).
    started_at: float
    #: The shared telemetry ring buffers.
    store: ITelemetryStore
    #: Client identity and per-client state.
    registry: IClientRegistry
    #: The browser extension link: liveness, settings, the command queue.
    extension: ExtensionLink
    #: Extension-bound calls, routed to the client that asked.
    router: IQueryRouter
    #: The daemon-wide noise rules (each client's rules consult them after its own)...
    noise_global: NoiseRules
    #: ... and the file that keeps them (C{<state_dir>/noise-global.json}).
    noise_file: JsonDocument
    #: Screenshots kept in the state dir.
    screenshots: ScreenshotStore
    #: The daemon's graceful stop.
    shutdown: Shutdown
    #: The console buffer's journal (C{None} with C{--no-persist}).
    journal: BufferJournal | None = None
    #: State dir checks, disk health and every buffer's journal (C{journals} empty with
    #: C{--no-persist}).
    persistence: Persistence | None = None
    #: Worker processes for CPU-heavy work (C{None}: none, the work runs inline).
    workers: WorkerPool | None = None

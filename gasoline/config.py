"""
The daemon's configuration: one frozen value built from the command line (L{gasoline.tap}) or the
environment (C{gasoline.tac}), and the defaults both share with the connector.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from gasoline.common import default_state_dir
from gasoline.core.storage.store import CONSOLE, DEFAULT_BUFFERS, BufferSpec
from gasoline.core.inflight import IN_FLIGHT_LIMIT

DEFAULT_LISTEN = "tcp:7890:interface=127.0.0.1"
DEFAULT_CLIENT_TTL = 3600.0
DEFAULT_MAX_CLIENTS = 10


@attrs.frozen
class Config:
    """Everything the daemon is configured with (the validated command-line options)."""

    listen: str = DEFAULT_LISTEN
    state_dir: Path = attrs.field(factory=default_state_dir, converter=Path)
    max_entries: int = DEFAULT_BUFFERS[CONSOLE].entries
    client_ttl: float = DEFAULT_CLIENT_TTL
    max_clients: int = DEFAULT_MAX_CLIENTS
    log_dir: Path | None = None
    #: Pinned extension ids allowed as C{chrome-extension://<id>} origins (empty: any id).
    extension_ids: tuple[str, ...] = ()
    #: Optional key guarding MCP and admin routes (never the extension routes).
    api_key: str | None = None
    #: Persist the console buffer to the state dir.
    persist: bool = True
    #: MCP tool calls allowed per minute per client; 0 disables the limit.
    tool_rate_limit: int = 100
    #: Web origins (C{--allow-origin}, normalized) a browser may call every route but
    #: /shutdown from; by default only the extension's origin is accepted (docs/security.md).
    allowed_origins: tuple[str, ...] = ()
    #: The session proxy's servers file (docs/proxy.md); None: no proxy.
    proxy_config: Path | None = None
    #: Agents may start a browser (C{interact {what:"launch_browser"}}, docs/browser.md).
    allow_launch_browser: bool = False
    #: C{--state-key-file}: journals, client state and documents sealed at rest
    #: (L{gasoline.core.storage.atrest}); None: written in clear.
    state_key_file: Path | None = None
    #: Bytes of request bodies and unfinished WebSocket messages held at once
    #: (gasoline.core.inflight; docs/operations.md, "Memory").
    in_flight_limit: int = IN_FLIGHT_LIMIT

    def buffer_specs(self) -> dict[str, BufferSpec]:
        spec = DEFAULT_BUFFERS[CONSOLE]
        return {CONSOLE: BufferSpec(self.max_entries, spec.max_bytes)}

"""
C{GET /health}: liveness for the extension, its options page, the connector and supervisors.

The body has the fields the extension reads (extension-protocol.md §2: C{status},
C{service-name}, C{name}, C{version}, C{logs{...}}, C{capture{...}}) plus C{uptime_seconds},
C{buffers} (C{store.stats()}), C{extension} (C{{connected, last_poll}}) and C{clients}. Also
C{GET /metrics} (L{MetricsAPI}); the other admin routes have their own APIs (C{/clients}).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any


from klein import Klein
from twisted.web.resource import IResource

from gasoline._version import __version__
from gasoline.core.extension.link import rfc3339
from gasoline.core.doctor import doctor_checks
from gasoline.core.trust.request_facts import facts_of
from gasoline.core.storage.store import CONSOLE
from gasoline.http.json import json_body

if TYPE_CHECKING:
    from twisted.web.server import Request

    from gasoline.core.daemon import Daemon


class HealthAPI:
    """C{GET /health} of one daemon."""

    app = Klein()

    def __init__(self, gasoline: Daemon) -> None:
        self.gasoline = gasoline

    def health(self) -> dict[str, Any]:
        g = self.gasoline
        console = g.store.buffers[CONSOLE]
        log_file = None
        log_file_size = 0
        journal = g.journal
        if journal is not None:
            log_file = str(journal.path)
            try:
                log_file_size = os.stat(journal.path).st_size
            except OSError:
                log_file_size = 0
        link = g.extension
        settings = link.settings
        capture: dict[str, Any] = {
            "extension_connected": link.connected,
            # connected, waiting_for_pairing (asks for the identity, syncs nothing) or not_connected
            "extension_state": link.state,
            "extension_last_seen": rfc3339(link.last_sync),
            "extension_version": link.extension_version,
            "extension_session_id": link.session_id,
            "pilot_enabled": settings.get("pilot_enabled"),
            "tracking_enabled": settings.get("tracking_enabled"),
            "tracked_tab_id": settings.get("tracked_tab_id"),
            "tracked_tab_url": settings.get("tracked_tab_url"),
            "pending_commands": len(link.commands.outstanding()),
            # Both fingerprints: the daemon's (the extension pins it) and the extension's (the
            # daemon pins it); docs/extension.md, "Pairing".
            "pairing": link.pairing(),
        }
        clients = g.registry.summary()
        return {
            "status": "ok",
            "service-name": "gasoline",
            "name": "gasoline",
            "version": __version__,
            # gasoline status / gasoline stop: which process answers on this port.
            "pid": os.getpid(),
            # The connector reads the client key there (<state_dir>/client-key) when the daemon
            # it reaches is not one it started (docs/mcp.md); the path is no secret, the key is.
            "state_dir": str(g.config.state_dir),
            "logs": {
                "entries": len(console),
                "max_entries": console.capacity,
                "log_file": log_file,
                "log_file_size": log_file_size,
            },
            "capture": capture,
            "uptime_seconds": round(g.clock.seconds() - g.started_at, 3),
            "buffers": g.store.stats(),
            "extension": link.health(),
            "clients": clients,
            "persistence": self._persistence(),
        }

    def _persistence(self) -> dict[str, Any]:
        """Journals' sizes and what fails to reach the disk (gasoline.core.storage.persist)."""
        p = self.gasoline.persistence
        if p is None:
            return {"journals": {}, "failing": []}
        return {
            "journals": {name: {k: s[k] for k in ("size", "lines", "compactions", "syncs",
                                                 "write_errors")}
                         for name, s in p.stats().items()},
            "failing": [{k: v for k, v in f.items() if k != "path"}
                        for f in p.health.problems()],
        }

    @app.route("/health", methods=["GET", "HEAD"])
    def get_health(self, request: Request) -> bytes:
        body = self.health()
        if not facts_of(request).key_ok:
            # With --api-key, client ids are for callers that prove the key (GET /events and
            # the MCP client header take an id): the counts stay public.
            body["clients"] = {k: v for k, v in body["clients"].items() if k != "list"}
        return json_body(request, body)

    @app.route("/health/doctor", methods=["GET"])
    def get_doctor(self, request: Request) -> bytes:
        """The checks of C{configure doctor}, for C{gasoline doctor}: no MCP session, no client
        registered or persisted for asking."""
        g = self.gasoline
        return json_body(request, {"checks": doctor_checks(g, g.clock.seconds())})




class MetricsAPI:
    """C{GET /metrics}: answered by the Prometheus exposition resource it is given
    (L{gasoline.metrics.Metrics.resource})."""

    app = Klein()

    def __init__(self, exposition: IResource) -> None:
        self.exposition = exposition

    @app.route("/metrics", methods=["GET"])
    def metrics(self, request: Request) -> IResource:
        return self.exposition

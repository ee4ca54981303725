"""
The daemon's health checks: what C{configure {what:"doctor"}} answers an agent and C{GET
/health/doctor} answers C{gasoline doctor} (which asks without registering a client).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gasoline import __version__
from gasoline.core.extension.link import NOT_CONNECTED_FIX, PAIR_FIX, WAITING_FOR_PAIRING

if TYPE_CHECKING:
    from gasoline.core.daemon import Daemon
    from gasoline.core.extension.link import ExtensionLink


def extension_check(link: ExtensionLink | None) -> tuple[bool, str, str]:
    """(connected, detail, fix) of the extension link, naming the pairing wait."""
    if link is None:
        return False, "no extension link", NOT_CONNECTED_FIX
    if link.connected:
        return True, "the extension is syncing", ""
    if link.waiting_for_pairing:
        return False, WAITING_FOR_PAIRING, PAIR_FIX
    return False, "no sync in the last 10 s", NOT_CONNECTED_FIX


def doctor_checks(app: Daemon, now: float) -> list[dict[str, Any]]:
    """The checks, each C{{check, status: ok|warn|fail, detail, fix?}}."""
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool | None, detail: str, fix: str = "") -> None:
        c = {"check": name, "status": "ok" if ok else ("warn" if ok is None else "fail"),
             "detail": detail}
        if fix and not ok:
            c["fix"] = fix
        checks.append(c)

    ext = app.extension
    connected, detail, fix = extension_check(ext)
    check("extension_connected", connected, detail, fix)
    last = ext.last_sync
    age = None if last is None else round(now - last, 3)
    check("last_sync_age", None if age is None else age < 10,
          "never synced" if age is None else f"last sync {age} s ago")
    stats = app.store.stats()
    full = [n for n, s in stats.items() if s.get("capacity") and s.get("used", 0) >= s["capacity"]]
    check("buffers", None if full else True,
          f"full (oldest entries are being evicted): {', '.join(full)}" if full
          else "buffers have room", "Read more often, or raise --max-entries.")
    state_dir = app.config.state_dir
    writable = os.access(state_dir, os.W_OK) if os.path.isdir(state_dir) else \
        os.access(os.path.dirname(os.path.abspath(state_dir)) or ".", os.W_OK)
    check("persistence_writable", writable, f"state dir {state_dir}",
          "Point --state-dir at a writable directory.")
    health = app.persistence.health if app.persistence is not None else None
    if health is not None:
        problems = health.problems()
        check("disk_writes", not problems,
              "; ".join(f"{p['what']}: {p['error']} ({p['failures']} failed writes in "
                        f"{p['failing_for_seconds']} s, {p['path']})" for p in problems)
              if problems else "every state write reached the disk",
              "Free disk space or make the state dir writable; until then telemetry and client "
              "state are kept in memory only.")
        for warning in health.warnings:
            check("state_dir_permissions", None, warning)
    live = app.registry.live_count()
    maxc = app.registry.max_clients
    check("clients", None if maxc and live >= maxc else True,
          f"{live} live clients (max {maxc})", "Disconnect idle clients or raise --max-clients.")
    listen = app.config.listen
    if listen:
        check("listen", True, f"listening on {listen}")
    check("version", True, f"gasoline {__version__}; extension "
          f"{ext.extension_version or 'unknown'}")
    return checks

"""
C{configure}'s diagnostics of the daemon (not of the caller's state): C{health},
C{describe_capabilities}, C{telemetry}, C{audit_log}, C{doctor} and C{restart}.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gasoline import __version__
from gasoline.core.doctor import extension_check, doctor_checks
from gasoline.core.errors import GasolineError
from gasoline.core.clients.session_ids import session_label
from gasoline.tools.context import ToolContext
from gasoline.tools.schemas import TOOL_MODES

if TYPE_CHECKING:
    from gasoline.mcp.tools import ToolRegistry


def _registry(ctx: ToolContext) -> ToolRegistry | None:
    """The MCP server's tool registry (None for a tool called without an MCP request)."""
    return ctx.request.server.tools if ctx.request is not None else None


# -- health, capabilities, telemetry, audit, doctor ---------------------------------------------


def configure_health(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    app = ctx.app
    now = ctx.now()
    ext = app.extension
    registry = app.registry
    server = ctx.request.server if ctx.request is not None else None
    session = ctx.session
    body: dict[str, Any] = {
        "status": "ok",
        "version": __version__,
        "uptime_seconds": round(now - app.started_at, 3),
        "extension": {
            "connected": ctx.extension_connected,
            "state": ext.state,
            "last_sync": ext.last_sync,
            "pairing": ext.pairing(),
        },
        "buffers": app.store.stats(),
        "clients": registry.summary() if registry is not None else None,
        "mcp_sessions": len(server.sessions) if server is not None else None,
        "you": {
            "client_id": ctx.client_id,
            # A label: the id is the session's credential (gasoline.core.clients.session_ids).
            "session_label": session_label(session.session_id)
            if session is not None else None,
            "transport": session.transport if session is not None else None,
            "protocol_version": session.protocol_version if session is not None else None,
            "cursors": dict(ctx.state.cursors),
        },
    }
    connected, detail, fix = extension_check(ext)
    if not connected:
        body["extension"]["detail"] = detail
        body["extension"]["fix"] = fix
    ext_word = "connected" if connected else (
        "waiting for the user to pair it (see extension.fix)"
        if body["extension"]["state"] == "waiting_for_pairing" else "not connected")
    pairing = body["extension"]["pairing"] or {}
    fps = (f"; daemon identity {pairing['daemon_fingerprint']}, pinned extension "
           f"{pairing.get('extension_fingerprint') or 'none yet'}"
           if pairing.get("daemon_fingerprint") else "")
    return ctx.ok(f"Gasoline {__version__} ok; extension {ext_word}{fps}", body)


def capabilities(gt: Any) -> dict[str, Any]:
    """Which tools and modes are built (generated from the tool tables of C{gt}, the
    L{gasoline.tools.GasolineTools}, or none when C{None})."""
    tools = {}
    for name, (modes, alias) in TOOL_MODES.items():
        built = gt.built(name) if gt is not None else []
        tools[name] = {"modes": list(modes), "built": built,
                       "not_built": [m for m in modes if m not in built],
                       "alias_of_what": alias}
    return {
        "version": __version__,
        "tools": tools,
        "features": {
            "per_client_cursors": True, "checkpoints": True, "noise_rule_scopes": ["client",
                                                                                   "global"],
            "tab_selection": True, "background_commands": True, "redaction": True,
            "result_cap_bytes": 100_000,
            "rate_limit_per_minute": gt.daemon.config.tool_rate_limit if gt is not None else None,
        },
    }


def configure_describe_capabilities(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    caps = capabilities(ctx.tools)
    n = sum(len(t["built"]) for t in caps["tools"].values())
    return ctx.ok(f"{len(caps['tools'])} tools, {n} modes built", caps)


def configure_telemetry(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    reg = _registry(ctx)
    router = ctx.router
    data: dict[str, Any] = {
        "calls_per_tool": dict(reg.calls) if reg is not None else {},
        "calls_per_mode": dict(reg.mode_calls) if reg is not None else {},
        "errors_per_code": dict(reg.errors) if reg is not None else {},
        "buffers": ctx.app.store.stats(),
        "your_rate_limit": reg.limiter.usage(ctx.client_id)
        if reg is not None and reg.limiter is not None else None,
        "router": router.health(),
        "extension_syncs": ctx.app.extension.syncs,
    }
    total = sum(data["calls_per_tool"].values())
    return ctx.ok(f"{total} tool calls since start", data)


def configure_audit_log(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    limit = ctx.int_arg(args, "limit", 100, 1, 1000)
    reg = _registry(ctx)
    records = reg.audit_log(ctx.client_id, limit) if reg is not None else []
    return ctx.ok(f"your last {len(records)} tool calls (parameters redacted)",
                  {"client_id": ctx.client_id, "count": len(records), "calls": records})


def configure_doctor(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    app = ctx.app
    checks = doctor_checks(app, ctx.now())
    reg = app.registry
    summary = reg.summary() if reg is not None else {}
    failing = [c["check"] for c in checks if c["status"] == "fail"]
    warns = [c["check"] for c in checks if c["status"] == "warn"]
    word = "all checks passed" if not failing and not warns else \
        f"{len(failing)} failing, {len(warns)} warnings"
    return ctx.ok(f"doctor: {word}", {"checks": checks, "clients": summary})


# -- restart ----------------------------------------------------------------------------------------


def configure_restart(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Without C{confirm: true}: what a restart would affect (nothing is done). With it: a
    graceful stop (the one C{POST /shutdown} schedules), only when no other client is
    connected; the stdio connector starts a fresh daemon on its next call."""
    confirm = ctx.bool_arg(args, "confirm", False)
    registry = ctx.app.registry
    others = [s for s in (registry.list() if registry is not None else [])
              if s.live and s.client_id != ctx.client_id]
    router = ctx.router
    pending_total = router.pending_count() if router is not None else 0
    pending_mine = router.pending_count(ctx.client_id) if router is not None else 0
    shutdown = ctx.app.shutdown
    impact = {
        "other_connected_clients": len(others),
        "your_pending_commands": pending_mine,
        "other_pending_commands": max(0, pending_total - pending_mine),
        "extension_connected": ctx.extension_connected,
        "restart_available": shutdown.available,
        "what_survives": "client state (cursors, checkpoints, noise rules, key-value, sequences) "
                         "is persisted in the state dir; buffered telemetry and pending commands "
                         "are lost",
        "how_it_comes_back": "the stdio connector (gasoline connect, unless --no-autostart) "
                             "starts a new daemon on its next call; a daemon started by hand "
                             "must be started again",
    }
    if not confirm:
        return ctx.ok(f"restart would affect {len(others)} other connected client(s) and "
                      f"{impact['other_pending_commands']} of their pending command(s); nothing "
                      "was done (pass confirm:true to restart; refused while other clients are "
                      "connected)", {"restarted": False, **impact})
    if others:
        raise GasolineError(f"{len(others)} other client(s) are connected to this daemon; a "
                            "restart would cut them off", code="other_clients_connected",
                            others=len(others),
                            retry="Retry when you are the only connected client (configure "
                            "{what:'restart'} shows the count).")
    if not shutdown.available:
        raise GasolineError("this daemon cannot restart itself (no stop hook: it is not running "
                            "under twistd)", code="restart_unavailable",
                            retry="Restart the process that runs the daemon.")
    already = shutdown.stopping
    shutdown.request(f"configure restart (client {ctx.client_id})")
    return ctx.ok("the daemon is stopping; your stdio connector (unless --no-autostart) starts "
                  "a new one on its next call (client state is kept in the state dir)",
                  {"restarted": True, "already_stopping": already, **impact})

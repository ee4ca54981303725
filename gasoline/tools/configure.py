"""
``configure``: the caller's own settings and state, and the daemon's diagnostics.

Per-client (persisted with the client state, ``<state-dir>/clients/<id>.json``): ``store``/``load``
(key-value, by ``namespace``), ``noise_rule`` (scope ``client``), ``checkpoint`` (names are the
caller's; ``other-client:name`` reads another client's on purpose), ``select_tab`` (URL patterns),
read cursors (``clear``). Shared, only on explicit request: ``noise_rule scope:"global"`` and
``clear scope:"all"`` (empties the shared buffers; other clients' next reads say so).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import orjson
from twisted.logger import Logger

from gasoline import __version__
from gasoline.core.errors import GasolineError, InvalidParam, MissingParam
from gasoline.core.store import (
    ACTIONS,
    CONSOLE,
    EXTENSION_LOGS,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)
from gasoline.tools._state import recordings_of, resolve_checkpoint
from gasoline.tools._views import VIEW_CURSORS
from gasoline.tools.context import (
    ToolContext,
    client_noise_rules,
    decode_entries,
    newest_entries,
    save_noise_rules,
)
from gasoline.tools.schemas import TOOL_MODES

_log = Logger()

DEFAULT_NAMESPACE = "default"
#: kv namespaces Gasoline keeps for itself (recordings); agents cannot store or list them.
RESERVED_NS_PREFIX = "gasoline:"
MAX_KV_KEYS = 1000
MAX_KV_VALUE_BYTES = 64 * 1024
MAX_KEY_LENGTH = 200
MAX_CHECKPOINTS = 100
MAX_CHECKPOINT_NAME = 100
MAX_TAB_PATTERNS = 50
MAX_PATTERN_LENGTH = 500

#: ``buffer`` argument -> store buffers.
BUFFER_GROUPS: dict[str, tuple[str, ...]] = {
    "network": (NETWORK_BODIES, WATERFALL),
    "websocket": (WEBSOCKET_EVENTS,),
    "actions": (ACTIONS,),
    "logs": (CONSOLE, EXTENSION_LOGS),
}


def _registry(ctx: ToolContext) -> Any:
    request = ctx.request
    server = getattr(request, "server", None) if request is not None else None
    return getattr(server, "tools", None)


# -- store / load -------------------------------------------------------------------------------


def _namespace(ctx: ToolContext, args: dict[str, Any]) -> str:
    ns = ctx.str_arg(args, "namespace", DEFAULT_NAMESPACE)
    if not ns or len(ns) > MAX_KEY_LENGTH:
        raise InvalidParam(f"namespace must be 1..{MAX_KEY_LENGTH} characters", param="namespace")
    if ns.startswith(RESERVED_NS_PREFIX):
        raise InvalidParam(f"namespaces starting with {RESERVED_NS_PREFIX!r} are Gasoline's own",
                           param="namespace")
    return ns


def _key(ctx: ToolContext, args: dict[str, Any], required: bool) -> str | None:
    key = ctx.str_arg(args, "key")
    if key is None:
        if required:
            raise MissingParam("store needs 'key' (and 'value')", param="key")
        return None
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidParam(f"key must be 1..{MAX_KEY_LENGTH} characters", param="key")
    return key


def configure_store(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    ns = _namespace(ctx, args)
    key = _key(ctx, args, True)
    if "value" not in args:
        raise MissingParam("store needs 'value' (any JSON value; null deletes the key)",
                           param="value")
    value = args["value"]
    kv = ctx.state.kv
    space = kv.get(ns)
    if not isinstance(space, dict):
        space = kv[ns] = {}
    if value is None:
        existed = space.pop(key, None) is not None
        if not space:
            kv.pop(ns, None)
        ctx.state.mark_dirty()
        _persist_now(ctx, "delete", f"{ns}/{key}")
        return ctx.ok(f"{ns}/{key} {'deleted' if existed else 'was not set'}",
                      {"namespace": ns, "key": key, "deleted": existed})
    try:
        size = len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        raise InvalidParam("value must be JSON-encodable", param="value") from None
    if size > MAX_KV_VALUE_BYTES:
        raise InvalidParam(f"value is {size} bytes; at most {MAX_KV_VALUE_BYTES}", param="value")
    total = sum(len(s) for n, s in kv.items()
                if isinstance(s, dict) and not str(n).startswith(RESERVED_NS_PREFIX))
    if key not in space and total >= MAX_KV_KEYS:
        raise InvalidParam(f"at most {MAX_KV_KEYS} keys per client",
                           retry="Delete keys you no longer need (store with value null).")
    space[key] = value
    ctx.state.mark_dirty()
    _persist_now(ctx, "store", f"{ns}/{key}")
    return ctx.ok(f"stored {ns}/{key} ({size} bytes)", {"namespace": ns, "key": key,
                                                         "bytes": size})


def _persist_now(ctx: ToolContext, what: str, name: str) -> None:
    """Write the caller's state file now; raise if the disk refused it (never answer "stored"
    for a value that would not survive a restart). The value stays in memory either way."""
    registry = getattr(ctx.app, "registry", None)
    save = getattr(registry, "save_now", None)
    error = save(ctx.client_id) if save is not None else None
    if error is not None:
        raise GasolineError(
            f"{what} {name}: NOT persisted ({error}); the value is kept in memory for this "
            "daemon's lifetime only", code="not_persisted",
            retry="Free disk space or make the state dir writable (configure doctor shows what "
                  "is failing), then store again.")


def configure_load(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    ns = _namespace(ctx, args)
    key = _key(ctx, args, False)
    space = ctx.state.kv.get(ns)
    space = space if isinstance(space, dict) else {}
    if key is None:
        keys = sorted(space)
        return ctx.ok(f"{len(keys)} keys in namespace {ns}",
                      {"namespace": ns, "keys": keys,
                       "namespaces": sorted(k for k in ctx.state.kv if isinstance(k, str)
                                            and not k.startswith(RESERVED_NS_PREFIX))})
    if key not in space:
        raise GasolineError(f"no key {key!r} in namespace {ns!r}", code="no_data",
                            retry="configure {what:'load'} without key lists the keys.")
    return ctx.ok(f"loaded {ns}/{key}", {"namespace": ns, "key": key, "value": space[key]})


# -- noise rules --------------------------------------------------------------------------------


def configure_noise_rule(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    action = ctx.str_arg(args, "noise_action", "list",
                         ("add", "remove", "list", "reset", "auto_detect"))
    scope = ctx.str_arg(args, "scope", "client", ("client", "global"))
    mine = client_noise_rules(ctx)
    glob = ctx.app.noise_global
    target = mine if scope == "client" else glob

    def saved() -> None:
        if scope == "client":
            save_noise_rules(ctx, mine)
        else:
            ctx.app.noise_file.mark_dirty()

    if action == "list":
        rules = {"client": mine.list(), "global": glob.list()}
        if scope == "global":
            rules = {"global": glob.list()}
        n = sum(len(v) for v in rules.values())
        return ctx.ok(f"{n} noise rules ({', '.join(f'{k}: {len(v)}' for k, v in rules.items())})",
                      {"rules": rules})
    if action == "add":
        pattern = args.get("pattern")
        if pattern is None:
            raise MissingParam("noise_rule add needs 'pattern'", param="pattern")
        rule = target.add(
            pattern=pattern,
            field=ctx.str_arg(args, "field", "any"),
            kind=ctx.str_arg(args, "kind", "regex"),
            level=ctx.str_arg(args, "level"),
            reason=ctx.str_arg(args, "reason", ""),
            id=ctx.str_arg(args, "rule_id"),
        )
        saved()
        return ctx.ok(f"noise rule {rule.id} added ({scope} scope)", {"rule": rule.to_json(),
                                                                       "scope": scope})
    if action == "remove":
        rule_id = ctx.str_arg(args, "rule_id")
        if not rule_id:
            raise MissingParam("noise_rule remove needs 'rule_id'", param="rule_id")
        rule = target.remove(rule_id)
        saved()
        return ctx.ok(f"noise rule {rule.id} removed ({scope} scope)", {"rule": rule.to_json(),
                                                                         "scope": scope})
    if action == "reset":
        dropped = target.reset()
        saved()
        return ctx.ok(f"{dropped} {scope} noise rules dropped; built-ins re-enabled",
                      {"dropped": dropped, "scope": scope})
    # auto_detect: propose (or, with apply:true, add) rules for repeated messages.
    from gasoline.core.noise import auto_detect  # noqa: PLC0415

    threshold = ctx.int_arg(args, "threshold", 10, 2, 100_000)
    apply = ctx.bool_arg(args, "apply", False)
    entries = newest_entries(ctx, CONSOLE, 5000)
    proposals = auto_detect(entries, target if scope == "client" else mine, threshold=threshold,
                            apply=False)
    if apply:
        proposals = auto_detect(entries, target, threshold=threshold, apply=True)
        saved()
    word = "added" if apply else "proposed (pass apply:true to add them)"
    return ctx.ok(f"{len(proposals)} noise rules {word}",
                  {"proposals": [p.to_json() for p in proposals], "applied": apply,
                   "scope": scope})


# -- clear --------------------------------------------------------------------------------------


def _move_cursors(ctx: ToolContext, buffer: str, head: int) -> None:
    """Move every cursor the caller has on C{buffer} (its own and its views', ``<buffer>:<view>``)
    to C{head}."""
    cursors = ctx.state.cursors
    keys = {buffer, *VIEW_CURSORS.get(buffer, ()), *(k for k in cursors if k.startswith(buffer + ":"))}
    for key in keys:
        cursors[key] = head


def configure_clear(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    scope = ctx.str_arg(args, "scope", "client", ("client", "all"))
    which = ctx.str_arg(args, "buffer", "all", ("network", "websocket", "actions", "logs", "all"))
    if which == "all":
        names = tuple(ctx.app.store.buffers)
    else:
        names = BUFFER_GROUPS[which]
    store = ctx.app.store
    if scope == "client":
        moved = {}
        for name in names:
            head = store.buffers[name].head
            moved[name] = max(0, head - max(ctx.state.cursors.get(name, 0),
                                            store.buffers[name].tail))
            _move_cursors(ctx, name, head)
        ctx.state.mark_dirty()
        skipped = sum(moved.values())
        return ctx.ok(f"your cursors moved to the newest entry ({skipped} unread entries "
                      "skipped); the shared buffers were not touched",
                      {"scope": "client", "buffers": list(names), "skipped": moved})
    clears = ctx.runtime.buffer_clears
    now = ctx.now()
    removed: dict[str, int] = {}
    for name in names:
        n = store.clear(name)
        removed[name] = n
        head = store.buffers[name].head
        clears[name] = {"seq": head, "at": now, "by": ctx.client_id, "removed": n}
        _move_cursors(ctx, name, head)
    if which == "all":
        store.performance.clear()
    ctx.state.mark_dirty()
    total = sum(removed.values())
    return ctx.ok(f"emptied {len(names)} shared buffers ({total} entries removed); other "
                  "clients' next reads will say so", {"scope": "all", "removed": removed})


# -- checkpoints --------------------------------------------------------------------------------


def configure_checkpoint(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    from gasoline.analysis import make_checkpoint  # noqa: PLC0415

    action = ctx.str_arg(args, "checkpoint_action", "create", ("create", "list", "delete"))
    cps = ctx.state.checkpoints
    if not isinstance(cps, dict):
        cps = ctx.state.checkpoints = {}
    if action == "list":
        items = [{"name": n, "created_at": c.get("created_at"), "heads": c.get("heads")}
                 for n, c in cps.items() if isinstance(c, dict)]
        return ctx.ok(f"{len(items)} checkpoints", {"checkpoints": items})
    name = ctx.str_arg(args, "name")
    if not name:
        raise MissingParam(f"checkpoint {action} needs 'name'", param="name")
    if action == "delete":
        if cps.pop(name, None) is None:
            raise GasolineError(f"no checkpoint {name!r}", code="no_data")
        ctx.state.mark_dirty()
        return ctx.ok(f"checkpoint {name} deleted", {"name": name, "deleted": True})
    if ":" in name or len(name) > MAX_CHECKPOINT_NAME:
        raise InvalidParam(f"checkpoint names are 1..{MAX_CHECKPOINT_NAME} characters without "
                           "':' (that separates a client id)", param="name")
    if name not in cps and len(cps) >= MAX_CHECKPOINTS:
        raise InvalidParam(f"at most {MAX_CHECKPOINTS} checkpoints per client",
                           retry="Delete old ones (checkpoint_action:'delete').")
    store = ctx.app.store
    heads = {n: ring.head for n, ring in store.buffers.items()}
    counters = {f"{n}_total": ring.head for n, ring in store.buffers.items()}
    errors = [e for e in newest_entries(ctx, CONSOLE, 2000) if e.get("level") == "error"]
    counters["errors_seen"] = len(errors)
    cp = make_checkpoint(name, heads, ctx.now(), counters, errors)
    cp.update(session_snapshot(ctx))  # error messages, failing URLs, vitals (diff_sessions)
    replaced = name in cps
    cps[name] = cp
    ctx.state.mark_dirty()
    return ctx.ok(f"checkpoint {name} {'replaced' if replaced else 'created'} "
                  f"(analyze {{what:'changes', checkpoint:'{name}'}} diffs against it)",
                  {"name": name, "client_id": ctx.client_id, "created_at": cp["created_at"],
                   "heads": heads, "reference": f"{ctx.client_id}:{name}"})


# -- tab selection ------------------------------------------------------------------------------


def configure_select_tab(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    patterns = args.get("patterns")
    url = ctx.str_arg(args, "url")
    default = "set" if patterns is not None or url is not None else "list"
    action = ctx.str_arg(args, "tab_action", default, ("set", "add", "list", "clear"))
    if action == "list":
        return ctx.ok(f"{len(ctx.state.tab_filters)} tab URL patterns selected",
                      {"patterns": list(ctx.state.tab_filters)})
    if action == "clear":
        n = len(ctx.state.tab_filters)
        ctx.state.tab_filters = []
        ctx.state.mark_dirty()
        return ctx.ok(f"tab selection cleared ({n} patterns); you see every tab again",
                      {"patterns": []})
    if patterns is None:
        patterns = [url] if url is not None else []
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise InvalidParam("patterns must be a list of non-empty strings (URL substrings or "
                           "globs such as 'http://localhost:3000/*')", param="patterns")
    if any(len(p) > MAX_PATTERN_LENGTH for p in patterns):
        raise InvalidParam(f"a pattern has at most {MAX_PATTERN_LENGTH} characters",
                           param="patterns")
    new = list(ctx.state.tab_filters) if action == "add" else []
    for p in patterns:
        if p not in new:
            new.append(p)
    if len(new) > MAX_TAB_PATTERNS:
        raise InvalidParam(f"at most {MAX_TAB_PATTERNS} patterns", param="patterns")
    if not new:
        raise MissingParam("select_tab needs 'patterns' (or tab_action:'clear')",
                           param="patterns")
    ctx.state.tab_filters = new
    ctx.state.mark_dirty()
    return ctx.ok(f"you now see only tabs and entries matching {len(new)} URL patterns",
                  {"patterns": new})


# -- health, capabilities, telemetry, audit, doctor ---------------------------------------------


def configure_health(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    app = ctx.app
    now = ctx.now()
    ext = app.extension
    registry = app.registry
    server = getattr(ctx.request, "server", None)
    session = ctx.session
    body = {
        "status": "ok",
        "version": __version__,
        "uptime_seconds": round(now - app.started_at, 3),
        "extension": {
            "connected": ctx.extension_connected,
            "last_sync": getattr(ext, "last_sync", None),
        },
        "buffers": app.store.stats(),
        "clients": registry.summary() if registry is not None else None,
        "mcp_sessions": len(server.sessions) if server is not None else None,
        "you": {
            "client_id": ctx.client_id,
            "session_id": getattr(session, "session_id", None),
            "transport": getattr(session, "transport", None),
            "protocol_version": getattr(session, "protocol_version", None),
            "cursors": dict(ctx.state.cursors),
        },
    }
    ext_word = "connected" if body["extension"]["connected"] else "not connected"
    return ctx.ok(f"Gasoline {__version__} ok; extension {ext_word}", body)


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
        "router": router.health() if router is not None and hasattr(router, "health") else None,
        "extension_syncs": getattr(ctx.app.extension, "syncs", None),
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
    now = ctx.now()
    checks = []

    def check(name: str, ok: bool | None, detail: str, fix: str = "") -> None:
        c = {"check": name, "status": "ok" if ok else ("warn" if ok is None else "fail"),
             "detail": detail}
        if fix and not ok:
            c["fix"] = fix
        checks.append(c)

    ext = app.extension
    check("extension_connected", ctx.extension_connected,
          "the extension is syncing" if ctx.extension_connected else "no sync in the last 10 s",
          "Open the browser with the Gasoline extension pointed at this daemon.")
    last = getattr(ext, "last_sync", None)
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
    persistence = getattr(app, "persistence", None)
    health = getattr(persistence, "health", None)
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
    reg = app.registry
    summary = reg.summary() if reg is not None else {}
    live = reg.live_count() if reg is not None else 0
    maxc = getattr(reg, "max_clients", None)
    check("clients", None if maxc and live >= maxc else True,
          f"{live} live clients (max {maxc})", "Disconnect idle clients or raise --max-clients.")
    check("version", True, f"gasoline {__version__}; extension "
          f"{getattr(ext, 'extension_version', None) or 'unknown'}")
    failing = [c["check"] for c in checks if c["status"] == "fail"]
    warns = [c["check"] for c in checks if c["status"] == "warn"]
    word = "all checks passed" if not failing and not warns else \
        f"{len(failing)} failing, {len(warns)} warnings"
    return ctx.ok(f"doctor: {word}", {"checks": checks, "clients": summary})


# -- CI test boundaries -------------------------------------------------------------------------


def _boundary(ctx: ToolContext, args: dict[str, Any], action: str) -> dict[str, Any]:
    """Same as ``POST /test-boundary``: later entries are tagged with the active test ids."""
    from gasoline.core.extension import rfc3339  # noqa: PLC0415

    test_id = ctx.str_arg(args, "test_id") or ctx.str_arg(args, "name")
    if not test_id:
        raise MissingParam(f"test_boundary_{action} needs 'test_id'", param="test_id")
    from gasoline.core.boundaries import check_test_id  # noqa: PLC0415

    problem = check_test_id(test_id)
    if problem is not None:
        raise InvalidParam(problem.replace("field ", ""), param="test_id")
    boundaries = ctx.app.store.test_boundaries
    now = ctx.now()
    if action == "start":
        boundaries.start(test_id, now)
    else:
        boundaries.end(test_id)
    return ctx.ok(f"test {test_id} {'started' if action == 'start' else 'ended'}",
                  {"test_id": test_id, "action": action, "timestamp": rfc3339(now),
                   "active_tests": sorted(boundaries.active)})


MODES: dict[str, Callable[[ToolContext, dict[str, Any]], Any]] = {
    "store": configure_store,
    "load": configure_load,
    "noise_rule": configure_noise_rule,
    "clear": configure_clear,
    "checkpoint": configure_checkpoint,
    "select_tab": configure_select_tab,
    "health": configure_health,
    "describe_capabilities": configure_describe_capabilities,
    "test_boundary_start": lambda ctx, args: _boundary(ctx, args, "start"),
    "test_boundary_end": lambda ctx, args: _boundary(ctx, args, "end"),
    "telemetry": configure_telemetry,
    "audit_log": configure_audit_log,
    "doctor": configure_doctor,
}


# -- recordings (user-action recordings, per client) ---------------------------------------------

MAX_RECORDINGS = 20
MAX_RECORDED_ACTIONS = 500


def configure_recording_start(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    name = ctx.str_arg(args, "name") or f"recording-{int(ctx.now())}"
    if len(name) > MAX_CHECKPOINT_NAME:
        raise InvalidParam(f"name has at most {MAX_CHECKPOINT_NAME} characters", param="name")
    rec = recordings_of(ctx)
    if rec.get("active"):
        raise InvalidParam(f"recording {rec['active']['name']!r} is already running",
                           retry="Stop it first (configure {what:'recording_stop'}).")
    heads = {n: ctx.app.store.buffers[n].head for n in (ACTIONS, CONSOLE, NETWORK_BODIES)}
    rec["active"] = {"name": name, "started_at": ctx.now(), "heads": heads}
    ctx.state.mark_dirty()
    return ctx.ok(f"recording {name} started: use the page, then configure "
                  "{what:'recording_stop'}", {"name": name, "heads": heads})


def configure_recording_stop(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    rec = recordings_of(ctx)
    active = rec.get("active")
    if not active:
        raise GasolineError("no recording is running", code="no_data",
                            retry="Start one with configure {what:'recording_start', name}.")
    store = ctx.app.store
    heads = active.get("heads", {})
    raw = store.buffers[ACTIONS].read(int(heads.get(ACTIONS, 0)))
    actions = [orjson.loads(b) for b in raw.items[:MAX_RECORDED_ACTIONS]]
    logs = [orjson.loads(b) for b in store.buffers[CONSOLE].read(int(heads.get(CONSOLE, 0))).items]
    net = [orjson.loads(b) for b in
           store.buffers[NETWORK_BODIES].read(int(heads.get(NETWORK_BODIES, 0))).items]
    errors = sum(1 for e in logs if e.get("level") == "error")
    failed = sum(1 for e in net if isinstance(e.get("status"), int) and e["status"] >= 400)
    recording = {
        "name": active["name"], "started_at": active["started_at"], "stopped_at": ctx.now(),
        "action_count": len(actions), "actions_missed": raw.missed,
        "actions_cut": max(0, len(raw.items) - MAX_RECORDED_ACTIONS),
        "errors": errors, "failed_requests": failed,
        "start_url": next((a.get("url") for a in actions if a.get("url")), None),
        "actions": actions,
    }
    saved = rec["saved"]
    saved.pop(recording["name"], None)
    saved[recording["name"]] = recording
    while len(saved) > MAX_RECORDINGS:
        del saved[next(iter(saved))]
    rec["active"] = None
    ctx.state.mark_dirty()
    summary = {k: v for k, v in recording.items() if k != "actions"}
    return ctx.ok(f"recording {recording['name']} saved: {len(actions)} actions, {errors} "
                  f"errors, {failed} failed requests", summary)


MODES["recording_start"] = configure_recording_start
MODES["recording_stop"] = configure_recording_stop

# Playback of a saved recording through the extension (gasoline.tools._playback).
from gasoline.tools._playback import configure_playback  # noqa: E402

MODES["playback"] = configure_playback

from gasoline.tools._playback import (  # noqa: E402
    configure_replay_sequence,
    configure_save_sequence,
)

MODES["save_sequence"] = configure_save_sequence
MODES["replay_sequence"] = configure_replay_sequence


# -- session snapshots and diff_sessions ----------------------------------------------------------

#: What a checkpoint keeps beyond heads/fingerprints, so diff_sessions can name what changed.
#: (Kept small: checkpoints live in the client state file, up to 100 of them per client.)
MAX_SNAPSHOT_MESSAGES = 30
MAX_SNAPSHOT_URLS = 50
MAX_SNAPSHOT_VITALS = 20
SNAPSHOT_ENTRIES = 2000
#: Entries per buffer diff_sessions reads between the two points (the newest kept).
DIFF_ENTRIES = 10_000
#: Vitals compared by diff_sessions (``timing`` keys plus CLS and total blocking time).
VITAL_KEYS = ("time_to_first_byte", "first_contentful_paint", "largest_contentful_paint",
              "dom_content_loaded", "load", "interaction_to_next_paint")
#: A vital "changed" when it moved by more than this fraction and this many ms (CLS: 0.05).
VITAL_CHANGE = 0.10
VITAL_MIN_MS = 50.0


def _url_key(entry: dict[str, Any]) -> str | None:
    """``METHOD url`` (query dropped) of a request, to compare failing URLs across sessions."""
    url = entry.get("url")
    if not isinstance(url, str) or not url:
        return None
    method = entry.get("method") if isinstance(entry.get("method"), str) else "GET"
    return f"{method.upper()[:10]} {url.split('?', 1)[0][:200]}"


def _vitals_of(snapshot: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    timing = snapshot.get("timing") if isinstance(snapshot.get("timing"), dict) else {}
    for key in VITAL_KEYS:
        value = timing.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
                and abs(value) < 1e12:
            out[key] = float(value)
    cls = snapshot.get("cumulative_layout_shift")
    if isinstance(cls, (int, float)) and not isinstance(cls, bool) and cls == cls and abs(cls) < 1e6:
        out["cumulative_layout_shift"] = float(cls)
    tasks = snapshot.get("long_tasks")
    tbt = tasks.get("total_blocking_time") if isinstance(tasks, dict) else None
    if isinstance(tbt, (int, float)) and not isinstance(tbt, bool) and tbt == tbt and abs(tbt) < 1e12:
        out["total_blocking_time"] = float(tbt)
    return out


def session_snapshot(ctx: ToolContext) -> dict[str, Any]:
    """The parts of "now" a checkpoint keeps for diff_sessions: the messages of recent errors by
    fingerprint, the request URLs failing recently, and the latest vitals per page URL."""
    from gasoline.analysis._util import is_failed_request  # noqa: PLC0415
    from gasoline.analysis.clusters import fingerprint  # noqa: PLC0415

    messages: dict[str, str] = {}
    failing: dict[str, None] = {}  # ordered set, most recent last
    for e in newest_entries(ctx, CONSOLE, SNAPSHOT_ENTRIES):
        if e.get("level") != "error":
            continue
        if e.get("type") == "network" and is_failed_request(e):
            key = _url_key(e)
            if key:
                failing.pop(key, None)
                failing[key] = None
        fp = fingerprint(e)
        messages.pop(fp, None)
        messages[fp] = str(e.get("message", ""))[:160]
    for b in newest_entries(ctx, NETWORK_BODIES, SNAPSHOT_ENTRIES):
        if is_failed_request(b):
            key = _url_key(b)
            if key:
                failing.pop(key, None)
                failing[key] = None
    vitals = {}
    for url, snap in list(ctx.app.store.performance.items())[-MAX_SNAPSHOT_VITALS:]:
        if isinstance(snap, dict):
            values = _vitals_of(snap)
            if values:
                vitals[str(url)[:200]] = values
    return {"error_messages": dict(list(messages.items())[-MAX_SNAPSHOT_MESSAGES:]),
            "failing_urls": list(failing)[-MAX_SNAPSHOT_URLS:], "vitals": vitals}


def _window(ctx: ToolContext, buffer: str, start: int, stop: int, limit: int
            ) -> tuple[list[dict[str, Any]], int]:
    """Entries of C{buffer} with sequence numbers in [start, stop) (the newest C{limit}), and
    how many of them were evicted before this read."""
    ring = ctx.app.store.buffers.get(buffer)
    if ring is None or stop <= start:
        return [], 0
    raw = ring.read(start)
    items = raw.items[:max(0, stop - raw.first_seq)]
    lost = max(0, min(stop, ring.tail) - start)
    cut = max(0, len(items) - limit)
    return decode_entries(items[cut:]), lost + cut


def _compare_vitals(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    changed = []
    for url in sorted(set(before) & set(after)):
        a, b = before[url], after[url]
        if not isinstance(a, dict) or not isinstance(b, dict):
            continue
        for key in sorted(set(a) & set(b)):
            x, y = a[key], b[key]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y)):
                continue
            delta = y - x
            floor = 0.05 if key == "cumulative_layout_shift" else VITAL_MIN_MS
            if abs(delta) > floor and abs(delta) > VITAL_CHANGE * max(abs(x), 1e-9):
                changed.append({"url": url, "metric": key, "before": x, "after": y,
                                "delta": round(delta, 3),
                                "direction": "worse" if delta > 0 else "better"})
    return changed


def configure_diff_sessions(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    from gasoline.analysis.changes import changes  # noqa: PLC0415
    from gasoline.tools._shared import noise_filter, view  # noqa: PLC0415

    ref_a = ctx.str_arg(args, "from_checkpoint") or ctx.str_arg(args, "checkpoint") \
        or ctx.str_arg(args, "name")
    if not ref_a:
        raise MissingParam("diff_sessions needs 'from_checkpoint' (a checkpoint name; "
                           "to_checkpoint defaults to now)", param="from_checkpoint",
                           retry="configure {what:'checkpoint', checkpoint_action:'list'} "
                           "lists yours.")
    ref_b = ctx.str_arg(args, "to_checkpoint") or "now"
    limit = ctx.int_arg(args, "limit", 50, 1, 1000)
    a = resolve_checkpoint(ctx, ref_a)
    heads_now = {n: ring.head for n, ring in ctx.app.store.buffers.items()}
    if ref_b == "now":
        b = {"name": "now", "created_at": ctx.now(), "heads": heads_now,
             **session_snapshot(ctx)}
    else:
        b = resolve_checkpoint(ctx, ref_b)
    notes = []

    def heads_of(cp: dict[str, Any]) -> dict[str, int]:
        h = cp.get("heads") if isinstance(cp.get("heads"), dict) else {}
        return {k: v for k, v in h.items() if isinstance(v, int) and not isinstance(v, bool)}

    ha, hb = heads_of(a), heads_of(b)
    if sum(hb.values()) < sum(ha.values()):
        a, b, ha, hb = b, a, hb, ha
        notes.append("from_checkpoint is newer than to_checkpoint: compared the other way round")
    keep, _ = view(ctx, args)
    entries: dict[str, list[dict[str, Any]]] = {}
    missed: dict[str, int] = {}
    for buffer in (CONSOLE, NETWORK_BODIES, WEBSOCKET_EVENTS, ACTIONS):
        items, lost = _window(ctx, buffer, ha.get(buffer, 0), hb.get(buffer, heads_now.get(buffer, 0)),
                              DIFF_ENTRIES)
        if keep is not None:
            items = [e for e in items if keep(e)]
        entries[buffer] = items
        missed[buffer] = lost
    entries[CONSOLE], hidden = noise_filter(ctx, entries[CONSOLE])
    snapshot = {"at": b.get("created_at"), "heads": hb, "entries": entries, "missed": missed,
                "counters": {}}
    diff = changes(a, snapshot, limit=limit)

    counts = {name: {"at_from": ha.get(name, 0), "at_to": hb.get(name, 0),
                     "added": max(0, hb.get(name, 0) - ha.get(name, 0))}
              for name in sorted(set(ha) | set(hb))}
    clusters = diff["errors"]["clusters"]
    new_errors = [{"message": (c.get("sample") or {}).get("message") or c.get("template"),
                   "count": c.get("count"), "fingerprint": c.get("fingerprint")}
                  for c in clusters if c.get("new_kind")]
    seen_between = {c.get("fingerprint") for c in clusters}
    a_messages = a.get("error_messages") if isinstance(a.get("error_messages"), dict) else {}
    # Resolved: error kinds known at `from` that did not occur between `from` and `to`.
    resolved = [{"fingerprint": fp, "message": a_messages.get(fp)}
                for fp in (a.get("error_fingerprints") or []) if isinstance(fp, str)
                and fp not in seen_between]
    if not a_messages and a.get("error_fingerprints"):
        notes.append("the from checkpoint predates error messages in checkpoints: resolved "
                     "errors are named by fingerprint only")
    failing_before = a.get("failing_urls") if isinstance(a.get("failing_urls"), list) else None
    from gasoline.analysis._util import is_failed_request  # noqa: PLC0415

    between: dict[str, None] = {}
    for item in entries[NETWORK_BODIES] + [e for e in entries[CONSOLE]
                                           if e.get("type") == "network"]:
        key = _url_key(item) if is_failed_request(item) else None
        if key:
            between[key] = None
    failing_between = list(between)
    if failing_before is None:
        notes.append("the from checkpoint predates failing-URL tracking: every failing URL "
                     "between the two counts as new")
        failing_before = []
    known_failing = set(failing_before)
    new_failing = [u for u in failing_between if u not in known_failing]
    va = a.get("vitals") if isinstance(a.get("vitals"), dict) else None
    vb = b.get("vitals") if isinstance(b.get("vitals"), dict) else None
    vitals = {"changed": _compare_vitals(va, vb)} if va is not None and vb is not None else \
        {"changed": [], "note": "a checkpoint predates vitals tracking"}
    if any(missed.values()):
        notes.append("some entries between the two were evicted from the buffers before this "
                     "read (see missed)")
    body = {
        "from": a.get("name"), "to": b.get("name"),
        "from_created_at": a.get("created_at"), "to_created_at": b.get("created_at"),
        "buffers": counts, "missed": missed,
        "new_errors": new_errors, "resolved_errors": resolved[:limit],
        "new_failing_urls": new_failing[:limit], "failing_urls_between": failing_between[:limit],
        "vitals": vitals, "errors_between": diff["errors"]["count"],
        "failed_requests_between": diff["failed_requests"]["count"],
        "websocket_events_between": diff["websocket_events"]["count"],
        "actions_between": diff["actions"]["count"], "noise_hidden": hidden, "notes": notes,
    }
    summary = (f"{a.get('name')} -> {b.get('name')}: {len(new_errors)} new error kind(s), "
               f"{len(resolved)} resolved, {len(new_failing)} new failing URL(s), "
               f"{len(vitals['changed'])} vital change(s)")
    return ctx.ok(summary, body)


MODES["diff_sessions"] = configure_diff_sessions


# -- restart ----------------------------------------------------------------------------------------


def configure_restart(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Without ``confirm: true``: what a restart would affect (nothing is done). With it: a
    graceful stop (the one ``POST /shutdown`` schedules), only when no other client is
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


MODES["restart"] = configure_restart

# Context streaming (seed 004): the caller's subscription (gasoline.tools._events).
from gasoline.tools._events import PROPERTIES as _STREAMING_PROPERTIES  # noqa: E402
from gasoline.tools._events import configure_streaming  # noqa: E402

MODES["streaming"] = configure_streaming


# -- arguments the modes above read beyond CONFIGURE_SCHEMA ----------------------------------------

PROPERTIES: dict[str, Any] = {
    "steps": {"type": "array", "items": {"type": "object"},
              "description": "save_sequence: interact argument objects, e.g. [{what:'click', "
              "selector:'#go'}] (at most 100)."},
    "from_actions": {"type": "boolean", "description": "save_sequence: build the steps from "
                     "your recorded actions (last_n, or a recording)."},
    "recording": {"type": "string", "description": "save_sequence from_actions: take the "
                  "actions of this recording."},
    "last_n": {"type": "integer", "minimum": 1, "maximum": 500,
               "description": "save_sequence from_actions: how many recent actions (50)."},
    "description": {"type": "string", "description": "save_sequence: what the sequence does."},
    "sequence_action": {"type": "string", "enum": ["save", "list", "delete", "get"],
                        "description": "save_sequence (default save)."},
    "continue_on_error": {"type": "boolean", "description": "replay_sequence: run the "
                          "remaining steps after a failed one (default false)."},
    "from_checkpoint": {"type": "string", "description": "diff_sessions: the earlier checkpoint "
                        "(yours, or 'client:name')."},
    "to_checkpoint": {"type": "string", "description": "diff_sessions: the later checkpoint "
                      "(default 'now')."},
    "checkpoint": {"type": "string", "description": "diff_sessions: alias of from_checkpoint."},
    "confirm": {"type": "boolean", "description": "restart: really restart (only when you are "
                "the only connected client); without it restart only reports."},
    **_STREAMING_PROPERTIES,
}

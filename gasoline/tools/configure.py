"""
C{configure}: the caller's own settings and state, and the daemon's diagnostics.

Per-client (persisted with the client state, C{<state-dir>/clients/<id>.json}): C{store}/C{load}
(key-value, by C{namespace}), C{noise_rule} (scope C{client}), C{checkpoint} (names are the
caller's; C{other-client:name} reads another client's on purpose), C{select_tab} (URL patterns),
read cursors (C{clear}). Shared, only on explicit request: C{noise_rule scope:"global"} and
C{clear scope:"all"} (empties the shared buffers; other clients' next reads say so).

The daemon's diagnostics (C{health}, C{describe_capabilities}, C{telemetry}, C{audit_log},
C{doctor}, C{restart}) are in L{gasoline.tools._diagnostics}; C{diff_sessions} and the snapshot a
checkpoint records for it in L{gasoline.tools._session_diff}.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson

from gasoline.analysis import make_checkpoint
from gasoline.core.clients.noise import auto_detect
from gasoline.core.errors import GasolineError, InvalidParam, MissingParam
from gasoline.core.extension.link import rfc3339
from gasoline.core.storage.boundaries import check_test_id
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    EXTENSION_LOGS,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)
from gasoline.tools._diagnostics import (
    configure_audit_log,
    configure_describe_capabilities,
    configure_doctor,
    configure_health,
    configure_restart,
    configure_telemetry,
)
from gasoline.tools._session_diff import configure_diff_sessions, session_snapshot
from gasoline.tools._state import RECORDINGS_NS, recordings_of
from gasoline.tools._views import VIEW_CURSORS
from gasoline.tools.context import (
    ToolContext,
    client_noise_rules,
    newest_entries,
    save_noise_rules,
)
from gasoline.tools.schemas import MODE_PROPERTIES

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

#: C{buffer} argument -> store buffers.
BUFFER_GROUPS: dict[str, tuple[str, ...]] = {
    "network": (NETWORK_BODIES, WATERFALL),
    "websocket": (WEBSOCKET_EVENTS,),
    "actions": (ACTIONS,),
    "logs": (CONSOLE, EXTENSION_LOGS),
}


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
    assert key is not None  # (required: _key raised otherwise)
    if "value" not in args:
        raise MissingParam("store needs 'value' (any JSON value; null deletes the key)",
                           param="value")
    value = args["value"]
    kv = ctx.state.kv
    if value is None:
        existed = ctx.state.delete_value(ns, key)
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
    space = kv.get(ns)
    if (not isinstance(space, dict) or key not in space) and total >= MAX_KV_KEYS:
        raise InvalidParam(f"at most {MAX_KV_KEYS} keys per client",
                           retry="Delete keys you no longer need (store with value null).")
    ctx.state.store_value(ns, key, value)
    _persist_now(ctx, "store", f"{ns}/{key}")
    return ctx.ok(f"stored {ns}/{key} ({size} bytes)", {"namespace": ns, "key": key,
                                                         "bytes": size})


def _persist_now(ctx: ToolContext, what: str, name: str, *, daemon_wide: bool = False) -> None:
    """Write the caller's state file (C{daemon_wide}: the global noise rules' file) now; raise if
    the disk refused it (never answer "stored" for a value that would not survive a restart).
    The value stays in memory either way."""
    if daemon_wide:
        error = ctx.app.noise_file.save_now()
    else:
        error = ctx.app.registry.save_now(ctx.client_id)
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
        _persist_now(ctx, "noise rules", f"({scope} scope)", daemon_wide=scope == "global")

    if action == "list":
        by_scope = {"client": mine.published_list(), "global": glob.published_list()}
        if scope == "global":
            by_scope = {"global": glob.published_list()}
        # One list, each rule with its id, scope and the published shape it may have been added
        # in (match_spec, classification): scripts read rules[].id back.
        rules = [r for listed in by_scope.values() for r in listed]
        counts = {k: len(v) for k, v in by_scope.items()}
        n = sum(counts.values())
        return ctx.ok(f"{n} noise rules ({', '.join(f'{k}: {c}' for k, c in counts.items())})",
                      {"rules": rules, "counts": counts})
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
    """Move every cursor the caller has on C{buffer} (its own and its views', C{<buffer>:<view>})
    to C{head}."""
    cursors = ctx.state.cursors
    keys = {buffer, *VIEW_CURSORS.get(buffer, ()), *(k for k in cursors if k.startswith(buffer + ":"))}
    for key in keys:
        ctx.state.set_cursor(key, head)


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
        store.clear_performance()
    ctx.state.mark_dirty()
    total = sum(removed.values())
    return ctx.ok(f"emptied {len(names)} shared buffers ({total} entries removed); other "
                  "clients' next reads will say so", {"scope": "all", "removed": removed})


# -- checkpoints --------------------------------------------------------------------------------


def configure_checkpoint(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    action = ctx.str_arg(args, "checkpoint_action", "create", ("create", "list", "delete"))
    cps = ctx.state.checkpoints
    if action == "list":
        items = [{"name": n, "created_at": c.get("created_at"), "heads": c.get("heads")}
                 for n, c in cps.items() if isinstance(c, dict)]
        return ctx.ok(f"{len(items)} checkpoints", {"checkpoints": items})
    name = ctx.str_arg(args, "name")
    if not name:
        raise MissingParam(f"checkpoint {action} needs 'name'", param="name")
    if action == "delete":
        if not ctx.state.delete_checkpoint(name):
            raise GasolineError(f"no checkpoint {name!r}", code="no_data")
        _persist_now(ctx, "checkpoint delete", name)
        return ctx.ok(f"checkpoint {name} deleted", {"name": name, "deleted": True})
    if ":" in name or len(name) > MAX_CHECKPOINT_NAME:
        raise InvalidParam(f"checkpoint names are 1..{MAX_CHECKPOINT_NAME} characters without "
                           "':' (that separates a client id)", param="name")
    if name not in cps and len(cps) >= MAX_CHECKPOINTS:
        raise InvalidParam(f"at most {MAX_CHECKPOINTS} checkpoints per client",
                           retry="Delete old ones (checkpoint_action:'delete').")
    store = ctx.app.store
    heads = {n: ring.head for n, ring in store.buffers.items()}
    counters: dict[str, float] = {f"{n}_total": ring.head for n, ring in store.buffers.items()}
    errors = [e for e in newest_entries(ctx, CONSOLE, 2000) if e.get("level") == "error"]
    counters["errors_seen"] = len(errors)
    cp = make_checkpoint(name, heads, ctx.now(), counters, errors)
    cp.update(session_snapshot(ctx))  # error messages, failing URLs, vitals (diff_sessions)
    replaced = name in cps
    ctx.state.set_checkpoint(name, cp)
    _persist_now(ctx, "checkpoint", name)
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
        ctx.state.set_tab_filters([])
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
    ctx.state.set_tab_filters(new)
    return ctx.ok(f"you now see only tabs and entries matching {len(new)} URL patterns",
                  {"patterns": new})


# -- CI test boundaries -------------------------------------------------------------------------


def _boundary(ctx: ToolContext, args: dict[str, Any], action: str) -> dict[str, Any]:
    """Same as C{POST /test-boundary}: later entries are tagged with the active test ids."""
    test_id = ctx.str_arg(args, "test_id") or ctx.str_arg(args, "name")
    if not test_id:
        raise MissingParam(f"test_boundary_{action} needs 'test_id'", param="test_id")
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
    ctx.state.put(RECORDINGS_NS, {**rec, "active": {"name": name, "started_at": ctx.now(),
                                                    "heads": heads}})
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
    # Newest last; the oldest leave first.
    saved = {n: r for n, r in rec["saved"].items() if n != recording["name"]}
    saved[recording["name"]] = recording
    while len(saved) > MAX_RECORDINGS:
        del saved[next(iter(saved))]
    ctx.state.put(RECORDINGS_NS, {**rec, "saved": saved, "active": None})
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

MODES["diff_sessions"] = configure_diff_sessions
MODES["restart"] = configure_restart

# Context streaming: the caller's subscription (gasoline.tools._events).
from gasoline.tools._events import configure_streaming  # noqa: E402

MODES["streaming"] = configure_streaming


#: Arguments the modes above read beyond CONFIGURE_SCHEMA (they live in L{gasoline.tools.schemas}:
#: tools/list is answered without importing this module).
PROPERTIES: dict[str, Any] = MODE_PROPERTIES["configure"]

"""
Playback of a saved recording, and its results.

C{configure {what:"playback", name}} replays one of the caller's recordings (made with
C{configure recording_start} / C{recording_stop}) through the extension, one step at a time, with
the same C{interact} handlers an agent would call: the same pilot check, the same selectors, and each
step recorded into the actions buffer with C{source: "ai"}. It returns a C{playback_id} at once; the
steps run in the background. C{observe {what:"playback_results", playback_id?}} shows the outcome of
every step, to the client that started the playback and to no one else. With C{wait: true} the
call answers that outcome itself when the last step is done, and a caller that gave a progress token
hears C{step n of m: <mode>} as each step starts (cancelling the call stops the playback).

How recorded actions map to steps::

    ============  ======================================================================
    recorded      replayed as
    ============  ======================================================================
    click         C{interact click} on the recorded element
    input         C{interact type} with the recorded value (password fields, recorded as
                  C{[redacted]}, are skipped: their values were never captured)
    select        C{interact select} with the recorded value
    keypress      C{interact key_press}
    hover         C{interact hover} on the recorded element
    drag          C{interact drag} from the recorded element to the recorded C{target}
    navigate      C{interact navigate} to the recorded destination
    other         skipped (scrolls, for instance, carry no element to act on)
    ============  ======================================================================

The element is addressed by the most stable selector the extension recorded: test id, then CSS,
then ARIA label, then role and name, then visible text.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import orjson
from twisted.internet.defer import (
    CancelledError,
    Deferred,
    maybeDeferred,
)
from twisted.logger import Logger

from gasoline.common import rfc3339
from gasoline.core.errors import GasolineError, InvalidParam, MissingParam, QueueFull
from gasoline.core.redaction.keys import is_marker
from gasoline.core.storage.store import ACTIONS
from gasoline.tools._commands import require_pilot
from gasoline.tools._shared import newest
from gasoline.tools._state import recording_named, recordings_of
from gasoline.tools.context import ToolContext, state_of_ref
from gasoline.tools.schemas import INTERACT_MODES

if TYPE_CHECKING:
    from gasoline.core.interfaces import IClientState

log = Logger()

#: Playbacks kept per client for C{observe playback_results} (oldest leave first).
MAX_PLAYBACKS_PER_CLIENT = 10
MAX_STEPS = 500
REDACTED = "[redacted]"


def selector_for(action: dict[str, Any]) -> str | None:
    """The most stable selector of a recorded action's element, in the extension's syntax."""
    selectors = action.get("selectors")
    if not isinstance(selectors, dict):
        return None
    test_id = selectors.get("testId")
    if isinstance(test_id, str) and test_id:
        return f"[data-testid={json.dumps(test_id)}]"
    css = selectors.get("css")
    if isinstance(css, str) and css:
        return css
    label = selectors.get("ariaLabel")
    if isinstance(label, str) and label:
        return f"aria-label={label}"
    role = selectors.get("role")
    if isinstance(role, dict) and isinstance(role.get("role"), str):
        name = role.get("name")
        return f"role={role['role']}" + (f"[name={json.dumps(name)}]" if isinstance(name, str)
                                         and name else "")
    text = selectors.get("text")
    if isinstance(text, str) and text:
        return f"text={text}"
    return None


def step_for(action: dict[str, Any]) -> tuple[str | None, dict[str, Any], str]:
    """C{(interact mode or None to skip, its arguments, why skipped)} for one recorded action."""
    kind = action.get("type")
    if kind == "navigate":
        url = action.get("to_url") or action.get("url")
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            return "navigate", {"url": url}, ""
        return None, {}, "no http(s) destination recorded"
    if kind not in ("click", "input", "select", "keypress", "hover", "drag"):
        return None, {}, f"{kind!r} actions are not replayed"
    selector = selector_for(action)
    if kind == "keypress":
        key = action.get("key")
        if not isinstance(key, str) or not key or key == REDACTED or is_marker(key):
            return None, {}, "no key recorded"
        return "key_press", {"key": key, **({"selector": selector} if selector else {})}, ""
    if selector is None:
        return None, {}, "no selector recorded for the element"
    if kind in ("click", "hover"):
        return kind, {"selector": selector}, ""
    if kind == "drag":
        target = action.get("target")
        if not isinstance(target, str) or not target:
            return None, {}, "no drop target recorded"
        return "drag", {"selector": selector, "target": target}, ""
    value = action.get("value")
    if value == REDACTED or (isinstance(value, str) and is_marker(value)):
        return None, {}, "the value was redacted when recorded (a password field)"
    if not isinstance(value, str):
        return None, {}, "no value recorded"
    if kind == "select":
        return "select", {"selector": selector, "value": value}, ""
    return "type", {"selector": selector, "text": value}, ""


def _playbacks(ctx: ToolContext) -> "OrderedDict[str, dict[str, Any]]":
    every = ctx.runtime.playbacks
    mine = every.get(ctx.client_id)
    if mine is None:
        mine = every[ctx.client_id] = OrderedDict()
    return mine


def configure_playback(ctx: ToolContext, args: dict[str, Any]
                       ) -> dict[str, Any] | Deferred[dict[str, Any]]:
    name, recording = recording_named(ctx, args, "playback")
    stop_on_error = ctx.bool_arg(args, "stop_on_error", True)
    from_start = ctx.bool_arg(args, "from_start", True)
    actions = [a for a in recording.get("actions", []) if isinstance(a, dict)][:MAX_STEPS]
    steps: list[dict[str, Any]] = []
    start_url = recording.get("start_url")
    if from_start and isinstance(start_url, str) and start_url.startswith(("http://", "https://")) \
            and not (actions and actions[0].get("type") == "navigate"):
        steps.append({"index": 0, "action": "navigate", "mode": "navigate",
                      "args": {"url": start_url}, "status": "pending"})
    for action in actions:
        mode, step_args, why = step_for(action)
        step = {"index": len(steps), "action": action.get("type"), "mode": mode, "args": step_args,
                "status": "pending" if mode else "skipped"}
        if why:
            step["reason"] = why
        steps.append(step)
    # Refuse at once rather than start a playback whose every step would fail.
    ctx.app.extension.require_connected()
    require_pilot(ctx)

    mine = _playbacks(ctx)
    playback_id = f"pb-{ctx.client_id}-{int(ctx.now() * 1000)}-{len(mine)}"
    record = {"playback_id": playback_id, "recording": name, "status": "running",
              "started_at": ctx.now(), "finished_at": None, "stop_on_error": stop_on_error,
              "steps": steps}
    mine[playback_id] = record
    while len(mine) > MAX_PLAYBACKS_PER_CLIENT:
        mine.popitem(last=False)

    runnable = sum(1 for s in steps if s["status"] == "pending")
    if ctx.bool_arg(args, "wait", False):
        # Answer when the last step is done, saying "step n of m" as each starts (and, through
        # the progress heartbeats, what the step waits for); cancelling the call stops the playback.
        def step_started(done: int, mode: str) -> None:
            ctx.progress(done, runnable, f"step {done + 1} of {runnable}: {mode}")

        waited = Deferred.fromCoroutine(_run(ctx, record, ctx.mode_table("interact"),
                                             stop_on_error, step_started))
        return waited.addCallback(lambda _: _outcome(ctx, record))
    d = Deferred.fromCoroutine(_run(ctx, record, ctx.mode_table("interact"), stop_on_error))
    d.addErrback(lambda f: log.failure("playback {id} failed", f, id=playback_id))
    return ctx.ok(f"playback {playback_id} of {name} started: {runnable} steps "
                  f"({len(steps) - runnable} skipped); observe {{what:'playback_results', "
                  f"playback_id:'{playback_id}'}} for the outcome",
                  {"playback_id": playback_id, "status": "running", "steps": len(steps),
                   "runnable": runnable})


async def _run(ctx: ToolContext, record: dict[str, Any], interact: dict[str, Any],
               stop_on_error: bool,
               step_started: Callable[[int, str], None] | None = None) -> None:
    """Run the playback's steps one at a time; C{step_started(steps started before, mode)} as
    each starts. A cancelled call (C{wait:true}) ends it C{cancelled}, later steps C{not_run}."""
    failed = False
    started = 0
    for step in record["steps"]:
        if step["status"] != "pending":
            continue
        if failed and stop_on_error:
            step["status"] = "not_run"
            continue
        step["status"] = "running"
        if step_started is not None:
            step_started(started, step["mode"])
        started += 1
        try:
            step_ctx = attrs.evolve(ctx, tool="interact", mode=step["mode"])
            result = await maybeDeferred(interact[step["mode"]], step_ctx,
                                         {"what": step["mode"], **step["args"]})
        except CancelledError:
            step.update(status="not_run", reason="the playback call was cancelled")
            for later in record["steps"]:
                if later["status"] == "pending":
                    later.update(status="not_run", reason="the playback call was cancelled")
            record["status"] = "cancelled"
            record["finished_at"] = ctx.now()
            raise
        except GasolineError as e:
            step.update(status="error", error=e.code, message=e.message)
            failed = True
            continue
        except Exception as e:  # a bug must not leave the playback "running" forever
            log.failure("playback step {index} crashed", index=step["index"])
            step.update(status="error", error="internal_error", message=type(e).__name__)
            failed = True
            continue
        text = ""
        if isinstance(result, dict):
            content = result.get("content") or [{}]
            text = content[0].get("text", "") if isinstance(content[0], dict) else ""
        if isinstance(result, dict) and result.get("isError"):
            step.update(status="error", summary=text.partition("\n")[0])
            failed = True
        else:
            step.update(status="complete", summary=text.partition("\n")[0])
    record["status"] = "failed" if failed else "complete"
    record["finished_at"] = ctx.now()


def _outcome(ctx: ToolContext, record: dict[str, Any]) -> dict[str, Any]:
    """One playback's outcome, step by step (C{observe playback_results}, C{playback wait})."""
    counts = _counts(record)
    return ctx.ok(f"playback {record['playback_id']} ({record['recording']}): {record['status']}, "
                  + ", ".join(f"{n} {k}" for k, n in counts.items() if n), {**record,
                                                                            "counts": counts})


def observe_playback_results(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    mine = _playbacks(ctx)
    playback_id = ctx.str_arg(args, "playback_id") or ctx.str_arg(args, "correlation_id")
    if playback_id:
        record = mine.get(playback_id)
        if record is None:  # another client's id gets the same answer as an unknown one
            raise GasolineError(f"no playback {playback_id!r} of yours", code="no_data",
                                retry="observe {what:'playback_results'} lists yours.")
        return _outcome(ctx, record)
    if args.get("playback_id") is not None and not isinstance(args.get("playback_id"), str):
        raise InvalidParam("playback_id must be a string", param="playback_id")
    items = [{k: v for k, v in r.items() if k != "steps"} | {"counts": _counts(r)}
             for r in reversed(mine.values())]
    return ctx.ok(f"{len(items)} playbacks", {"playbacks": items})


def _counts(record: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for step in record["steps"]:
        counts[step["status"]] = counts.get(step["status"], 0) + 1
    return counts


# -- named sequences of interact steps (configure save_sequence / replay_sequence) ---------------
#
# A sequence is a list of interact argument objects (``{what: "click", selector: "#go"}``), kept
# per client in the reserved kv namespace ``gasoline:sequences`` (persisted with the client
# state in ``<state-dir>/clients/<id>.json``, like store/load). ``replay_sequence`` runs the steps
# one at a time through the interact handlers as the caller (so every command goes through the
# query router under the caller's id and its per-client queue limit) and answers the per-step
# outcomes when the last step is done.

SEQUENCES_NS = "gasoline:sequences"
MAX_SEQUENCES = 50
MAX_SEQUENCE_STEPS = 100
MAX_SEQUENCE_BYTES = 64 * 1024
MAX_SEQUENCE_NAME = 100
DEFAULT_FROM_ACTIONS = 50
#: A replay stops starting new steps after this many seconds (each step has its own timeout).
REPLAY_BUDGET = 110.0
#: Step arguments that would make a step answer before it ran.
_BACKGROUND_KEYS = ("background", "sync", "wait")


#: Most tags one sequence carries (the published Gasoline's tags, kept and answered back).
MAX_SEQUENCE_TAGS = 20


def sequences_of(state: IClientState) -> dict[str, Any]:
    seqs = state.kv.get(SEQUENCES_NS)
    if not isinstance(seqs, dict):
        seqs = {}
        state.put(SEQUENCES_NS, seqs)
    return seqs


def validate_steps(steps: Any) -> list[dict[str, Any]]:
    """The steps as C{{what, ...}} objects, each naming an interact mode; L{InvalidParam} names
    the first bad one."""
    if not isinstance(steps, list) or not steps:
        raise InvalidParam("steps must be a non-empty list of interact argument objects, e.g. "
                           "[{what:'navigate', url:'https://...'}, {what:'click', "
                           "selector:'#go'}]", param="steps")
    if len(steps) > MAX_SEQUENCE_STEPS:
        raise InvalidParam(f"a sequence has at most {MAX_SEQUENCE_STEPS} steps", param="steps")
    out = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise InvalidParam(f"step {i} must be an object of interact arguments",
                               param="steps", index=i)
        step = dict(step)
        what = step.pop("what", None)
        alias = step.pop("action", None)
        what = alias if what is None else what
        if not isinstance(what, str) or what not in INTERACT_MODES:
            raise InvalidParam(f"step {i}: 'what' must be an interact mode", param="steps",
                               index=i, valid=list(INTERACT_MODES))
        if step.get("background") is True or step.get("sync") is False \
                or step.get("wait") is False:
            raise InvalidParam(f"step {i}: background/sync/wait cannot send a step to the "
                               "background (each step waits for its answer)", param="steps",
                               index=i)
        for key in _BACKGROUND_KEYS:
            step.pop(key, None)
        out.append({"what": what, **step})
    try:  # as the client state is persisted (orjson: no integers beyond 64 bits)
        size = len(orjson.dumps(out, option=orjson.OPT_NON_STR_KEYS))
    except (TypeError, orjson.JSONEncodeError):
        raise InvalidParam("steps must be JSON values (integers within 64 bits)",
                           param="steps") from None
    if size > MAX_SEQUENCE_BYTES:
        raise InvalidParam(f"the steps are {size} bytes; at most {MAX_SEQUENCE_BYTES}",
                           param="steps")
    return out


def _steps_from_actions(ctx: ToolContext, args: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    recording = ctx.str_arg(args, "recording")
    if recording:
        saved = recordings_of(ctx)["saved"].get(recording)
        if saved is None:
            raise GasolineError(f"no recording {recording!r}", code="no_data",
                                retry="observe {what:'recordings'} lists yours.")
        actions = [a for a in saved.get("actions", []) if isinstance(a, dict)]
    else:
        n = ctx.int_arg(args, "last_n", DEFAULT_FROM_ACTIONS, 1, 500)
        actions = newest(ctx, ACTIONS, n, args)
    steps, skipped = [], 0
    for action in actions:
        mode, step_args, _ = step_for(action)
        if mode is None:
            skipped += 1
            continue
        steps.append({"what": mode, **step_args})
    return steps[-MAX_SEQUENCE_STEPS:], skipped + max(0, len(steps) - MAX_SEQUENCE_STEPS)


def _sequence_name(ctx: ToolContext, args: dict[str, Any]) -> str:
    name = ctx.str_arg(args, "name")
    if not name:
        raise MissingParam("save_sequence needs 'name'", param="name")
    if ":" in name or len(name) > MAX_SEQUENCE_NAME:
        raise InvalidParam(f"sequence names are 1..{MAX_SEQUENCE_NAME} characters without ':' "
                           "(that separates a client id)", param="name")
    return name


def configure_save_sequence(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    action = ctx.str_arg(args, "sequence_action", "save", ("save", "list", "delete", "get"))
    seqs = sequences_of(ctx.state)
    if action == "list":
        items = [{"name": n, "steps": len(s.get("steps", [])), "created_at": s.get("created_at"),
                  "description": s.get("description"), "source": s.get("source"),
                  "tags": list(s.get("tags") or []), "step_count": len(s.get("steps", [])),
                  "saved_at": rfc3339(s.get("created_at"))}
                 for n, s in seqs.items() if isinstance(s, dict)]
        return ctx.ok(f"{len(items)} sequences", {"status": "ok", "sequences": items,
                                                   "count": len(items)})
    name = _sequence_name(ctx, args)
    if action == "delete":
        if name not in seqs:
            raise GasolineError(f"no sequence {name!r}", code="no_data")
        ctx.state.put(SEQUENCES_NS, {n: s for n, s in seqs.items() if n != name})
        return ctx.ok(f"sequence {name} deleted", {"name": name, "deleted": True})
    if action == "get":
        seq = seqs.get(name)
        if not isinstance(seq, dict):
            raise GasolineError(f"no sequence {name!r}", code="no_data")
        # The published answer's fields too (status, tags, step_count, saved_at).
        steps = seq.get("steps", [])
        return ctx.ok(f"sequence {name}: {len(steps)} steps",
                      {"status": "ok", "tags": [], **seq, "step_count": len(steps),
                       "saved_at": rfc3339(seq.get("created_at"))})
    skipped = 0
    if ctx.bool_arg(args, "from_actions", False):
        raw_steps, skipped = _steps_from_actions(ctx, args)
        if not raw_steps:
            raise GasolineError("no recorded action can be replayed as a step", code="no_data",
                                retry="Use the page (or pass steps), then save again.")
        source = "actions"
    else:
        if "steps" not in args:
            raise MissingParam("save_sequence needs 'steps' (a list of interact argument "
                               "objects) or from_actions:true", param="steps")
        raw_steps, source = args["steps"], "steps"
    steps = validate_steps(raw_steps)
    description = ctx.str_arg(args, "description")
    if name not in seqs and len(seqs) >= MAX_SEQUENCES:
        raise InvalidParam(f"at most {MAX_SEQUENCES} sequences per client",
                           retry="Delete old ones (sequence_action:'delete').")
    replaced = name in seqs
    tags = args.get("tags", [])
    if not isinstance(tags, list) or len(tags) > MAX_SEQUENCE_TAGS or not all(
            isinstance(t, str) and 0 < len(t) <= 64 for t in tags):
        raise InvalidParam(f"tags must be a list of at most {MAX_SEQUENCE_TAGS} strings of 1..64 "
                           "characters", param="tags")
    ctx.state.put(SEQUENCES_NS, {**seqs, name: {
        "name": name, "steps": steps, "created_at": ctx.now(), "source": source,
        "description": (description or "")[:500] or None, "tags": tags}})
    extra = f", {skipped} recorded actions skipped" if skipped else ""
    return ctx.ok(f"sequence {name} {'replaced' if replaced else 'saved'}: {len(steps)} steps"
                  f"{extra}; configure {{what:'replay_sequence', name:'{name}'}} runs it",
                  {"name": name, "steps": steps, "skipped_actions": skipped,
                   "reference": f"{ctx.client_id}:{name}"})


def resolve_sequence(ctx: ToolContext, ref: str) -> dict[str, Any]:
    """The caller's sequence C{ref}, or C{client:name} for another client's (on purpose)."""
    state, name = state_of_ref(ctx, ref, "sequence")
    seq = sequences_of(state).get(name)
    if not isinstance(seq, dict) or not isinstance(seq.get("steps"), list):
        raise GasolineError(f"no sequence {ref!r}", code="no_data",
                            retry="configure {what:'save_sequence', sequence_action:'list'} "
                            "lists yours.")
    return seq


async def configure_replay_sequence(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    ref = ctx.str_arg(args, "name")
    if not ref:
        raise MissingParam("replay_sequence needs 'name'", param="name")
    continue_on_error = ctx.bool_arg(args, "continue_on_error", False)
    seq = resolve_sequence(ctx, ref)
    steps = validate_steps(seq["steps"])  # stored steps are checked again: they may be old
    router = ctx.router
    limit = router.per_client_limit
    if router.pending_count(ctx.client_id) >= limit:
        raise QueueFull(f"you already have {limit} commands waiting for the extension",
                        limit=limit, scope="client")
    ctx.app.extension.require_connected()
    outcomes = await _replay(ctx, steps, continue_on_error)

    def answer(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for o in outcomes:
            counts[o["status"]] = counts.get(o["status"], 0) + 1
        failed = next((o for o in outcomes if o["status"] == "error"), None)
        status = "failed" if failed else "complete"
        summary = f"sequence {ref}: {counts.get('complete', 0)}/{len(outcomes)} steps complete"
        if failed is not None:
            summary += (f"; FAILED at step {failed['index']} ({failed['what']}: "
                        f"{failed.get('error') or 'error'})")
            if not continue_on_error and counts.get("not_run"):
                summary += f", {counts['not_run']} not run"
        return ctx.ok(summary, {"name": ref, "status": status, "counts": counts,
                                "continue_on_error": continue_on_error, "steps": outcomes})

    return answer(outcomes)


async def _replay(ctx: ToolContext, steps: list[dict[str, Any]],
                  continue_on_error: bool) -> list[dict[str, Any]]:
    started = ctx.now()
    outcomes: list[dict[str, Any]] = []
    stop: str | None = None
    for index, step in enumerate(steps):
        what = step["what"]
        outcome: dict[str, Any] = {"index": index, "what": what}
        outcomes.append(outcome)
        if stop is None and ctx.now() - started > REPLAY_BUDGET:
            stop = f"the replay ran over its {REPLAY_BUDGET:g} s budget"
        if stop is not None:
            outcome.update(status="not_run", reason=stop)
            continue
        handler = ctx.mode_table("interact").get(what)
        ctx.progress(index, len(steps), f"step {index + 1} of {len(steps)}: {what}")
        at = ctx.now()
        if handler is None:
            outcome.update(status="error", error="not_implemented",
                           message=f"interact {what} is not implemented")
        else:
            try:
                step_ctx = attrs.evolve(ctx, tool="interact", mode=what)
                result = await maybeDeferred(handler, step_ctx, dict(step))
            except CancelledError:
                raise  # the caller cancelled the replay: start no further step
            except GasolineError as e:
                outcome.update(status="error", error=e.code, message=e.message[:500])
            except Exception as e:  # a bug in one step must not leave the call hanging
                log.failure("sequence step {index} crashed", index=index)
                outcome.update(status="error", error="internal_error", message=type(e).__name__)
            else:
                text = ""
                if isinstance(result, dict):
                    content = result.get("content") or [{}]
                    text = content[0].get("text", "") if isinstance(content[0], dict) else ""
                if isinstance(result, dict) and result.get("isError"):
                    code = "step_failed"
                    try:
                        code = str(json.loads(text.partition("\n")[2]).get("error") or code)
                    except (ValueError, AttributeError):
                        pass
                    outcome.update(status="error", error=code[:64],
                                   message=text.partition("\n")[0][:500])
                else:
                    outcome.update(status="complete", summary=text.partition("\n")[0][:500])
        outcome["duration_ms"] = round((ctx.now() - at) * 1000, 3)
        if outcome["status"] == "error" and not continue_on_error:
            stop = f"step {index} failed"
    return outcomes

"""
Playback of a saved recording, and its results.

``configure {what:"playback", name}`` replays one of the caller's recordings (made with
``configure recording_start`` / ``recording_stop``) through the extension, one step at a time, with
the same ``interact`` handlers an agent would call: the same pilot check, the same selectors, and each
step recorded into the actions buffer with ``source: "ai"``. It returns a ``playback_id`` at once; the
steps run in the background. ``observe {what:"playback_results", playback_id?}`` shows the outcome of
every step, to the client that started the playback and to no one else.

How recorded actions map to steps:

============  ======================================================================
recorded      replayed as
============  ======================================================================
click         ``interact click`` on the recorded element
input         ``interact type`` with the recorded value (password fields, recorded as
              ``[redacted]``, are skipped: their values were never captured)
select        ``interact select`` with the recorded value
keypress      ``interact key_press``
navigate      ``interact navigate`` to the recorded destination
other         skipped (scrolls, for instance, carry no element to act on)
============  ======================================================================

The element is addressed by the most stable selector the extension recorded: test id, then CSS,
then ARIA label, then role and name, then visible text.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import attrs
from twisted.internet.defer import Deferred, inlineCallbacks, maybeDeferred
from twisted.logger import Logger

from gasoline.core.errors import GasolineError, InvalidParam, MissingParam
from gasoline.mcp.modes.context import ToolContext
from gasoline.mcp.modes.interact import MODES as INTERACT
from gasoline.mcp.modes.interact import require_pilot

log = Logger()

#: Playbacks kept per client for ``observe playback_results`` (oldest leave first).
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
    if kind not in ("click", "input", "select", "keypress"):
        return None, {}, f"{kind!r} actions are not replayed"
    selector = selector_for(action)
    if kind == "keypress":
        key = action.get("key")
        if not isinstance(key, str) or not key or key == REDACTED:
            return None, {}, "no key recorded"
        return "key_press", {"key": key, **({"selector": selector} if selector else {})}, ""
    if selector is None:
        return None, {}, "no selector recorded for the element"
    if kind == "click":
        return "click", {"selector": selector}, ""
    value = action.get("value")
    if value == REDACTED:
        return None, {}, "the value was redacted when recorded (a password field)"
    if not isinstance(value, str):
        return None, {}, "no value recorded"
    if kind == "select":
        return "select", {"selector": selector, "value": value}, ""
    return "type", {"selector": selector, "text": value}, ""


def _playbacks(ctx: ToolContext) -> "OrderedDict[str, dict[str, Any]]":
    every = ctx.app.extras.setdefault("playbacks", {})
    mine = every.get(ctx.client_id)
    if mine is None:
        mine = every[ctx.client_id] = OrderedDict()
    return mine


def configure_playback(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    from gasoline.mcp.modes.configure import recordings_of  # noqa: PLC0415  (cycle)

    name = ctx.str_arg(args, "name")
    if not name:
        raise MissingParam("playback needs 'name': one of your recordings "
                           "(observe {what:'recordings'})", param="name")
    recording = recordings_of(ctx)["saved"].get(name)
    if recording is None:
        raise GasolineError(f"no recording {name!r}", code="no_data",
                            retry="observe {what:'recordings'} lists yours.")
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

    d = _run(ctx, record, INTERACT, stop_on_error)
    d.addErrback(lambda f: log.failure("playback {id} failed", f, id=playback_id))
    runnable = sum(1 for s in steps if s["status"] == "pending")
    return ctx.ok(f"playback {playback_id} of {name} started: {runnable} steps "
                  f"({len(steps) - runnable} skipped); observe {{what:'playback_results', "
                  f"playback_id:'{playback_id}'}} for the outcome",
                  {"playback_id": playback_id, "status": "running", "steps": len(steps),
                   "runnable": runnable})


@inlineCallbacks
def _run(ctx: ToolContext, record: dict[str, Any], interact: dict[str, Any],
         stop_on_error: bool) -> Deferred:
    failed = False
    for step in record["steps"]:
        if step["status"] != "pending":
            continue
        if failed and stop_on_error:
            step["status"] = "not_run"
            continue
        step["status"] = "running"
        try:
            step_ctx = attrs.evolve(ctx, tool="interact", mode=step["mode"])
            result = yield maybeDeferred(interact[step["mode"]], step_ctx,
                                         {"what": step["mode"], **step["args"]})
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


def observe_playback_results(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    mine = _playbacks(ctx)
    playback_id = ctx.str_arg(args, "playback_id") or ctx.str_arg(args, "correlation_id")
    if playback_id:
        record = mine.get(playback_id)
        if record is None:  # another client's id gets the same answer as an unknown one
            raise GasolineError(f"no playback {playback_id!r} of yours", code="no_data",
                                retry="observe {what:'playback_results'} lists yours.")
        counts = _counts(record)
        return ctx.ok(f"playback {playback_id} ({record['recording']}): {record['status']}, "
                      + ", ".join(f"{n} {k}" for k, n in counts.items() if n), {**record,
                                                                                "counts": counts})
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

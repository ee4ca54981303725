"""
The tool side of context streaming (the machinery is L{gasoline.streaming}):

 - C{configure {what:"streaming", enabled, subscribe, filters}} (also C{streaming_action}
   enable / disable / status) answers C{{configured, streaming_enabled, subscribe, filters}},
   with C{enabled} beside C{streaming_enabled} (the published Gasoline's name for it);
 - C{observe {what:"events", since?, wait_ms?, limit?}} returns the caller's pending events,
   oldest first, and acknowledges them; with C{wait_ms} (at most 50 000) it long-polls until an
   event arrives, with C{notifications/progress} when the request carried a progress token;
 - L{append_unread_note}: the short note other tool results carry while events are unread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred

from gasoline.core.errors import GasolineError, InvalidParam
from gasoline.streaming.hub import MAX_WAIT_MS, PROGRESS_EVERY
from gasoline.streaming.redaction import UNTRUSTED
from gasoline.streaming.subscription import ALL, ALL_WARNING, parse

if TYPE_CHECKING:
    from gasoline.streaming.hub import Streaming
    from gasoline.tools.context import ToolContext

DEFAULT_EVENTS = 100
MAX_EVENTS = 1000



def _streaming(ctx: ToolContext) -> Streaming:
    streaming = ctx.tools.streaming if ctx.tools is not None else None
    if streaming is None:
        raise GasolineError("streaming is not available in this daemon", code="not_implemented")
    return streaming


def configure_streaming(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    streaming = _streaming(ctx)
    action = ctx.str_arg(args, "streaming_action", None, ("enable", "disable", "status"))
    if action == "status" or (action is None and "enabled" not in args
                              and "subscribe" not in args and "filters" not in args):
        status = streaming.status(ctx.state)
        status["enabled"] = status["streaming_enabled"]  # the published shape's key
        if status["streaming_enabled"]:
            status["events_url"] = streaming.events_url(ctx.state.client_id)
        word = "on" if status["streaming_enabled"] else "off"
        return ctx.ok(f"streaming is {word}", status)
    if action == "disable":
        args = {**args, "enabled": False}
    elif action == "enable" and "subscribe" not in args and "events" in args:
        args = {**args, "subscribe": args["events"]}  # the 0.7.x argument name
    subscription = parse(args)
    agent = streaming.configure(ctx.state, subscription)
    if agent is None:
        return ctx.ok("streaming disabled: you will receive no more browser events",
                      {"configured": True, "streaming_enabled": False, "enabled": False,
                       "subscribe": [], "filters": None})
    assert subscription is not None  # None (disable) configures no agent
    body: dict[str, Any] = {"configured": True, "streaming_enabled": True, "enabled": True,
                            "subscribe": list(subscription.types),
                            "filters": subscription.filters(),
                            # GET /events for consumers that do not speak MCP: only this agent
                            # learns the token (docs/security.md, "Route policy").
                            "events_url": streaming.events_url(ctx.state.client_id)}
    summary = (f"streaming {', '.join(subscription.types)} (at most "
               f"{subscription.rate_limit}/s); read them with observe {{what:\"events\"}}")
    if ALL in subscription.types:
        body["warning"] = ALL_WARNING.format(rate=subscription.rate_limit)
        summary += "; warning: 'all' can be many events"
    return ctx.ok(summary, body)


def _answer(ctx: Any, out: dict[str, Any] | None, waited_ms: int | None) -> dict[str, Any]:
    if out is None:
        return ctx.ok("not subscribed: no events; subscribe with configure {what:\"streaming\", "
                      "subscribe:[\"error\", ...]}",
                      {"count": 0, "events": [], "streaming_enabled": False})
    events = out["events"]
    n = len(events)
    body = {"count": n, **out, "streaming_enabled": True}
    if waited_ms is not None:
        body["waited_ms"] = waited_ms
    if n:
        body["untrusted_content"] = UNTRUSTED
    summary = f"{n} browser event{'s' if n != 1 else ''}"
    if n:
        summary += f" (seq {events[0]['seq']}-{events[-1]['seq']}, acknowledged)"
    if out["has_more"]:
        summary += "; more pending"
    return ctx.ok(summary, body)


def observe_events(ctx: Any, args: dict[str, Any]) -> Any:
    streaming = _streaming(ctx)
    since = ctx.int_arg(args, "since", None, 0, 2**62)
    wait_ms = ctx.int_arg(args, "wait_ms", 0, 0, 2**62)
    if wait_ms > MAX_WAIT_MS:
        raise InvalidParam(f"wait_ms must be at most {MAX_WAIT_MS} (the client's request "
                           "timeout is usually 60 s)", param="wait_ms", value=wait_ms)
    limit = ctx.int_arg(args, "limit", DEFAULT_EVENTS, 1, MAX_EVENTS)
    peek = streaming.read(ctx.state, since, limit, ack=False)
    if peek is None or peek["events"] or wait_ms == 0:
        return _answer(ctx, streaming.read(ctx.state, since, limit), None)
    clock = ctx.clock
    started = clock.seconds()
    deadline = started + wait_ms / 1000.0
    ctx.working("waiting for browser events")  # carried by the progress heartbeats
    outer: Deferred = Deferred(lambda _: current[0].cancel())
    current: list[Deferred] = []

    def step(_: Any = None) -> None:
        now = clock.seconds()
        out = streaming.read(ctx.state, since, limit, ack=False)
        if out is None or out["events"] or now >= deadline:
            outer.callback(_answer(ctx, streaming.read(ctx.state, since, limit),
                                   int(round((now - started) * 1000))))
            return
        remaining = deadline - now
        chunk = min(remaining, PROGRESS_EVERY) if ctx.request is not None \
            and ctx.request.progress_token is not None else remaining
        d = streaming.wait(ctx.state, chunk)
        current[:] = [d]

        def woke(_: Any) -> None:
            if outer.called:
                return
            now = clock.seconds()
            pending = streaming.read(ctx.state, since, limit, ack=False)
            if now < deadline and pending is not None and not pending["events"]:
                ctx.progress(round((now - started) * 1000), wait_ms, "waiting for browser events")
            step()

        d.addCallback(woke)
        d.addErrback(lambda f: None)

    step()
    return outer


def append_unread_note(ctx: ToolContext, result: Any) -> Any:
    """Add the caller's unread-events note to a successful result (a second text block, so the
    first block's summary line and JSON stay as they are)."""
    if ctx.tool == "observe" and ctx.mode == "events":
        return result
    if ctx.tool == "configure" and ctx.mode == "streaming":
        return result
    streaming = ctx.tools.streaming if ctx.tools is not None else None
    if streaming is None or not isinstance(result, dict) or result.get("isError"):
        return result
    content = result.get("content")
    if not isinstance(content, list):
        return result
    note = streaming.unread_note(ctx.state)
    if note is not None:
        content.append({"type": "text", "text": note})
    return result

"""
C{interact} modes carried out with real input and the extension's debugger session on the tracked
tab (extension/worker/devtools.js): C{hover}, C{drag}, C{key_press} with modifiers and chords,
C{dialog} (JavaScript dialogs), C{emulate} and C{resize}, and C{performance_trace}.

Every one needs the AI Web Pilot and acts only on tracked tabs (the extension decides both, as for
every command; the daemon refuses early when the extension reports the pilot off). C{hover},
C{drag} and C{key_press} are C{dom_action}s (recorded into the shared C{actions} buffer with
C{source: "ai"}, like C{click}); C{dialog}, C{emulate} and C{trace} are commands of their own.
"""

from __future__ import annotations

from typing import Any, Callable

from gasoline.core.errors import InvalidParam, MissingParam
from gasoline.tools._actions import record
from gasoline.tools._commands import newer_command, require_pilot
from gasoline.tools._shared import action_data, as_dict, extension_mode, lst, timeout_of
from gasoline.tools._snapshot import ref_selector

#: Named devices the extension knows (extension/worker/devtools.js DEVICES).
DEVICES = ("iphone-13", "pixel-7", "ipad-air", "laptop", "desktop-1080p")
#: Named network profiles (extension/worker/devtools.js NETWORKS).
NETWORKS = ("offline", "slow-3g", "fast-3g", "4g", "none")
COLOR_SCHEMES = ("dark", "light", "no-preference")
MAX_KEY_CHARS = 200


#: How a mode's element is named (C{selector}, C{element_id}, ...): L{gasoline.tools.interact}
#: C{target}, given by L{modes} so that every interact mode reads its target the same way.
_targets: list[Callable[..., str | None]] = []


def _target(ctx: Any, args: dict[str, Any], required: bool = True) -> str | None:
    return _targets[0](ctx, args, required)


def _input_action(ctx: Any, args: dict[str, Any], params: dict[str, Any], kind: str,
                  summary: str, **fields: Any) -> Any:
    selector = params.get("selector")

    def describe(result: Any) -> tuple[str, dict[str, Any] | None]:
        r = as_dict(result)
        record(ctx, kind, r, selector=selector, command=ctx.mode, **fields)
        text = summary
        if isinstance(r.get("dialog"), dict):
            text += f"; a {r['dialog'].get('type')} dialog opened and waits (interact dialog)"
        return text, action_data(ctx, args, r)

    return extension_mode(ctx, args, "dom_action", params, describe,
                          on_submit=lambda cid: record(ctx, kind, None, status="submitted",
                                                       correlation_id=cid, selector=selector,
                                                       command=ctx.mode, **fields),
                          timeout=timeout_of(ctx, args))


def hover(ctx: Any, args: dict[str, Any]) -> Any:
    """Move the real pointer over an element (CSS :hover applies, mouseover/mouseenter fire)."""
    require_pilot(ctx)
    selector = _target(ctx, args)
    return _input_action(ctx, args, {"action": "hover", "selector": selector}, "hover",
                         f"hovering over {selector!r}")


def drag(ctx: Any, args: dict[str, Any]) -> Any:
    """Drag an element onto another with a real pointer (and real HTML5 drag events when the
    page's source is draggable)."""
    require_pilot(ctx)
    selector = _target(ctx, args)
    to = ctx.str_arg(args, "target") or ctx.str_arg(args, "to")
    target_ref = ctx.str_arg(args, "target_ref")
    if (not to or not to.strip()) and target_ref and target_ref.strip():
        to = ref_selector(ctx, args, target_ref)
    if not to or not to.strip():
        raise MissingParam("interact drag needs 'target' (the selector of the element to drop "
                           "on) or 'target_ref' (its snapshot ref)", param="target")
    return _input_action(ctx, args, {"action": "drag", "selector": selector, "target": to},
                         "drag", f"dragged {selector!r} onto {to!r}", target=to)


def key_press(ctx: Any, args: dict[str, Any]) -> Any:
    """Press a key, a combination (C{Control+K}, C{Shift+Tab}, C{Meta+A}) or a chord sequence
    (C{"Control+K Control+S"}) with real key events, in the focused element or in C{selector}
    (focused first)."""
    require_pilot(ctx)
    key = ctx.str_arg(args, "key") or ctx.str_arg(args, "text") or "Enter"
    if len(key) > MAX_KEY_CHARS:
        raise InvalidParam(f"key is {len(key)} characters; at most {MAX_KEY_CHARS}", param="key")
    selector = _target(ctx, args, required=False)
    params: dict[str, Any] = {"action": "key_press", "key": key}
    if selector:
        params["selector"] = selector
    where = f" in {selector!r}" if selector else ""
    return _input_action(ctx, args, params, "keypress", f"pressed {key}{where}", key=key)


def dialog(ctx: Any, args: dict[str, Any]) -> Any:
    """The JavaScript dialog open in the tab: without C{accept}, its status; C{accept: true}
    accepts it (a prompt with C{prompt_text}), C{accept: false} dismisses it."""
    require_pilot(ctx)
    accept = args.get("accept")
    params: dict[str, Any] = {"action": "status"}
    if accept is not None:
        params["action"] = "accept" if ctx.bool_arg(args, "accept") else "dismiss"
    prompt_text = args.get("prompt_text", args.get("text"))
    if prompt_text is not None:
        if not isinstance(prompt_text, str):
            raise InvalidParam("prompt_text must be a string", param="prompt_text")
        params["prompt_text"] = prompt_text

    def describe(result: Any) -> tuple[str, dict[str, Any] | None]:
        r = as_dict(result)
        if params["action"] == "status":
            pending = r.get("pending")
            if isinstance(pending, dict):
                return (f"a {pending.get('type')} dialog is open: {str(pending.get('message'))[:200]!r}",
                        {"result": r})
            return "no dialog is open", {"result": r}
        record(ctx, "dialog", r, command="dialog", accepted=params["action"] == "accept")
        return f"dialog {params['action']}ed", action_data(ctx, args, r)

    return newer_command(ctx, args, "dialog", params, describe, "interact dialog")


def _viewport(ctx: Any, args: dict[str, Any]) -> dict[str, Any] | None:
    vp = args.get("viewport")
    if vp is None and args.get("width") is None and args.get("height") is None:
        return None
    if vp is not None and not isinstance(vp, dict):
        raise InvalidParam("viewport must be an object {width, height, device_scale_factor?, "
                           "mobile?}", param="viewport")
    out: dict[str, Any] = dict(vp or {})
    for name in ("width", "height"):
        value = args.get(name, out.get(name))
        if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 10_000:
            raise InvalidParam(f"{name} must be an integer from 100 to 10000", param=name)
        out[name] = value
    dsf = out.get("device_scale_factor")
    if dsf is not None and (isinstance(dsf, bool) or not isinstance(dsf, (int, float))
                            or not 0 < dsf <= 10):
        raise InvalidParam("device_scale_factor must be a number from 0 to 10",
                           param="device_scale_factor")
    if "mobile" in out:
        out["mobile"] = bool(out["mobile"])
    return {k: out[k] for k in ("width", "height", "device_scale_factor", "mobile") if k in out}


def emulate_params(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    if args.get("reset") is not None and ctx.bool_arg(args, "reset"):
        return {"reset": True}
    params: dict[str, Any] = {}
    device = ctx.str_arg(args, "device")
    if device is not None:
        if device.lower() not in DEVICES:
            raise InvalidParam(f"unknown device {device!r}", param="device", valid=list(DEVICES))
        params["device"] = device.lower()
    viewport = _viewport(ctx, args)
    if viewport is not None:
        params["viewport"] = viewport
    cpu = args.get("cpu_throttling")
    if cpu is not None:
        if isinstance(cpu, bool) or not isinstance(cpu, (int, float)) or not 1 <= cpu <= 20:
            raise InvalidParam("cpu_throttling is a slowdown factor from 1 (none) to 20",
                               param="cpu_throttling")
        params["cpu_throttling"] = cpu
    network = ctx.str_arg(args, "network")
    if network is not None:
        if network not in NETWORKS:
            raise InvalidParam(f"unknown network {network!r}", param="network",
                               valid=list(NETWORKS))
        params["network"] = network
    custom = args.get("network_conditions")
    if custom is not None:
        if network is not None:
            raise InvalidParam("give either network (a profile) or network_conditions",
                               param="network_conditions")
        if not isinstance(custom, dict):
            raise InvalidParam("network_conditions is {latency_ms, download_kbps, upload_kbps}",
                               param="network_conditions")
        for key in ("latency_ms", "download_kbps", "upload_kbps"):
            v = custom.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise InvalidParam(f"network_conditions.{key} must be a number >= 0",
                                   param="network_conditions")
        params["network"] = {k: custom[k] for k in ("latency_ms", "download_kbps",
                                                    "upload_kbps") if k in custom}
    if args.get("offline") is not None:
        params["offline"] = ctx.bool_arg(args, "offline")
    scheme = ctx.str_arg(args, "color_scheme")
    if scheme is not None:
        if scheme not in COLOR_SCHEMES:
            raise InvalidParam(f"unknown color_scheme {scheme!r}", param="color_scheme",
                               valid=list(COLOR_SCHEMES))
        params["color_scheme"] = scheme
    if "geolocation" in args:
        geo = args["geolocation"]
        if geo == {}:
            geo = None
        if geo is not None:
            if not isinstance(geo, dict):
                raise InvalidParam("geolocation is {latitude, longitude, accuracy?} ({} clears it)",
                                   param="geolocation")
            lat, lon = geo.get("latitude"), geo.get("longitude")
            if (isinstance(lat, bool) or not isinstance(lat, (int, float)) or not -90 <= lat <= 90
                    or isinstance(lon, bool) or not isinstance(lon, (int, float))
                    or not -180 <= lon <= 180):
                raise InvalidParam("geolocation needs latitude (-90..90) and longitude "
                                   "(-180..180)", param="geolocation")
            geo = {k: geo[k] for k in ("latitude", "longitude", "accuracy") if k in geo}
        params["geolocation"] = geo
    if not params:
        raise MissingParam(f"interact {ctx.mode} needs at least one of device, viewport (or "
                           "width and height), cpu_throttling, network, offline, color_scheme, "
                           "geolocation, or reset:true", param="device")
    return params


def emulate(ctx: Any, args: dict[str, Any]) -> Any:
    """Emulate a device or viewport, CPU throttling, network conditions (offline), a color
    scheme or a geolocation in the tracked tab, until C{reset: true} (or the session ends)."""
    require_pilot(ctx)
    if ctx.mode == "resize" and args.get("reset") is None and _viewport(ctx, args) is None:
        raise MissingParam("interact resize needs 'width' and 'height' (or reset:true)",
                           param="width")
    params = emulate_params(ctx, args)

    def describe(result: Any) -> tuple[str, dict[str, Any] | None]:
        r = as_dict(result)
        record(ctx, "emulate", r, command=ctx.mode)
        if params.get("reset"):
            return "emulation reset", action_data(ctx, args, r)
        state = r.get("emulation")
        names = sorted(str(k) for k in state) if isinstance(state, dict) else []
        return "emulating " + (", ".join(names) or "nothing"), action_data(ctx, args, r)

    return newer_command(ctx, args, "emulate", params, describe, f"interact {ctx.mode}")


#: How long a trace waits after the load for late LCP candidates and shifts (the extension's
#: bound: extension/worker/devtools.js TRACE_MAX_SETTLE_MS).
MAX_SETTLE_MS = 10_000
#: A trace: up to 15 s of load, the settle time, the read-back.
TRACE_TIMEOUT = 40.0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _ms(value: Any) -> str:
    return f"{value:.0f} ms" if isinstance(value, (int, float)) else "n/a"


def trace_summary(r: dict[str, Any]) -> str:
    """One line an agent can act on: LCP with its element and largest phase, CLS with the worst
    element, total blocking time, render-blocking requests."""
    parts = []
    lcp = r.get("lcp")
    if isinstance(lcp, dict):
        phases = _dict(lcp.get("phases"))
        worst = max(phases.items(), key=lambda kv: kv[1] if isinstance(kv[1], (int, float)) else -1,
                    default=None)
        text = f"LCP {_ms(lcp.get('time'))} ({lcp.get('element') or lcp.get('tag') or 'element'}"
        if worst:
            text += f"; largest phase {worst[0]} {_ms(worst[1])}"
        parts.append(text + ")")
    else:
        parts.append("no LCP")
    shifts = _dict(r.get("layout_shifts"))
    by = lst(shifts.get("by_element"))
    cls = f"CLS {shifts.get('cls', 0)}"
    if by and isinstance(by[0], dict):
        cls += f" (most from {by[0].get('element')})"
    parts.append(cls)
    tasks = _dict(r.get("long_tasks"))
    parts.append(f"{tasks.get('count', 0)} long task(s), TBT {_ms(tasks.get('total_blocking_time'))}")
    blocking = lst(r.get("render_blocking"))
    parts.append(f"{len(blocking)} render-blocking request(s)")
    return "trace: " + "; ".join(parts)


def performance_trace(ctx: Any, args: dict[str, Any]) -> Any:
    """Reload the tracked tab with performance observers installed before its first script (or,
    C{reload: false}, read what the page buffered) and answer the insights: LCP and its phases,
    render-blocking requests, long tasks and long animation frames, layout shifts by element."""
    require_pilot(ctx)
    params: dict[str, Any] = {}
    if args.get("reload") is not None:
        params["reload"] = ctx.bool_arg(args, "reload")
    settle = ctx.int_arg(args, "settle_ms", None, 0, MAX_SETTLE_MS)
    if settle is not None:
        params["settle_ms"] = settle
    if args.get("ignore_cache") is not None:
        params["ignore_cache"] = ctx.bool_arg(args, "ignore_cache")

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        return trace_summary(r), {"trace": r}

    return newer_command(ctx, args, "trace", params, describe, "interact performance_trace",
                         timeout=timeout_of(ctx, args) or TRACE_TIMEOUT)


def modes(target: Callable[..., str | None]) -> dict[str, Any]:
    """The modes, reading their target with C{target(ctx, args, required)}."""
    _targets[:] = [target]
    return dict(MODES)


MODES: dict[str, Any] = {
    "hover": hover,
    "drag": drag,
    "key_press": key_press,
    "dialog": dialog,
    "emulate": emulate,
    "resize": emulate,
    "performance_trace": performance_trace,
}

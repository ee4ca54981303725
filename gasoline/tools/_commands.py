"""
Guards and fallbacks for extension commands: a refused command when the extension's AI Web
Pilot is off, and a clear error for a command an older extension does not know.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import Deferred

from gasoline.core.errors import GasolineError
from gasoline.tools._shared import (
    extension_mode,
)


class PilotDisabled(GasolineError):
    code = "pilot_disabled"
    retry = ("Ask the user to turn on 'AI Web Pilot' in the Gasoline extension popup; reading "
             "modes (get_text, list_interactive, screenshot, ...) work without it.")


#: The fix when the browser was started by C{gasoline browser} (its extension says so in its
#: settings, C{launched}): that command's option, not a popup (a headless browser has none).
LAUNCHED_PILOT_FIX = ("This browser was started by `gasoline browser` without --pilot{headless}: "
                      "end it and start it again with `gasoline browser --pilot URL` (or "
                      "interact launch_browser with pilot:true); reading modes (get_text, "
                      "list_interactive, screenshot, ...) work without it.")


def require_pilot(ctx: Any) -> None:
    settings = ctx.app.extension.settings
    if settings.get("pilot_enabled") is False:
        launched = settings.get("launched")
        raise PilotDisabled(
            f"interact {ctx.mode or ''} is refused: the extension reports "
            "AI Web Pilot disabled".replace("  ", " "),
            retry=LAUNCHED_PILOT_FIX.format(
                headless=" (headless: it has no popup)" if launched.get("headless") else "")
            if isinstance(launched, dict) else None)


class ExtensionTooOld(GasolineError):
    code = "extension_outdated"
    retry = ("Update the Gasoline extension (reload it from this repository's extension/ folder); "
             "the other modes keep working with the old one.")


def needs_newer_extension(what: str) -> Callable[[Any], Any]:
    """An errback turning the extension's C{unknown_query_type} into a clear error."""

    def check(failure: Any) -> Any:
        err = failure.value
        text = err.details.get("extension_error") if isinstance(err, GasolineError) else None
        if isinstance(text, str) and text.startswith("unknown_query_type"):
            raise ExtensionTooOld(f"{what} needs a newer Gasoline extension: the connected one "
                                  "does not know this command")
        return failure

    return check


def newer_command(ctx: Any, args: dict[str, Any], type: str, params: dict[str, Any],
                  describe: Callable[[Any], tuple[str, dict[str, Any] | None]], what: str,
                  **kw: Any) -> Any:
    """L{extension_mode} for commands older extensions do not know."""
    out = extension_mode(ctx, args, type, params, describe, **kw)
    if isinstance(out, Deferred):
        out.addErrback(needs_newer_extension(what))
    return out

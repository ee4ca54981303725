"""
C{interact launch_browser}: start a browser paired with this daemon (through the launcher of
L{gasoline.tools._launch}, off unless the daemon runs with C{--allow-launch-browser}), then wait a
bounded time until the launched page's capture reaches the daemon, so that an C{observe} right
after the answer sees what the page logged while loading. The other C{interact} modes are in
L{gasoline.tools.interact}.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from twisted.internet.task import deferLater

from gasoline.core.errors import InvalidParam
from gasoline.tools._launch import LaunchDisabled

if TYPE_CHECKING:
    from gasoline.core.interfaces import ITelemetryStore


async def launch_browser(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Start a browser paired with this daemon (C{gasoline browser --detach}; docs/browser.md).
    Off unless the daemon runs with C{--allow-launch-browser}."""
    launcher = ctx.tools.launcher if ctx.tools is not None else None
    if launcher is None:
        raise LaunchDisabled("interact launch_browser is off: the daemon was not started with "
                             "--allow-launch-browser")
    url = ctx.str_arg(args, "url") or "about:blank"
    if not (url == "about:blank" or re.match(r"https?://|file://", url)):
        raise InvalidParam("url must be http://, https:// or file://", param="url")
    display = bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    headless = ctx.bool_arg(args, "headless", not display)
    pilot = ctx.bool_arg(args, "pilot", True)
    track_all = ctx.bool_arg(args, "track_all", False)
    text = await launcher.launch(url, headless=headless, pilot=pilot, track_all=track_all)
    flowing, waited = await _capture_flowing(ctx, url)
    return ctx.ok(f"launched a browser at {url} (paired with this daemon, tracking its tab"
                  f"{', pilot on' if pilot else ''}{', headless' if headless else ''})"
                  + ("" if flowing else f"; its capture had not reached the daemon after "
                     f"{waited / 1000:g} s (observe may see nothing yet)"),
                  {"launched": True, "url": url, "headless": headless, "pilot": pilot,
                   "track_all": track_all, "output": text, "capture_flowing": flowing,
                   "waited_ms": waited})


#: How long C{launch_browser} waits for the launched page's capture to reach the daemon.
CAPTURE_WAIT = 10.0
#: Once the page is shown, how long capture must be quiet (nothing more arriving) to be taken as
#: delivered, and how long to wait for a first batch from a page that may capture nothing.
CAPTURE_QUIET = 0.3
CAPTURE_FIRST = 2.0
_CAPTURE_POLL = 0.05


def _captured(store: ITelemetryStore) -> int:
    """How many entries every buffer of C{store} has taken so far (each ring's next sequence)."""
    return sum(ring.head for ring in store.buffers.values())


async def _capture_flowing(ctx: Any, url: str) -> tuple[bool, int]:
    """Wait (at most L{CAPTURE_WAIT}) until the launched page's capture has reached the daemon,
    so that an C{observe} right after the answer sees what the page logged while loading:

     1. the extension syncs with its tracked tab on a page (no longer C{about:blank}); a sync
        the daemon holds (the long poll, begun before the tab navigated) is answered at once so
        the next one comes with the current settings;
     2. capture has arrived since the launch (any buffer grew: the new browser captures only
        its page) and has been quiet for L{CAPTURE_QUIET} s; a page that sent nothing within
        L{CAPTURE_FIRST} s of step 1 counts as flowing.

    C{(flowing, waited ms)}."""
    link = ctx.app.extension
    store = ctx.app.store
    start = ctx.now()
    at_url: float | None = None
    count = _captured(store)
    changed = ctx.now()
    grew = False
    next_wake = start
    while ctx.now() - start < CAPTURE_WAIT:
        now = ctx.now()
        seen = _captured(store)
        if seen != count:
            count, changed, grew = seen, now, True  # the new browser captures only its page
        if at_url is None:
            settings = link.settings or {}
            last = link.last_sync
            shown = str(settings.get("tracked_tab_url") or "")
            if link.connected and last is not None and last > start and (
                    url == "about:blank" or (shown and not shown.startswith("about:"))):
                at_url = now
            elif now >= next_wake:
                link.commands.wake()  # a held sync from before the navigation: answer it
                next_wake = now + 0.5
        elif (grew and now - changed >= CAPTURE_QUIET) or (
                not grew and now - at_url >= CAPTURE_FIRST):
            return True, int((now - start) * 1000)
        await deferLater(ctx.clock, _CAPTURE_POLL, lambda: None)
    return False, int((ctx.now() - start) * 1000)

"""
C{interact record_start} / C{record_stop}: the tab recorded as screenshot frames on a timer plus the
buffers' timeline, written under the state dir per client (docs/analyze-generate-interact.md).
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from typing import Any

import attrs
import orjson
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from gasoline.analysis import media
from gasoline.analysis._util import entry_time, iso
from gasoline.core import paths
from gasoline.core.errors import GasolineError
from gasoline.core.storage.files import thread_runner
from gasoline.core.storage.store import ACTIONS, CONSOLE, NETWORK_BODIES
from gasoline.tools._shared import (
    as_dict,
    heads,
    page_url,
    since,
)
from gasoline.tools.context import reserved_dict, store_reserved_dict

log = Logger()


SCREEN_RECORDINGS_KEY = "interact:screen_recordings"


MAX_SCREEN_RECORDINGS = 20


MAX_ACTIVE_RECORDINGS = 4


DEFAULT_FPS = 1.0


MAX_FPS = 2.0


DEFAULT_RECORD_SECONDS = 120


MAX_RECORD_SECONDS = 600


MAX_FRAMES = 600


FRAME_TIMEOUT = 15.0


MAX_FRAME_FAILURES = 5


TIMELINE_LIMIT = 500


@attrs.define(eq=False)
class ScreenRecording:
    """One client's running frame recording of the tracked tab."""

    id: str
    client_id: str
    name: str | None
    directory: Path
    started_at: float
    interval: float
    deadline: float
    quality: int
    tab_id: int | None
    url: str | None
    heads: dict[str, int]
    frames: list[dict[str, Any]] = attrs.field(factory=list)
    skipped: int = 0
    failures: int = 0
    errors: list[str] = attrs.field(factory=list)
    timer: IDelayedCall | None = None
    done: bool = False
    finished: Deferred[Any] | None = None

    def add_frame(self, frame: dict[str, Any]) -> None:
        """A frame was captured (the run of failed captures ends)."""
        self.frames.append(frame)
        self.failures = 0

    def skip_frame(self) -> None:
        """No frame this time: the tab was not visible."""
        self.skipped += 1

    def frame_failed(self, text: str) -> int:
        """A capture failed (why: C{text}, the first 20 kept); the failures in a row now."""
        self.failures += 1
        if len(self.errors) < 20:
            self.errors.append(text[:300])
        return self.failures

    def wait(self, timer: IDelayedCall | None) -> None:
        """The next frame is due when C{timer} fires (C{None}: it fired)."""
        self.timer = timer

    def stop(self) -> None:
        """No more frames: the pending one is cancelled."""
        self.done = True
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None

    def finishing(self, written: Deferred[Any]) -> Deferred[Any]:
        """C{written} fires with the manifest once it is written (what a second stop gets)."""
        self.finished = written
        return written


def _active(ctx: Any) -> dict[str, ScreenRecording]:
    return ctx.runtime.screen_recordings


def _recording_index(ctx: Any) -> dict[str, Any]:
    return reserved_dict(ctx, SCREEN_RECORDINGS_KEY)


def _state_dir(ctx: Any) -> Path:
    return Path(ctx.app.config.state_dir)


def _frame(ctx: Any, rec: ScreenRecording) -> Deferred:
    """Ask for one screenshot of the recorded tab and move it into the recording's folder."""
    params = {"format": "jpeg", "quality": rec.quality, "if_active": True}
    d = ctx.router_call("screenshot", params, timeout=FRAME_TIMEOUT, tab_id=rec.tab_id)

    def got(result: Any) -> bool:
        r = as_dict(result)
        path = media.screenshot_file(_state_dir(ctx), r.get("path"))
        if rec.done:
            return False
        n = len(rec.frames) + 1
        moved = media.move_into(path, rec.directory / f"frame-{n:05d}{path.suffix}")
        frame: dict[str, Any] = {"index": n, "file": moved.name,
                                 "t": round(ctx.now() - rec.started_at, 3)}
        if isinstance(r.get("url"), str):
            frame["url"] = r["url"][:2000]
        rec.add_frame(frame)
        return True

    return d.addCallback(got)


def _schedule(ctx: Any, rec: ScreenRecording) -> None:
    if rec.done:
        return
    if ctx.now() + rec.interval > rec.deadline or len(rec.frames) >= MAX_FRAMES:
        why = "frame limit" if len(rec.frames) >= MAX_FRAMES else "max_seconds"
        _finish(ctx, rec, f"stopped automatically ({why} reached)").addErrback(
            lambda f: log.failure("finishing screen recording {id}", f, id=rec.id))
        return
    rec.wait(ctx.clock.callLater(rec.interval, _tick, ctx, rec))


def _tick(ctx: Any, rec: ScreenRecording) -> None:
    rec.wait(None)
    if rec.done:
        return

    def failed(failure: Any) -> None:
        err = failure.value
        text = (err.message if isinstance(err, GasolineError) else "") or str(err) \
            or type(err).__name__
        if "tab_not_visible" in text:
            rec.skip_frame()
            return
        if not isinstance(err, (GasolineError, OSError)):
            log.failure("screen recording {id} frame", failure, id=rec.id)
        failures = rec.frame_failed(text)
        if failures >= MAX_FRAME_FAILURES and not rec.done:
            _finish(ctx, rec, f"stopped after {failures} failed captures in a row").addErrback(
                lambda f: log.failure("finishing screen recording {id}", f, id=rec.id))

    d = _frame(ctx, rec)
    d.addErrback(failed)
    d.addCallback(lambda _: _schedule(ctx, rec))


def _entry_summary(kind: str, e: dict[str, Any]) -> dict[str, Any]:
    if kind == "action":
        keep: tuple[str, ...] = ("type", "source", "url", "to_url", "value", "key", "client_id")
    elif kind == "console":
        keep = ("level", "type", "message", "url")
    else:
        keep = ("method", "url", "status", "duration")
    out: dict[str, Any] = {"kind": kind}
    for key in keep:
        value = e.get(key)
        if isinstance(value, str):
            out[key] = value[:300]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value
    if kind == "action" and isinstance(e.get("selectors"), dict):
        out["selectors"] = {k: v for k, v in e["selectors"].items()
                            if k in ("css", "testId", "text", "role", "ariaLabel")}
    return out


def _timeline(ctx: Any, rec: ScreenRecording) -> tuple[list[dict[str, Any]], dict[str, int]]:
    items: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for buffer, kind in ((ACTIONS, "action"), (CONSOLE, "console"), (NETWORK_BODIES, "network")):
        entries, _missed, _head = since(ctx, buffer, rec.heads.get(buffer, 0), TIMELINE_LIMIT)
        counts[kind] = len(entries)
        for e in entries:
            item = _entry_summary(kind, e)
            at = entry_time(e)
            item["at"] = iso(at)
            item["t"] = round(at - rec.started_at, 3) if at is not None else None
            items.append(item)
    items.sort(key=lambda i: (i["t"] is None, i["t"] if i["t"] is not None else 0))
    return items, counts


def _write_manifest(directory: Path, manifest: dict[str, Any]) -> Path:
    return media.write_new(directory / "manifest.json",
                           orjson.dumps(manifest, option=orjson.OPT_INDENT_2, default=str))


def _remove_tree(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def _finish(ctx: Any, rec: ScreenRecording, reason: str) -> Deferred:
    """Stop C{rec}, write its manifest (frames + timeline) and index it in the client's state."""
    if rec.finished is not None:
        return rec.finished
    rec.stop()
    active = _active(ctx)
    if active.get(rec.client_id) is rec:
        del active[rec.client_id]
    stopped = ctx.now()
    timeline, counts = _timeline(ctx, rec)
    manifest = {
        "recording_id": rec.id, "name": rec.name, "url": rec.url, "tab_id": rec.tab_id,
        "started_at": iso(rec.started_at), "stopped_at": iso(stopped),
        "duration_seconds": round(stopped - rec.started_at, 3),
        "fps": round(1.0 / rec.interval, 3), "stop_reason": reason,
        "directory": str(rec.directory), "frame_count": len(rec.frames),
        "skipped_frames": rec.skipped, "errors": rec.errors, "frames": rec.frames,
        "timeline_counts": counts, "timeline": timeline,
    }
    index = _recording_index(ctx)
    index[rec.id] = {"recording_id": rec.id, "name": rec.name, "url": rec.url,
                     "started_at": manifest["started_at"], "stopped_at": manifest["stopped_at"],
                     "frame_count": len(rec.frames), "stop_reason": reason,
                     "manifest": str(rec.directory / "manifest.json")}
    evicted = []
    while len(index) > MAX_SCREEN_RECORDINGS:
        oldest = next(iter(index))
        evicted.append(Path(str(index.pop(oldest).get("manifest", ""))).parent)
    store_reserved_dict(ctx, SCREEN_RECORDINGS_KEY, index)
    run = thread_runner(ctx.app.clock)

    async def write() -> dict[str, Any]:
        await run(_write_manifest, rec.directory, manifest)
        root = paths.real(_state_dir(ctx) / media.SCREEN_RECORDINGS_DIR)
        for directory in evicted:
            if paths.inside(paths.real(directory), root) and paths.real(directory) != root:
                await run(_remove_tree, directory)
        return manifest

    return rec.finishing(Deferred.fromCoroutine(write()))


def _recording_result(ctx: Any, manifest: dict[str, Any], summary: str) -> dict[str, Any]:
    shown = dict(manifest)
    timeline = raw_timeline if isinstance(raw_timeline := shown.get("timeline"), list) else []
    shown["timeline"] = timeline[:100]
    shown["timeline_truncated"] = len(timeline) > 100
    frames = raw_frames if isinstance(raw_frames := shown.get("frames"), list) else []
    shown["frames"] = frames[:100]
    shown["frames_truncated"] = len(frames) > 100
    shown["manifest"] = str(Path(str(manifest.get("directory", ""))) / "manifest.json")
    return ctx.ok(summary, shown)


def record_start(ctx: Any, args: dict[str, Any]) -> Deferred:
    """Record the tracked tab as JPEG frames (C{captureVisibleTab} through the C{screenshot}
    command, at most C{fps} a second) plus the actions/console/network timeline of the window."""
    active = _active(ctx)
    running = active.get(ctx.client_id)
    if running is not None:
        raise GasolineError(f"you are already recording ({running.id}); call interact "
                            "{what:\"record_stop\"} first", code="already_recording",
                            recording_id=running.id)
    if len(active) >= MAX_ACTIVE_RECORDINGS:
        raise GasolineError(f"{len(active)} screen recordings are running (the limit); try again "
                            "when one stops", code="too_many_recordings")
    name = ctx.str_arg(args, "name")
    if name is not None:
        media.valid_name(name)
    fps = ctx.num_arg(args, "fps", DEFAULT_FPS, 0.1, MAX_FPS)
    seconds = ctx.int_arg(args, "max_seconds", DEFAULT_RECORD_SECONDS, 1, MAX_RECORD_SECONDS)
    quality = ctx.int_arg(args, "quality", 60, 10, 100)
    tab_id = ctx.int_arg(args, "tab_id", None, 0, 2**53)
    now = ctx.now()
    rec_id = "rec_" + secrets.token_hex(6)
    rec = ScreenRecording(
        id=rec_id, client_id=ctx.client_id, name=name,
        directory=media.client_dir(_state_dir(ctx), media.SCREEN_RECORDINGS_DIR, ctx.client_id)
        / rec_id,
        started_at=now, interval=1.0 / fps, deadline=now + seconds, quality=quality,
        tab_id=tab_id, url=page_url(ctx), heads=heads(ctx))
    active[ctx.client_id] = rec

    def started(_: Any) -> dict[str, Any]:
        _schedule(ctx, rec)
        return ctx.ok(f"recording {rec.id} started ({fps:g} frame(s)/s at most, up to {seconds} s); "
                      "stop it with interact {what:\"record_stop\"}",
                      {"recording_id": rec.id, "name": name, "directory": str(rec.directory),
                       "fps": fps, "max_seconds": seconds, "first_frame": rec.frames[0]
                       if rec.frames else None, "url": rec.url})

    def refused(failure: Any) -> Any:
        rec.stop()
        if active.get(ctx.client_id) is rec:
            del active[ctx.client_id]
        return failure

    return _frame(ctx, rec).addCallbacks(started, refused)


def record_stop(ctx: Any, args: dict[str, Any]) -> Deferred:
    rec = _active(ctx).get(ctx.client_id)
    wanted = ctx.str_arg(args, "recording_id")
    if rec is not None and (wanted is None or wanted == rec.id):
        d = _finish(ctx, rec, "stopped by record_stop")
        return d.addCallback(lambda m: _recording_result(
            ctx, m, f"recording {rec.id} stopped: {m['frame_count']} frame(s), "
            f"{len(m['timeline'])} timeline event(s); frames and manifest.json in {rec.directory}"))
    index = _recording_index(ctx)
    if wanted is None:
        if not index:
            raise GasolineError("you have no screen recording running or saved", code="no_data",
                                retry="Start one with interact {what:\"record_start\"}.")
        wanted = next(reversed(index))
    entry = index.get(wanted)
    if not isinstance(entry, dict) or not isinstance(entry.get("manifest"), str):
        raise GasolineError(f"no screen recording {wanted!r} of yours", code="no_data",
                            param="recording_id", valid=list(index)[-20:])
    path = Path(entry["manifest"])
    root = paths.real(_state_dir(ctx) / media.SCREEN_RECORDINGS_DIR)
    if not paths.inside(paths.real(path), root):
        raise GasolineError(f"screen recording {wanted!r} is not readable", code="no_data")

    def read() -> dict[str, Any]:
        try:
            value = orjson.loads(media.read_bounded(path, 64 * 1024 * 1024, "recording_id"))
        except (OSError, orjson.JSONDecodeError, GasolineError):
            raise GasolineError(f"the manifest of screen recording {wanted!r} is gone or "
                                "unreadable", code="no_data", param="recording_id") from None
        if not isinstance(value, dict):
            raise GasolineError(f"the manifest of {wanted!r} is not an object", code="no_data")
        return value

    d = thread_runner(ctx.app.clock)(read)
    return d.addCallback(lambda m: _recording_result(
        ctx, m, f"screen recording {wanted} ({m.get('stop_reason')}): "
        f"{m.get('frame_count', 0)} frame(s)"))

"""
C{--log-dir}: the daemon's log files::

    <log-dir>/
      server.log            the daemon's own log: lifecycle, sessions, failed tool calls,
                            the extension coming and going, limits hit (one JSON object a line)
      clients/<id>.log      one line per tool_call and tool_result of that client: arguments
                            redacted, result sizes and counts, never result bodies
      shared/console.log    browser console entries as the extension sent them
      shared/network.log    network bodies and waterfall entries
      shared/websocket.log  WebSocket events

Every file is created 0600 in 0700 directories (they hold page data and client ids). A file
rotates by renaming it to C{<name>.<UTC time>.log} beside itself, and a new one starts:

 - client logs when the client's last session closes, or at C{client_max_bytes} (10 MB);
 - shared logs every C{shared_max_age} seconds (an hour) or at C{shared_max_bytes} (50 MB);
 - C{server.log} at C{server_max_bytes} (10 MB).

Rotated files older than C{retention} (7 days, by modification time on the daemon's clock) are
deleted by an hourly timer. All file work (opening, writing, renaming, deleting) runs on one
dedicated worker thread, in order; the reactor thread only hands it lines (and, for the shared
logs, the batches the store already published), so a slow disk never stalls ingest or a tool call.
Tests pass C{run=run_inline} and a C{task.Clock} to do the same work synchronously.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import orjson
from twisted.application.service import MultiService
from twisted.internet.interfaces import IReactorTime
from twisted.logger import ILogObserver, LogLevel, formatEvent
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from gasoline.common import is_factory_chatter, make_private_dir, rfc3339
from gasoline.core.lifecycle import ClockedTimer
from gasoline.core.storage.store import (
    CONSOLE,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from gasoline.core.interfaces import IClientRegistry
    from gasoline.mcp.session import McpSession

MB = 1_000_000
#: Which shared log each buffer's writes go to.
SHARED_LOGS = {
    CONSOLE: "shared/console.log",
    NETWORK_BODIES: "shared/network.log",
    WATERFALL: "shared/network.log",
    WEBSOCKET_EVENTS: "shared/websocket.log",
}
SERVER_LOG = "server.log"
#: A rotated file: C{<stem>.<YYYYmmddTHHMMSS>[-n].log}.
ROTATED = re.compile(r"^.+\.\d{8}T\d{6}(?:-\d+)?\.log$")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@attrs.frozen
class LogLimits:
    """Rotation and retention (C{docs/operations.md}); every field has a command-line option."""

    client_max_bytes: int = 10 * MB
    shared_max_bytes: int = 50 * MB
    shared_max_age: float = 3600.0
    server_max_bytes: int = 10 * MB
    retention: float = 7 * 86400.0
    #: How often the retention sweep runs.
    sweep_interval: float = 3600.0


def run_inline(f: Callable[..., Any], *args: Any) -> None:
    """The synchronous runner (tests): do the file work at once on the calling thread."""
    f(*args)


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y%m%dT%H%M%S")


class _File:
    """One log file, owned by the worker thread."""

    def __init__(self, path: Path, max_bytes: int, max_age: float | None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.fd: int | None = None
        self.size = 0
        self.opened_at = 0.0

    def write(self, data: bytes, now: float) -> None:
        if self.fd is not None and self.size and (
            self.size + len(data) > self.max_bytes
            or (self.max_age is not None and now - self.opened_at >= self.max_age)
        ):
            self.rotate(now)
        if self.fd is None:
            make_private_dir(self.path.parent)
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                              0o600)
            self.size = os.fstat(self.fd).st_size
            self.opened_at = now
            if self.size and self.max_age is not None:
                # A file left by the previous run: its age counts from its last write.
                self.opened_at = min(now, os.fstat(self.fd).st_mtime)
        os.write(self.fd, data)
        self.size += len(data)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def rotate(self, now: float) -> Path | None:
        """Rename the file to its rotated name; the next write starts a new one."""
        self.close()
        if not self.path.exists() or self.path.stat().st_size == 0:
            return None
        stem = self.path.name[:-4] if self.path.name.endswith(".log") else self.path.name
        target = self.path.with_name(f"{stem}.{_stamp(now)}.log")
        n = 1
        while target.exists():
            target = self.path.with_name(f"{stem}.{_stamp(now)}-{n}.log")
            n += 1
        os.rename(self.path, target)
        os.utime(target, (now, now))
        self.size = 0
        return target


class LogFiles:
    """The files under C{log_dir} and the work on them; see the module docstring.

    Every public method runs on the reactor thread and only queues work for the runner.
    """

    def __init__(self, log_dir: Path, clock: IReactorTime, limits: LogLimits = LogLimits(),
                 run: Callable[..., Any] = run_inline) -> None:
        self.log_dir = Path(log_dir)
        self.clock = clock
        self.limits = limits
        self._runner = run
        self._files: dict[str, _File] = {}
        #: Lines handed to the worker (tests, C{/metrics} could read it).
        self.lines = 0
        #: Closed (the service stopped): what the daemon still reports is not written.
        self.closed = False

    def _run(self, fn: Callable[..., Any], *args: Any) -> None:
        if not self.closed:
            self._runner(fn, *args)

    def open(self) -> None:
        """Take writes again (the service started)."""
        self.closed = False

    # -- reactor side ----------------------------------------------------------------------------

    def write(self, relpath: str, record: dict[str, Any]) -> None:
        """Append C{record} (a JSON object; C{ts} is added) to the file at C{relpath}."""
        now = self.clock.seconds()
        self.lines += 1
        self._run(self._write_records, relpath, [record], now)

    def client_log(self, client_id: str) -> str:
        return f"clients/{_SAFE.sub('_', client_id) or '_'}.log"

    def rotate(self, relpath: str) -> None:
        self._run(self._rotate, relpath, self.clock.seconds())

    def sweep(self) -> None:
        """Delete rotated files older than the retention (on the worker)."""
        self._run(self._sweep, self.clock.seconds())

    def close(self) -> None:
        self._run(self._close)
        self.closed = True

    # -- worker side -----------------------------------------------------------------------------

    def _file(self, relpath: str) -> _File:
        f = self._files.get(relpath)
        if f is None:
            limits = self.limits
            if relpath.startswith("clients/"):
                f = _File(self.log_dir / relpath, limits.client_max_bytes, None)
            elif relpath.startswith("shared/"):
                f = _File(self.log_dir / relpath, limits.shared_max_bytes, limits.shared_max_age)
            else:
                f = _File(self.log_dir / relpath, limits.server_max_bytes, None)
            self._files[relpath] = f
        return f

    def _write_records(self, relpath: str, records: list[dict[str, Any]], now: float) -> None:
        ts = rfc3339(now)
        out = []
        for record in records:
            try:
                out.append(orjson.dumps({"ts": ts, **record}, default=str,
                                        option=orjson.OPT_NON_STR_KEYS))
            except (TypeError, orjson.JSONEncodeError):
                out.append(orjson.dumps({"ts": ts, "unencodable": True}))
        out.append(b"")
        try:
            self._file(relpath).write(b"\n".join(out), now)
        except OSError as e:
            # Never raise into the worker; say so once per file on stderr-backed twistd log.
            _warn(f"gasoline: cannot write {self.log_dir / relpath}: {e}")

    def _write_entries(self, relpath: str, buffer: str, first_seq: int,
                       entries: tuple[dict[str, Any], ...], now: float) -> None:
        self._write_records(relpath, [
            {"buffer": buffer, "seq": first_seq + i, "entry": e} for i, e in enumerate(entries)
        ], now)

    def _rotate(self, relpath: str, now: float) -> None:
        f = self._files.pop(relpath, None)
        if f is None:
            f = self._file(relpath)
            del self._files[relpath]
        try:
            f.rotate(now)
        except OSError as e:
            _warn(f"gasoline: cannot rotate {f.path}: {e}")

    def _sweep(self, now: float) -> list[Path]:
        horizon = now - self.limits.retention
        removed = []
        for folder in (self.log_dir, self.log_dir / "clients", self.log_dir / "shared"):
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                if not ROTATED.match(name):
                    continue
                path = folder / name
                try:
                    if path.stat().st_mtime < horizon:
                        path.unlink()
                        removed.append(path)
                except OSError:
                    continue
        return removed

    def _close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()

    # -- shared logs from the store's writes -----------------------------------------------------

    def buffer_written(self, event: Any) -> None:
        """A L{gasoline.core.storage.store.BufferWrite}: copy its entries to the buffer's shared log."""
        relpath = SHARED_LOGS.get(event.buffer)
        if relpath is None:
            return
        self.lines += len(event.entries)
        self._run(self._write_entries, relpath, event.buffer, event.first_seq, event.entries,
                  event.at)


def _warn(text: str) -> None:
    try:
        os.write(2, (text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


@implementer(ILogObserver)
class ServerLogObserver:
    """Twisted log events -> C{server.log} lines: C{{ts, level, source, text[, error]}}, the
    text as a person reads it, not Twisted's raw event dict; factory chatter dropped."""

    def __init__(self, files: LogFiles, min_level: LogLevel = LogLevel.info) -> None:
        self.files = files
        self.min_level = min_level

    def __call__(self, event: dict[str, Any]) -> None:
        level = event.get("log_level", LogLevel.info)
        if level < self.min_level:
            return
        if is_factory_chatter(event):
            return
        text = formatEvent(event)
        if not text and "log_text" in event:
            text = str(event["log_text"])
        record: dict[str, Any] = {
            "level": getattr(level, "name", str(level)),
            "source": _source(event),
            "text": text,
        }
        failure = event.get("log_failure")
        if failure is not None:
            try:
                record["error"] = failure.getTraceback()
            except Exception:  # a broken failure must not break logging
                record["error"] = repr(failure)
        self.files.write(SERVER_LOG, record)


def _source(event: dict[str, Any]) -> str:
    namespace = event.get("log_namespace")
    if not namespace or namespace == "log_legacy":
        system = event.get("log_system") or event.get("system")
        return str(system) if system and system != "-" else "twisted"
    return str(namespace)


class ClientLogs:
    """Per-client logs: a L{gasoline.mcp.tools.ToolRegistry} observer and an MCP session
    observer (rotation when a client's last session closes)."""

    def __init__(self, files: LogFiles, registry: IClientRegistry | None = None) -> None:
        self.files = files
        self.registry = registry

    def tool_call(self, client_id: str, tool: str, mode: str | None, params: Any) -> None:
        self.files.write(self.files.client_log(client_id or "anonymous"), {
            "client": client_id, "type": "tool_call", "tool": tool, "what": mode,
            "args": params,
        })

    def tool_result(self, client_id: str, tool: str, mode: str | None, outcome: str, ms: float,
                    result: Any) -> None:
        record: dict[str, Any] = {"client": client_id, "type": "tool_result", "tool": tool,
                                  "what": mode, "outcome": outcome, "ms": ms}
        record.update(_result_size(result))
        self.files.write(self.files.client_log(client_id or "anonymous"), record)

    def audit_event(self, client_id: str, record: dict[str, Any]) -> None:
        """An audit record that is not a tool call (proxy sessions and their servers)."""
        self.files.write(self.files.client_log(client_id or "anonymous"), {
            "client": client_id, "type": "audit_event", **record})

    def session_opened(self, session: McpSession) -> None:
        pass

    def session_closed(self, session: McpSession) -> None:
        state = self.registry.get(session.client_id) if self.registry is not None else None
        if state is None or state.connections == 0:
            self.files.rotate(self.files.client_log(session.client_id))


def _result_size(result: Any) -> dict[str, Any]:
    """Sizes, not bodies: bytes of text, and the entry count the result's JSON reports."""
    if not isinstance(result, dict):
        return {}
    content = result.get("content")
    if not isinstance(content, list):
        return {}
    size = 0
    entries = None
    for block in content:
        if not isinstance(block, dict):
            continue
        text = block.get("text")
        if isinstance(text, str):
            size += len(text)
            if entries is None:
                entries = _count_of(text)
        elif isinstance(block.get("data"), str):
            size += len(block["data"])
    out: dict[str, Any] = {"bytes": size}
    if entries is not None:
        out["entries"] = entries
    return out


_COUNT = re.compile(r'"(?:count|total)":(\d{1,12})[,}]')


def _count_of(text: str) -> int | None:
    m = _COUNT.search(text, 0, 4096) if len(text) > 0 else None
    return int(m.group(1)) if m else None


class LogService(MultiService):
    """C{--log-dir} as a service: the worker thread, the server-log observer on C{publisher},
    and the retention timer. Its C{files} are given to L{gasoline.app.build} (C{log_files}), which
    feeds them the store's writes (shared logs) and, through L{ClientLogs} passed to the tool
    registry and the MCP server as they are built, each client's tool calls and session ends.
    Once stopped, nothing more is written."""

    def __init__(self, log_dir: Path, clock: IReactorTime, *, limits: LogLimits = LogLimits(),
                 publisher: Any = None, thread: bool = True) -> None:
        super().__init__()
        self._pool = None
        run: Callable[..., None] = run_inline
        if thread:
            # One thread: writes stay in order and no two threads touch a file.
            self._pool = ThreadPool(minthreads=1, maxthreads=1, name="gasoline-logs")
            run = self._pool.callInThread
        self.files = LogFiles(log_dir, clock, limits, run)
        self.observer = ServerLogObserver(self.files)
        self._publisher = publisher
        ClockedTimer(limits.sweep_interval, clock, self.files.sweep).setServiceParent(self)

    def startService(self) -> None:
        # Once, at start-up, before the reactor serves anything.
        make_private_dir(self.files.log_dir)
        self.files.open()
        if self._pool is not None:
            self._pool.start()
        if self._publisher is not None:
            self._publisher.addObserver(self.observer)
        super().startService()

    def stopService(self) -> Deferred[None] | None:
        d = super().stopService()
        if self._publisher is not None:
            self._publisher.removeObserver(self.observer)
        self.files.close()
        if self._pool is not None:
            self._pool.stop()  # joins the worker once its queue is written
        return d


__all__ = ["LogFiles", "LogLimits", "LogService", "ServerLogObserver", "ClientLogs",
           "run_inline"]

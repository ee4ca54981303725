"""
Small daemon-wide JSON documents in the state dir (today: the global noise rules).

A L{JsonDocument} is read once when the daemon starts and written by a timer when it was marked
dirty (and once more when its service stops), never inside a request, the same way client states
are (L{gasoline.core.clients}). Writes are atomic (a temporary file renamed over the old one) and
private (mode 0600); an unreadable or corrupt file is logged and ignored, never fatal.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import orjson
from twisted.application.internet import TimerService
from twisted.application.service import Service
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

log = Logger()

#: Seconds between checks for a dirty document.
FLUSH_INTERVAL = 2.0


def write_private(path: Path, body: bytes) -> None:
    """Replace C{path} atomically with C{body}, readable by this user only (0600).

    The bytes go to a sibling temporary file (created 0600, never following a link) that is then
    renamed over C{path}: a reader sees the old or the new content, never a torn one.

    @raise OSError: the write or the rename failed (the temporary file is removed).
    """
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@attrs.define(eq=False)
class JsonDocument:
    """One JSON file; C{encode()} returns what to write (a JSON-serialisable value)."""

    path: Path
    encode: Callable[[], Any]
    #: Check on every tick whether C{encode()} changed (no L{mark_dirty} needed; a value that
    #: changes all the time, like a sequence number, is still written at most once per tick).
    poll: bool = False
    _dirty: bool = attrs.field(default=False, init=False)
    _written: bytes | None = attrs.field(default=None, init=False)

    def load(self) -> Any:
        """The stored value, or C{None} when there is none (or it cannot be read)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError:
            log.failure("could not read {path}", path=str(self.path))
            return None
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            log.warn("ignoring {path}: not valid JSON", path=str(self.path))
            return None
        self._written = raw
        return value

    def mark_dirty(self) -> None:
        self._dirty = True

    def flush(self, force: bool = False) -> bool:
        """Write the document if it changed since the last write; return whether it wrote."""
        if not (force or self._dirty or self.poll):
            return False
        self._dirty = False
        try:
            body = orjson.dumps(self.encode(), option=orjson.OPT_SORT_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            log.failure("{path} is not JSON-serialisable", path=str(self.path))
            return False
        if body == self._written:
            return False
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_private(self.path, body)
        except OSError:
            log.failure("could not write {path}", path=str(self.path))
            self._dirty = True  # try again on the next tick
            return False
        self._written = body
        return True

    def service(self, clock: IReactorTime, interval: float = FLUSH_INTERVAL) -> Service:
        """A timer service flushing this document (and once more when it stops)."""
        return _FlushService(self, clock, interval)


class _FlushService(TimerService):
    def __init__(self, document: JsonDocument, clock: IReactorTime, interval: float) -> None:
        super().__init__(interval, self._tick)
        self.clock = clock
        self._document = document

    def _tick(self) -> None:
        try:
            self._document.flush()
        except Exception:
            log.failure("flushing {path} failed", path=str(self._document.path))

    def stopService(self):
        d = super().stopService()
        self._document.flush()
        return d

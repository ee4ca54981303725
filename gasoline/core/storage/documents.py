"""
Small daemon-wide JSON documents in the state dir (today: the global noise rules).

A L{JsonDocument} is read once when the daemon starts and written by a timer when it was marked
dirty (and once more when its service stops), never inside a request, the same way client states
are (L{gasoline.core.clients.registry}). Writes are atomic (a temporary file renamed over the old one) and
private (mode 0600); an unreadable or corrupt file is moved aside with one log line naming it
and the fix (L{gasoline.core.storage.files.set_aside}), never fatal.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

import attrs
import orjson
from twisted.application.internet import TimerService
from twisted.application.service import Service
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gasoline.common import read_nofollow
from gasoline.core.storage.atrest import MAGIC
from gasoline.core.storage.files import (
    DiskHealth,
    describe,
    make_private_dir,
    set_aside,
    unreadable,
    write_atomic,
)

log = Logger()

#: Seconds between checks for a dirty document.
FLUSH_INTERVAL = 2.0


@attrs.define(eq=False)
class JsonDocument:
    """One JSON file; C{encode()} returns what to write (a JSON-serialisable value)."""

    path: Path
    encode: Callable[[], Any]
    #: Check on every tick whether C{encode()} changed (no L{mark_dirty} needed; a value that
    #: changes all the time, like a sequence number, is still written at most once per tick).
    poll: bool = False
    #: Where a failing write is reported (logged once with a back-off; C{configure doctor}).
    health: DiskHealth | None = None
    #: What the daemon goes on without when the file is corrupt (said in the one log line).
    what: str = "what it held"
    #: C{--state-key-file}: the file is sealed (L{gasoline.core.storage.atrest}).
    at_rest: Any = None
    _dirty: bool = attrs.field(default=False, init=False)
    _written: bytes | None = attrs.field(default=None, init=False)
    _error: str | None = attrs.field(default=None, init=False)

    def load(self) -> Any:
        """The stored value, or C{None} when there is none (or it cannot be read)."""
        try:
            raw = read_nofollow(self.path)
        except FileNotFoundError:
            return None
        except OSError as e:
            unreadable(self.path, describe(e), self.what)
            return None
        sealed = self.at_rest is not None and raw.startswith(MAGIC)
        if sealed:
            opened = self.at_rest.open_blob(raw, b"document")
            if opened is None:
                log.warn("ignoring {path}: it does not open with the state key", path=str(self.path))
                return None
            raw = opened
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            set_aside(self.path, "not valid JSON", self.what)
            return None
        # A file written in clear before the key is rewritten sealed at the next flush.
        self._written = raw if sealed or self.at_rest is None else None
        return value

    def unusable(self, why: str) -> None:
        """The value L{load} returned is not the document's shape: set the file aside."""
        self._written = None
        set_aside(self.path, why, self.what)

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
            make_private_dir(self.path.parent)
            write_atomic(self.path, body if self.at_rest is None
                         else self.at_rest.seal_blob(body, b"document"))
        except OSError as e:
            self._error = describe(e)
            if self.health is not None:
                self.health.failed(self.path.name, self.path, e)
            else:
                log.warn("could not write {path}: {why}", path=str(self.path), why=self._error)
            self._dirty = True  # try again on the next tick
            return False
        self._error = None
        if self.health is not None:
            self.health.succeeded(self.path.name)
        self._written = body
        return True

    def save_now(self) -> str | None:
        """Write the document now if it changed (one small atomic write, as the timer does);
        return why it could not be written, else C{None}. For answers that promise persistence."""
        self._dirty = True
        self.flush()
        return self._error if self._dirty else None

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

    def stopService(self) -> Deferred[None] | None:
        d = super().stopService()
        self._document.flush()
        return d

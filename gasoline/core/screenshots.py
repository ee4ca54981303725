"""
Screenshots kept in the state dir: what the extension uploads (C{POST /screenshots}) and what
C{observe {what:"screenshot"}} receives inline from a capture command.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs

from gasoline.core.errors import GasolineError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]+")


@attrs.define(eq=False)
class ScreenshotStore:
    """Writes images under C{<state_dir>/screenshots/}, one new file each (mode 0600)."""

    state_dir: Path = attrs.field(converter=Path)

    @property
    def directory(self) -> Path:
        return self.state_dir / "screenshots"

    def save(self, image: bytes, ext: str, url: Any, correlation_id: Any, now: float) -> Path:
        """Write C{image} to a new file named after the page's host and the time; one small write.

        @param ext: the file extension (C{png}, C{jpg}, ...).
        @param url: the page the image shows (its host names the file), or anything else.
        @param correlation_id: an error or command id to add to the name, if a string.
        @param now: the capture time (seconds since the epoch).
        @return: the path written.
        @raise GasolineError: no free file name (C{screenshot_failed}).
        """
        directory = self.directory
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        host = urlsplit(url).hostname if isinstance(url, str) else None
        stamp = (datetime.fromtimestamp(now, timezone.utc).strftime("%Y%m%d-%H%M%S")
                 + f"-{int(now * 1000) % 1000:03d}")
        parts = [_UNSAFE.sub("_", host or "page")[:60], stamp]
        if isinstance(correlation_id, str) and correlation_id:
            parts.append(_UNSAFE_ID.sub("_", correlation_id)[:60])
        base = "-".join(parts)
        for n in range(1000):
            name = f"{base}.{ext}" if n == 0 else f"{base}-{n}.{ext}"
            path = directory / name
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "wb") as f:
                f.write(image)
            return path
        raise GasolineError("could not pick a screenshot file name", code="screenshot_failed")

"""
Screenshots kept in the state dir: what the extension uploads (C{POST /screenshots}) and what
C{observe {what:"screenshot"}} receives inline from a capture command.
"""

from __future__ import annotations

import base64
import re
from collections import OrderedDict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs

from gasoline.core.errors import GasolineError
from gasoline.core.storage.files import DiskHealth, describe, make_private_dir, write_new

#: The largest image a tool result carries inline, in base64 characters (about 750 KB of image):
#: MCP clients refuse or drop larger image blocks. Bigger screenshots are inlined from the
#: scaled-down preview the extension sends with them (long edge at most 1568 px, JPEG).
MAX_INLINE_IMAGE_CHARS = 1_000_000
#: Screenshots whose inline image is kept in memory for the tool call waiting for them.
MAX_PREVIEWS = 8
MIME_OF_EXT = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "webp": "image/webp"}


def image_content(image: bytes, mime: str) -> dict[str, Any] | None:
    """An MCP C{image} content block of C{image}, or None when it is larger than
    L{MAX_INLINE_IMAGE_CHARS} in base64 (or empty)."""
    if not image or (len(image) + 2) // 3 * 4 > MAX_INLINE_IMAGE_CHARS:
        return None
    return {"type": "image", "data": base64.b64encode(image).decode("ascii"), "mimeType": mime}


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]+")


class ScreenshotNotSaved(GasolineError):
    """A screenshot file could not be written: the HTTP answer is 507 Insufficient Storage."""

    http_status = 507


@attrs.define(eq=False)
class ScreenshotStore:
    """Writes images under C{<state_dir>/screenshots/}, one new file each (mode 0600)."""

    state_dir: Path = attrs.field(converter=Path)
    #: Where a failing write is reported (logged once with a back-off; C{configure doctor}).
    health: DiskHealth | None = None
    #: path -> (image, MIME type): what a tool result inlines for a recent screenshot (bounded).
    _previews: OrderedDict = attrs.field(factory=OrderedDict, init=False, repr=False)

    def keep_preview(self, path: Path, image: bytes, mime: str) -> None:
        """Remember the inline image for the screenshot saved at C{path} (at most
        L{MAX_PREVIEWS}; an image over L{MAX_INLINE_IMAGE_CHARS} is not kept)."""
        if not image or (len(image) + 2) // 3 * 4 > MAX_INLINE_IMAGE_CHARS:
            return
        self._previews[str(path)] = (image, mime)
        self._previews.move_to_end(str(path))
        while len(self._previews) > MAX_PREVIEWS:
            self._previews.popitem(last=False)

    def preview(self, path: Any) -> tuple[bytes, str] | None:
        """The inline image kept for the screenshot at C{path} (taken: a second call finds
        none), or None."""
        return self._previews.pop(str(path), None) if isinstance(path, str) else None

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
        @raise GasolineError: no free file name, or the file could not be written (disk full,
            read-only state dir): C{screenshot_failed}, with C{http_status} 507. No partial or
            empty file is left behind.
        """
        directory = self.directory
        try:
            make_private_dir(directory)
        except OSError as e:
            self._failed(directory, e)
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
                write_new(path, image)  # all or nothing: never a zero-byte file
            except FileExistsError:
                continue
            except OSError as e:
                self._failed(path, e)
            if self.health is not None:
                self.health.succeeded("screenshots")
            return path
        raise GasolineError("could not pick a screenshot file name", code="screenshot_failed")

    def _failed(self, path: Path, error: OSError) -> None:
        why = (self.health.failed("screenshots", path, error) if self.health is not None
               else f"could not write {path}: {describe(error)}")
        raise ScreenshotNotSaved(f"screenshot not saved: {why}", code="screenshot_failed")

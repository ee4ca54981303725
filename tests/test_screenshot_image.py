"""``interact screenshot`` answers MCP ``image`` content an agent can see, size-bounded, plus the
file's path, checked with the official ``mcp`` SDK as the client of a real daemon whose
extension is a thread speaking the real ``/sync`` and ``POST /screenshots`` protocol."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import threading
import urllib.request
import zlib

import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ImageContent, TextContent

from gasoline.core.storage.screenshots import MAX_INLINE_IMAGE_CHARS
from gasoline.testing import EXTENSION_HEADERS

pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore:The logging capability is deprecated")]


def png(width: int, height: int, noise: bool = False) -> bytes:
    """A real PNG (RGB): random pixels (incompressible) or a flat colour."""
    def row() -> bytes:
        return b"\x00" + (os.urandom(width * 3) if noise else b"\x20\x80\xc0" * width)

    raw = b"".join(row() for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                             0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


class ScreenshotExtension(threading.Thread):
    """Syncs with the daemon; answers each screenshot command with C{image} (and C{preview})."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.image = png(8, 8)
        self.preview: bytes | None = None
        self.stopping = threading.Event()

    def post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={**EXTENSION_HEADERS,
                                              "Content-Type": "application/json"},
                                     method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"{}")

    def run(self) -> None:
        settings = {"pilot_enabled": True, "tracking_enabled": True, "tracked_tab_id": 7,
                    "tracked_tab_url": "https://shop.example/"}
        while not self.stopping.is_set():
            try:
                answer = self.post("/sync", {"session_id": "shots", "settings": settings,
                                             "extension_version": "0.7.9"})
            except OSError:
                return
            for command in answer.get("commands") or ():
                if command.get("type") != "screenshot":
                    continue
                body = {"data_url": "data:image/png;base64,"
                        + base64.b64encode(self.image).decode(),
                        "url": "https://shop.example/", "query_id": command["id"]}
                if self.preview is not None:
                    body["preview_data_url"] = ("data:image/png;base64,"
                                                + base64.b64encode(self.preview).decode())
                self.post("/screenshots", body)


async def screenshot(url: str) -> tuple[list, bool]:
    async with streamable_http_client(url + "/mcp") as (read, write, *_):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("interact", {"what": "screenshot"})
            return result.content, result.is_error


def test_a_screenshot_is_an_image_block_the_sdk_decodes_plus_the_path(daemon):
    ext = ScreenshotExtension(daemon.url)
    ext.start()
    try:
        # Small enough: the image itself, inline.
        ext.image = png(40, 30)
        content, is_error = asyncio.run(screenshot(daemon.url))
        assert not is_error, content
        text = [c for c in content if isinstance(c, TextContent)]
        images = [c for c in content if isinstance(c, ImageContent)]
        assert len(text) == 1 and len(images) == 1, content
        data = json.loads(text[0].text.partition("\n")[2])
        saved = data["path"]
        assert saved.endswith(".png") and os.path.exists(saved)
        decoded = base64.b64decode(images[0].data, validate=True)
        assert images[0].mime_type == "image/png" and decoded == ext.image
        assert png_size(decoded) == (40, 30)
        with open(saved, "rb") as f:
            assert f.read() == decoded
        # Too large to inline (incompressible, over the bound): the extension's preview is what
        # the agent sees; the file keeps the whole image.
        ext.image = png(700, 500, noise=True)
        assert len(base64.b64encode(ext.image)) > MAX_INLINE_IMAGE_CHARS
        ext.preview = png(140, 100, noise=True)
        content, is_error = asyncio.run(screenshot(daemon.url))
        [image] = [c for c in content if isinstance(c, ImageContent)]
        assert len(image.data) <= MAX_INLINE_IMAGE_CHARS
        assert png_size(base64.b64decode(image.data)) == (140, 100)
        path = json.loads(content[0].text.partition("\n")[2])["path"]
        assert os.path.getsize(path) == len(ext.image)
        # Too large and no preview (the published extension): no image, and the answer says why.
        ext.preview = None
        content, is_error = asyncio.run(screenshot(daemon.url))
        assert not is_error and [c.type for c in content] == ["text"]
        assert "no inline image" in content[0].text.partition("\n")[0]
    finally:
        ext.stopping.set()
        ext.join(10)

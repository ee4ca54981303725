"""
Subresource Integrity hashes for scripts and stylesheets whose bodies were captured.

A hash is only right if it is computed over the exact bytes the server sent. The extension
captures bodies as text, so a hash is produced only for a complete (not truncated) text body, and
computed over its UTF-8 encoding; every other resource is listed under C{unhashable} with the
reason. Check the hash against the file you deploy (C{openssl dgst -sha384 -binary f | base64}).
"""

from __future__ import annotations

import base64
import hashlib
import html
from typing import Any

from gasoline.analysis._util import dicts, text
from gasoline.core.errors import InvalidParam

ALGORITHMS = ("sha256", "sha384", "sha512")
#: The extension cuts response bodies at 16 KB: a body of exactly that size may be cut.
EXTENSION_BODY_LIMIT = 16 * 1024
MAX_RESOURCES = 500


def integrity(body: bytes, algorithm: str = "sha384") -> str:
    digest = hashlib.new(algorithm, body).digest()
    return f"{algorithm}-{base64.b64encode(digest).decode('ascii')}"


def _kind(resource: dict[str, Any]) -> str | None:
    declared = text(resource.get("type") or resource.get("initiator_type"), 40).lower()
    content_type = text(resource.get("content_type"), 200).lower()
    url = text(resource.get("url"), 4000).split("?", 1)[0].lower()
    if declared == "script" or "javascript" in content_type or url.endswith((".js", ".mjs")):
        return "script"
    if declared in ("style", "stylesheet", "css") or "text/css" in content_type or url.endswith(".css"):
        return "style"
    return None


def _tag(kind: str, url: str, value: str) -> str:
    src = html.escape(url, quote=True)
    if kind == "script":
        return f'<script src="{src}" integrity="{value}" crossorigin="anonymous"></script>'
    return f'<link rel="stylesheet" href="{src}" integrity="{value}" crossorigin="anonymous">'


def sri(resources: Any, algorithm: str = "sha384") -> dict[str, Any]:
    """C{{resources: [{url, type, integrity, tag}], unhashable: [{url, reason}]}}."""
    if algorithm not in ALGORITHMS:
        raise InvalidParam(f"algorithm must be one of {', '.join(ALGORITHMS)}", param="algorithm")
    hashed: list[dict[str, Any]] = []
    unhashable: list[dict[str, Any]] = []
    seen: set[str] = set()
    for resource in dicts(resources)[:MAX_RESOURCES]:
        url = text(resource.get("url"), 4000)
        if not url or url in seen:
            continue
        seen.add(url)
        kind = _kind(resource)
        if kind is None:
            continue  # SRI applies to scripts and stylesheets only
        body = resource.get("response_body", resource.get("body"))
        reason = None
        if not url.startswith(("http://", "https://")):
            reason = "not an http(s) URL"
        elif body is None:
            reason = "body not captured"
        elif not isinstance(body, str):
            reason = "body is not text"
        elif resource.get("response_truncated") or resource.get("truncated"):
            reason = "body was truncated by the extension"
        elif len(body.encode("utf-8")) == EXTENSION_BODY_LIMIT:
            reason = "body is exactly the capture limit and may be truncated"
        if reason is not None:
            unhashable.append({"url": url, "type": kind, "reason": reason})
            continue
        assert isinstance(body, str)  # the checks above leave only text
        value = integrity(body.encode("utf-8"), algorithm)
        hashed.append({"url": url, "type": kind, "integrity": value, "tag": _tag(kind, url, value)})
    return {
        "algorithm": algorithm,
        "resources": hashed,
        "unhashable": unhashable,
        "notes": [
            "Hashes are over the UTF-8 text the extension captured; verify against the deployed file.",
            "Cross-origin resources also need CORS (crossorigin=\"anonymous\" and an "
            "Access-Control-Allow-Origin response header).",
        ],
    }

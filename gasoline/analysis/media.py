"""
Files behind the media modes (C{interact upload}, C{analyze visual_baseline} / C{visual_diff},
C{interact record_start} / C{record_stop}): which paths an agent may name, bounded reads and
small writes, and data URLs.

Everything here is plain blocking file I/O meant to run in the reactor's thread pool
(L{gasoline.core.storage.files.thread_runner}); the path checks (L{resolve_readable}, L{inside}) are a
few C{stat} calls and run where they are called. The sandbox itself is L{gasoline.core.paths}
(C{real}, C{inside} and C{PathRefused} are re-exported here for the media modes).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gasoline.common import CLOEXEC, NOFOLLOW
from gasoline.core.errors import GasolineError, InvalidParam
from gasoline.core.paths import PathRefused, inside, real, resolve_inside
from gasoline.core.storage.files import make_private_dir, write_atomic

#: Largest total size of the files one C{upload} sends.
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MAX_UPLOAD_FILES = 20
#: Largest screenshot a visual comparison reads (each side).
MAX_IMAGE_BYTES = 12 * 1024 * 1024

#: Where the media modes keep their files under the state dir.
VISUAL_DIR = "visual"
SCREEN_RECORDINGS_DIR = "screen-recordings"
SCREENSHOTS_DIR = "screenshots"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DATA_URL = re.compile(r"^data:(image/(?:png|jpeg|webp));base64,", re.IGNORECASE)


def valid_name(name: str, param: str = "name") -> str:
    """A file-system-safe name chosen by an agent (baseline, recording label)."""
    if not _NAME.match(name):
        raise InvalidParam(f"{param} must be 1-64 characters of letters, digits, '.', '_' or '-' "
                           "starting with a letter or digit", param=param)
    return name


def client_dir(state_dir: str | os.PathLike[str], area: str, client_id: str) -> Path:
    """C{<state_dir>/<area>/<hash of the client id>}: a per-client folder whatever the id holds."""
    digest = hashlib.sha256(client_id.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return Path(state_dir) / area / digest


# -- upload ---------------------------------------------------------------------------------------


def upload_roots(cwd: str | None, state_dir: Any) -> list[Path]:
    roots = []
    if cwd:
        roots.append(real(cwd))
    if state_dir is not None:
        roots.append(real(state_dir))
    return roots


def resolve_readable(name: str, roots: list[Path], param: str = "file_path",
                     relative_from: str | None = None) -> Path:
    """The real path of the regular file C{name} (relative: from C{relative_from}, the agent's
    working directory), or L{PathRefused} when it is missing, not a regular file, or outside every
    root (symlinks resolved). Without a working directory a relative C{name} is refused:
    "absolute path required"."""
    relative = isinstance(name, str) and not Path(name).is_absolute()
    if relative and relative_from is None:
        raise PathRefused(f"absolute path required: {param} {name!r} is relative and your "
                          "working directory is unknown (your client does not send it)",
                          param=param)
    resolved = resolve_inside(name, roots, param=param, base=relative_from)
    try:
        st = os.stat(resolved)
    except OSError as e:
        hint = (f" (a relative path is taken from your working directory {relative_from}; give "
                "an absolute path otherwise)" if relative else "")
        raise PathRefused(f"cannot read {name!r}: {e.strerror or e}{hint}", param=param) from None
    if not stat.S_ISREG(st.st_mode):
        raise PathRefused(f"{name!r} is not a regular file", param=param)
    return resolved


def refuse_private_state(path: Path, state_dir: Any, client_id: str, param: str = "file_path") -> None:
    """Inside the state dir only files in its sub-folders may be read, never C{clients/} (every
    client's state) nor another client's C{visual/} or C{screen-recordings/} folder; the
    daemon's own top-level files (journal, C{daemon.json}) neither."""
    if state_dir is None:
        return
    root = real(state_dir)
    if not inside(path, root):
        return
    parts = path.relative_to(root).parts
    own = client_dir(root, "x", client_id).name
    if len(parts) < 2 or parts[0] == "clients" or (
            parts[0] in (VISUAL_DIR, SCREEN_RECORDINGS_DIR) and parts[1] != own):
        raise PathRefused(f"{path} is one of the daemon's own files (client states, journals, "
                          "other clients' folders)", param=param)


def read_files(paths: Iterable[Path], limit: int = MAX_UPLOAD_BYTES) -> list[tuple[Path, bytes]]:
    """Read each file (never following a symlink at the last component; at most C{limit} bytes
    in all, else L{InvalidParam})."""
    out: list[tuple[Path, bytes]] = []
    total = 0
    for path in paths:
        data = read_bounded(path, limit - total, "files")
        total += len(data)
        out.append((path, data))
    return out


def read_bounded(path: Path, limit: int, param: str) -> bytes:
    flags = os.O_RDONLY | NOFOLLOW | CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise PathRefused(f"cannot read {path}: {e.strerror or e}", param=param) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise PathRefused(f"{path} is not a regular file", param=param)
        data = f.read(max(0, limit) + 1)
    if len(data) > limit:
        raise InvalidParam(f"{path.name} goes over the size limit ({limit} bytes left of the "
                           "allowance)", param=param)
    return data


def file_payload(path: Path, data: bytes) -> dict[str, Any]:
    """What the extension needs to build a C{File}: name, MIME type, size, base64 bytes."""
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return {"name": path.name, "type": kind, "size": len(data),
            "data": base64.b64encode(data).decode("ascii")}


# -- images ---------------------------------------------------------------------------------------


def screenshot_file(state_dir: Any, reported: Any) -> Path:
    """The screenshot the daemon saved for a C{screenshot} command: the C{path} its result names,
    checked to be a file under C{<state_dir>/screenshots/} (results are not trusted)."""
    if not isinstance(reported, str) or not reported or "\x00" in reported:
        raise GasolineError("the screenshot command answered without a saved file",
                            code="screenshot_failed")
    root = real(Path(state_dir) / SCREENSHOTS_DIR)
    path = real(reported)
    if not inside(path, root) or path == root or not path.is_file():
        raise GasolineError("the screenshot command answered a path outside the screenshots "
                            "folder", code="screenshot_failed")
    return path


def data_url(data: bytes, path: Path) -> str:
    kind = {".png": "image/png", ".webp": "image/webp"}.get(path.suffix.lower(), "image/jpeg")
    return f"data:{kind};base64," + base64.b64encode(data).decode("ascii")


def decode_image_data_url(value: Any, limit: int = MAX_IMAGE_BYTES) -> tuple[bytes, str] | None:
    """C{(bytes, extension)} of a base64 C{data:image/png|jpeg|webp} URL, or None."""
    if not isinstance(value, str):
        return None
    m = _DATA_URL.match(value)
    if m is None or len(value) > limit * 4 // 3 + 64:
        return None
    try:
        raw = base64.b64decode(value[m.end():], validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw:
        return None
    return raw, {"image/png": "png", "image/webp": "webp"}.get(m.group(1).lower(), "jpg")


def write_new(path: Path, data: bytes) -> Path:
    """Write C{data} to the file C{path}, replacing it atomically (mode 0600; parents created
    0700; a symbolic link at C{path} is refused)."""
    make_private_dir(path.parent)
    write_atomic(path, data)  # 0600, never through a symlink, no half-written file
    return path


def move_into(source: Path, target: Path) -> Path:
    """Rename C{source} to C{target} (same file system: a metadata change, no copy)."""
    make_private_dir(target.parent)
    os.replace(source, target)
    return target

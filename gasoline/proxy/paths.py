"""
C{allowedDirectories}: path arguments of a local server's tools are checked before the call goes
out, so a session can never reach outside its own directories (another session's included), even
through a child that would not check (or that trusts roots it was told by someone else).

Which arguments are paths: every string under a key that names one (C{path}, C{paths},
C{source}, C{destination}, C{directory}, C{file}, C{root}, C{cwd}, C{uri} or any key ending
in C{path}, C{dir}, C{directory}, C{file} or C{root}), at any depth, and every string anywhere
that looks like one (starts with C{/}, C{~} or C{file://}, or has a C{..} segment). Relative
paths are taken from the session's working directory; symlinks are resolved (C{realpath}) before
the comparison, so a link inside the project that points elsewhere is refused too.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterator

from gasoline.core.paths import PathRefused

_PATH_KEYS = frozenset({"path", "paths", "source", "destination", "directory", "file", "files",
                        "root", "cwd", "uri", "filename", "dirname", "target"})
_PATH_SUFFIX = re.compile(r"(path|paths|dir|directory|file|root)$", re.IGNORECASE)
_DOTDOT = re.compile(r"(^|[/\\])\.\.([/\\]|$)")
#: Strings longer than this are not paths (a file's content, say) unless their key says so.
_MAX_LOOKS_LIKE = 4096


def _refused(path: str, allowed: tuple[str, ...]) -> PathRefused:
    return PathRefused(f"path {path!r} is outside this session's allowed directories "
                       f"({', '.join(allowed)})", code="path_not_allowed",
                       retry="Use a path inside the allowed directories.",
                       allowedDirectories=list(allowed))


def _is_path_key(key: str) -> bool:
    return key.lower() in _PATH_KEYS or bool(_PATH_SUFFIX.search(key))


def _looks_like_path(value: str) -> bool:
    if len(value) > _MAX_LOOKS_LIKE or "\n" in value:
        return False
    return value.startswith(("/", "~", "file://")) or bool(_DOTDOT.search(value))


def path_strings(arguments: Any, key: str = "") -> Iterator[str]:
    """Every string in C{arguments} that is (or looks like) a path."""
    if isinstance(arguments, dict):
        for k, v in arguments.items():
            yield from path_strings(v, k if isinstance(k, str) else "")
    elif isinstance(arguments, list):
        for v in arguments:
            yield from path_strings(v, key)
    elif isinstance(arguments, str):
        if (key and _is_path_key(key) and len(arguments) <= 65536) or _looks_like_path(arguments):
            yield arguments


def check_arguments(arguments: Any, working_directory: str, allowed: tuple[str, ...]) -> None:
    """Raise L{PathRefused} (code C{path_not_allowed}, with the C{allowedDirectories} detail) for
    the first path argument outside C{allowed}; the rules are L{gasoline.core.paths}'s
    (C{realpath}, then component-wise containment), applied here on strings: this check runs on
    every proxied call, and L{gasoline.core.paths.real} / L{gasoline.core.paths.inside} build
    C{Path} objects that cost more than the C{lstat}s themselves (L{within} is C{inside} for
    C{realpath} results).

    Filesystem calls (C{realpath}) are a few C{lstat}s per argument; they run on the reactor
    thread like any other small, bounded piece of work. The allowed directories are resolved
    on each call, and only when the call names a path.
    """
    real_allowed: list[str] | None = None
    for raw in path_strings(arguments):
        value = raw[len("file://"):] if raw.startswith("file://") else raw
        if "\0" in value:
            raise _refused(raw, allowed)
        value = os.path.expanduser(value) if value.startswith("~") else value
        full = os.path.realpath(os.path.join(working_directory, value))
        if real_allowed is None:
            real_allowed = [os.path.realpath(d) for d in allowed]
        if not any(within(full, d) for d in real_allowed):
            raise _refused(raw, allowed)


def within(path: str, root: str) -> bool:
    """L{gasoline.core.paths.inside} for two C{os.path.realpath} results (absolute, normalised),
    compared as strings: C{path} is C{root} or lies below it, component by component
    (C{/a/bc} is not inside C{/a/b})."""
    return path == root or path.startswith(root if root.endswith("/") else root + "/")

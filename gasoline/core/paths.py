"""
The one path sandbox: which file-system paths an agent may name.

Every place that takes a path from an agent (C{save_to} of the generators, C{test_file},
C{interact upload}, the visual and screen-recording files, the C{allowedDirectories} of a proxied
local server) resolves it here: relative paths are taken from a base directory (the agent's
working directory), symbolic links are resolved (C{realpath}) before the comparison, and the result
must lie inside one of the allowed roots, compared component by component (C{/a/bc} is not inside
C{/a/b}). A refusal is a L{PathRefused}, whose C{allowed_roots} detail names the roots.

The checks are a few C{lstat} calls; callers run them where they are (the reactor thread) or in
the thread pool together with the I/O that follows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from gasoline.core.errors import GasolineError


class PathRefused(GasolineError):
    """A path an agent named is empty, malformed, or resolves outside every allowed root."""

    code = "path_refused"
    retry = ("Name a path inside your working directory (relative paths are taken from it) or "
             "inside the daemon's state dir.")


def real(path: str | os.PathLike[str]) -> Path:
    """C{path} with every symbolic link resolved (C{os.path.realpath}), as a C{pathlib.Path}."""
    return Path(os.path.realpath(path))


def inside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether C{path} is C{root} or lies below it, component by component.

    Both are taken as they are: pass resolved paths (L{real}) to compare what the file system
    will reach.
    """
    path, root = Path(path), Path(root)
    return path == root or path.is_relative_to(root)


def resolve_inside(
    name: str,
    roots: Iterable[str | os.PathLike[str]],
    *,
    param: str,
    base: str | os.PathLike[str] | None = None,
    parent_refs: bool = True,
    where: str = "your working directory and the state dir",
    retry: str | None = None,
) -> Path:
    """The real path that C{name} names, or L{PathRefused}.

    @param name: the path the agent sent; relative paths are taken from C{base}.
    @param roots: the directories the path may lie in; they are resolved here too.
    @param param: the argument's name, reported in the error.
    @param base: where a relative C{name} starts (default: the first root).
    @param parent_refs: C{False} refuses any C{..} component outright, even one that stays inside.
    @param where: the roots in words, for the error message.
    @param retry: the error's hint to the agent, when the default one does not fit.
    @return: the resolved path, inside one of C{roots} (it may not exist yet).
    @raise PathRefused: C{name} is empty, holds a NUL, has a refused C{..}, there is no root, or
        the resolved path is outside every root (its C{allowed_roots} detail lists them).
    """
    if not name.strip() or "\x00" in name:
        raise PathRefused(f"{param} is empty or not a valid path", param=param, retry=retry)
    raw = Path(name)
    if not parent_refs and ".." in raw.parts:
        raise PathRefused(f"{param} may not contain '..' components: {name!r}", param=param,
                          retry=retry)
    real_roots = [real(root) for root in roots]
    if not real_roots:
        raise PathRefused(f"{param}: there is no directory to resolve it in ({where})",
                          param=param, retry=retry)
    start = real(base) if base is not None else real_roots[0]
    resolved = real(raw if raw.is_absolute() else start / raw)
    if not any(inside(resolved, root) for root in real_roots):
        raise PathRefused(f"{param} {name!r} resolves outside {where}", param=param,
                          retry=retry, allowed_roots=[str(root) for root in real_roots])
    return resolved

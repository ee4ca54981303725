"""
C{allowedDirectories}: path arguments of a server's tools are checked before the call goes out,
so a session can never reach outside its own directories (another session's included), even
through a child that would not check (or that trusts roots it was told by someone else). Every
server run by C{command} is checked, whatever its C{executionContext} (its process reads this
machine's files either way); a server reached by C{url} is not (its paths are another machine's).

The check works on the canonical form of every spelling a server could read a string as:

  - B{which strings}: every string under a key that names a path (C{path}, C{paths},
    C{source}, C{destination}, C{directory}, C{file}, C{root}, C{cwd}, C{uri}, ... or any key
    ending in C{path}, C{dir}, C{directory}, C{file} or C{root}), at any depth and of any
    length; and every other string on one line (a string with a line break is content: no
    server opens it as a path), under any key, and every object key below the top level (the
    top level's are the tool's parameter names);
  - B{its readings}: the string as it is; as a C{file:} URL in any spelling (any case,
    C{file:/p}, C{file:///p}, C{file://localhost/p}, percent-escapes such as C{file:%2Fp},
    with and without its C{?query} / C{#fragment}); percent-decoded (once, twice, three
    times: a server that decodes what it gets; escapes are bytes, UTF-8 or not); with C{~}
    expanded and as written;
  - B{its resolutions}: relative readings are taken from the server's working directory;
    each is resolved as the kernel does (C{realpath}: symlinks first, then C{..}) and as a
    server that normalises first does (C{normpath}, then C{realpath}), each only where it is
    at most C{PATH_MAX} bytes long (a longer one cannot be opened).

A path-key string is refused unless every resolution lies in an allowed directory; it is refused
too when one of its readings cannot be resolved (longer than C{PATH_MAX} bytes even once
normalised: C{path_too_long}; a C{file:} URL of another host, a NUL, an unpaired surrogate:
C{path_not_allowed}). Another string is refused when it
reads as a path (absolute, C{~}, a C{file:} URL, a C{..} segment) and one of its resolutions
lies outside; a plain relative word (C{"hello"}, C{"src/app.py"}) is refused when it resolves
outside through a symlink or names something that exists outside (the working directory may be
outside: a shared server's is its own), and passes when it names nothing there; a string that
cannot be resolved is not a path.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterator
from urllib.parse import unquote_to_bytes

from gasoline.core.paths import PathRefused

_PATH_KEYS = frozenset({"path", "paths", "source", "destination", "directory", "file", "files",
                        "root", "cwd", "uri", "filename", "dirname", "target"})
_PATH_SUFFIX = re.compile(r"(path|paths|dir|directory|file|root)$", re.IGNORECASE)
_DOTDOT = re.compile(r"(^|/)\.\.(/|$)")
_FILE_URL = re.compile(r"^file:", re.IGNORECASE)
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
#: Longest path the kernel opens (Linux C{PATH_MAX}, its terminating NUL included).
PATH_MAX = 4095
#: Percent-decodings tried on a string (a server that decodes twice is covered).
DECODINGS = 3


class _Unresolvable(Exception):
    """A reading that cannot be resolved (another host, not UTF-8, a NUL)."""


def _refused(path: str, allowed: tuple[str, ...]) -> PathRefused:
    return PathRefused(f"path {_shown(path)!r} is outside this session's allowed directories "
                       f"({', '.join(allowed)})", code="path_not_allowed",
                       retry="Use a path inside the allowed directories.",
                       allowedDirectories=list(allowed))


def _unresolvable(path: str, why: str, allowed: tuple[str, ...], code: str) -> PathRefused:
    return PathRefused(f"path {_shown(path)!r} cannot be checked ({why}); only paths inside "
                       f"this session's allowed directories ({', '.join(allowed)}) are passed on",
                       code=code, retry="Use a plain path inside the allowed directories.",
                       allowedDirectories=list(allowed))


def _shown(path: str) -> str:
    return path if len(path) <= 200 else path[:200] + f"... ({len(path)} characters)"


def _is_path_key(key: str) -> bool:
    return key.lower() in _PATH_KEYS or bool(_PATH_SUFFIX.search(key))


def path_strings(arguments: Any, key: str = "", top: bool = True) -> Iterator[tuple[str, bool]]:
    """Every string in C{arguments} that may name a path, with whether its key says it does:
    strings under a path key (any length, any content), other strings and object keys on one
    line (below the top level: the arguments' own names are the tool's parameters)."""
    if isinstance(arguments, dict):
        for k, v in arguments.items():
            if isinstance(k, str):
                if not top and "\n" not in k and "\r" not in k:
                    yield k, False
                yield from path_strings(v, k, False)
            else:
                yield from path_strings(v, "", False)
    elif isinstance(arguments, list):
        for v in arguments:
            yield from path_strings(v, key, False)
    elif isinstance(arguments, str):
        if key and _is_path_key(key):
            yield arguments, True
        elif "\n" not in arguments and "\r" not in arguments:
            yield arguments, False


def _decode(data: str) -> str:
    """Percent-escapes decoded to the bytes a server would open (as C{os.fsdecode} reads
    them: bytes that are not UTF-8 stay those bytes)."""
    try:
        return os.fsdecode(unquote_to_bytes(data))
    except UnicodeEncodeError:
        raise _Unresolvable("an unpaired surrogate") from None


def _url_path(value: str) -> list[str]:
    """The paths a C{file:} URL names: its path decoded, with and without C{?...}/C{#...}."""
    rest = value[len("file:"):]
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if _decode(host).lower() not in ("", "localhost"):
            raise _Unresolvable(f"a file: URL of the host {host!r}")
        rest = slash + path
    out = [_decode(rest)]
    bare = re.split(r"[?#]", rest, maxsplit=1)[0]
    if bare != rest:
        out.append(_decode(bare))
    return out


def readings(value: str) -> list[str]:
    """Every path C{value} may be read as (see the module docstring); raise L{_Unresolvable}
    when a C{file:} URL or its escapes cannot be decoded."""
    if "%" not in value and value[:1] != "~" and "\0" not in value \
            and not _FILE_URL.match(value):
        return [value]  # the usual case: one reading
    out = [value]
    if _FILE_URL.match(value):
        out.extend(_url_path(value))
    current = value
    for _ in range(DECODINGS):
        if not _ESCAPE.search(current):
            break
        current = _decode(current)
        out.append(current)
        if _FILE_URL.match(current):
            out.extend(_url_path(current))
    for r in list(out):
        if r.startswith("~"):
            expanded = os.path.expanduser(r)
            if expanded != r:
                out.append(expanded)
    seen: list[str] = []
    for r in out:
        if "\0" in r:
            raise _Unresolvable("a NUL character")
        if r not in seen:
            seen.append(r)
    return seen


def _fits(path: str) -> bool:
    if len(path) > PATH_MAX:
        return False
    try:
        return len(path.encode("utf-8", "surrogateescape")) <= PATH_MAX
    except UnicodeEncodeError:
        raise _Unresolvable("an unpaired surrogate") from None


def _path_shaped(reading: str) -> bool:
    return reading.startswith(("/", "~")) or bool(_DOTDOT.search(reading)) \
        or bool(_FILE_URL.match(reading))


def check_arguments(arguments: Any, working_directory: str, allowed: tuple[str, ...]) -> None:
    """Raise L{PathRefused} (code C{path_not_allowed} or C{path_too_long}, with the
    C{allowedDirectories} detail) for the first string of C{arguments} that may name a path
    outside C{allowed} (the module docstring says which and how). The containment rule is
    L{gasoline.core.paths}'s (C{realpath}, then component-wise), applied here on strings:
    this check runs on every proxied call.

    Filesystem calls (C{realpath}) are a few C{lstat}s per string; they run on the reactor
    thread like any other small, bounded piece of work. The allowed directories are resolved
    once per call, when a string needs them.
    """
    real_allowed: list[str] | None = None
    real_wd: str | None = None
    for raw, keyed in path_strings(arguments):
        if not keyed and not raw:
            continue
        try:
            resolved: list[str] = []
            #: Plain relative words' resolutions: outside only matters if they lead somewhere.
            words: list[tuple[str, str]] = []
            for reading in readings(raw):
                full = os.path.join(working_directory, reading)
                lexical = os.path.normpath(full)
                fits = _fits(full)
                fits_lexical = fits if lexical == full else _fits(lexical)
                if keyed and not fits and not fits_lexical:
                    raise _unresolvable(raw, f"longer than {PATH_MAX} bytes, even normalised",
                                        allowed, "path_too_long")
                if not (keyed or _path_shaped(reading)):
                    # Without C{..}, the kernel's and the normalised resolutions agree. A word
                    # whose first component names nothing names nothing at all: one lstat.
                    if fits and os.path.lexists(
                            os.path.join(working_directory, reading.split("/", 1)[0])):
                        words.append((reading, os.path.realpath(full)))
                    continue
                if fits:
                    resolved.append(os.path.realpath(full))
                if lexical != full and fits_lexical:
                    resolved.append(os.path.realpath(lexical))
        except _Unresolvable as e:
            if keyed or _path_shaped(raw):
                raise _unresolvable(raw, str(e), allowed, "path_not_allowed") from None
            continue
        if not resolved and not words:
            continue
        if real_allowed is None:
            real_allowed = [os.path.realpath(d) for d in allowed]
        for real in resolved:
            if not any(within(real, d) for d in real_allowed):
                raise _refused(raw, allowed)
        for reading, real in words:
            if any(within(real, d) for d in real_allowed):
                continue
            # Outside (the working directory itself may be: a shared server's is its own): a
            # word that names nothing there passes; one that goes through a symlink or names
            # something that exists is a path out.
            if real_wd is None:
                real_wd = os.path.realpath(working_directory)
            if real != os.path.normpath(os.path.join(real_wd, reading)) \
                    or os.path.lexists(real):
                raise _refused(raw, allowed)


def within(path: str, root: str) -> bool:
    """L{gasoline.core.paths.inside} for two C{os.path.realpath} results (absolute, normalised),
    compared as strings: C{path} is C{root} or lies below it, component by component
    (C{/a/bc} is not inside C{/a/b})."""
    return path == root or path.startswith(root if root.endswith("/") else root + "/")

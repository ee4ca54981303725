"""Everything but the C extension is declared in setup.cfg and pyproject.toml.

gasoline/streaming/_counting.c speeds up the streaming tally's count (docs/streaming.md). It is
optional: where it cannot be compiled (no C compiler or Python headers), the install goes on
and the daemon uses the pure-Python reference it was written from, with the same results.
"""

import os

from setuptools import Extension, find_namespace_packages, setup


def _extension_packages() -> list[str]:
    """C{extension/} (the MV3 extension) ships as C{gasoline/_extension/}: package data that
    C{gasoline browser} loads into the browser it starts (gasoline.launch.chromium.extension_dir).
    Every folder of it is a (data-only) package so the wheel carries all its files."""
    out = []
    for folder, _, _ in os.walk("extension"):
        rel = os.path.relpath(folder, "extension")
        if rel.split(os.sep)[0] in ("scripts", "node_modules"):
            continue
        out.append("gasoline._extension" + ("" if rel == "." else "." + rel.replace(os.sep, ".")))
    return sorted(out)


_EXTENSION = _extension_packages()

setup(
    ext_modules=[
        Extension("gasoline.streaming._counting", ["gasoline/streaming/_counting.c"], optional=True),
    ],
    packages=find_namespace_packages(include=["gasoline", "gasoline.*", "twisted.plugins"])
    + _EXTENSION,
    package_dir={"gasoline._extension": "extension"},
    # The status page's HTML, CSS and JS (gasoline.http.status_page).
    package_data={"gasoline.http": ["static/*"], **{name: ["*"] for name in _EXTENSION}},
)

"""Everything but the C extension is declared in setup.cfg and pyproject.toml.

gasoline/streaming/_counting.c speeds up the streaming tally's count (docs/streaming.md). It is
optional: where it cannot be compiled (no C compiler or Python headers), the install goes on
and the daemon uses the pure-Python reference it was written from, with the same results.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("gasoline.streaming._counting", ["gasoline/streaming/_counting.c"], optional=True),
])

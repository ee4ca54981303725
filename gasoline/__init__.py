"""Gasoline: one local daemon, many AI agents, one browser."""

from gasoline._version import __version__

__all__ = ["__version__"]

"""The single place the daemon's version lives."""

__version__ = "0.1.0"

#: What C{/sync} answers as C{server_version}: the published 0.7.x extension warns about a
#: version mismatch unless major.minor is C{0.7} (extension-protocol.md §3.8).
EXTENSION_COMPAT_VERSION = f"0.7.99+gasoline.{__version__}"

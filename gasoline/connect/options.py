"""
The options of C{gasoline connect}, declared once, as plain data: the Twisted option parser
(L{gasoline.connect.main.ConnectOptions}, which adds defaults and checks) and the first exchange's
small parser (L{gasoline.connect.fast.parse_args}, which runs before Twisted is imported) are both
built from these tables. Imports nothing.
"""

from __future__ import annotations

#: The daemon's port when neither C{--port} nor C{--url} is given.
DEFAULT_PORT = 7890

#: C{(long name, short name or None, help)} of each option that takes a value, in C{--help}'s
#: order.
VALUE_OPTIONS: tuple[tuple[str, str | None, str], ...] = (
    ("client-id", None, "This agent's client id (default: hash of the working directory)."),
    ("port", "p", f"Daemon port on 127.0.0.1 (default {DEFAULT_PORT})."),
    ("url", None, "Daemon base URL (instead of --port), e.g. http://127.0.0.1:7890."),
    ("state-dir", None, "State dir for an auto-started daemon (default: $GASOLINE_STATE_DIR, else "
                        "the platform's user state dir)."),
    ("bound", None, "Seconds a request may wait for an unreachable daemon before it is answered "
                    "with an error."),
    ("max-line", None, "Longest accepted stdin line in bytes."),
    ("api-key", None, "Key for a daemon started with --api-key (default: $GASOLINE_API_KEY); sent "
                      "as X-Gasoline-Key, and given to a daemon this connector starts."),
)

#: C{(long name, short name or None, help)} of each flag.
FLAGS: tuple[tuple[str, str | None, str], ...] = (
    ("no-autostart", None, "Never start a daemon; wait for one (requests time out with errors)."),
)

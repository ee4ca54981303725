"""
The ``gasoline`` console script.

  gasoline --version            print the version
  gasoline serve [twistd opts]  run the daemon in the foreground (same as ``twistd -n gasoline``)
  gasoline connect [...]        the stdio MCP connector an agent's MCP config spawns
"""

from __future__ import annotations

import sys

from gasoline import __version__

USAGE = """usage: gasoline [--version] <command> [options]

commands:
  serve     run the daemon in the foreground (twistd -n gasoline [options])
  connect   stdio MCP connector: forwards an agent's MCP session to the daemon
            (gasoline connect --help)
"""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stderr.write(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version", "version"):
        print(f"gasoline {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command == "serve":
        from twisted.scripts.twistd import run  # noqa: PLC0415

        sys.argv = ["twistd", "-n", "gasoline", *rest]
        run()
        return 0
    if command == "connect":
        # Answer the agent's initialize before importing Twisted (gasoline.connect.fast).
        from gasoline.connect.fast import first_exchange  # noqa: PLC0415

        import os  # noqa: PLC0415  (already loaded by the interpreter)

        fast = argv is None and os.environ.get("GASOLINE_CONNECT_FAST", "1") != "0"
        prelude = first_exchange(rest) if fast else None
        from gasoline.connect.main import main as connect_main  # noqa: PLC0415

        return connect_main(rest, prelude=prelude)
    sys.stderr.write(f"gasoline: unknown command {command!r}\n\n{USAGE}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

"""
The C{gasoline} console script.

  gasoline --version            print the version
  gasoline serve [twistd opts]  run the daemon in the foreground (same as C{twistd -n gasoline})
  gasoline connect [...]        the stdio MCP connector an agent's MCP config spawns
  gasoline doctor|status|stop|identity   operations without an agent (L{gasoline.admin_cli})
"""

from __future__ import annotations

import sys

from gasoline import __version__

USAGE = """usage: gasoline [--version] <command> [options]

commands:
  serve     run the daemon in the foreground (twistd -n gasoline [options])
  connect   stdio MCP connector: forwards an agent's MCP session to the daemon
            (gasoline connect --help)
  identity  print the running daemon's identity fingerprint, which the extension's popup asks
            you to compare when pairing (never creates a key)
  doctor    run the daemon's health checks (configure doctor) without an agent;
            exit status 1 when a check fails
  status    is a daemon running, where, which version, pid, who is connected
            (exit status 3 when none is)
  stop      stop a daemon gracefully (the pid its /health reports)

doctor, status, stop and identity act only on the daemon named by --port N, --url URL or
--state-dir DIR (default: $GASOLINE_STATE_DIR, else the platform's state dir, whose daemon.json
names the daemon running for it); they never fall back to another port (gasoline COMMAND --help).
"""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        (sys.stdout if args else sys.stderr).write(USAGE)  # asked for: stdout, exit 0
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
    if command in ("doctor", "status", "stop", "identity"):
        from gasoline.admin_cli import COMMANDS  # noqa: PLC0415  (standard library only)

        return COMMANDS[command](rest)
    sys.stderr.write(f"gasoline: unknown command {command!r}\n\n{USAGE}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

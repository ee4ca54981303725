"""
The C{gasoline} console script::

  gasoline --version            print the version
  gasoline serve [twistd opts]  run the daemon in the foreground (same as C{twistd -n gasoline})
  gasoline connect [...]        the stdio MCP connector an agent's MCP config spawns
  gasoline browser [URL] [...]  Chromium with the extension, paired and tracking (L{gasoline.launch})
  gasoline doctor|status|stop|identity   operations without an agent (L{gasoline.admin_cli})
  gasoline pair [accept FP | forget]     the extension this daemon pins (L{gasoline.core.identity})
"""

from __future__ import annotations

import sys

from gasoline import __version__

USAGE = """usage: gasoline [--version] <command> [options]

commands:
  serve     run the daemon in the foreground (twistd -n gasoline [options])
  connect   stdio MCP connector: forwards an agent's MCP session to the daemon
            (gasoline connect --help)
  browser   start Chromium with Gasoline's extension, already paired with the daemon
            (started if none runs) and tracking the opened tab
            (gasoline browser [URL] [--headless] [--pilot] [--track-all] [--detach] ...; --help)
  identity  print the running daemon's identity fingerprint, which the extension's popup asks
            you to compare when pairing (never creates a key)
  pair      the extension this daemon pins: list it and refused ones, accept another
            (gasoline pair [accept FINGERPRINT | forget] [--state-dir DIR])
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
        from twisted.scripts.twistd import run

        sys.argv = ["twistd", "-n", "gasoline", *rest]
        run()
        return 0
    if command == "connect":
        # Answer the agent's initialize before importing Twisted (gasoline.connect.fast).
        from gasoline.connect.fast import first_exchange

        import os  # already loaded by the interpreter

        fast = argv is None and os.environ.get("GASOLINE_CONNECT_FAST", "1") != "0"
        prelude = first_exchange(rest) if fast else None
        from gasoline.connect.main import main as connect_main

        return connect_main(rest, prelude=prelude)
    if command == "browser":
        from gasoline.launch.main import main as browser_main

        return browser_main(rest)
    if command == "pair":
        return _pair(rest)
    if command in ("doctor", "status", "stop", "identity"):
        from gasoline.admin_cli import COMMANDS  # standard library only

        return COMMANDS[command](rest)
    sys.stderr.write(f"gasoline: unknown command {command!r}\n\n{USAGE}")
    return 2


def _pair(rest: list[str]) -> int:
    from pathlib import Path

    from gasoline.config import default_state_dir
    from gasoline.core.identity import pair_command

    state_dir = default_state_dir()
    if "--state-dir" in rest:
        at = rest.index("--state-dir")
        if at + 1 >= len(rest):
            sys.stderr.write("usage: gasoline pair [accept FINGERPRINT | forget] [--state-dir DIR]\n")
            return 2
        state_dir = Path(rest[at + 1])
        rest = rest[:at] + rest[at + 2:]
    action = rest[0] if rest else None
    if (action == "accept" and len(rest) != 2) or (action in (None, "forget") and len(rest) > 1):
        action = "usage"
    code, text = pair_command(state_dir, action, rest[1] if len(rest) > 1 else None)
    (sys.stdout if code == 0 else sys.stderr).write(text + "\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())

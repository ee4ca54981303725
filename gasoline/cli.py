"""
The C{gasoline} console script::

  gasoline --version            print the version
  gasoline serve [twistd opts]  run the daemon in the foreground (same as C{twistd -n gasoline})
  gasoline connect [...]        the stdio MCP connector an agent's MCP config spawns
  gasoline setup CLIENT         register that connector with an MCP client (L{gasoline.setup_cli})
  gasoline browser [URL] [...]  Chromium with the extension, paired and tracking (L{gasoline.launch})
  gasoline doctor|status|stop|identity   operations without an agent (L{gasoline.admin_cli})
  gasoline pair [accept FP | forget]     the extension this daemon pins (L{gasoline.core.trust.pins})
  gasoline client-proof ID [--port N]  the headers that let an HTTP MCP client act as ID
"""

from __future__ import annotations

import os
import sys

from gasoline import __version__

#: mypy reads the imports below; at run time they are skipped (importing C{typing} would cost
#: C{gasoline connect} several milliseconds before the agent's C{initialize} is answered).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

USAGE = """usage: gasoline [--version] <command> [options]

commands:
  serve     run the daemon in the foreground (twistd -n gasoline [options])
  setup     register the connector with an MCP client: claude, claude-desktop, cursor,
            vscode, windsurf (its command line where it has one, else its config file;
            --print shows it and changes nothing; gasoline setup --help)
  connect   stdio MCP connector: forwards an agent's MCP session to the daemon
            (gasoline connect --help)
  browser   start Chromium with Gasoline's extension, already paired with the daemon
            (started if none runs) and tracking the opened tab
            (gasoline browser [URL] [--headless] [--pilot] [--track-all] [--detach] ...; --help)
  identity  print the running daemon's identity fingerprint, which the extension's popup asks
            you to compare when pairing (never creates a key)
  pair      the extension this daemon pins: list it and refused ones, accept another
            (gasoline pair [accept FINGERPRINT | forget] [--state-dir DIR]
            [--port N | --url URL]: a named daemon's state dir is the one its /health
            names, its identity checked)
  doctor    run the daemon's health checks (configure doctor) without an agent;
            exit status 1 when a check fails
  status    is a daemon running, where, which version, pid, who is connected
            (exit status 3 when none is)
  stop      stop a daemon gracefully (the pid its /health reports)
  client-proof  print the headers an HTTP MCP client sends to act as a fixed client id
            (gasoline client-proof ID [--port N | --url URL | --state-dir DIR] [--json]):
            X-Gasoline-Client and its X-Gasoline-Client-Proof, made with the daemon's
            <state-dir>/client-key

doctor, status, stop and identity act only on the daemon named by --port N, --url URL or
--state-dir DIR (default: $GASOLINE_STATE_DIR, else the platform's state dir, whose daemon.json
names the daemon running for it); they never fall back to another port (gasoline COMMAND --help).
"""


def main(argv: list[str] | None = None) -> int:
    """Run one command. A reader that goes away (C{gasoline doctor | head}) ends the command
    quietly, without a C{BrokenPipeError} traceback."""
    try:
        code = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # Nothing more can reach the reader: point stdout at /dev/null so the interpreter's own
        # flush at exit fails no more (the recipe of Python's signal module documentation).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return code


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        (sys.stdout if args else sys.stderr).write(USAGE)  # asked for: stdout, exit 0
        return 0 if args else 2
    if args[0] in ("-V", "--version", "version"):
        print(f"gasoline {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command == "serve":
        from twisted.python.usage import UsageError
        from twisted.scripts.twistd import ServerOptions, runApp

        # What twistd's run() does, with the arguments given rather than read from sys.argv.
        config = ServerOptions()
        try:
            config.parseOptions(["-n", "gasoline", *rest])
        except UsageError as e:
            print(config)
            print(f"gasoline serve: {e}")
            return 1
        runApp(config)
        return 0
    if command == "connect":
        # Answer the agent's initialize before importing Twisted (gasoline.connect.fast).
        from gasoline.connect.fast import first_exchange

        fast = argv is None and os.environ.get("GASOLINE_CONNECT_FAST", "1") != "0"
        prelude = first_exchange(rest) if fast else None
        from gasoline.connect.main import main as connect_main

        return connect_main(rest, prelude=prelude)
    if command == "browser":
        from gasoline.launch.main import main as browser_main

        return browser_main(rest)
    if command == "setup":
        from gasoline.setup_cli import main as setup_main  # standard library only

        return setup_main(rest)
    if command == "pair":
        return _pair(rest)
    if command == "client-proof":
        return _client_proof(rest)
    if command in ("doctor", "status", "stop", "identity"):
        from gasoline.admin_cli import COMMANDS  # standard library only

        return COMMANDS[command](rest)
    sys.stderr.write(f"gasoline: unknown command {command!r}\n\n{USAGE}")
    return 2


PAIR_USAGE = ("gasoline pair [accept FINGERPRINT | forget] [--state-dir DIR] "
              "[--port N | --url URL]")


def _pair(rest: list[str]) -> int:
    """C{gasoline pair}: edits the pin file of the state dir; with C{--port} / C{--url}, only once
    the daemon answering there is the one whose identity that state dir holds (never another
    daemon's pins)."""
    import argparse
    from pathlib import Path

    from gasoline.core.trust.pins import pair_command

    p = argparse.ArgumentParser(prog="gasoline pair", usage=PAIR_USAGE)
    p.add_argument("action", nargs="?", choices=("accept", "forget"))
    p.add_argument("fingerprint", nargs="?")
    p.add_argument("--state-dir", type=Path)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--port", "-p", type=int)
    where.add_argument("--url")
    try:
        opts = p.parse_args(rest)
    except SystemExit as e:
        return int(e.code or 0) if e.code in (0, None) else 2
    if (opts.action == "accept") != (opts.fingerprint is not None):
        sys.stderr.write("usage: " + PAIR_USAGE + "\n")
        return 2
    from gasoline.config import default_state_dir

    if opts.port is not None or opts.url:
        state_dir = _named_state_dir("pair", opts)
        if state_dir is None:
            return 1
    else:
        state_dir = opts.state_dir or default_state_dir()
    code, text = pair_command(state_dir, opts.action, opts.fingerprint)
    (sys.stdout if code == 0 else sys.stderr).write(text + "\n")
    return code


CLIENT_PROOF_USAGE = ("gasoline client-proof CLIENT_ID [--state-dir DIR] [--port N | --url URL] "
                      "[--json]")


def _client_proof(rest: list[str]) -> int:
    """C{gasoline client-proof}: the two headers for a client id, from the state dir's client key
    (made by the daemon at its first start; never made here)."""
    import argparse
    import json
    import re
    from pathlib import Path

    from gasoline.common import (
        CLIENT_PROOF_HEADER,
        client_key_path,
        client_proof,
        default_state_dir,
        read_client_key,
    )

    p = argparse.ArgumentParser(prog="gasoline client-proof", usage=CLIENT_PROOF_USAGE,
                                description="Print the headers an HTTP MCP client sends to act "
                                "as CLIENT_ID (docs/security.md, 'Who may act as a client id').")
    p.add_argument("client_id", metavar="CLIENT_ID")
    p.add_argument("--state-dir", type=Path,
                   help="the daemon's state dir (default: $GASOLINE_STATE_DIR, else the "
                   "platform's)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--port", "-p", type=int,
                       help="the daemon on this port of 127.0.0.1: its state dir is the one its "
                       "/health names, its identity checked")
    where.add_argument("--url", help="the daemon at this base URL (as --port)")
    p.add_argument("--json", action="store_true", help="print the headers as a JSON object")
    try:
        opts = p.parse_args(rest)
    except SystemExit as e:
        return int(e.code or 0) if e.code in (0, None) else 2
    cid = opts.client_id
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$", cid) or cid == "stateless" \
            or cid.startswith(("gasoline-extension", "anon-")):
        sys.stderr.write("gasoline client-proof: a client id is 1-64 characters of letters, "
                         "digits, '.', '_' or '-' (not starting with '.' or '-'; not 'stateless', "
                         "anon-... nor gasoline-extension...: the daemon reserves those)\n")
        return 2
    if opts.port is not None or opts.url:
        found = _named_state_dir("client-proof", opts)
        if found is None:
            return 1
        state_dir = found
    else:
        state_dir = opts.state_dir or default_state_dir()
    try:
        key = read_client_key(state_dir)
    except FileNotFoundError:
        sys.stderr.write(f"gasoline client-proof: {client_key_path(state_dir)} does not exist: "
                         "the daemon makes it at its first start (start it, or pass the "
                         "--state-dir it runs with)\n")
        return 1
    except (OSError, ValueError) as e:
        sys.stderr.write(f"gasoline client-proof: cannot read {client_key_path(state_dir)}: "
                         f"{(e.strerror if isinstance(e, OSError) else None) or e}\n")
        return 1
    headers = {"X-Gasoline-Client": cid, CLIENT_PROOF_HEADER: client_proof(key, cid)}
    if opts.json:
        sys.stdout.write(json.dumps(headers) + "\n")
    else:
        sys.stdout.write("".join(f"{k}: {v}\n" for k, v in headers.items()))
    return 0


def _named_state_dir(command: str, opts: Any) -> Path | None:
    """The state dir of the daemon C{--port} / C{--url} names: C{--state-dir} if given, else the
    one its C{/health} names; its identity must be the one the daemon offers (never another
    daemon's pins or key: L{gasoline.daemon_dir}). None, the reason on stderr, when there is
    none."""
    from gasoline.daemon_dir import StateDirProblem, state_dir_at

    url = opts.url.rstrip("/") if opts.url else f"http://127.0.0.1:{opts.port}"
    try:
        return state_dir_at(url, opts.state_dir, os.environ.get("GASOLINE_API_KEY") or None)
    except StateDirProblem as e:
        sys.stderr.write(f"gasoline {command}: {e}\n")
        return None


if __name__ == "__main__":
    raise SystemExit(main())

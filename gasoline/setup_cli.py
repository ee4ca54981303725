"""
C{gasoline setup CLIENT}: register the connector (C{gasoline connect}) with an MCP client::

    gasoline setup claude|claude-desktop|cursor|vscode|windsurf [--scope user|project]
                   [--name gasoline] [--port N] [--state-dir DIR] [--print] [--config PATH]

What is registered is this installation's own connector, by absolute path (the C{gasoline} script
beside this interpreter, else C{<python> -m gasoline}), with C{connect} and the options given here.
A client with a command line that registers servers is asked to do it (C{claude mcp add},
C{code --add-mcp}) when that command is on C{PATH}; otherwise its JSON config file is merged:
the C{gasoline} entry is added or replaced, everything else in the file is kept, and the file is
replaced atomically. C{--print} prints what would be registered (the command, or the JSON) and
changes nothing. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

#: The clients, each with its configuration file(s) (user scope, project scope: relative to the
#: working directory) and the key under which servers are listed.
CLIENTS: dict[str, dict[str, Any]] = {
    "claude": {"title": "Claude Code", "cli": "claude", "key": "mcpServers",
               "user": lambda home: home / ".claude.json", "project": Path(".mcp.json")},
    "claude-desktop": {"title": "Claude Desktop", "cli": None, "key": "mcpServers",
                       "user": lambda home: _desktop_config(home), "project": None},
    "cursor": {"title": "Cursor", "cli": None, "key": "mcpServers",
               "user": lambda home: home / ".cursor" / "mcp.json",
               "project": Path(".cursor") / "mcp.json"},
    "vscode": {"title": "VS Code", "cli": "code", "key": "servers", "user": None,
               "project": Path(".vscode") / "mcp.json"},
    "windsurf": {"title": "Windsurf", "cli": None, "key": "mcpServers",
                 "user": lambda home: home / ".codeium" / "windsurf" / "mcp_config.json",
                 "project": None},
}

USAGE = ("gasoline setup {" + ",".join(CLIENTS) + "} [--scope user|project] [--name NAME] "
         "[--port N] [--state-dir DIR] [--api-key KEY] [--print] [--config PATH]")


def _desktop_config(home: Path) -> Path:
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
    if sys.platform == "win32":
        base = Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
        return base / "Claude" / "claude_desktop_config.json"
    base = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    return base / "Claude" / "claude_desktop_config.json"


def connector_command(opts: argparse.Namespace) -> list[str]:
    """This installation's connector, by absolute path, with the options given."""
    script = Path(sys.executable).with_name("gasoline.exe" if sys.platform == "win32"
                                            else "gasoline")
    argv = [str(script)] if script.exists() else [str(Path(sys.executable).absolute()), "-m",
                                                  "gasoline"]
    argv.append("connect")
    if opts.port is not None:
        argv += ["--port", str(opts.port)]
    if opts.state_dir is not None:
        argv += ["--state-dir", str(Path(opts.state_dir).expanduser().absolute())]
    return argv


def server_entry(client: str, argv: list[str], api_key: str | None) -> dict[str, Any]:
    """The JSON a client's config lists for the connector."""
    entry: dict[str, Any] = {"command": argv[0], "args": argv[1:]}
    if client == "vscode":
        entry = {"type": "stdio", **entry}
    if api_key:
        entry["env"] = {"GASOLINE_API_KEY": api_key}
    return entry


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gasoline setup", usage=USAGE,
        description="Register this installation's connector (gasoline connect) with an MCP "
        "client: through its command line where it has one on PATH, else in its config file.")
    p.add_argument("client", choices=sorted(CLIENTS), metavar="CLIENT",
                   help="one of: " + ", ".join(CLIENTS))
    p.add_argument("--scope", choices=("user", "project"), default=None,
                   help="user (every project; the default where the client has it) or project "
                   "(this directory's config)")
    p.add_argument("--name", default="gasoline", help="the server's name in the client "
                   "(default: gasoline)")
    p.add_argument("--port", "-p", type=int, help="the daemon's port (default: the connector's)")
    p.add_argument("--state-dir", help="the daemon's state dir (default: the connector's)")
    p.add_argument("--api-key", default=None, help="for a daemon started with --api-key (set "
                   "as GASOLINE_API_KEY in the entry)")
    p.add_argument("--print", action="store_true", dest="print_only",
                   help="print what would be registered; change nothing")
    p.add_argument("--config", type=Path, help="the client's config file to merge into "
                   "(instead of its usual one)")
    return p


def main(argv: list[str]) -> int:
    p = _parser()
    try:
        opts = p.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) if e.code in (0, None) else 2
    client = CLIENTS[opts.client]
    cli = shutil.which(client["cli"]) if client["cli"] and opts.config is None else None
    scope = opts.scope or ("user" if client["user"] is not None or cli else "project")
    # Claude Code's command line knows both scopes; VS Code's (code --add-mcp) the user's only.
    use_cli = cli is not None and (opts.client == "claude" or scope == "user")
    if not use_cli and client[scope] is None and opts.config is None:
        other = "user" if scope == "project" else "project"
        sys.stderr.write(f"gasoline setup: {client['title']} has no {scope} config file "
                         + (f"(and its `{client['cli']}` command is not on PATH) "
                            if client["cli"] else "")
                         + f"that this command writes; use --scope {other} or --print\n")
        return 2
    argv_ = connector_command(opts)
    entry = server_entry(opts.client, argv_, opts.api_key)
    if use_cli:
        assert cli is not None
        command = _cli_command(opts.client, cli, opts.name, scope, argv_, entry, opts.api_key)
        if opts.print_only:
            print(" ".join(_quote(a) for a in command))
            return 0
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            sys.stderr.write(f"gasoline setup: {' '.join(command[:3])} failed (exit "
                             f"{done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}"
                             "\n")
            return 1
        print(f"gasoline setup: registered {opts.name!r} with {client['title']} ({client['cli']} "
              f"command line, {scope} scope): {' '.join(argv_)}")
        return 0
    path = opts.config or _config_path(client, scope)
    if opts.print_only:
        print(json.dumps({client["key"]: {opts.name: entry}}, indent=2))
        print(f"(merge into {path})", file=sys.stderr)
        return 0
    try:
        _merge(path, client["key"], opts.name, entry)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"gasoline setup: cannot update {path}: {e}\n")
        return 1
    print(f"gasoline setup: registered {opts.name!r} with {client['title']} in {path}: "
          f"{' '.join(argv_)}")
    if opts.client in ("claude-desktop", "cursor", "windsurf"):
        print(f"restart {client['title']} (or reload its MCP servers) to start it")
    return 0


def _config_path(client: dict[str, Any], scope: str) -> Path:
    where: Path | Callable[[Path], Path] = client[scope]
    if scope == "user":
        assert callable(where)
        return where(Path.home())
    assert isinstance(where, Path)
    return Path.cwd() / where


def _cli_command(name: str, cli: str, server: str, scope: str, argv: list[str],
                 entry: dict[str, Any], api_key: str | None) -> list[str]:
    if name == "claude":
        command = [cli, "mcp", "add", "--scope", scope]
        if api_key:
            command += ["--env", f"GASOLINE_API_KEY={api_key}"]
        return command + [server, "--", *argv]
    # VS Code: `code --add-mcp JSON` adds it to the user profile.
    return [cli, "--add-mcp", json.dumps({"name": server, **entry})]


def _quote(arg: str) -> str:
    return shlex.quote(arg)


def _merge(path: Path, key: str, name: str, entry: dict[str, Any]) -> None:
    """Add or replace C{key.name} in the JSON object at C{path} (created when missing), keeping
    everything else; written atomically (a temporary file, then a rename).

    @raise ValueError: the file is not a JSON object (it is left as it is)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    data = json.loads(text) if text.strip() else {}
    if not isinstance(data, dict):
        raise ValueError("it does not hold a JSON object")
    servers = data.get(key)
    if servers is None:
        servers = data[key] = {}
    if not isinstance(servers, dict):
        raise ValueError(f"its {key!r} is not a JSON object")
    servers[name] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)

"""Imports live at module level: every C{import} inside a function of the package is listed below
with the reason it cannot be at the top of its module.

An import hidden in a function is a place where a library upgrade (Twisted, cryptography) breaks
at run time, on the first call, instead of at start-up; and it hides a module's dependencies from
its reader. The reasons that keep one inside a function:

 - an entry point's per-command imports (what only that command needs, so that the others, the
   connector's first exchange above all, do not load it), and the reactor, which twistd installs
   before the plugin's C{makeService} runs;
 - a module that a platform may lack;
 - a lazy load whose price is measured and stated in docs/operations.md ("What is loaded on first
   use instead of at start"; tests/test_idle_memory.py checks that an idle daemon has not loaded
   them).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import gasoline

ROOT = Path(gasoline.__file__).parent

_COMMAND = ("an entry point's per-command import: loaded only by the command that needs it "
            "(gasoline connect answers the agent's initialize before Twisted is imported)")
_REACTOR = ("the reactor: twistd installs the one the user chose before makeService runs; "
            "importing twisted.internet.reactor earlier would install the default one")
_POSIX = "a module that only exists on POSIX systems; the caller handles its absence"
_CTYPES = ("ctypes may be missing from a Python build; only Linux has what it calls (prctl, "
           "unshare), and the caller handles the failure")
_FIRST_EXCHANGE = ("the connector's first exchange (client_rules.py, used by connect/fast.py) "
                   "imports nothing beyond the standard library's socket/signal/hashlib/hmac/"
                   "binascii/os; platformdirs only when the default state dir is needed")
_AUTOBAHN = ("autobahn (with click, cbor2 and txaio) at the first /cdp or /extension/cdp "
             "request: imported at start it adds 4.3 MiB to the idle daemon's RSS "
             "(docs/operations.md)")
_PROXY = ("the session proxy (and treq, Twisted's HTTP client, which it imports) only with "
          "--proxy-config: imported at start, with autobahn, another 1.2 MiB of idle RSS "
          "(docs/operations.md)")

#: (module of the package, imported module, imported name or "" for C{import module}): why.
ALLOWED: dict[tuple[str, str, str], str] = {
    **{("cli.py", module, name): _COMMAND for module, name in (
        ("twisted.python.usage", "UsageError"),
        ("twisted.scripts.twistd", "ServerOptions"),
        ("twisted.scripts.twistd", "runApp"),
        ("gasoline.connect.fast", "first_exchange"),
        ("gasoline.connect.main", "main"),
        ("gasoline.launch.main", "main"),
        ("gasoline.setup_cli", "main"),
        ("gasoline.admin_cli", "COMMANDS"),
        ("argparse", ""),
        ("json", ""),
        ("re", ""),
        ("pathlib", "Path"),
        ("gasoline.core.trust.pins", "pair_command"),
        ("gasoline.config", "default_state_dir"),
        ("gasoline.common", "CLIENT_PROOF_HEADER"),
        ("gasoline.common", "client_key_path"),
        ("gasoline.common", "client_proof"),
        ("gasoline.common", "default_state_dir"),
        ("gasoline.common", "read_client_key"),
        ("gasoline.daemon_dir", "StateDirProblem"),
        ("gasoline.daemon_dir", "state_dir_at"),
    )},
    ("tap.py", "twisted.internet", "reactor"): _REACTOR,
    ("tap.py", "resource", ""): _POSIX,
    ("tap.py", "gasoline.proxy.config", "ProxyConfigError"): _PROXY,
    ("tap.py", "gasoline.proxy.config", "load"): _PROXY,
    ("tap.py", "gasoline.proxy.netpolicy", "check"): _PROXY,
    ("app.py", "gasoline.proxy.config", "load"): _PROXY,
    ("app.py", "gasoline.proxy.metrics", "call_observer"): _PROXY,
    ("app.py", "gasoline.proxy.metrics", "register"): _PROXY,
    ("app.py", "gasoline.proxy.session", "ProxyManager"): _PROXY,
    ("http/relay.py", "gasoline.http", "relay_ws"): _AUTOBAHN,
    ("proxy/_watchdog.py", "ctypes", ""): _CTYPES,
    ("client_rules.py", "platformdirs", ""): _FIRST_EXCHANGE,
}


def function_level_imports(source: str) -> list[tuple[str, str]]:
    """C{(imported module, name)} of each import inside a function (or a function inside a
    class or another function) of C{source}; C{name} is C{""} for C{import module}."""
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import) and in_function:
                found.extend((alias.name, "") for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and in_function:
                module = "." * child.level + (child.module or "")
                found.extend((module, alias.name) for alias in child.names)
            else:
                visit(child, in_function or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(source), False)
    return found


def _package_imports() -> set[tuple[str, str, str]]:
    return {(path.relative_to(ROOT).as_posix(), module, name)
            for path in sorted(ROOT.rglob("*.py"))
            for module, name in function_level_imports(path.read_text(encoding="utf-8"))}


def test_every_function_level_import_has_a_stated_reason():
    found = _package_imports()
    unlisted = sorted(found - ALLOWED.keys())
    assert unlisted == [], f"imports inside functions with no reason listed: {unlisted}"


def test_the_allow_list_has_no_stale_entry():
    stale = sorted(ALLOWED.keys() - _package_imports())
    assert stale == [], f"listed but no longer inside a function: {stale}"


def test_the_scanner_finds_a_planted_import():
    source = (
        "import os\n"
        "from twisted.internet import defer\n"
        "if os.name == 'nt':\n"
        "    import msvcrt\n"
        "def f():\n"
        "    import json\n"
        "    from twisted.internet import reactor as r\n"
        "class C:\n"
        "    def m(self):\n"
        "        def inner():\n"
        "            from . import sibling\n"
        "    async def a(self):\n"
        "        if True:\n"
        "            from ..pkg.mod import name\n"
    )
    assert function_level_imports(source) == [
        ("json", ""), ("twisted.internet", "reactor"), (".", "sibling"), ("..pkg.mod", "name")]


def test_a_planted_import_in_the_package_fails_the_check(tmp_path, monkeypatch):
    """The package scan itself (not only the parser) reports a new one."""
    package = tmp_path / "gasoline"
    (package / "tools").mkdir(parents=True)
    (package / "tools" / "planted.py").write_text("def f():\n    import orjson\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", package)
    assert _package_imports() == {("tools/planted.py", "orjson", "")}
    try:
        test_every_function_level_import_has_a_stated_reason()
    except AssertionError as e:
        assert "tools/planted.py" in str(e)
    else:
        raise AssertionError("the planted import was not reported")

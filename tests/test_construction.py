"""Construction, not mutation: the composition root (C{gasoline.app}) and the tap
(C{gasoline.tap}) pass every collaborator when they build an object and never set an attribute
(or an item of an attribute, C{root.mounts[b"x"] = ...}) on an object afterwards; the built
daemon's hooks are the ones passed at construction."""

from __future__ import annotations

import ast
import inspect

import pytest
from twisted.internet.task import Clock

import gasoline.app
import gasoline.tap
from gasoline.app import Config, build
from gasoline.metrics import Metrics

#: The modules that build the daemon.
COMPOSITION = [gasoline.app, gasoline.tap]


def _mutations(name: str, source: str) -> list[str]:
    """Every C{x.y = ...}, C{x.y += ...} and C{x.y[k] = ...} whose C{x} is not C{self}."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            base = target.value if isinstance(target, ast.Subscript) else target
            if not isinstance(base, ast.Attribute):
                continue
            owner = base.value
            if isinstance(owner, ast.Name) and owner.id == "self":
                continue
            found.append(f"{name}:{node.lineno}: {ast.unparse(target)} = ...")
    return found


@pytest.mark.parametrize("module", COMPOSITION, ids=lambda m: m.__name__)
def test_the_composition_sets_nothing_on_a_built_object(module):
    assert _mutations(module.__name__, inspect.getsource(module)) == []


def test_the_check_finds_a_mutation():
    """The check above can fail: it finds each form in a module that has them."""
    source = ("def f(root, router, x):\n"
              "    root.mounts[b'a'] = 1\n"
              "    router.on_latency = 2\n"
              "    x.count += 1\n"
              "    local = {}\n"
              "    local[b'a'] = 1\n")
    assert [m.split(": ", 1)[1] for m in _mutations("fake", source)] == [
        "root.mounts[b'a'] = ...", "router.on_latency = ...", "x.count = ..."]


def test_the_built_daemon_has_its_hooks_from_construction(tmp_path):
    metrics = Metrics()
    app = build(Config(state_dir=tmp_path, persist=False), Clock(), metrics=metrics)
    root = app.resource
    assert root.on_response == metrics.request_done
    assert app.router.on_latency == metrics.observe_query
    assert app.extension.identity is not None
    assert root.mounts[b"mcp"].session_binder is None  # no --proxy-config: nothing to bind
    assert set(root.mounts) >= {b"", b"ui", b"health", b"clients", b"mcp", b"pairing",
                                b"session", b"metrics", b"events", b"json", b"status", b"cdp",
                                b"extension"}


# -- no private names of other libraries ----------------------------------------------------------

#: Underscore names that are documented public API.
DOCUMENTED = {"os._exit", "sys._getframe"}
#: Known, with the reason it is not fixed here.
PENDING = {
    # --listen is validated with Twisted's endpoint-string parser; the option validation is being
    # reworked separately (issue 31) and moves with it.
    ("gasoline/tap.py", "twisted.internet.endpoints._parseServer"),
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _foreign_private_names(path: str, source: str) -> set[tuple[str, str]]:
    """C{(path, name)} for each private name of another library this source imports or reads
    or writes through an imported module (C{import _json}, C{from twisted.x import _y},
    C{from twisted.x._y import z}, C{endpoints._name})."""
    found = set()
    foreign: dict[str, str] = {}  # local name -> what it is
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "gasoline":
                    continue
                if any(_private(part) for part in alias.name.split(".")):
                    found.add((path, alias.name))
                foreign[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "gasoline" or node.module == "__future__":
                continue
            if any(_private(part) for part in node.module.split(".")):
                found.add((path, node.module))
            for alias in node.names:
                if _private(alias.name):
                    found.add((path, f"{node.module}.{alias.name}"))
                foreign[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in foreign):
            name = f"{foreign[node.value.id]}.{node.attr}"
            if name not in DOCUMENTED:
                found.add((path, name))
    return found


def test_no_private_name_of_another_library_is_used():
    """Every module of the package: no private module, class, function or module global of
    Python's, Twisted's or any other library's is imported, read or written (they move
    without notice: CPython 3.12 renamed C{_sha256})."""
    from pathlib import Path

    root = Path(gasoline.app.__file__).parent
    found = set()
    for file in sorted(root.rglob("*.py")):
        path = f"gasoline/{file.relative_to(root).as_posix()}"
        found |= _foreign_private_names(path, file.read_text(encoding="utf-8"))
    assert found == PENDING


def test_the_private_name_check_finds_each_form():
    source = ("import _json\n"
              "from _sha256 import sha256\n"
              "from twisted.web.client import _HTTP11ClientFactory\n"
              "from twisted.internet import endpoints, posixbase\n"
              "import os\n"
              "endpoints._parseServer('tcp:0', None)\n"
              "posixbase._tls = None\n"
              "os._exit(0)\n"
              "from gasoline.core import _private_helper\n")
    assert _foreign_private_names("m.py", source) == {
        ("m.py", "_json"), ("m.py", "_sha256"), ("m.py", "twisted.web.client._HTTP11ClientFactory"),
        ("m.py", "twisted.internet.endpoints._parseServer"),
        ("m.py", "twisted.internet.posixbase._tls")}

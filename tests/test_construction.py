"""Construction, not mutation: the composition root (C{gasoline.app}) and the tap
(C{gasoline.tap}) pass every collaborator when they build an object and never set an attribute
(or an item of an attribute, C{root.mounts[b"x"] = ...}) on an object afterwards; the built
daemon's hooks are the ones passed at construction. The same scan covers every other module of
the package but those listed in C{NOT_YET}."""

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


def _unpacked(targets: list[ast.expr]) -> list[ast.expr]:
    """The assignment targets inside tuples and lists (C{a.x, (b.y, *c.z) = ...})."""
    out: list[ast.expr] = []
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            out += _unpacked(list(target.elts))
        elif isinstance(target, ast.Starred):
            out += _unpacked([target.value])
        else:
            out.append(target)
    return out


def _mutations(name: str, source: str) -> list[str]:
    """Every C{x.y = ...}, C{x.y += ...} and C{x.y[k] = ...} whose C{x} is not C{self}, tuple
    targets included (C{x.y, x.z = ...})."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in _unpacked(targets):
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


#: Modules of gasoline/ that still set an attribute (or an item of one) on an object other than
#: C{self}: hooks patched on after building (C{ctx.tool = ...}, C{timer.clock = ...},
#: C{channel.on_proven = ...}), request facts stamped on the request, and domain code updating
#: the records it owns (C{state.gone_at = now}, C{session.closed = True}). The scan skips them;
#: once one passes, drop it from here (C{_mutations} of a module lists what is left).
NOT_YET = frozenset({
    "_tls.py", "admin_cli.py", "cli.py", "connect/bridge.py", "connect/client.py",
    "connect/main.py", "core/clients/registry.py", "core/extension/commands.py", "core/storage/files.py", "core/clients/noise.py",
    "core/trust/pairing.py", "core/storage/persist.py", "core/redaction/scan.py", "core/extension/router.py",
    "core/storage/screenshots.py", "core/storage/store.py", "core/workers.py", "tools/_interactive_list.py",
    "http/ingest.py", "http/mcp_http.py", "http/mcp_sse.py", "http/relay_ws.py", "mcp/outgoing.py",
    "mcp/server.py", "proxy/remote.py", "proxy/routing.py", "proxy/session.py",
    "relay/hub.py", "relay/sessions.py", "relay/targets.py", "streaming/delivery.py",
    "streaming/dispatch.py", "streaming/hub.py", "streaming/subscription.py", "testing.py",
    "tools/__init__.py", "tools/_commands.py", "tools/_links.py", "tools/_page_views.py",
    "tools/_playback.py", "tools/_reader.py", "tools/_screen_recording.py", "tools/_shared.py",
    "tools/_snapshot.py", "tools/_state.py", "tools/aliases.py", "tools/analyze.py",
    "tools/configure.py", "tools/context.py",
})


def _package_modules() -> list[str]:
    from pathlib import Path

    root = Path(gasoline.app.__file__).parent
    return sorted(f.relative_to(root).as_posix() for f in root.rglob("*.py"))


@pytest.mark.parametrize("module", [m for m in _package_modules() if m not in NOT_YET])
def test_no_module_of_the_package_sets_anything_on_another_object(module):
    """The rule of the composition root, over every module of gasoline/ but L{NOT_YET}:
    collaborators and hooks arrive at construction; an object changes its own attributes
    (C{self.x = ...}), or through its own methods, never from outside."""
    from pathlib import Path

    source = (Path(gasoline.app.__file__).parent / module).read_text(encoding="utf-8")
    assert _mutations(module, source) == []


def test_most_of_the_package_keeps_the_construction_rule():
    """The scan covers the whole package, and the modules outside it are the smaller part."""
    modules = _package_modules()
    assert len(modules) > 150 and {"app.py", "tap.py", "core/interfaces.py"} <= set(modules)
    assert len(NOT_YET & set(modules)) < len(modules) / 2


def test_the_check_finds_a_mutation():
    """The check above can fail: it finds each form in a module that has them."""
    source = ("def f(root, router, x):\n"
              "    root.mounts[b'a'] = 1\n"
              "    router.on_latency = 2\n"
              "    x.count += 1\n"
              "    local = {}\n"
              "    local[b'a'] = 1\n"
              "    x.status, (self.mine, *x.rest) = 1, (2, 3)\n")
    assert [m.split(": ", 1)[1] for m in _mutations("fake", source)] == [
        "root.mounts[b'a'] = ...", "router.on_latency = ...", "x.count = ...",
        "x.status = ...", "x.rest = ..."]


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

#: Where the scans look: the package, its tests and its benchmarks.
SCANNED = ("gasoline", "tests", "bench")
#: Underscore names that are documented public API.
DOCUMENTED = {"os._exit", "sys._getframe"}
#: Functions that read or write an attribute named by a string.
_BY_NAME = {"getattr", "setattr", "hasattr", "delattr"}
#: Known, with the reason it is not fixed here.
PENDING = {
    # The MCP SDK's client factory; httpx2.AsyncClient(headers=..., timeout=httpx2.Timeout(30,
    # read=300)) is the public equivalent. Left while the client-proof work rewrites these lines.
    ("tests/test_tools_extension_roundtrip.py", "mcp.shared._httpx_utils"),
    ("tests/e2e/test_extension_mcp.py", "mcp.shared._httpx_utils"),
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _sources() -> dict[str, str]:
    """C{path -> source} of every Python file of L{SCANNED}."""
    from pathlib import Path

    repo = Path(gasoline.app.__file__).parent.parent
    return {file.relative_to(repo).as_posix(): file.read_text(encoding="utf-8")
            for folder in SCANNED for file in sorted((repo / folder).rglob("*.py"))}


def _own_private_names(sources: dict[str, str]) -> set[str]:
    """Every private name these sources define: their modules, functions, classes, names bound by
    assignment (module, class or local), and attributes assigned on C{self} or C{cls}."""
    from pathlib import PurePosixPath

    modules = {PurePosixPath(path).stem for path in sources}
    own = set()
    for source in sources.values():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    for part in ast.walk(target):
                        if isinstance(part, ast.Name):
                            own.add(part.id)
                        elif (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)
                              and part.value.id in ("self", "cls")):
                            own.add(part.attr)
    return {name for name in own if _private(name)} | modules


def _foreign_private_names(path: str, source: str, own: set[str]) -> set[tuple[str, str]]:
    """C{(path, name)} for each private name of another library this source uses:
      - imports one (C{import _json}, C{from twisted.x import _y}, C{from twisted.x._y import z});
      - reads or writes one through an imported module (C{endpoints._parseServer});
      - reads or writes an attribute C{x._name} (C{self._name} too: an inherited one), or names
        one to C{getattr}/C{setattr}/C{hasattr}/C{delattr}, that the project itself (C{own})
        never defines: then it is another library's (C{channel._requestProducer},
        C{getattr(channel, "_waitingForTransport")}, C{channel._gasoline_no_delay = True}).
    """
    found = set()
    foreign: dict[str, str] = {}  # local name -> the other library's module or object
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in {"gasoline", *own}:
                    continue
                if any(_private(part) for part in alias.name.split(".")):
                    found.add((path, alias.name))
                foreign[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in {"gasoline", "tests", "bench", "__future__", *own}:
                continue
            if any(_private(part) for part in node.module.split(".")):
                found.add((path, node.module))
            for alias in node.names:
                if _private(alias.name):
                    found.add((path, f"{node.module}.{alias.name}"))
                foreign[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in foreign:
                name = f"{foreign[node.value.id]}.{node.attr}"
                if name not in DOCUMENTED:
                    found.add((path, name))
            elif node.attr not in own:
                found.add((path, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in _BY_NAME and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value) and node.args[1].value not in own):
            found.add((path, f"{node.func.id}({ast.unparse(node.args[0])}, "
                             f"{node.args[1].value!r})"))
    return found


def test_no_private_name_of_another_library_is_used():
    """Every module of the package, its tests and benchmarks: no private module, class,
    function, module global or attribute of Python's, Twisted's or any other library's is
    imported, read or written (they move without notice: CPython 3.12 renamed C{_sha256})."""
    sources = _sources()
    own = _own_private_names(sources)
    found = set()
    for path, source in sources.items():
        found |= _foreign_private_names(path, source, own)
    assert found == PENDING
    assert len(sources) > 300 and {"_buffer", "_private", "_foreign_private_names"} <= own


def test_the_private_name_check_finds_each_form():
    source = ("import _json\n"
              "from _sha256 import sha256\n"
              "from twisted.web.client import _HTTP11ClientFactory\n"
              "from twisted.internet import endpoints, posixbase\n"
              "import os\n"
              "endpoints._parseServer('tcp:0', None)\n"
              "posixbase._tls = None\n"
              "os._exit(0)\n"
              "from gasoline.core import _private_helper\n"
              "paused = getattr(channel, '_waitingForTransport', False)\n"
              "channel._gasoline_no_delay = True\n"
              "class Channel(HTTPChannel):\n"
              "    def f(self):\n"
              "        self._mine = 1\n"
              "        return self._requestProducer, self._mine, other._mine\n")
    assert _foreign_private_names("m.py", source, own={"_mine"}) == {
        ("m.py", "_json"), ("m.py", "_sha256"), ("m.py", "twisted.web.client._HTTP11ClientFactory"),
        ("m.py", "twisted.internet.endpoints._parseServer"),
        ("m.py", "twisted.internet.posixbase._tls"),
        ("m.py", "getattr(channel, '_waitingForTransport')"),
        ("m.py", "channel._gasoline_no_delay"), ("m.py", "self._requestProducer")}


def _package_classes():
    """C{(path, class node, class)} for every class of the package (its modules imported)."""
    import importlib
    from pathlib import Path

    root = Path(gasoline.app.__file__).parent
    for file in sorted(root.rglob("*.py")):
        parts = file.relative_to(root).with_suffix("").parts
        if parts[-1] == "__main__":
            continue  # (runs the command line when imported)
        name = ".".join(("gasoline", *parts)).removesuffix(".__init__")
        module = importlib.import_module(name)
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and isinstance(getattr(module, node.name, None), type):
                yield f"gasoline/{file.relative_to(root).as_posix()}", node, getattr(module, node.name)


def _private_names_of_class(node: ast.ClassDef) -> set[str]:
    """The private names a class's own source defines or uses on C{self}/C{cls}."""
    names = set()
    for part in ast.walk(node):
        if (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)
                and part.value.id in ("self", "cls")):
            names.add(part.attr)
        elif isinstance(part, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(part.name)
    for statement in node.body:
        targets = (statement.targets if isinstance(statement, ast.Assign) else
                   [statement.target] if isinstance(statement, ast.AnnAssign) else [])
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return {name for name in names if _private(name)}


def _private_names_of_foreign_class(cls: type) -> set[str]:
    import re

    names = {name for name in vars(cls) if _private(name)}
    try:
        names |= set(re.findall(r"self\.(_\w+)", inspect.getsource(cls)))
    except (OSError, TypeError):  # a class without Python source
        pass
    return names


def test_no_subclass_touches_a_private_name_of_its_base_from_another_library():
    """The other half of the class: a package class that subclasses another library's class
    (C{HTTPChannel}, C{Request}, C{Service}) neither sets, reads nor overrides a private name
    that base class has (C{self._parsePOSTFormSubmission = False}, a C{_respond...} override),
    even when the package happens to use the same name elsewhere."""
    found = set()
    subclasses = 0
    for path, node, cls in _package_classes():
        bases = [base for base in cls.__mro__[1:]
                 if base.__module__.split(".")[0] not in ("gasoline", "builtins")]
        subclasses += bool(bases)
        mine = _private_names_of_class(node)
        for base in bases:
            for name in mine & _private_names_of_foreign_class(base):
                found.add((path, node.name, f"{base.__module__}.{base.__qualname__}.{name}"))
    assert found == set()
    assert subclasses > 20  # (the scan sees the package's subclasses of Twisted's classes)


def test_the_subclass_check_finds_a_private_attribute_of_the_base():
    from twisted.web.http import Request

    node = ast.parse("class R(Request):\n"
                     "    def __init__(self, *a):\n"
                     "        super().__init__(*a)\n"
                     "        self._parsePOSTFormSubmission = False\n"
                     "        self._mine = 1\n").body[0]
    assert isinstance(node, ast.ClassDef)
    mine = _private_names_of_class(node)
    assert mine == {"_parsePOSTFormSubmission", "_mine"}
    assert mine & _private_names_of_foreign_class(Request) == {"_parsePOSTFormSubmission"}

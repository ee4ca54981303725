"""Construction, not mutation: the composition root (C{gasoline.app}) and the tap
(C{gasoline.tap}) pass every collaborator when they build an object and never set an attribute
(or an item of an attribute, C{root.mounts[b"x"] = ...}) on an object afterwards; the built
daemon's hooks are the ones passed at construction. The same scan covers every other module of
the package."""

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


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _mutations(name: str, source: str) -> list[str]:
    """Every C{x.y = ...}, C{x.y += ...} and C{x.y[k] = ...} whose C{x} is not C{self}, tuple
    targets included (C{x.y, x.z = ...}), and the same written by name: C{setattr(x, ...)},
    C{delattr(x, ...)}, C{vars(x)[k] = ...}, C{x.__dict__[k] = ...} (C{x} not C{self})."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("setattr", "delattr") and node.args
                and not _is_self(node.args[0])):
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
            continue
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in _unpacked(targets):
            base = target.value if isinstance(target, ast.Subscript) else target
            if (isinstance(target, ast.Subscript) and isinstance(base, ast.Call)
                    and isinstance(base.func, ast.Name) and base.func.id == "vars"
                    and base.args and not _is_self(base.args[0])):
                found.append(f"{name}:{node.lineno}: {ast.unparse(target)} = ...")
                continue
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


#: Objects of other libraries configured, before use, the one way their library offers: no
#: constructor argument and no class attribute to subclass. C{(module, target)}; the scan of
#: that module passes over these targets only.
LIBRARY_CONFIGURED = frozenset({
    # google-re2's Options (a C++ struct): settable only by attribute, then passed to compile.
    ("core/clients/noise.py", "options.log_errors"), ("core/clients/noise.py", "options.case_sensitive"),
    ("core/clients/noise.py", "options.max_mem"),
    ("core/redaction/scan.py", "options.log_errors"), ("core/redaction/scan.py", "options.max_mem"),
    ("streaming/subscription.py", "options.log_errors"),
    ("streaming/subscription.py", "options.max_mem"),
    # The HTTP connection pool's own client factory, which Twisted builds: Factory.noisy (public)
    # is the only way to keep its "Starting factory" line per checked link out of the log.
    ("tools/_links.py", "factory.noisy"),
})


def _package_modules() -> list[str]:
    from pathlib import Path

    root = Path(gasoline.app.__file__).parent
    return sorted(f.relative_to(root).as_posix() for f in root.rglob("*.py"))


@pytest.mark.parametrize("module", _package_modules())
def test_no_module_of_the_package_sets_anything_on_another_object(module):
    """The rule of the composition root, over every module of gasoline/:
    collaborators and hooks arrive at construction; an object changes its own attributes
    (C{self.x = ...}), or through its own methods, never from outside."""
    from pathlib import Path

    source = (Path(gasoline.app.__file__).parent / module).read_text(encoding="utf-8")
    assert [m for m in _mutations(module, source)
            if (module, m.split(": ", 1)[1].removesuffix(" = ...")) not in LIBRARY_CONFIGURED] == []


def test_each_library_configured_target_is_still_there():
    """An entry of L{LIBRARY_CONFIGURED} names an assignment its module still has (a stale one
    would let a new mutation of that name through)."""
    from pathlib import Path

    root = Path(gasoline.app.__file__).parent
    for module, target in LIBRARY_CONFIGURED:
        found = _mutations(module, (root / module).read_text(encoding="utf-8"))
        assert f"{target} = ..." in [m.split(": ", 1)[1] for m in found], (module, target)


def test_the_scan_covers_the_whole_package():
    """The scan's module list is the package's: every module under gasoline/."""
    modules = _package_modules()
    assert len(modules) > 150 and {"app.py", "tap.py", "core/interfaces.py"} <= set(modules)


def test_the_check_finds_a_mutation():
    """The check above can fail: it finds each form in a module that has them."""
    source = ("def f(root, router, x):\n"
              "    root.mounts[b'a'] = 1\n"
              "    router.on_latency = 2\n"
              "    x.count += 1\n"
              "    local = {}\n"
              "    local[b'a'] = 1\n"
              "    x.status, (self.mine, *x.rest) = 1, (2, 3)\n"
              "    setattr(x, 'hidden', 1)\n"
              "    delattr(x, 'gone')\n"
              "    vars(x)['v'] = 1\n"
              "    x.__dict__['d'] = 1\n"
              "    setattr(self, 'mine', 1)\n"
              "    vars(self)['mine'] = 1\n")
    assert sorted(m.split(": ", 1)[1] for m in _mutations("fake", source)) == sorted([
        "root.mounts[b'a'] = ...", "router.on_latency = ...", "x.count = ...",
        "x.status = ...", "x.rest = ...", "setattr(x, 'hidden', 1)", "delattr(x, 'gone')",
        "vars(x)['v'] = ...", "x.__dict__['d'] = ..."])


def test_the_built_daemon_has_its_hooks_from_construction(tmp_path):
    metrics = Metrics()
    app = build(Config(state_dir=tmp_path, persist=False), Clock(), metrics=metrics)
    root = app.resource
    assert root.on_response == metrics.request_done
    assert app.router.on_latency == metrics.observe_query
    assert app.extension.identity is not None
    from gasoline.http.mcp_http import McpHTTP
    assert root.handlers.api(McpHTTP).session_binder is None  # no --proxy-config: nothing to bind
    assert {type(api).__name__ for api in root.handlers.apis} >= {
        "IngestAPI", "CursorReads", "StatusPage", "HealthAPI", "ClientsAPI", "McpHTTP",
        "PairingAPI", "ProxyAPI", "MetricsAPI", "EventsAPI", "RelayDiscoveryAPI", "RelaySockets"}


# -- no container of another object changed from outside -----------------------------------------

#: Methods that change a list, set, dict or deque in place.
_CONTAINER_CHANGES = frozenset({
    "append", "appendleft", "extend", "insert", "add", "update", "pop", "popitem", "popleft",
    "clear", "remove", "discard", "setdefault", "move_to_end", "sort", "reverse"})
#: C{(module, call)} that the scan below reads as a container change but that call a method of
#: one of the package's own classes (its contract, not a container's).
OWN_METHODS = {
    ("streaming/dispatch.py", "agent.inbox.append"),  # Inbox.append: bounded, sequence-numbered
    ("tools/_actions.py", "ctx.app.store.add"),  # TelemetryStore.add: a buffer write
}
#: C{(module, call)} that change a container of another object by that object's declared
#: contract, with the reason.
SHARED_CONTAINERS = {
    # Deadlines.watched: a connection whose deadline is met removes itself from it (Deadlines'
    # documented contract), here in GasolineChannel.setTimeout, on every request: one dict
    # operation, not a call of Deadlines.forget (which also stops an idle timer).
    ("http/request.py", "idle.watched.pop"),
}


def _container_changes(source: str) -> list[str]:
    """Every C{x.attr.append(...)}-like call (L{_CONTAINER_CHANGES}) whose C{x} is not C{self} or
    C{cls}: a container that belongs to another object changed from outside it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _CONTAINER_CHANGES
                and isinstance(node.func.value, ast.Attribute)):
            owner = node.func.value.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            found.append(ast.unparse(node.func))
    return found


def test_no_container_of_another_object_is_changed_from_outside():
    """The construction rule for containers: an object's lists, sets and dicts change through
    its methods (C{state.command_queued(id)}, not C{state.pending_commands.add(id)}). Every
    module of the package."""
    from pathlib import Path

    root = Path(gasoline.app.__file__).parent
    found = set()
    for module in _package_modules():
        found |= {(module, c) for c in _container_changes((root / module).read_text("utf-8"))}
    assert found == OWN_METHODS | SHARED_CONTAINERS


def test_the_container_check_finds_each_form():
    source = ("state.pending_commands.add(1)\n"
              "ctx.session.subscriptions.discard(u)\n"
              "self.manager.progress_routes.pop(t, None)\n"
              "self.items.append(1)\n"
              "local.append(1)\n")
    assert _container_changes(source) == [
        "state.pending_commands.add", "ctx.session.subscriptions.discard",
        "self.manager.progress_routes.pop"]


# -- no attribute contracts by name --------------------------------------------------------------

#: C{getattr}/C{hasattr} with a literal name that stay, each on an object of another library or of
#: the platform (duck typing what that library does not declare), with the reason.
BY_NAME_FOREIGN = {
    # Platform constants that do not exist everywhere (Windows has no O_NOFOLLOW, O_CLOEXEC,
    # O_NONBLOCK; some systems no RLIMIT_DATA): read once in common.py, which the rest imports;
    # client_rules.py reads its two itself (the connector's first exchange imports it alone).
    ("common.py", "getattr(os, 'O_NOFOLLOW')"), ("common.py", "getattr(os, 'O_CLOEXEC')"),
    ("common.py", "getattr(os, 'O_NONBLOCK')"),
    ("client_rules.py", "getattr(os, 'O_NOFOLLOW')"), ("client_rules.py", "getattr(os, 'O_CLOEXEC')"),
    ("proxy/_watchdog.py", "getattr(resource, 'RLIMIT_DATA')"),
    # twisted.python.usage's convention: a coercer function may carry its help as coerceDoc.
    ("tap.py", "getattr(coerce, 'coerceDoc')"),
    # Twisted transports: abortConnection is ITCPTransport's, not every transport's; a request's
    # channel is None once its connection is gone.
    ("stream.py", "getattr(transport, 'abortConnection')"),
    ("stream.py", "getattr(request, 'channel')"), ("stream.py", "getattr(channel, 'transport')"),
    # setTcpNoDelay and loseWriteConnection are ITCPTransport's, not every transport's (a UNIX
    # socket's, a test's StringTransport); a TCP transport's producer is FileDescriptor's, which
    # ITransport does not declare.
    ("http/request.py", "getattr(transport, 'setTcpNoDelay')"),
    ("http/request.py", "getattr(transport, 'loseWriteConnection')"),
    ("http/relay_ws.py", "getattr(transport, 'producer')"),
    # A process's end: ProcessDone and ProcessTerminated carry exitCode, another reason has none.
    ("connect/discovery.py", "getattr(reason.value, 'exitCode')"),
    # A ProcessProtocol's transport is typed ITransport; the process transport's pid is not.
    ("core/workers.py", "getattr(self.transport, 'pid')"),
    # A log event's level comes from whoever emitted the event.
    ("logs.py", "getattr(level, 'name')"),
}


def _by_name(source: str) -> list[str]:
    """Every C{getattr(x, "name"...)} and C{hasattr(x, "name")}: C{getattr(x, 'name')}."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            found.append(f"{node.func.id}({ast.unparse(node.args[0])}, {node.args[1].value!r})")
    return found


def test_no_contract_of_the_package_is_reached_by_name():
    """An attribute of the project's own objects is read as an attribute of a declared type (a
    class, an interface or a C{Protocol}), so a rename fails in mypy, not at run time: a
    C{getattr}/C{hasattr} with a literal name is only for another library's objects, each listed
    in L{BY_NAME_FOREIGN} with its reason."""
    from pathlib import Path

    root = Path(gasoline.app.__file__).parent
    found = set()
    for module in _package_modules():
        found |= {(module, m) for m in _by_name((root / module).read_text(encoding="utf-8"))}
    assert found == BY_NAME_FOREIGN


def test_the_by_name_check_finds_each_form():
    assert _by_name("getattr(session, 'client_id', '')\nhasattr(key, 'proof')\n"
                    "getattr(x, name)\n") == ["getattr(session, 'client_id')",
                                                "hasattr(key, 'proof')"]


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

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

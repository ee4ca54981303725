"""One docstring markup for the package: epytext, as Twisted writes it (C{code}, L{link},
@param/@return/@raise). No reST/Sphinx leftovers (double-backtick literals, :param:, :class:`x`)
in docstrings or C{#:} attribute comments."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import gasoline

PACKAGE = Path(gasoline.__file__).resolve().parent
#: Files still to convert (none: every module of the package uses epytext).
NOT_YET: set[str] = set()
NOT_YET_DIRS: tuple[str, ...] = ()
_REST = re.compile(r"``[^`]|:(?:param|returns?|raises?|rtype|type)\b[^:]*:|:(?:class|func|meth|mod|obj|attr):`")


def _docstrings(tree: ast.AST):
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield body[0].lineno, doc
        for before, after in zip(body, body[1:]):
            if (isinstance(before, (ast.Assign, ast.AnnAssign)) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                yield after.lineno, after.value.value


def test_docstrings_and_attribute_comments_use_epytext_only():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in NOT_YET or rel.startswith(NOT_YET_DIRS):
            continue
        text = path.read_text()
        for line, doc in _docstrings(ast.parse(text)):
            if _REST.search(doc):
                found.append(f"{rel}:{line}: {_REST.search(doc).group(0)!r}")
        for number, source in enumerate(text.splitlines(), 1):
            if source.lstrip().startswith("#:") and _REST.search(source):
                found.append(f"{rel}:{number}: {source.strip()[:80]}")
    assert found == []


def test_the_check_sees_a_rest_literal_and_a_sphinx_field():
    assert _REST.search("the ``what`` argument")
    assert _REST.search(":param clock: the clock")
    assert _REST.search("see :class:`Foo`")
    assert not _REST.search("the C{what} argument; @param clock: the clock; L{Foo}")


_PLACEHOLDER = re.compile(r"^\s*(DOC|TODO|TBD|FIXME|XXX)?\s*\.?\s*$", re.IGNORECASE)


def _placeholder_module_docstrings() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if doc is None or _PLACEHOLDER.match(doc) or len(doc.split()) < 5:
            found.append(path.relative_to(PACKAGE).as_posix())
    return found


def test_every_module_says_what_it_is_for():
    """A module's docstring is its first line of documentation (pydoctor's page for it): no
    module goes without one, or with a placeholder."""
    assert _placeholder_module_docstrings() == []


def test_the_check_sees_a_placeholder():
    assert _PLACEHOLDER.match("DOC") and _PLACEHOLDER.match("  todo. ") and _PLACEHOLDER.match("")
    assert not _PLACEHOLDER.match("The C{gasoline} console script.")


#: A reference to the tracker or the seeds ("issue 11 §3", "seed 004") instead of what the code does.
_TRACKER_REFERENCE = re.compile(r"\b(?:[Ii]ssue|[Ss]eed)s? ?#?\d+\b")


#: Files that still name an issue, with the reason they are not reworded here (none now).
_TRACKER_PENDING: set[str] = set()


def test_the_package_tests_and_benches_describe_behaviour_not_issue_numbers():
    """Comments and docstrings say what the code (a test: what it checks) does and why, not which
    issue or seed asked for it (the reader of the code has neither at hand)."""
    repo = PACKAGE.parent
    files = [path for folder in ("gasoline", "tests", "bench")
             for path in sorted((repo / folder).rglob("*.py"))
             if path != Path(__file__).resolve()]  # (this file's examples are the check's own)
    found = []
    for path in files:
        rel = path.relative_to(repo).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _TRACKER_REFERENCE.search(line) and rel not in _TRACKER_PENDING:
                found.append(f"{rel}:{number}: {line.strip()[:80]}")
    assert found == []
    assert len(files) > 300
    for rel in _TRACKER_PENDING:  # (an exception that is no longer needed goes)
        assert _TRACKER_REFERENCE.search((repo / rel).read_text()), rel


def test_the_check_sees_tracker_references():
    for text in ("(issue 11 §3)", "seed 004's event types", "see Issue #32", "seeds 000"):
        assert _TRACKER_REFERENCE.search(text), text
    for text in ("an issue with the page", "a random seed", "seed=0"):
        assert not _TRACKER_REFERENCE.search(text), text

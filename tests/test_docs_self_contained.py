"""The documentation stands on its own: no path outside the repository (design or reference
folders beside it, absolute work paths) and no internal document or issue numbers, in README.md
and every page under docs/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]

#: What points outside: a folder beside the repository, an absolute path of the machine it was
#: written on, an internal design document's number, an issue's number.
OUTSIDE = [
    (re.compile(r"(?:\.\./)+shared/|(?<![\w/.-])shared/(?:reference|design|seeds)\b"),
     "a path outside the repository"),
    (re.compile(r"/work/"), "an absolute path of the machine it was written on"),
    (re.compile(r"\bseeds? \d{1,3}\b|\bseed-\d", re.IGNORECASE), "an internal document number"),
    (re.compile(r"\bissues? #?\d+\b|#\d{1,4}\b(?!\w)", re.IGNORECASE), "an issue number"),
]


def test_there_are_pages_to_check():
    assert len(PAGES) > 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_page_points_nowhere_outside_the_repository(page):
    found = []
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for pattern, what in OUTSIDE:
            for m in pattern.finditer(line):
                found.append(f"{page.relative_to(REPO)}:{n}: {what}: {m.group(0)!r}")
    assert not found, "\n".join(found)

"""The one path sandbox (gasoline.core.paths): every agent-named path goes through it."""

from __future__ import annotations

import pytest

from gasoline.core.errors import GasolineError
from gasoline.core.paths import PathRefused, inside, real, resolve_inside


def test_relative_paths_start_at_the_first_root_and_come_back_resolved(tmp_path):
    (tmp_path / "wd").mkdir()
    assert resolve_inside("a/b.txt", [tmp_path / "wd"], param="p") == real(tmp_path / "wd/a/b.txt")


def test_a_relative_path_may_start_at_a_base_that_is_not_a_root(tmp_path):
    (tmp_path / "wd" / "sub").mkdir(parents=True)
    got = resolve_inside("x", [tmp_path / "wd"], param="p", base=tmp_path / "wd" / "sub")
    assert got == real(tmp_path / "wd/sub/x")


def test_inside_compares_components_not_string_prefixes(tmp_path):
    assert inside(tmp_path / "a", tmp_path / "a")
    assert inside(tmp_path / "a" / "b", tmp_path / "a")
    assert not inside(tmp_path / "ab", tmp_path / "a")


@pytest.mark.parametrize("name", ["../outside", "/etc/passwd", "link/secret", "sub/../../x"])
def test_paths_that_resolve_outside_every_root_are_refused(tmp_path, name):
    wd = tmp_path / "wd"
    (wd / "sub").mkdir(parents=True)
    (wd / "link").symlink_to(tmp_path)  # a link inside that points out
    with pytest.raises(PathRefused) as e:
        resolve_inside(name, [wd], param="file_path")
    assert e.value.code == "path_refused" and isinstance(e.value, GasolineError)
    assert e.value.details == {"param": "file_path", "allowed_roots": [str(real(wd))]}


def test_the_second_root_is_allowed_too(tmp_path):
    (tmp_path / "wd").mkdir()
    (tmp_path / "state").mkdir()
    assert resolve_inside(str(tmp_path / "state/f"), [tmp_path / "wd", tmp_path / "state"],
                          param="p") == real(tmp_path / "state/f")


@pytest.mark.parametrize("name", ["", "   ", "a\x00b"])
def test_empty_and_nul_paths_are_refused(tmp_path, name):
    with pytest.raises(PathRefused, match="empty or not a valid path"):
        resolve_inside(name, [tmp_path], param="p")


def test_parent_references_can_be_refused_even_when_they_stay_inside(tmp_path):
    (tmp_path / "sub").mkdir()
    assert resolve_inside("sub/../x", [tmp_path], param="p") == real(tmp_path / "x")
    with pytest.raises(PathRefused, match="'..' components"):
        resolve_inside("sub/../x", [tmp_path], param="p", parent_refs=False)


def test_no_root_is_a_refusal_with_the_callers_hint(tmp_path):
    with pytest.raises(PathRefused) as e:
        resolve_inside("x", [], param="save_to", retry="Pass the code instead.")
    assert e.value.retry == "Pass the code instead."
    assert e.value.to_json()["error"] == "path_refused"

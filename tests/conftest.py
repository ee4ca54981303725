"""Shared pytest fixtures."""

from __future__ import annotations

import os
import shutil

import pytest

from gasoline.testing import DaemonProcess

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_tool(name: str, path: str | None = None, why: str = "") -> str:
    """Return the path of an external tool; without it, fail under CI=true and skip locally."""
    found = path if path and os.path.exists(path) else shutil.which(name)
    if found:
        return found
    message = f"{name} is required for this test but was not found{': ' + why if why else ''}"
    if IN_CI:
        pytest.fail(f"CI=true: {message}")
    pytest.skip(f"SKIPPED LOUDLY — {message}")


@pytest.fixture
def daemon(tmp_path):
    """A real ``twistd -n gasoline`` on a free loopback port with a temporary state dir."""
    d = DaemonProcess(state_dir=tmp_path / "state")
    d.start()
    try:
        yield d
    finally:
        d.stop()

"""The user install in one line, as a user runs it: `pipx install .` from the checkout and
`uv tool install` of the built wheel, from a fresh virtualenv holding only pipx and uv (installed
from the package index here). Each installed `gasoline` then starts a daemon through its connector
and answers an agent's initialize. Everything lives under tmp_path (PIPX_HOME, UV_TOOL_DIR, the
state dir); every daemon started is stopped."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PIPX = "pipx==1.18.4"
UV = "uv==0.13.8"

pytestmark = pytest.mark.integration

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "user-install", "version": "1"}}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    """A fresh virtualenv with pipx and uv, nothing else."""
    work = tmp_path_factory.mktemp("user-install")
    subprocess.run([sys.executable, "-m", "venv", str(work / "tools")], check=True, timeout=120)
    bindir = work / "tools" / "bin"
    subprocess.run([str(bindir / "python"), "-m", "pip", "install", "-q", PIPX, UV],
                   check=True, timeout=600)
    return work, bindir


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PIPX_HOME=str(work / "pipx-home"), PIPX_BIN_DIR=str(work / "pipx-bin"),
               PIPX_MAN_DIR=str(work / "pipx-man"), UV_TOOL_DIR=str(work / "uv-tools"),
               UV_TOOL_BIN_DIR=str(work / "uv-bin"), UV_CACHE_DIR=str(work / "uv-cache"),
               UV_PYTHON_DOWNLOADS="never")
    return env


def _serves_an_agent(gasoline: Path, work: Path, name: str) -> None:
    """The installed command answers --version, and its connector starts a daemon (twistd of
    the same installation) and answers initialize; the daemon is stopped again."""
    from gasoline import __version__

    version = subprocess.run([str(gasoline), "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"gasoline {__version__}"
    state = work / f"state-{name}"
    port = _free_port()
    try:
        done = subprocess.run([str(gasoline), "connect", "--port", str(port), "--state-dir",
                               str(state), "--client-id", f"user-{name}"],
                              input=json.dumps(INIT) + "\n", capture_output=True, text=True,
                              timeout=120, cwd=work)
        first = json.loads(done.stdout.splitlines()[0])
        assert first["id"] == 0 and first["result"]["serverInfo"]["name"] == "gasoline", done
    finally:
        subprocess.run([str(gasoline), "stop", "--state-dir", str(state)], capture_output=True,
                       timeout=60)
    assert not (state / "daemon.json").exists()


def test_pipx_install_from_the_checkout(tools):
    work, bindir = tools
    done = subprocess.run([str(bindir / "pipx"), "install", str(REPO)], capture_output=True,
                          text=True, timeout=900, env=_env(work))
    assert done.returncode == 0, done.stdout + done.stderr
    _serves_an_agent(work / "pipx-bin" / "gasoline", work, "pipx")


def test_uv_tool_install_of_the_built_wheel(tools):
    work, bindir = tools
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w",
                    str(work / "dist")], check=True, timeout=300)
    [wheel] = (work / "dist").glob("gasoline-*.whl")
    done = subprocess.run([str(bindir / "uv"), "tool", "install", "--python", sys.executable,
                           str(wheel)], capture_output=True, text=True, timeout=900,
                          env=_env(work))
    assert done.returncode == 0, done.stdout + done.stderr
    _serves_an_agent(work / "uv-bin" / "gasoline", work, "uv")

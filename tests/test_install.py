"""What a user gets: the built wheel in a fresh virtualenv, not the editable checkout."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from support import reap

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A wheel built from this checkout, installed into a new virtualenv."""
    work = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO),
                    "-w", str(work / "dist")], check=True, timeout=300)
    [wheel] = (work / "dist").glob("gasoline-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True, timeout=120)
    bindir = work / "venv" / "bin"
    subprocess.run([str(bindir / "python"), "-m", "pip", "install", "-q", str(wheel)],
                   check=True, timeout=600)
    return wheel, bindir, work


def test_the_wheel_carries_the_twistd_plugin_and_no_dropin_cache(installed):
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert "twisted/plugins/gasoline_plugin.py" in names
    assert not any(n.endswith("dropin.cache") for n in names)
    assert not any(n.startswith("twisted/__init__") or n == "twisted/plugins/__init__.py"
                   for n in names)


def test_the_wheel_is_pure_python(installed):
    """One wheel for every platform: the tag is py3-none-any and it carries no compiled code."""
    wheel, _, _ = installed
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    z = zipfile.ZipFile(wheel)
    [meta] = [n for n in z.namelist() if n.endswith(".dist-info/WHEEL")]
    wheel_meta = z.read(meta).decode()
    assert "Root-Is-Purelib: true" in wheel_meta and "Tag: py3-none-any" in wheel_meta
    assert not [n for n in z.namelist() if n.endswith((".so", ".pyd", ".c", ".dylib"))]


def test_twistd_from_the_installed_wheel_knows_gasoline(installed):
    _, bindir, work = installed
    listing = subprocess.run([str(bindir / "twistd"), "--help"], capture_output=True, text=True,
                             timeout=60, cwd=work)
    assert listing.returncode == 0 and "gasoline" in listing.stdout
    own = subprocess.run([str(bindir / "twistd"), "-n", "gasoline", "--help"],
                         capture_output=True, text=True, timeout=60, cwd=work)
    assert own.returncode == 0, own.stderr
    assert "--listen" in own.stdout and "--state-dir" in own.stdout


def test_the_installed_daemon_starts_with_default_options_and_answers_health(installed):
    _, bindir, work = installed
    port = _free_port()
    state = work / "state"
    proc = subprocess.Popen(
        [str(bindir / "twistd"), "-n", "--pidfile=", "gasoline",
         "--listen", f"tcp:{port}:interface=127.0.0.1", "--state-dir", str(state)],
        cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        body = None
        while time.monotonic() < deadline and body is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    body = json.loads(r.read())
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
        assert body is not None, proc.stdout.read().decode(errors="replace") if proc.poll() else ""
        assert body["service-name"] == "gasoline"
        assert (state / "daemon.json").stat().st_mode & 0o777 == 0o600
    finally:
        proc.terminate()
        reap(proc, 20)
        proc.stdout.close()

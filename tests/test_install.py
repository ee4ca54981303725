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


def _tree_packages() -> set[str]:
    """Every folder that must ship as a package: the Python packages under C{gasoline/} and
    C{twisted.plugins}, and each folder of C{extension/} (but its build scripts) as
    C{gasoline._extension...}."""
    found = {str(p.parent.relative_to(REPO)).replace("/", ".")
             for p in (REPO / "gasoline").rglob("__init__.py")}
    # Data-only folders (the agent guide, the status page) are packages too: setuptools warns
    # about data in a folder it was not told is one.
    found |= {str(p.relative_to(REPO)).replace("/", ".")
              for p in (REPO / "gasoline").rglob("*")
              if p.is_dir() and p.name != "__pycache__" and any(
                  f.is_file() and f.suffix not in (".pyc",) for f in p.iterdir())}
    found.add("twisted.plugins")
    for folder in [REPO / "extension", *(p for p in (REPO / "extension").rglob("*") if p.is_dir())]:
        rel = folder.relative_to(REPO / "extension").parts
        if rel[:1] in (("scripts",), ("node_modules",)):
            continue
        found.add(".".join(("gasoline", "_extension", *rel)))
    return found


def test_pyproject_lists_every_package_of_the_tree():
    """The package list in pyproject.toml is written out (the extension is mapped under another
    name, which find cannot do): a new folder that is not listed would be missing from the
    wheel."""
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(declared["packages"]) == _tree_packages()
    data = declared["package-data"]
    assert {p for p in declared["packages"] if p.startswith("gasoline._extension")} <= set(data)


def test_the_wheel_carries_the_extension_and_the_status_page(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.relative_to(REPO / "extension").as_posix()
               for p in (REPO / "extension").rglob("*")
               if p.is_file() and p.relative_to(REPO / "extension").parts[0] != "scripts"}
    assert shipped and {f"gasoline/_extension/{n}" for n in shipped} <= names
    assert {f"gasoline/http/static/{p.name}"
            for p in (REPO / "gasoline/http/static").iterdir()} <= names


def test_building_the_package_prints_no_setuptools_warnings(tmp_path):
    """`make run` installs the checkout quietly: setuptools has nothing to warn about (every
    folder with files is a declared package)."""
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO),
                           "-w", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    for sign in ("check.warn", "Warning:", "would be ignored", "########"):
        assert sign not in out, out


def test_the_installed_daemon_reads_the_secret_names_the_extension_ships(installed):
    """The one list of secret names is read by the daemon from the wheel's copy of the extension
    (gasoline/_extension/lib/secret-names.json), the same file the extension's module is made from."""
    wheel, bindir, _ = installed
    assert "gasoline/_extension/lib/secret-names.json" in zipfile.ZipFile(wheel).namelist()
    assert "gasoline/_extension/lib/secret-names.js" in zipfile.ZipFile(wheel).namelist()
    out = subprocess.run(
        [str(bindir / "python"), "-c",
         "from gasoline.core.redaction.keys import secret_names_path, is_sensitive_key; "
         "print(secret_names_path()); print(is_sensitive_key('totp'))"],
        capture_output=True, text=True, timeout=60, check=True, cwd="/")
    path, totp = out.stdout.split()
    assert Path(path).parts[-4:] == ("gasoline", "_extension", "lib", "secret-names.json")
    assert str(bindir.parent) in path and totp == "True"

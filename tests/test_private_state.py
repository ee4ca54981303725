"""
State dirs are 0700 and their files 0600 whoever creates them, under the usual umask (022): the
daemon, the connector that starts it (the state dir and the daemon's log, before twistd opens it),
`gasoline browser --detach` (the state dir and its log), `gasoline pair forget`, the identity and
client keys, launch grants, server logs, artefacts saved in the state dir. Every creator goes
through one pair of functions (gasoline.common.make_private_dir / make_private_file): a source
scan fails on a directory made any other way. `gasoline doctor` warns when the state dir or a
file in it is not private, and names the fix.
"""

from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

import gasoline
from gasoline.common import make_private_dir, make_private_file, not_private

PACKAGE = Path(gasoline.__file__).parent


@pytest.fixture(autouse=True)
def usual_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_two_functions_make_private_paths_and_tighten_an_existing_file(tmp_path):
    d = make_private_dir(tmp_path / "a" / "state")
    assert mode(d) == 0o700
    f = tmp_path / "a" / "state" / "log"
    f.write_text("x")
    f.chmod(0o644)
    make_private_file(f)
    assert mode(f) == 0o600 and f.read_text() == "x"
    assert mode(make_private_file(d / "new.log")) == 0o600
    (d / "link").symlink_to(f)
    with pytest.raises(OSError, match="symbolic link"):
        make_private_file(d / "link")


def test_the_connector_makes_the_state_dir_and_the_daemon_log_private(tmp_path):
    from gasoline.connect.discovery import Spawner

    class Recording:
        def spawnProcess(self, *args, **kwargs):
            pass

    Spawner(Recording(), 7891, tmp_path / "state")()
    assert mode(tmp_path / "state") == 0o700
    assert mode(tmp_path / "state" / "daemon.log") == 0o600


def test_gasoline_browser_detach_makes_the_state_dir_and_its_log_private(tmp_path, monkeypatch):
    from gasoline.launch import main as launch

    class Child:
        def __init__(self, argv, **kwargs):
            ready = Path(argv[argv.index("--ready-file") + 1])
            ready.write_text(json.dumps({"error": "no browser here (test)"}))

        def poll(self):
            return None

    monkeypatch.setattr(launch.subprocess, "Popen", Child)
    state = tmp_path / "state"
    assert launch._detach(["--detach", "--state-dir", str(state)], {"state-dir": state}) == 1
    assert mode(state) == 0o700 and mode(state / "browser.log") == 0o600


def test_gasoline_pair_forget_in_a_new_state_dir_is_private(tmp_path):
    from gasoline.core.trust.pins import pair_command

    state = tmp_path / "new"
    assert pair_command(state, "forget")[0] == 0
    assert not_private(state) == []


def test_everything_a_daemon_keeps_is_private(tmp_path):
    """A daemon filling its state dir (every file the corrupt-state test enumerates, plus server
    logs and an artefact saved in the state dir): nothing group or others may use."""
    from test_state_files import fill

    from gasoline.tools._artifacts import write_artifact

    state, servers, _, _ = fill(tmp_path)

    class Ctx:
        cwd = None

        class app:
            class config:
                state_dir = state

    write_artifact(Ctx, str(state / "artifacts" / "deep" / "er" / "out.har"), "{}")
    from gasoline.logs import LogService  # the --log-dir service's folder

    logs = LogService(state / "logs", MemoryReactorClock(), thread=False)
    logs.startService()
    logs.stopService()
    assert (state / "logs").is_dir()
    assert (state / "artifacts" / "deep" / "er" / "out.har").is_file()
    assert not_private(state) == [], not_private(state)
    assert len(list(state.rglob("*"))) > 15


def test_an_artefact_in_the_project_keeps_the_project_s_modes(tmp_path):
    from gasoline.tools._artifacts import write_artifact

    project = tmp_path / "repo"
    project.mkdir()

    class Ctx:
        cwd = str(project)

        class app:
            class config:
                state_dir = tmp_path / "state"

    write_artifact(Ctx, str(project / "reports" / "out.har"), "{}")
    assert mode(project / "reports") == 0o755 and mode(project / "reports" / "out.har") == 0o644


def test_no_directory_is_made_another_way():
    """Every mkdir of the package is in gasoline/common.py, but for the project's own folders of
    a saved artefact (not the state dir's), the MCP client's own config folder that
    C{gasoline setup} writes to (e.g. C{.cursor/}, not ours to make private) and the test
    helpers."""
    allowed = {("common.py", "make_private_dir"), ("tools/_artifacts.py", "write_artifact"),
               ("setup_cli.py", "_merge"), ("testing.py", None), ("testing_process.py", None)}
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        tree = ast.parse(path.read_text())
        for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                                   ast.AsyncFunctionDef))]:
            for node in ast.walk(func):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr in ("mkdir", "makedirs"):
                    if (rel, func.name) not in allowed and (rel, None) not in allowed:
                        found.append((rel, func.name, ast.unparse(node)))
    assert found == []


def test_doctor_warns_when_the_state_dir_is_not_private(tmp_path, capsys):
    from gasoline import admin_cli

    state = make_private_dir(tmp_path / "state")
    make_private_file(state / "daemon.log")
    check = admin_cli._privacy_check(state)
    assert check["status"] == "ok"
    state.chmod(0o755)
    (state / "daemon.log").chmod(0o644)
    (state / "clients").mkdir(mode=0o755)
    check = admin_cli._privacy_check(state)
    assert check["status"] == "warn" and check["fix"] == f"chmod -R go= {state}"
    for p in (state, state / "daemon.log", state / "clients"):
        assert str(p) in check["detail"]
    # through the command: the warning and its fix are printed (no daemon is running there)
    code = admin_cli.doctor(["--state-dir", str(state)])
    out = capsys.readouterr().out
    assert "state_dir_private" in out and f"chmod -R go= {state}" in out
    assert code == 1  # (no daemon answers: that check fails, this one only warns)
    os.system(f"chmod -R go= {state}")
    assert admin_cli._privacy_check(state)["status"] == "ok"

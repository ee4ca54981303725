"""`gasoline setup CLIENT` against a fake client command line and temporary config files (HOME
and PATH point into tmp_path: the real ~ is never read or written)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def setup_cmd(tmp_path: Path, *args: str, path_dirs: list[Path] | None = None,
              cwd: Path | None = None) -> subprocess.CompletedProcess:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    # Only the fake tools and the interpreter's own directory: no real `claude` or `code`.
    path = os.pathsep.join([*(str(p) for p in path_dirs or []), "/usr/bin", "/bin"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "APPDATA"))}
    env.update(HOME=str(home), PATH=path, USERPROFILE=str(home))
    return subprocess.run([sys.executable, "-m", "gasoline", "setup", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=str(cwd or tmp_path))


def fake_cli(tmp_path: Path, name: str, exit_code: int = 0) -> tuple[Path, Path]:
    """A fake client command that records its argv (one JSON list per line)."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    log = tmp_path / f"{name}.calls"
    script = bindir / name
    script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                      f"sys.exit({exit_code})\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bindir, log


def connector_argv() -> list[str]:
    script = Path(sys.executable).with_name("gasoline")
    return [str(script), "connect"] if script.exists() else \
        [str(Path(sys.executable).absolute()), "-m", "gasoline", "connect"]


def test_claude_is_registered_through_its_command_line_when_it_is_on_path(tmp_path):
    bindir, log = fake_cli(tmp_path, "claude")
    done = setup_cmd(tmp_path, "claude", "--port", "7891", path_dirs=[bindir])
    assert done.returncode == 0, done.stderr
    [argv] = [json.loads(line) for line in log.read_text().splitlines()]
    assert argv[:5] == ["mcp", "add", "--scope", "user", "gasoline"] and argv[5] == "--"
    assert argv[6:] == [*connector_argv(), "--port", "7891"]
    assert Path(argv[6]).is_absolute()
    assert not (tmp_path / "home" / ".claude.json").exists()  # the CLI did it, not a file
    # --print shows the command and runs nothing.
    shown = setup_cmd(tmp_path, "claude", "--print", path_dirs=[bindir])
    assert shown.returncode == 0 and "mcp add --scope user gasoline --" in shown.stdout
    assert len(log.read_text().splitlines()) == 1


def test_a_failing_client_command_is_one_line_and_exit_1(tmp_path):
    bindir, _ = fake_cli(tmp_path, "claude", exit_code=3)
    done = setup_cmd(tmp_path, "claude", path_dirs=[bindir])
    assert done.returncode == 1 and "failed (exit 3)" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_the_claude_command_its_user_config_is_merged_keeping_the_rest(tmp_path):
    config = tmp_path / "home" / ".claude.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"theme": "dark", "mcpServers": {
        "other": {"command": "x"}, "gasoline": {"command": "old"}}}))
    done = setup_cmd(tmp_path, "claude", "--state-dir", str(tmp_path / "state"))
    assert done.returncode == 0, done.stderr
    data = json.loads(config.read_text())
    assert data["theme"] == "dark" and data["mcpServers"]["other"] == {"command": "x"}
    entry = data["mcpServers"]["gasoline"]
    assert [entry["command"], *entry["args"]] == [*connector_argv(), "--state-dir",
                                                  str(tmp_path / "state")]


@pytest.mark.parametrize("client,relative,key", [
    ("cursor", ".cursor/mcp.json", "mcpServers"),
    ("windsurf", ".codeium/windsurf/mcp_config.json", "mcpServers"),
    ("claude-desktop", ".config/Claude/claude_desktop_config.json", "mcpServers"),
])
def test_clients_without_a_command_line_get_their_user_config_file(tmp_path, client, relative,
                                                                   key):
    done = setup_cmd(tmp_path, client, "--api-key", "k-1")
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "home" / relative).read_text())
    entry = data[key]["gasoline"]
    assert [entry["command"], *entry["args"]] == connector_argv()
    assert entry["env"] == {"GASOLINE_API_KEY": "k-1"}
    assert (tmp_path / "home" / relative).stat().st_mode & 0o077 == 0  # it may hold the key


def test_project_scope_writes_the_working_directorys_config(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    assert setup_cmd(tmp_path, "cursor", "--scope", "project", cwd=project).returncode == 0
    assert "gasoline" in json.loads((project / ".cursor" / "mcp.json").read_text())["mcpServers"]
    assert setup_cmd(tmp_path, "vscode", cwd=project).returncode == 0  # no `code`: the project file
    entry = json.loads((project / ".vscode" / "mcp.json").read_text())["servers"]["gasoline"]
    assert entry["type"] == "stdio" and [entry["command"], *entry["args"]] == connector_argv()
    assert setup_cmd(tmp_path, "claude", "--scope", "project", cwd=project).returncode == 0
    assert "gasoline" in json.loads((project / ".mcp.json").read_text())["mcpServers"]


def test_vscode_is_registered_through_code_add_mcp_when_code_is_on_path(tmp_path):
    bindir, log = fake_cli(tmp_path, "code")
    assert setup_cmd(tmp_path, "vscode", path_dirs=[bindir]).returncode == 0
    [argv] = [json.loads(line) for line in log.read_text().splitlines()]
    assert argv[0] == "--add-mcp"
    added = json.loads(argv[1])
    assert added["name"] == "gasoline" and [added["command"], *added["args"]] == connector_argv()


def test_print_changes_nothing_and_a_broken_config_is_left_alone(tmp_path):
    shown = setup_cmd(tmp_path, "cursor", "--print")
    assert shown.returncode == 0
    assert json.loads(shown.stdout)["mcpServers"]["gasoline"]["args"] == connector_argv()[1:]
    assert not (tmp_path / "home" / ".cursor").exists()
    config = tmp_path / "broken.json"
    config.write_text("[1, 2")
    done = setup_cmd(tmp_path, "cursor", "--config", str(config))
    assert done.returncode == 1 and "cannot update" in done.stderr
    assert config.read_text() == "[1, 2"
    assert setup_cmd(tmp_path, "nope").returncode == 2

"""
L{gasoline.proxy.plan}: a C{/session/init} body checked, and each server planned as the session
sees it, without a manager, a reactor or a process.
"""

from __future__ import annotations

import os

import pytest

from gasoline.proxy.config import LOCAL, REMOTE, parse
from gasoline.proxy.errors import ProxyError
from gasoline.proxy.plan import SessionRequest, plan_session


def _request(wd, **prefs) -> SessionRequest:
    return SessionRequest.from_body({"workingDirectory": str(wd), "preferences": prefs})


@pytest.mark.parametrize("body, field", [
    ({}, "workingDirectory"),
    ({"workingDirectory": "relative/dir"}, "workingDirectory"),
    ({"workingDirectory": "/tmp/a\0b"}, "workingDirectory"),
    ({"workingDirectory": "/no/such/directory/here"}, "workingDirectory"),
    ({"workingDirectory": "/", "clientInfo": []}, "clientInfo"),
    ({"workingDirectory": "/", "capabilities": "x"}, "capabilities"),
    ({"workingDirectory": "/", "preferences": 1}, "preferences"),
    ({"workingDirectory": "/", "preferences": {"executionContext": {"a": "moon"}}},
     "preferences.executionContext"),
    ({"workingDirectory": "/", "preferences": {"executionContext": ["local"]}},
     "preferences.executionContext"),
])
def test_a_bad_init_body_is_refused_naming_its_field(body, field):
    with pytest.raises(ProxyError) as e:
        SessionRequest.from_body(body)
    assert e.value.code == "invalid_param" and f'"{field}"' in e.value.message


def test_a_good_init_body_is_normalised(tmp_path):
    request = SessionRequest.from_body({
        "workingDirectory": f"{tmp_path}/./sub/..", "clientInfo": {"name": "agent"},
        "preferences": {"executionContext": {"fs": "remote"}}})
    assert request.working_directory == str(tmp_path)
    assert request.client_info == {"name": "agent"} and request.capabilities == {}
    assert request.overrides == {"fs": "remote"}


def _config():
    return parse({"mcpServers": {
        "fs": {"command": "fs-server", "allowOverride": True,
               "allowedDirectories": ["{workingDirectory}", "data"]},
        "pinned": {"command": "pinned-server"},
        "shared": {"command": "shared-server", "executionContext": "remote", "cwd": "/srv"},
        "web": {"url": "https://mcp.example/mcp", "allowedDirectories": ["/abs", "rel"]},
        "off": {"command": "off-server", "enabled": False},
    }})


def test_each_server_is_planned_as_the_session_sees_it(tmp_path):
    plan = plan_session(_config(), (), _request(tmp_path), {"HOME": "/home/agent"})
    fs, pinned, shared, web, off = (plan.servers[n] for n in ("fs", "pinned", "shared", "web",
                                                               "off"))
    assert list(plan.servers) == ["fs", "pinned", "shared", "web", "off"]
    assert (fs.context, fs.working_directory) == (LOCAL, str(tmp_path))
    assert fs.allowed_directories == (str(tmp_path), str(tmp_path / "data"))
    # A shared process runs in its own directory; this session's calls are checked against
    # this session's directories.
    assert (shared.context, shared.working_directory) == (REMOTE, "/srv")
    assert shared.allowed_directories == (str(tmp_path),)
    assert (web.context, web.working_directory, web.allowed_directories) == (REMOTE, None,
                                                                             ("/abs",))
    assert not off.enabled and off.reason == "Disabled in the configuration"
    assert (off.working_directory, off.allowed_directories) == (None, ())
    assert all(e.child is None for e in plan.servers.values())  # nothing is started
    assert plan.local_instances == {"fs": 1, "pinned": 1}


def test_an_override_applies_only_where_the_server_allows_it(tmp_path):
    request = _request(tmp_path, executionContext={"fs": "remote", "pinned": "remote"})
    plan = plan_session(_config(), (), request, {})
    fs, pinned = plan.servers["fs"], plan.servers["pinned"]
    assert fs.context == REMOTE and fs.reason is None
    assert fs.working_directory == "/"  # no HOME in the environment: the root
    assert pinned.context == LOCAL
    assert pinned.reason == ("executionContext stays local: this server does not allow "
                             "overrides")
    assert plan.local_instances == {"pinned": 1}


def test_a_shared_server_without_cwd_runs_in_home(tmp_path):
    config = parse({"mcpServers": {"s": {"command": "x", "executionContext": "remote"}}})
    plan = plan_session(config, (), _request(tmp_path), {"HOME": "/home/agent"})
    assert plan.servers["s"].working_directory == "/home/agent"
    assert plan.local_instances == {}


def test_project_servers_are_planned_after_the_daemons(tmp_path):
    project = parse({"mcpServers": {"extra": {"command": "extra-server"}}}).servers
    plan = plan_session(_config(), project, _request(tmp_path), {})
    assert list(plan.servers)[-1] == "extra"
    assert plan.local_instances == {"fs": 1, "pinned": 1, "extra": 1}
    assert os.path.isabs(plan.servers["extra"].working_directory)

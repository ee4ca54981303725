"""The proxy's servers file, aggregated names and path checks: pure functions, no processes."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from zope.interface.verify import verifyObject

from gasoline.interfaces import ISessionTools
from gasoline.proxy.config import (
    LOCAL,
    REMOTE,
    ProxyConfigError,
    load,
    parse,
    project_servers,
)
from gasoline.proxy.naming import MAX_NAME, aggregated_name, build_table
from gasoline.proxy.paths import PathRefused, check_arguments, path_strings

ENV = {"HOME": "/home/u", "BRAVE_API_KEY": "k-123"}


def _one(spec, **proxy):
    raw = {"mcpServers": {"s": spec}}
    if proxy:
        raw["proxy"] = proxy
    return parse(raw, "servers.json", ENV)


def test_the_claude_format_with_the_proxy_fields_is_read():
    config = parse({"mcpServers": {
        "filesystem": {"command": "npx", "args": ["-y", "server-filesystem", "{workingDirectory}"],
                       "executionContext": "local", "allowedDirectories": ["{workingDirectory}"],
                       "timeout": 30},
        "brave": {"command": "brave-mcp", "env": {"BRAVE_API_KEY": "${BRAVE_API_KEY}"},
                  "executionContext": "remote", "allowOverride": True},
    }, "proxy": {"sessionIdleTimeout": 60, "maxSessions": 3, "maxChildrenPerServer": 2,
                 "startTimeout": 5, "allowProjectServers": ["/work/p"]}}, "f", ENV)
    fs, brave = config.servers
    assert (fs.name, fs.execution_context, fs.timeout) == ("filesystem", LOCAL, 30.0)
    assert brave.env == (("BRAVE_API_KEY", "k-123"),) and brave.execution_context == REMOTE
    assert brave.allow_override and brave.enabled
    assert (config.session_idle_timeout, config.max_sessions, config.max_children_per_server,
            config.start_timeout, config.allow_project_servers) == (60.0, 3, 2, 5.0, ("/work/p",))


def test_working_directory_placeholders_are_replaced_per_session():
    server = _one({"command": "x", "args": ["--root", "{workingDirectory}/src"],
                   "env": {"ROOT": "{workingDirectory}"}, "cwd": "sub",
                   "allowedDirectories": ["{workingDirectory}", "/shared", "docs"]}).servers[0]
    r = server.resolve("/p/a")
    assert r.args == ("--root", "/p/a/src") and r.env == {"ROOT": "/p/a"}
    assert r.cwd == "/p/a/sub"
    assert r.allowed_directories == ("/p/a", "/shared", "/p/a/docs")


def test_a_server_naming_an_unset_variable_is_listed_disabled_with_the_reason():
    server = _one({"command": "brave", "env": {"K": "${BRAVE_API_KEY}", "T": "${MISSING_TOKEN}"},
                   "args": ["${OTHER_MISSING}"]}).servers[0]
    assert not server.enabled
    assert server.reason == "Missing OTHER_MISSING, MISSING_TOKEN"


def test_enabled_false_is_disabled_with_a_reason():
    assert _one({"command": "x", "enabled": False}).servers[0].reason == \
        "Disabled in the configuration"


def test_url_servers_are_remote_with_their_transport_and_substituted_headers():
    remote = _one({"url": "https://mcp.example.com/mcp?k=${BRAVE_API_KEY}",
                   "headers": {"Authorization": "Bearer ${BRAVE_API_KEY}"}}).servers[0]
    assert remote.execution_context == REMOTE and remote.enabled and remote.reason is None
    assert remote.transport == "auto" and remote.url.endswith("?k=k-123")
    assert remote.headers == (("Authorization", "Bearer k-123"),)
    for kind in ("http", "streamable-http"):
        assert _one({"type": kind, "url": "http://a/mcp"}).servers[0].transport == \
            "streamable-http"
    assert _one({"type": "sse", "url": "http://a/sse"}).servers[0].transport == "sse"
    missing = _one({"url": "http://a/mcp", "headers": {"X-Key": "${NOPE_KEY}"}}).servers[0]
    assert not missing.enabled and missing.reason == "Missing NOPE_KEY"


@pytest.mark.parametrize("raw, message", [
    ({"mcpServers": {"s": {"command": "x", "colour": "red"}}}, "unknown field(s) colour"),
    ({"mcpServers": {}, "extra": 1}, "unknown field(s) extra"),
    ({"mcpServers": {}, "proxy": {"maxSesions": 1}}, "unknown field(s) maxSesions"),
    ({"mcpServers": {"s": {}}}, 'needs "command"'),
    ({"mcpServers": {"s": {"command": "x", "url": "http://a"}}}, "exclusive"),
    ({"mcpServers": {"s": {"command": ""}}}, "non-empty string"),
    ({"mcpServers": {"s": {"command": "x", "args": "a b"}}}, "list of strings"),
    ({"mcpServers": {"s": {"command": "x", "env": {"A": 1}}}}, "string values"),
    ({"mcpServers": {"s": {"command": "x", "timeout": 0}}}, "positive number"),
    ({"mcpServers": {"s": {"command": "x", "timeout": True}}}, "positive number"),
    ({"mcpServers": {"s": {"command": "x", "executionContext": "cloud"}}}, '"local" or "remote"'),
    ({"mcpServers": {"s": {"url": "http://a", "executionContext": "local"}}}, "always"),
    ({"mcpServers": {"s": {"command": "x", "enabled": "yes"}}}, "true or false"),
    ({"mcpServers": {"s": {"command": "x", "type": "sse"}}}, 'type "sse" needs "url"'),
    ({"mcpServers": {"s": {"url": "http://a", "type": "stdio"}}}, 'type "stdio" needs'),
    ({"mcpServers": {"s": {"url": "http://a", "args": []}}}, 's.args: only for a server run'),
    ({"mcpServers": {"s": {"url": "http://a", "cwd": "/"}}}, 's.cwd: only for a server run'),
    ({"mcpServers": {"s": {"command": "x", "headers": {}}}}, "s.headers: only for a server"),
    ({"mcpServers": {"s": {"url": "ftp://a"}}}, "http(s) URL"),
    ({"mcpServers": {"s": {"url": "http://a", "headers": {"A": 1}}}}, "string values"),
    ({"mcpServers": {"s": {"url": "http://a", "headers": {"A B": "1"}}}}, "valid header name"),
    ({"mcpServers": {"s": {"url": "http://a", "headers": {"A": "1\r\nX: y"}}}}, "one line"),
    ({"mcpServers": {"a__b": {"command": "x"}}}, "without '__'"),
    ({"mcpServers": {"has space": {"command": "x"}}}, "server name"),
    ({"mcpServers": {"s" * 33: {"command": "x"}}}, "server name"),
    ({"mcpServers": []}, "must be an object"),
    ({"mcpServers": {}, "proxy": {"maxSessions": 1.5}}, "positive integer"),
    ({"mcpServers": {}, "proxy": {"allowProjectServers": ["rel"]}}, "absolute"),
    ([], "must be an object"),
])
def test_invalid_files_are_refused_with_the_field_named(raw, message):
    with pytest.raises(ProxyConfigError) as e:
        parse(raw, "servers.json", ENV)
    assert message in str(e.value) and "servers.json" in str(e.value)


def test_load_reports_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ProxyConfigError, match="cannot read"):
        load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ProxyConfigError, match="not valid JSON"):
        load(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"mcpServers": {"t": {"command": "x"}}}))
    assert [s.name for s in load(good, ENV).servers] == ["t"]


def test_project_servers_only_where_the_user_allowed_the_directory(tmp_path):
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    for p in (allowed, other):
        (p / ".gasoline").mkdir(parents=True)
        (p / ".gasoline" / "servers.json").write_text(
            json.dumps({"mcpServers": {"proj": {"command": "x"}}}))
    config = parse({"mcpServers": {"base": {"command": "y"}},
                    "proxy": {"allowProjectServers": [str(allowed)]}}, "f", ENV)
    assert [s.name for s in project_servers(config, str(allowed), ENV)] == ["proj"]
    assert project_servers(config, str(other), ENV) == ()
    # A project may add servers, not redefine the daemon's, nor set the proxy's limits.
    (allowed / ".gasoline" / "servers.json").write_text(
        json.dumps({"mcpServers": {"base": {"command": "evil"}}}))
    with pytest.raises(ProxyConfigError, match="already defines"):
        project_servers(config, str(allowed), ENV)
    (allowed / ".gasoline" / "servers.json").write_text(
        json.dumps({"mcpServers": {}, "proxy": {"maxSessions": 999}}))
    with pytest.raises(ProxyConfigError, match="only"):
        project_servers(config, str(allowed), ENV)


# -- names ---------------------------------------------------------------------------------------

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_aggregated_names_are_kept_when_valid_and_shortened_deterministically_otherwise():
    assert aggregated_name("filesystem", "read_file") == "filesystem__read_file"
    long = aggregated_name("github", "x" * 100)
    assert len(long) == MAX_NAME and long == aggregated_name("github", "x" * 100)
    assert long.startswith("github__xxx") and _NAME.match(long)
    dotted, underscored = aggregated_name("s", "a.b"), aggregated_name("s", "a_b")
    assert dotted != underscored and _NAME.match(dotted) and underscored == "s__a_b"


@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}", fullmatch=True).filter(
    lambda s: "__" not in s), st.lists(st.text(min_size=1, max_size=200), min_size=1,
                                       max_size=20, unique=True))
def test_every_aggregated_name_is_valid_unique_and_maps_back(server, tools):
    table = build_table({server: tools})
    assert len(table) == len(tools)
    assert all(_NAME.match(name) for name in table)
    assert sorted(tool for _, tool in table.values()) == sorted(tools)


# -- paths ---------------------------------------------------------------------------------------


def test_path_arguments_are_found_by_key_and_every_one_line_string_and_key_is_a_candidate():
    args = {"path": "a.txt", "paths": ["b", "c"], "content": "just text", "sourcePath": "d",
            "options": {"destination": "e"}, "query": "../x", "url": "https://example.com/",
            "note": "/abs/y", "body": "two\nlines", "file": "x" * 70000}
    found = list(path_strings(args))
    keyed = sorted(v for v, k in found if k)
    assert keyed == ["a.txt", "b", "c", "d", "e", "x" * 70000]  # any length under a path key
    assert sorted(v for v, k in found if not k) == sorted(
        ["../x", "/abs/y", "just text", "https://example.com/", "destination"])  # nested keys
    assert "two\nlines" not in {v for v, _ in found}  # content, not a name


def test_paths_inside_pass_and_outside_are_refused(tmp_path):
    wd = tmp_path / "p"
    (wd / "sub").mkdir(parents=True)
    allowed = (str(wd),)
    check_arguments({"path": "sub/file", "other": str(wd / "x")}, str(wd), allowed)
    check_arguments({"path": f"file://{wd}/x"}, str(wd), allowed)
    (wd / "link").symlink_to(tmp_path)
    for bad in ("/etc/passwd", "../q", str(tmp_path / "p-sibling"), "sub/../../q", "link/x",
                "~/x", "sub/\0x", f"file://{tmp_path}"):
        with pytest.raises(PathRefused):
            check_arguments({"path": bad}, str(wd), allowed)


def test_session_tools_provide_the_interface(tmp_path):
    from twisted.internet.task import Clock

    from gasoline.proxy.routing import SessionTools
    from gasoline.proxy.session import ProxyManager

    class _Mcp:
        sessions: dict = {}

    manager = ProxyManager(Clock(), parse({"mcpServers": {}}), _Mcp())
    assert not manager.can_spawn  # a Clock cannot start processes
    assert verifyObject(ISessionTools, SessionTools(object()))

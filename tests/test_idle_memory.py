"""What an idle daemon holds (its idle RSS): the modules it has not imported.

Not an RSS threshold (that is bench/memory.py's job): the heavy modules an idle daemon must not
import, checked in a real C{twistd -n gasoline} process, and the lazy tool tables that make it so
(tools/list from the schemas alone, each tool's module imported at its first call).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from _mcp_calls import session_for, start

from gasoline.mcp.tools import ToolRegistry
from gasoline.tools import TOOL_MODULES, GasolineTools, ModeTables, load_tables
from gasoline.tools.schemas import MODE_PROPERTIES

#: Imported only when needed: Twisted's HTTP client (first https:// link check, remote MCP
#: servers), the relay's WebSockets (autobahn), the session proxy (--proxy-config), each tool's
#: implementation and what only those import. (pyOpenSSL and cryptography are not in this list:
#: Twisted's reactor imports them as it is installed, in any twistd process, a hello-world Klein
#: app's too; docs/operations.md has what they cost.)
MUST_NOT_BE_IMPORTED = (
    "autobahn", "twisted.web.client", "treq",
    "gasoline.proxy", "gasoline.generate",
    *(f"gasoline.tools.{tool}" for tool in TOOL_MODULES),
    "gasoline.tools._links", "gasoline.tools._playback", "gasoline.tools._screen_recording",
    "gasoline.tools._a11y", "gasoline.tools._session_diff",
)

#: Started under twistd as a user starts it (the plugin, default options), listing sys.modules
#: once the daemon listens (daemon.json written), then stopping.
_IDLE_DAEMON = textwrap.dedent("""
    import json, os, sys
    from twisted.scripts import twistd
    state, log = sys.argv[1], sys.argv[2]
    sys.argv = ["twistd", "-n", "--pidfile=", "--logfile", log, "gasoline",
                "--listen", "tcp:0:interface=127.0.0.1", "--state-dir", state]

    def report():
        from twisted.internet import reactor
        if not os.path.exists(os.path.join(state, "daemon.json")):
            reactor.callLater(0.05, report)
            return
        with open(os.path.join(state, "modules.json"), "w") as f:
            json.dump(sorted(sys.modules), f)
        reactor.stop()

    def schedule():
        from twisted.internet import reactor
        reactor.callWhenRunning(report)

    # twistd imports gasoline.tap (the plugin's module) while it parses the options, and
    # installs the reactor after: hook in once it has.
    from twisted.application import app
    _run = app.ApplicationRunner.run
    def run(self):
        schedule()
        return _run(self)
    app.ApplicationRunner.run = run
    twistd.run()
""")


def _idle_modules(state_dir) -> set[str]:
    done = subprocess.run([sys.executable, "-c", _IDLE_DAEMON, str(state_dir),
                           str(state_dir / "twistd.log")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + (state_dir / "twistd.log").read_text()
    return set(json.loads((state_dir / "modules.json").read_text()))


@pytest.mark.parametrize("start_count", [1, 2], ids=["first start", "started again"])
def test_an_idle_daemon_has_not_imported_the_heavy_modules(tmp_path, start_count):
    state = tmp_path / "state"
    state.mkdir()
    for _ in range(start_count):
        modules = _idle_modules(state)
    # It is a real daemon: it built everything it serves, and made its identity key.
    assert {"gasoline.tap", "gasoline.app", "gasoline.tools.schemas", "klein",
            "gasoline.http.ingest", "gasoline.mcp.server"} <= modules
    assert (state / "identity.pem").exists()
    loaded = sorted(m for m in modules
                    if any(m == heavy or m.startswith(heavy + ".") for heavy in MUST_NOT_BE_IMPORTED))
    assert loaded == []


# -- the tool tables: tools/list without the implementations ---------------------------------------


def test_tools_list_is_complete_before_any_tool_module_is_imported(app):
    tables = ModeTables()
    registry = ToolRegistry(app.clock)
    GasolineTools(app.daemon, tables=tables).register(registry)
    modules = load_tables()  # the implementations, imported here (the test process has them)
    for definition in registry.definitions():
        tool = definition["name"]
        module = sys.modules[f"gasoline.tools.{tool}"]
        properties = definition["inputSchema"]["properties"]
        assert module.PROPERTIES is MODE_PROPERTIES[tool]
        assert set(module.PROPERTIES) <= set(properties) and module.PROPERTIES
        assert set(properties["what"]["enum"]) >= set(modules[tool])  # every handler listed
    assert tables.loaded() == []
    # The daemon's own registry was built the same way.
    assert app.tools.tables.loaded() == [] and isinstance(app.tools.tables, ModeTables)


def test_a_tool_module_is_loaded_at_its_first_call_only(app):
    session = session_for(app, "lazy")
    assert "configure" in app.tools.tables and "nope" not in app.tools.tables
    assert list(app.tools.tables) == list(TOOL_MODULES) and len(app.tools.tables) == 5
    assert app.tools.tables.loaded() == []
    result = start(app, session, "configure", {"what": "health"})[0]["result"]
    assert result["isError"] is False
    assert app.tools.tables.loaded() == ["configure"]
    # An unknown mode is refused by the schema's enum, without importing anything.
    assert start(app, session, "analyze", {"what": "nope"})[0]["result"]["isError"] is True
    assert app.tools.tables.loaded() == ["configure"]
    with pytest.raises(KeyError):
        app.tools.tables["nope"]


def test_a_tool_module_that_fails_to_import_fails_only_that_tool(app, monkeypatch):
    import gasoline.tools as tools_package

    real = tools_package._module

    def broken(tool):
        if tool == "generate":
            raise ImportError("generate is broken")
        return real(tool)

    monkeypatch.setattr(tools_package, "_module", broken)
    session = session_for(app, "broken")
    failed = start(app, session, "generate", {"what": "har"})[0]["result"]
    assert failed["isError"] is True and "internal_error" in failed["content"][0]["text"]
    assert start(app, session, "observe", {"what": "errors"})[0]["result"]["isError"] is False
    assert app.tools.tables.loaded() == ["observe"]

"""The tools' schemas pass the MCP Inspector CLI's ``--strict`` schema-portability check with no
finding at all, neither error nor warning (``@modelcontextprotocol/inspector``, pinned 2.12.0 in
``.ci/node``: its CLI lints every ``inputSchema`` of ``tools/list`` for type unions, untyped
schemas, bare boolean schemas and remote ``$ref``s; ``--strict`` reports each in full).

A real daemon answers ``tools/list`` over ``/mcp``; a tiny stdio server with known faults is the
negative control. Needs Node >= 22 and the pinned package (``.ci/run`` installs both); without them
the test fails under ``CI=true`` and is skipped loudly otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import DaemonProcess, require_tool
from test_conformance import _node

from gasoline.tools.schemas import TOOL_MODES

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
INSPECTOR_CLI = ROOT / ".ci/node/node_modules/@modelcontextprotocol/inspector/clients/cli/build/index.js"
UNPORTABLE = Path(__file__).resolve().parent / "_unportable_mcp_server.py"


def _inspect(node: str, target: list[str], cwd: Path) -> tuple[int, dict, str]:
    """``tools/list --strict --format json`` on C{target}: exit status, JSON envelope, stderr."""
    run = subprocess.run(
        [node, str(INSPECTOR_CLI), *target, "--method", "tools/list", "--strict",
         "--format", "json"],
        capture_output=True, text=True, timeout=120, cwd=cwd,
    )
    try:
        envelope = json.loads(run.stdout)
    except ValueError:
        pytest.fail(f"the Inspector printed no JSON (exit {run.returncode}): {run.stdout[-2000:]}"
                    f"\n{run.stderr[-2000:]}")
    return run.returncode, envelope, run.stderr


@pytest.fixture(scope="module")
def node():
    found = _node()
    require_tool("MCP Inspector", str(INSPECTOR_CLI),
                 why="npm install --prefix .ci/node @modelcontextprotocol/inspector@2.12.0")
    return found


def test_the_five_tools_have_no_schema_portability_finding(node, tmp_path):
    with DaemonProcess(state_dir=tmp_path / "state") as daemon:
        code, envelope, stderr = _inspect(node, [f"{daemon.url}/mcp"], tmp_path)
    assert code == 0, stderr
    assert sorted(t["name"] for t in envelope["result"]["tools"]) == sorted(TOOL_MODES)
    assert envelope.get("schemaFindings", []) == [], json.dumps(envelope["schemaFindings"], indent=1)
    assert "portability" not in stderr, stderr


def test_the_check_reports_a_type_union_and_an_untyped_property(node, tmp_path):
    """The negative control: the same invocation does report what the issue forbids."""
    code, envelope, stderr = _inspect(node, [sys.executable, str(UNPORTABLE)], tmp_path)
    (tool,) = envelope["schemaFindings"]
    rules = sorted((f["rule"], f["path"], f["severity"]) for f in tool["findings"])
    assert tool["toolName"] == "unportable"
    assert ("type-union", "properties.id", "warning") in rules
    assert ("untyped-schema", "properties.value", "warning") in rules
    assert code == 0  # warnings only: --strict exits 6 on error-severity findings

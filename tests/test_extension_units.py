"""The extension's pure libraries (extension/lib/policy.js, redact.js, settings.js) and the service
worker's modules (extension/worker/: queues, command runner, sync bookkeeping, status, the entry
module's listeners) under Node's own test runner: tests/js/*.test.mjs, one process, every file.
Node is required: under CI=true a missing Node fails this test (support.require_tool); locally it
is skipped with a loud reason."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support import require_tool

TESTS = Path(__file__).resolve().parent / "js"


def test_the_extension_libraries_pass_their_node_tests():
    node = require_tool("node", why="the extension's unit tests run under node:test")
    files = sorted(TESTS.glob("*.test.mjs"))
    assert {f.name for f in files} >= {"policy.test.mjs", "redact.test.mjs", "settings.test.mjs", "queues.test.mjs",
                                       "runner.test.mjs", "syncstate.test.mjs", "worker.test.mjs", "background.test.mjs",
                                       "failures.test.mjs", "messages.test.mjs"}
    run = subprocess.run([node, "--test", *map(str, files)], capture_output=True, text=True,
                         timeout=120, cwd=TESTS)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    counts = dict(re.findall(r"^# (tests|pass|fail) (\d+)$", report, re.MULTILINE))
    assert int(counts["fail"]) == 0 and int(counts["pass"]) == int(counts["tests"]) >= 60, report

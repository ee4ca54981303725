"""Every proxy operation in the agent's audit, in memory (C{configure audit_log}) and in the log
dir (C{clients/<id>.log}): session start, each proxied call, a server restart, session end.

Real reactor, a real fake stdio MCP server (tests/proxy/fake_server.py)."""

from __future__ import annotations

import hashlib
import json
import os
import signal

import pytest
import pytest_twisted
from twisted.internet import reactor

from _proxy_harness import Daemon, fake_server, text_of, wait_for
from gasoline.logs import LogService

pytestmark = pytest.mark.integration


async def _call(d, sid, name, arguments=None, rid=7):
    return await d.mcp(sid, "tools/call", {"name": name, "arguments": arguments or {}}, rid)


def _lines(log_dir, relpath):
    """The records of a client's log, its rotated files (oldest first) and the current one."""
    path = log_dir / relpath
    stem = path.name[:-4]
    files = sorted(path.parent.glob(f"{stem}.*.log"), key=lambda p: p.stat().st_mtime)
    files += [path] if path.exists() else []
    assert files, f"no log file for {relpath}"
    return [json.loads(line) for f in files for line in f.read_text().splitlines()
            if line.strip()]


@pytest_twisted.ensureDeferred
async def test_session_start_calls_restart_and_end_are_audited_in_memory_and_on_disk(tmp_path):
    wd = tmp_path / "proj"
    wd.mkdir()
    logs = LogService(tmp_path / "logs", reactor, thread=False)
    d = Daemon(tmp_path, {"fake": fake_server()}, log_files=logs.files).start()
    try:
        sid = await d.session(wd)
        client = d.app.proxy.sessions[sid].client_id
        assert json.loads(text_of(await _call(d, sid, "fake__echo", {"a": 1}))) == {"a": 1}
        child = d.children(sid)[0]
        old = child.pid
        os.killpg(old, signal.SIGKILL)
        assert await wait_for(lambda: child.state == "ready" and child.pid != old, timeout=10)
        assert json.loads(text_of(await _call(d, sid, "fake__echo", {"a": 2}, 8))) == {"a": 2}
        await d.request("DELETE", f"/session/{sid}")
        audit = d.app.mcp.tools.audit_log(client)
        proxy = [(r["mode"], r["params"].get("server")) for r in audit if r["tool"] == "proxy"]
        assert proxy == [("session_start", None), ("server_restart", "fake"),
                         ("session_end", None)], audit
        start = next(r for r in audit if r["mode"] == "session_start")
        # The session id opens the session's routes: the audit keeps a reference, not the id.
        assert sid not in json.dumps(audit)
        assert start["params"]["ref"] == hashlib.sha256(sid.encode()).hexdigest()[:12]
        assert start["params"]["servers"] == ["fake"]
        assert start["params"]["working_directory"] == str(wd)
        calls = [r for r in audit if r["tool"] == "fake__echo"]
        assert [c["params"] for c in calls] == [{"a": 1}, {"a": 2}]
        assert all(c["outcome"] == "ok" for c in calls)
        # In order: start, call, restart, call, end.
        order = [r["mode"] if r["tool"] == "proxy" else r["tool"] for r in audit
                 if r["tool"] in ("proxy", "fake__echo")]
        assert order == ["session_start", "fake__echo", "server_restart", "fake__echo",
                         "session_end"]
        # The same on disk, in the client's own log.
        on_disk = _lines(tmp_path / "logs", logs.files.client_log(client))
        events = [(r["mode"]) for r in on_disk if r["type"] == "audit_event"]
        assert events == ["session_start", "server_restart", "session_end"]
        assert [r["args"] for r in on_disk if r["type"] == "tool_call"
                and r["tool"] == "fake__echo"] == [{"a": 1}, {"a": 2}]
        assert [r["outcome"] for r in on_disk if r["type"] == "tool_result"
                and r["tool"] == "fake__echo"] == ["ok", "ok"]
    finally:
        await d.stop()
        logs.files.close()

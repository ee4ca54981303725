"""The session proxy end to end with a small fake stdio MCP server (tests/proxy/fake_server.py):
sessions, aggregation, child processes (cwd, environment, process group, no orphans), restarts,
progress, cancellation, roots, sampling, list_changed, limits and hostile input.

Real reactor, real child processes, the daemon's HTTP surface on 127.0.0.1:0.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from _proxy_harness import Daemon, alive, fake_server, group_members, text_of, wait_for

pytestmark = pytest.mark.integration

FIVE = {"observe", "analyze", "generate", "configure", "interact"}


def _project(tmp_path, name="proj"):
    wd = tmp_path / name
    wd.mkdir()
    return wd


async def _call(d, sid, name, arguments=None, rid=7):
    return await d.mcp(sid, "tools/call", {"name": name, "arguments": arguments or {}}, rid)


@pytest_twisted.ensureDeferred
async def test_init_answers_servers_and_tools_and_mcp_lists_five_plus_aggregated(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server(),
                          "brave": fake_server(env={"KEY": "${GASOLINE_TEST_UNSET_VAR}"})}).start()
    try:
        info = await d.init(wd)
        sid = info["sessionId"]
        assert len(sid) == 32 and info["protocolVersion"] == "2025-11-25"
        assert info["capabilities"]["session"] == {"local_execution": True,
                                                   "remote_execution": True}
        fake = info["servers"]["fake"]
        assert fake["executionContext"] == "local" and fake["enabled"] is True
        assert fake["workingDirectory"] == str(wd) and fake["allowedDirectories"] == [str(wd)]
        assert fake["status"] == "ready"
        assert info["servers"]["brave"] == {"executionContext": "local", "enabled": False,
                                            "reason": "Missing GASOLINE_TEST_UNSET_VAR"}
        names = {t["name"] for t in info["tools"]}
        assert "fake__echo" in names and all(t["server"] == "fake" for t in info["tools"])
        await d.mcp_initialize(sid)
        listed = await d.mcp(sid, "tools/list", {}, 2)
        tools = [t["name"] for t in listed["result"]["tools"]]
        assert set(tools[:5]) == FIVE and set(tools[5:]) == names
        assert all(len(n) <= 64 for n in tools)
        r = await _call(d, sid, "fake__echo", {"x": 1})
        assert json.loads(text_of(r)) == {"x": 1}
        # The long name was shortened deterministically and still routes to its tool.
        long = next(n for n in tools if n.startswith("fake__aaaa"))
        assert len(long) == 64
        assert text_of(await _call(d, sid, long)) == "a" * 70
        # GET describes it; an MCP session without the proxy id does not see the child tools.
        code, described = await d.request("GET", f"/session/{sid}")
        assert code == 200 and described["sessionId"] == sid
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_child_runs_in_the_working_directory_with_a_minimal_environment_in_its_own_group(
        tmp_path, monkeypatch):
    monkeypatch.setenv("GASOLINE_SECRET_TOKEN", "do-not-leak")
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server(env={"EXTRA": "{workingDirectory}/x"})}).start()
    try:
        sid = await d.session(wd)
        seen = json.loads(text_of(await _call(d, sid, "fake__whereami")))
        assert seen["cwd"] == str(wd)
        assert "GASOLINE_SECRET_TOKEN" not in seen["env"]
        assert seen["env"]["EXTRA"] == f"{wd}/x"
        assert set(seen["env"]) <= {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "EXTRA",
                                    "LC_CTYPE"}  # LC_CTYPE: Python's own locale coercion
        watchdog = d.children(sid)[0].pid
        assert seen["pgid"] == watchdog != os.getpgid(0)
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_delete_leaves_no_process_behind_not_even_a_grandchild(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        sid = await d.session(wd)
        grandchild = json.loads(text_of(await _call(d, sid, "fake__spawn_grandchild")))["grandchild"]
        server = json.loads(text_of(await _call(d, sid, "fake__whereami", rid=8)))["pid"]
        group = d.children(sid)[0].pid
        assert alive(grandchild) and alive(server) and group_members(group)
        code, body = await d.request("DELETE", f"/session/{sid}")
        assert code == 200 and body == {"sessionId": sid, "ended": True}
        # The answer comes once the child is reaped: nothing of the group is left.
        assert group_members(group) == []
        assert not alive(server) and not alive(grandchild)
        assert (await d.request("GET", f"/session/{sid}"))[0] == 404
        code, _ = await d.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                  {"Mcp-Session-Id": sid})
        assert code == 404
        assert (await d.request("POST", f"/session/{sid}/destroy"))[0] == 404
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_destroy_route_and_mcp_delete_end_the_session_too(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        sid = (await d.init(wd))["sessionId"]
        group = d.children(sid)[0].pid
        assert (await d.request("POST", f"/session/{sid}/destroy"))[0] == 200
        assert group_members(group) == []
        sid = await d.session(wd)
        group = d.children(sid)[0].pid
        code, _ = await d.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
        assert code == 204
        assert await wait_for(lambda: group_members(group) == [])
        assert sid not in d.app.proxy.sessions
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_idle_timeout_ends_the_session_and_its_children(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}, proxy={"sessionIdleTimeout": 3.0}).start()
    try:
        sid = await d.session(wd)
        group = d.children(sid)[0].pid
        # Activity on the MCP session (any request) keeps it alive past the timeout.
        for rid in range(8):
            await deferLater(reactor, 0.5, lambda: None)
            await d.mcp(sid, "ping", {}, 10 + rid)
        assert sid in d.app.proxy.sessions and group_members(group)
        assert await wait_for(lambda: sid not in d.app.proxy.sessions, timeout=5)
        assert await wait_for(lambda: group_members(group) == [], timeout=10)
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_daemon_stop_ends_every_child_and_persists_sessions_for_a_restart(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}, persist=True).start()
    state = tmp_path / "state"
    try:
        sid = await d.session(wd)
        group = d.children(sid)[0].pid
    finally:
        await d.stop()
    assert group_members(group) == []
    saved = json.loads((state / "proxy-sessions.json").read_text())
    assert [s["sessionId"] for s in saved["sessions"]] == [sid]
    # A new daemon on the same state dir: the session is back, its child starts on the next call.
    d2 = Daemon(tmp_path, {"fake": fake_server()}, persist=True, state_dir=state).start()
    try:
        assert sid in d2.app.proxy.sessions
        assert d2.children(sid)[0].state == "stopped"
        seen = json.loads(text_of(await _call(d2, sid, "fake__whereami")))
        assert seen["cwd"] == str(wd)
        listed = await d2.mcp(sid, "tools/list", {}, 3)
        assert "fake__echo" in {t["name"] for t in listed["result"]["tools"]}
    finally:
        await d2.stop()


@pytest_twisted.ensureDeferred
async def test_a_killed_child_fails_fast_with_its_stderr_then_is_restarted(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        sid = await d.session(wd)
        child = d.children(sid)[0]
        r = await _call(d, sid, "fake__crash")
        assert r["result"]["isError"] is True
        text = text_of(r)
        assert "server_unavailable" in text and "crashing on purpose" in text
        assert child.state == "down"
        r = await _call(d, sid, "fake__echo", {"a": 1}, rid=9)
        assert r["result"]["isError"] is True and "unavailable" in text_of(r)
        assert await wait_for(lambda: child.state == "ready", timeout=10)
        assert child.restarts == 1
        assert json.loads(text_of(await _call(d, sid, "fake__echo", {"a": 2}, rid=10))) == {"a": 2}
        # Killed from outside (SIGKILL to the whole group): restarted as well.
        old = child.pid
        os.killpg(old, signal.SIGKILL)
        assert await wait_for(lambda: child.state == "ready" and child.pid != old, timeout=10)
        assert json.loads(text_of(await _call(d, sid, "fake__echo", {"a": 3}, rid=11))) == {"a": 3}
        code, described = await d.request("GET", f"/session/{sid}")
        assert described["servers"]["fake"]["restarts"] == 2
    finally:
        await d.stop()


def _mcp_session(d, sid):
    return d.app.mcp.sessions[sid]


@pytest_twisted.ensureDeferred
async def test_progress_is_forwarded_with_the_agents_token_and_cancellation_reaches_the_child(
        tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        sid = await d.session(wd)
        session = _mcp_session(d, sid)
        emitted = []
        result = await d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 40, "method": "tools/call",
            "params": {"name": "fake__slow", "arguments": {"steps": 3},
                       "_meta": {"progressToken": "agent-token"}}}, emitted.append)
        assert text_of(result) == "done"
        progress = [m["params"] for m in emitted if m.get("method") == "notifications/progress"]
        assert [p["progress"] for p in progress] == [1, 2, 3]
        assert all(p["progressToken"] == "agent-token" for p in progress)
        # Cancellation: the agent's notifications/cancelled reaches the child with its own id.
        marker = tmp_path / "proj" / "cancelled.txt"
        emitted.clear()
        pending = d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 41, "method": "tools/call",
            "params": {"name": "fake__slow", "arguments": {"steps": 200,
                                                           "cancel_marker": str(marker)},
                       "_meta": {"progressToken": 5}}}, emitted.append)
        assert await wait_for(lambda: any(m.get("method") == "notifications/progress"
                                          for m in emitted))
        await d.app.mcp.handle(session, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                         "params": {"requestId": 41}})
        assert await pending is None  # a cancelled request is not answered
        assert await wait_for(lambda: marker.exists())
        # The child is still usable afterwards.
        assert json.loads(text_of(await _call(d, sid, "fake__echo", {"b": 1}))) == {"b": 1}
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_roots_list_is_answered_from_the_allowed_directories(tmp_path):
    wd = _project(tmp_path)
    other = _project(tmp_path, "shared-docs")
    d = Daemon(tmp_path, {"fake": fake_server(
        allowedDirectories=["{workingDirectory}", str(other)])}).start()
    try:
        sid = (await d.init(wd, capabilities={"roots": {"listChanged": True}}))["sessionId"]
        await d.mcp_initialize(sid, {"roots": {"listChanged": True}})
        answer = json.loads(text_of(await _call(d, sid, "fake__roots")))
        assert answer["result"]["roots"] == [
            {"uri": wd.as_uri(), "name": "proj"}, {"uri": other.as_uri(), "name": "shared-docs"}]
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_sampling_is_refused_unless_the_agent_declared_it_and_relayed_when_it_did(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        sid = (await d.init(wd))["sessionId"]
        await d.mcp_initialize(sid)  # no sampling capability
        answer = json.loads(text_of(await _call(d, sid, "fake__sample")))
        assert "did not declare the sampling capability" in answer["error"]["message"]

        sid2 = (await d.init(wd, capabilities={"sampling": {}}))["sessionId"]
        await d.mcp_initialize(sid2, {"sampling": {}})
        session = _mcp_session(d, sid2)
        emitted = []
        pending = d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 50, "method": "tools/call",
            "params": {"name": "fake__sample", "arguments": {}}}, emitted.append)
        assert await wait_for(lambda: any(m.get("method") == "sampling/createMessage"
                                          for m in emitted))
        request = next(m for m in emitted if m.get("method") == "sampling/createMessage")
        assert request["params"]["maxTokens"] == 5
        await d.app.mcp.handle(session, {"jsonrpc": "2.0", "id": request["id"], "result": {
            "role": "assistant", "content": {"type": "text", "text": "hello from the agent"},
            "model": "m"}})
        result = await pending
        relayed = json.loads(text_of(result))
        assert relayed["result"]["content"]["text"] == "hello from the agent"
        # The child cancels a request it sent: the agent is told, with the id it was given.
        emitted.clear()
        result = await d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 51, "method": "tools/call",
            "params": {"name": "fake__sample_cancel", "arguments": {}}}, emitted.append)
        assert text_of(result) == "asked and cancelled"
        assert await wait_for(lambda: any(m.get("method") == "notifications/cancelled"
                                          for m in emitted + [json.loads(p) for _, _, p in
                                                              session.standalone._log]))
        asked = next(m for m in emitted if m.get("method") == "sampling/createMessage")
        told = [m for m in emitted + [json.loads(p) for _, _, p in session.standalone._log]
                if m.get("method") == "notifications/cancelled"]
        assert told[0]["params"]["requestId"] == asked["id"]
        assert asked["id"] not in session.outgoing
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_list_changed_is_forwarded_once_and_the_list_refreshed(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        sid = await d.session(wd)
        session = _mcp_session(d, sid)
        before = len(session.standalone)
        await _call(d, sid, "fake__change")  # the child announces list_changed twice
        assert await wait_for(lambda: "fake__added" in d.app.proxy.sessions[sid].tools)
        await deferLater(reactor, 0.7, lambda: None)
        notes = [json.loads(p) for _, _, p in list(session.standalone._log)[before:]]
        assert [n["method"] for n in notes] == ["notifications/tools/list_changed"]
        listed = await d.mcp(sid, "tools/list", {}, 3)
        assert "fake__added" in {t["name"] for t in listed["result"]["tools"]}
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_path_arguments_outside_the_allowed_directories_are_refused_before_the_call(
        tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        sid = await d.session(wd)
        ok = await _call(d, sid, "fake__echo", {"path": str(wd / "a.txt")})
        assert "isError" not in ok["result"]
        (wd / "escape").symlink_to(tmp_path)
        for bad in ("/etc/passwd", "../other", str(wd / "escape" / "x"), "file:///etc/hosts",
                    {"nested": [{"destination": "/tmp"}]}):
            args = bad if isinstance(bad, dict) else {"path": bad}
            r = await _call(d, sid, "fake__echo", args, rid=20)
            assert r["result"]["isError"] is True, bad
            assert "path_not_allowed" in text_of(r)
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_limits_refuse_with_a_clear_error(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()},
               proxy={"maxSessions": 2, "maxChildrenPerServer": 1}).start()
    try:
        await d.init(wd)
        code, body = await d.request("POST", "/session/init", {"workingDirectory": str(wd)})
        assert code == 429 and body["error"] == "too_many_children"
        assert "maxChildrenPerServer = 1" in body["message"]
        assert len(d.app.proxy.sessions) == 1
    finally:
        await d.stop()
    d = Daemon(tmp_path, {"fake": fake_server(enabled=False)}, proxy={"maxSessions": 1}).start()
    try:
        await d.init(wd)
        code, body = await d.request("POST", "/session/init", {"workingDirectory": str(wd)})
        assert code == 429 and body["error"] == "too_many_sessions"
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_hostile_session_requests_get_clear_errors(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server(enabled=False)}).start()
    try:
        cases = [
            ({"workingDirectory": "relative/dir"}, 400, "invalid_param"),
            ({"workingDirectory": str(tmp_path / "missing")}, 400, "invalid_param"),
            ({"workingDirectory": 5}, 400, "invalid_param"),
            ({"workingDirectory": str(wd), "preferences": {"executionContext": {"x": "mars"}}},
             400, "invalid_param"),
            ({"workingDirectory": str(wd), "capabilities": []}, 400, "invalid_param"),
            ([1, 2], 400, "bad_json"),
        ]
        for body, status, error in cases:
            code, answer = await d.request("POST", "/session/init", body)
            assert (code, answer["error"]) == (status, error), body
        import treq
        resp = await treq.post(d.url + "/session/init", data=b"{nope",
                               headers={"Content-Type": "application/json"})
        assert resp.code == 400 and (await resp.json())["error"] == "bad_json"
        resp = await treq.post(d.url + "/session/init", data=b"x" * (70 * 1024),
                               headers={"Content-Type": "application/json"})
        assert resp.code == 400
        code, answer = await d.request("GET", "/session/nope")
        assert code == 404 and answer["error"] == "unknown_session"
        code, answer = await d.request("DELETE", "/session/nope")
        assert code == 404
        # A browser (any Origin the guard lets through) cannot open sessions.
        code, answer = await d.request("POST", "/session/init", {"workingDirectory": str(wd)},
                                       {"Origin": "chrome-extension://abcdefghijklmnop"})
        assert code == 403
        assert d.app.proxy.sessions == {}
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_without_a_servers_file_session_routes_say_the_proxy_is_off(tmp_path):
    from twisted.web.server import Site

    from gasoline.app import Config, build
    import treq

    app = build(Config(state_dir=tmp_path, persist=False), reactor)
    port = reactor.listenTCP(0, Site(app.resource), interface="127.0.0.1")
    try:
        resp = await treq.post(f"http://127.0.0.1:{port.getHost().port}/session/init",
                               json={"workingDirectory": str(tmp_path)})
        body = await resp.json()
        assert resp.code == 404 and body["error"] == "proxy_disabled"
        assert "--proxy-config" in body["message"]
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_two_sessions_with_one_child_each_are_isolated(tmp_path):
    a, b = _project(tmp_path, "a"), _project(tmp_path, "b")
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        sa = (await d.init(a))["sessionId"]
        sb = (await d.init(b))["sessionId"]
        await d.mcp_initialize(sa)
        await d.mcp_initialize(sb)
        wa = json.loads(text_of(await _call(d, sa, "fake__whereami")))
        wb = json.loads(text_of(await _call(d, sb, "fake__whereami")))
        assert (wa["cwd"], wb["cwd"]) == (str(a), str(b)) and wa["pid"] != wb["pid"]
        r = await _call(d, sa, "fake__echo", {"path": str(b / "secret.txt")})
        assert r["result"]["isError"] is True and "path_not_allowed" in text_of(r)
        # Ending one leaves the other running.
        await d.request("DELETE", f"/session/{sa}")
        assert alive(wb["pid"]) and not alive(wa["pid"])
    finally:
        await d.stop()
    assert not alive(wb["pid"])


@pytest_twisted.ensureDeferred
async def test_a_server_that_cannot_start_is_listed_down_with_its_error_and_fails_fast(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server(),
                          "broken": {"command": str(tmp_path / "no-such-binary")},
                          "mute": {"command": "/bin/sh", "args": ["-c", "echo oops >&2; exit 4"]}},
               ).start()
    try:
        info = await d.init(wd)
        broken, mute = info["servers"]["broken"], info["servers"]["mute"]
        # Down, or already restarting (back-off from 0.5 s): the error stays until it is ready.
        assert broken["status"] in ("down", "starting") and "status 127" in broken["error"]
        assert mute["status"] in ("down", "starting") and "status 4" in mute["error"]
        assert {t["server"] for t in info["tools"]} == {"fake"}
        sid = info["sessionId"]
        await d.mcp_initialize(sid)
        assert json.loads(text_of(await _call(d, sid, "fake__echo", {"ok": 1}))) == {"ok": 1}
        code, described = await d.request("GET", f"/session/{sid}")
        assert described["servers"]["mute"]["status"] in ("down", "starting")
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_a_remote_server_is_one_shared_instance_and_overrides_need_the_config(tmp_path):
    a, b = _project(tmp_path, "a"), _project(tmp_path, "b")
    d = Daemon(tmp_path, {
        "shared": fake_server(executionContext="remote", allowedDirectories=[]),
        "flex": fake_server(executionContext="remote", allowOverride=True,
                            allowedDirectories=[]),
        "pinned": fake_server(executionContext="local"),
    }).start()
    try:
        prefs = {"executionContext": {"flex": "local", "pinned": "remote"}}
        ia = await d.init(a, preferences=prefs)
        ib = await d.init(b)
        assert ia["servers"]["flex"]["executionContext"] == "local"
        assert ib["servers"]["flex"]["executionContext"] == "remote"
        pinned = ia["servers"]["pinned"]
        assert pinned["executionContext"] == "local" and "does not allow overrides" in \
            pinned["reason"]
        sa, sb = ia["sessionId"], ib["sessionId"]
        await d.mcp_initialize(sa)
        await d.mcp_initialize(sb)
        wa = json.loads(text_of(await _call(d, sa, "shared__whereami")))
        wb = json.loads(text_of(await _call(d, sb, "shared__whereami")))
        assert wa["pid"] == wb["pid"]  # one shared instance
        fa = json.loads(text_of(await _call(d, sa, "flex__whereami")))
        assert fa["cwd"] == str(a) and fa["pid"] != wa["pid"]
        # Ending a session leaves the shared instance running for the others.
        await d.request("DELETE", f"/session/{sa}")
        assert alive(wb["pid"]) and not alive(fa["pid"])
        assert json.loads(text_of(await _call(d, sb, "shared__echo", {"z": 1}))) == {"z": 1}
    finally:
        await d.stop()
    assert not alive(wb["pid"])


@pytest_twisted.ensureDeferred
async def test_a_shared_stdio_servers_sampling_goes_to_its_only_user_and_is_refused_with_two(
        tmp_path):
    # A shared stdio child cannot say which session its request serves. With one session
    # using it, that session is the only possible one; with two, a guess (say, the one with a
    # call in flight) could hand one agent the other's data: refused, with the reason.
    a, b = _project(tmp_path, "a"), _project(tmp_path, "b")
    d = Daemon(tmp_path, {"shared": fake_server(executionContext="remote",
                                                allowedDirectories=[])}).start()
    try:
        sa = (await d.init(a, capabilities={"sampling": {}}))["sessionId"]
        await d.mcp_initialize(sa, {"sampling": {}})
        session = _mcp_session(d, sa)
        emitted: list = []
        pending = d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 50, "method": "tools/call",
            "params": {"name": "shared__sample", "arguments": {}}}, emitted.append)
        assert await wait_for(lambda: any(m.get("method") == "sampling/createMessage"
                                          for m in emitted))
        request = next(m for m in emitted if m.get("method") == "sampling/createMessage")
        await d.app.mcp.handle(session, {"jsonrpc": "2.0", "id": request["id"], "result": {
            "role": "assistant", "content": {"type": "text", "text": "from a"}, "model": "m"}})
        assert json.loads(text_of(await pending))["result"]["content"]["text"] == "from a"

        sb = (await d.init(b, capabilities={"sampling": {}}))["sessionId"]  # idle, no calls
        await d.mcp_initialize(sb, {"sampling": {}})
        emitted.clear()
        answer = json.loads(text_of(await d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 51, "method": "tools/call",
            "params": {"name": "shared__sample", "arguments": {}}}, emitted.append)))
        assert "cannot be attributed to one session (2 sessions use it" in \
            answer["error"]["message"]
        assert not any(m.get("method") == "sampling/createMessage" for m in emitted)
        assert not _mcp_session(d, sb).outgoing  # nothing reached the other agent either
        # The other session gone, the server has one user again.
        await d.request("DELETE", f"/session/{sb}")
        pending = d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 52, "method": "tools/call",
            "params": {"name": "shared__sample", "arguments": {}}}, emitted.append)
        assert await wait_for(lambda: any(m.get("method") == "sampling/createMessage"
                                          for m in emitted))
        request = next(m for m in emitted if m.get("method") == "sampling/createMessage")
        await d.app.mcp.handle(session, {"jsonrpc": "2.0", "id": request["id"], "result": {
            "role": "assistant", "content": {"type": "text", "text": "again"}, "model": "m"}})
        assert json.loads(text_of(await pending))["result"]["content"]["text"] == "again"
    finally:
        await d.stop()


def _scrape(families, name, **labels):
    for family in families:
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                yield sample.value


async def _metrics(d):
    from prometheus_client.parser import text_string_to_metric_families

    code, text = await d.request("GET", "/metrics", headers={"Accept": "text/plain"})
    assert code == 200
    return list(text_string_to_metric_families(text))


@pytest_twisted.ensureDeferred
async def test_metrics_show_sessions_children_restarts_calls_and_latency(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        before = await _metrics(d)
        assert list(_scrape(before, "gasoline_proxy_sessions")) == [0.0]
        sid = (await d.init(wd))["sessionId"]
        await d.mcp_initialize(sid)
        assert text_of(await _call(d, sid, "fake__echo", {"text": "x"}))
        r = await _call(d, sid, "fake__echo", {"path": "/etc/passwd"}, rid=8)  # refused path
        assert r["result"]["isError"] is True
        child = d.children(sid)[0]
        os.killpg(child.pid, signal.SIGKILL)
        assert await wait_for(lambda: child.state == "down")
        assert await wait_for(lambda: child.state == "ready", timeout=15)
        m = await _metrics(d)
        assert list(_scrape(m, "gasoline_proxy_sessions")) == [1.0]
        assert list(_scrape(m, "gasoline_proxy_children", server="fake", context="local",
                            state="ready")) == [1.0]
        assert list(_scrape(m, "gasoline_proxy_restarts_total", server="fake")) == [1.0]
        assert list(_scrape(m, "gasoline_proxy_calls_total", server="fake", outcome="ok")) == [1.0]
        assert list(_scrape(m, "gasoline_proxy_calls_total", server="fake",
                            outcome="error")) == [1.0]
        assert list(_scrape(m, "gasoline_proxy_call_seconds_count", server="fake")) == [2.0]
        assert list(_scrape(m, "gasoline_proxy_call_seconds_bucket", server="fake",
                            le="+Inf")) == [2.0]
        await d.request("DELETE", f"/session/{sid}")
        m = await _metrics(d)
        assert list(_scrape(m, "gasoline_proxy_sessions")) == [0.0]
        assert list(_scrape(m, "gasoline_proxy_children", server="fake")) == []
        assert list(_scrape(m, "gasoline_proxy_restarts_total", server="fake")) == [1.0]
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_messages_larger_than_the_pipe_buffer_arrive_whole_and_in_order(tmp_path):
    # Calls larger than a pipe holds (64 KiB), in flight together, with a small one behind them.
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        sid = (await d.init(wd))["sessionId"]
        await d.mcp_initialize(sid)
        big = "x" * 80_000  # more than the pipe holds, less than the 100 kB result cap
        calls = [_call(d, sid, "fake__echo", {"text": big + str(i)}, rid=10 + i) for i in range(3)]
        calls.append(_call(d, sid, "fake__echo", {"text": "small"}, rid=20))
        from twisted.internet.defer import ensureDeferred, gatherResults

        results = await gatherResults([ensureDeferred(c) for c in calls])
        texts = [json.loads(text_of(r))["text"] for r in results]
        assert texts == [big + "0", big + "1", big + "2", "small"]
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_agent_progress_on_a_relayed_request_reaches_the_child_and_elicitation_relays(
        tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        caps = {"sampling": {}, "elicitation": {}}
        sid = (await d.init(wd, capabilities=caps))["sessionId"]
        await d.mcp_initialize(sid, caps)
        session = _mcp_session(d, sid)
        emitted = []
        pending = d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 60, "method": "tools/call",
            "params": {"name": "fake__sample_progress", "arguments": {}}}, emitted.append)
        assert await wait_for(lambda: any(m.get("method") == "sampling/createMessage"
                                          for m in emitted))
        request = next(m for m in emitted if m.get("method") == "sampling/createMessage")
        given = request["params"]["_meta"]["progressToken"]
        assert given != "child-tok"  # the agent never sees a child's own token
        # Progress for an unknown token is dropped; the agent's progress for the relayed
        # request goes to the child, with the child's token.
        for token, n in (("nobody-s-token", 9), (given, 1), (given, 2)):
            await d.app.mcp.handle(session, {"jsonrpc": "2.0", "method": "notifications/progress",
                                             "params": {"progressToken": token, "progress": n}})
        await deferLater(reactor, 0.2, lambda: None)
        await d.app.mcp.handle(session, {"jsonrpc": "2.0", "id": request["id"], "result": {
            "role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}})
        seen = json.loads(text_of(await pending))
        assert seen["progress"] == [{"for": "child-tok", "progress": 1},
                                    {"for": "child-tok", "progress": 2}]
        assert d.app.proxy.sessions[sid]._relay_progress == {}

        emitted.clear()
        pending = d.app.mcp.handle(session, {
            "jsonrpc": "2.0", "id": 61, "method": "tools/call",
            "params": {"name": "fake__elicit", "arguments": {}}}, emitted.append)
        assert await wait_for(lambda: any(m.get("method") == "elicitation/create"
                                          for m in emitted))
        request = next(m for m in emitted if m.get("method") == "elicitation/create")
        assert request["params"]["message"] == "Which branch?"
        await d.app.mcp.handle(session, {"jsonrpc": "2.0", "id": request["id"], "result": {
            "action": "accept", "content": {"branch": "main"}}})
        answer = json.loads(text_of(await pending))
        assert answer["result"] == {"action": "accept", "content": {"branch": "main"}}
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_the_servers_timeout_and_cwd_fields_are_honoured(tmp_path):
    wd = _project(tmp_path)
    (wd / "sub").mkdir()
    d = Daemon(tmp_path, {"fake": fake_server(timeout=0.3, cwd="sub")}).start()
    try:
        sid = (await d.init(wd))["sessionId"]
        await d.mcp_initialize(sid)
        seen = json.loads(text_of(await _call(d, sid, "fake__whereami")))
        assert seen["cwd"] == str(wd / "sub")
        started = reactor.seconds()
        r = await _call(d, sid, "fake__slow", {"steps": 40}, rid=8)  # 2 s of work
        assert reactor.seconds() - started < 1.5
        assert r["result"]["isError"] is True and "server_timeout" in text_of(r)
        assert "within 0.3 s" in text_of(r)
        # The child was told to stop (notifications/cancelled) and still answers.
        assert text_of(await _call(d, sid, "fake__echo", {"x": 1}, rid=9))
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_project_servers_are_added_only_for_allowed_projects(tmp_path):
    allowed, other = _project(tmp_path, "allowed"), _project(tmp_path, "other")
    for wd in (allowed, other):
        (wd / ".gasoline").mkdir()
        (wd / ".gasoline" / "servers.json").write_text(json.dumps(
            {"mcpServers": {"mine": fake_server()}}))
    d = Daemon(tmp_path, {"fake": fake_server()},
               proxy={"allowProjectServers": [str(allowed)]}).start()
    try:
        a = await d.init(allowed)
        assert set(a["servers"]) == {"fake", "mine"} and a["servers"]["mine"]["status"] == "ready"
        assert "mine__echo" in {t["name"] for t in a["tools"]}
        b = await d.init(other)
        assert set(b["servers"]) == {"fake"}  # not allowed: its file is ignored
        # A project may not redefine the daemon's own servers.
        (allowed / ".gasoline" / "servers.json").write_text(json.dumps(
            {"mcpServers": {"fake": fake_server()}}))
        code, body = await d.request("POST", "/session/init", {"workingDirectory": str(allowed)})
        assert code == 400 and "already defines" in json.dumps(body)
    finally:
        await d.stop()

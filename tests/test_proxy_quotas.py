"""The proxy is transparent, with quotas of its own: Gasoline's tool budget (the
per-client rate limit) and its 100 kB result cap apply to Gasoline's own tools only; a proxied
server has the optional limits of its entry in the servers file (``callsPerMinute``,
``maxResultBytes``, ``cpuSeconds``, ``memoryMB``), reported as that server's error when hit.

Real reactor, the fake stdio server (tests/proxy/fake_server.py), the daemon's defaults
(``Config()``: 100 tool calls per minute per client) unless a test says otherwise.
"""

from __future__ import annotations

import json

import pytest
import pytest_twisted

from _proxy_harness import Daemon, fake_server, text_of
from gasoline.config import Config
from gasoline.mcp.tools import RESULT_CAP
from gasoline.proxy.config import ProxyConfigError, parse

pytestmark = pytest.mark.integration


def _project(tmp_path, name="proj"):
    wd = tmp_path / name
    wd.mkdir()
    return wd


async def _call(d, sid, name, arguments=None, rid=7):
    return await d.mcp(sid, "tools/call", {"name": name, "arguments": arguments or {}}, rid)


def _error(r):
    result = r["result"]
    assert result["isError"] is True, result
    text = text_of(r)
    return json.loads(text.partition("\n")[2]), text


def test_the_default_budget_is_the_one_the_issue_names():
    assert Config().tool_rate_limit == 100 and RESULT_CAP == 100_000


@pytest_twisted.ensureDeferred
async def test_proxied_calls_use_neither_gasolines_budget_nor_its_cap_and_its_own_tools_keep_both(
        tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server()}).start()
    try:
        sid = await d.session(wd)
        # Three times Gasoline's budget of proxied calls in far less than a minute: all answered.
        for i in range(300):
            r = await _call(d, sid, "fake__echo", {"i": i}, rid=100 + i)
            assert json.loads(text_of(r)) == {"i": i}, r
        # A result of three times Gasoline's cap arrives whole.
        r = await _call(d, sid, "fake__big", {"bytes": 3 * RESULT_CAP}, rid=5)
        assert text_of(r) == "x" * (3 * RESULT_CAP)
        # Gasoline's own tools still have their budget, untouched by the 301 proxied calls:
        # 100 answered, the 101st refused.
        codes = []
        for i in range(101):
            r = await _call(d, sid, "configure", {"what": "health"}, rid=1000 + i)
            codes.append(_error(r)[0]["error"] if r["result"].get("isError") else "ok")
        assert codes[:100] == ["ok"] * 100 and codes[100] == "rate_limited"
        # ... and proxied calls still go through after Gasoline's budget is spent.
        r = await _call(d, sid, "fake__echo", {"after": 1}, rid=3000)
        assert json.loads(text_of(r)) == {"after": 1}
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_calls_per_minute_is_the_servers_own_limit_per_session(tmp_path):
    a, b = _project(tmp_path, "a"), _project(tmp_path, "b")
    d = Daemon(tmp_path, {"fake": fake_server(callsPerMinute=3),
                          "free": fake_server()}).start()
    try:
        sa, sb = await d.session(a), await d.session(b)
        for i in range(3):
            assert json.loads(text_of(await _call(d, sa, "fake__echo", {"i": i}, rid=10 + i))) \
                == {"i": i}
        body, text = _error(await _call(d, sa, "fake__echo", {"i": 3}, rid=20))
        assert body["error"] == "server_rate_limited" and body["server"] == "fake"
        assert body["limit"] == 3 and 0 < body["retry_after_seconds"] <= 60
        assert "server fake" in text and "callsPerMinute" in text
        # Another session has its own count; another server of the same session is not limited.
        assert json.loads(text_of(await _call(d, sb, "fake__echo", {"b": 1}, rid=21))) == {"b": 1}
        assert json.loads(text_of(await _call(d, sa, "free__echo", {"f": 1}, rid=22))) == {"f": 1}
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_max_result_bytes_refuses_a_larger_result_as_the_servers_error(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server(maxResultBytes=2000)}).start()
    try:
        sid = await d.session(wd)
        assert text_of(await _call(d, sid, "fake__big", {"bytes": 1000})) == "x" * 1000
        body, text = _error(await _call(d, sid, "fake__big", {"bytes": 5000}, rid=8))
        assert body["error"] == "server_result_too_large" and body["server"] == "fake"
        assert body["limit"] == 2000 and body["size"] > 5000
        assert "maxResultBytes" in text and "x" * 100 not in text
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_cpu_seconds_ends_a_spinning_server_and_the_call_says_why(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server(cpuSeconds=1, timeout=30)}).start()
    try:
        sid = await d.session(wd)
        body, text = _error(await _call(d, sid, "fake__burn"))
        assert body["error"] == "server_unavailable", body
        assert "SIGXCPU" in text and "cpuSeconds 1" in text
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_memory_mb_bounds_a_servers_allocations(tmp_path):
    wd = _project(tmp_path)
    d = Daemon(tmp_path, {"fake": fake_server(memoryMB=200)}).start()
    try:
        sid = await d.session(wd)
        assert text_of(await _call(d, sid, "fake__allocate", {"mb": 20})) == str(20 * 1024 ** 2)
        body, text = _error(await _call(d, sid, "fake__allocate", {"mb": 400}, rid=8))
        assert body["error"] == "server_unavailable", body
        assert "MemoryError" in text and "memoryMB 200" in text
    finally:
        await d.stop()


@pytest.mark.parametrize("field", ["callsPerMinute", "maxResultBytes", "cpuSeconds", "memoryMB"])
def test_limit_fields_are_positive_integers_and_process_limits_need_a_command(field):
    assert getattr(parse({"mcpServers": {"s": {"command": "x", field: 5}}}).servers[0],
                   {"callsPerMinute": "calls_per_minute", "maxResultBytes": "max_result_bytes",
                    "cpuSeconds": "cpu_seconds", "memoryMB": "memory_mb"}[field]) == 5
    for bad in (0, -1, 1.5, True, "5"):
        with pytest.raises(ProxyConfigError, match=f"mcpServers.s.{field}: must be a positive"):
            parse({"mcpServers": {"s": {"command": "x", field: bad}}})
    remote = {"mcpServers": {"s": {"url": "https://example.invalid/mcp", field: 5}}}
    if field in ("cpuSeconds", "memoryMB"):
        with pytest.raises(ProxyConfigError, match='only for a server run by "command"'):
            parse(remote)
    else:
        assert parse(remote).servers[0].url


def test_limits_are_off_by_default():
    s = parse({"mcpServers": {"s": {"command": "x"}}}).servers[0]
    assert (s.calls_per_minute, s.max_result_bytes, s.cpu_seconds, s.memory_mb) == \
        (None, None, None, None)

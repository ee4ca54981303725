"""
The process pool (L{gasoline.core.workers}) on the real reactor: jobs run in worker processes and
answer what the function returns inline; a worker that dies is one error answer for the call it
was running and the daemon carries on (the next call gets a new worker); a job past its timeout
kills its worker; a job outside the allowed modules is refused in the daemon and in the worker.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import orjson
import pytest
import pytest_twisted
from twisted.internet import reactor

from _mcp_calls import session_for

from gasoline.analysis import error_clusters
from gasoline.app import Config, build
from gasoline.core.storage.store import CONSOLE
from gasoline.core.workers import WorkerCrashed, WorkerJobFailed, WorkerPool, WorkerTimeout
from gasoline.mcp import jsonrpc
from gasoline.tools.analyze import POOL_MIN_ERRORS

pytestmark = pytest.mark.integration


def _errors(n):
    return [{"level": "error", "message": f"TypeError: item {i % 9} is undefined",
             "url": f"http://x/{i % 4}", "ts": i} for i in range(n)]


@pytest_twisted.ensureDeferred
async def test_a_job_answers_what_the_function_returns_inline():
    pool = WorkerPool(reactor, size=2)
    try:
        errors = _errors(3000)
        got = await pool.run("gasoline.analysis:error_clusters", errors, limit=5)
        assert got == orjson.loads(orjson.dumps(error_clusters(errors, limit=5)))
        # Big input and output cross the AMP value limit (64 KiB) in chunks.
        big = [{"level": "error", "message": "x" * 70_000}]
        assert (await pool.run("gasoline.core.redaction.redactor:redact_value", big)) == big
        assert pool.started == 1 and pool.done == 2
    finally:
        await pool.stop()


@pytest_twisted.ensureDeferred
async def test_a_worker_crash_is_one_error_and_the_pool_carries_on():
    pool = WorkerPool(reactor, size=1, allowed=("gasoline.analysis", "os"))
    try:
        with pytest.raises(WorkerCrashed):
            await pool.run("os:_exit", 3)
        assert pool.crashed == 1
        got = await pool.run("gasoline.analysis:error_clusters", _errors(10))
        assert got["clusters"] and pool.started == 2
        with pytest.raises(WorkerJobFailed, match="ZeroDivisionError|TypeError"):
            await pool.run("os:getpid", 1)  # raises in the worker: the worker stays
        assert pool.started == 2
    finally:
        await pool.stop()


@pytest_twisted.ensureDeferred
async def test_a_job_past_its_timeout_kills_its_worker():
    pool = WorkerPool(reactor, size=1, allowed=("time",), timeout=0.5)
    try:
        with pytest.raises(WorkerTimeout):
            await pool.run("time:sleep", 30)
    finally:
        await pool.stop()
    assert pool._workers == []


def test_a_job_outside_the_allowed_modules_is_refused():
    pool = WorkerPool(reactor, size=1)
    with pytest.raises(ValueError, match="not under an allowed module"):
        pool.run("os:system", "true")
    with pytest.raises(ValueError):
        pool.run("gasoline.analysisx:anything")
    assert pool.started == 0


@pytest_twisted.ensureDeferred
async def test_a_worker_killed_during_a_tool_call_is_one_error_answer_and_the_daemon_stays_up():
    with tempfile.TemporaryDirectory(prefix="gasoline-workers-") as tmp:
        app = build(Config(state_dir=Path(tmp), persist=False), reactor)
        app.services.startService()
        try:
            assert app.daemon.workers is not None
            app.store.add(CONSOLE, _errors(POOL_MIN_ERRORS + 100))
            s = session_for(app, "me")

            def clusters(rid):
                return app.mcp.handle(s, jsonrpc.request(rid, "tools/call", {
                    "name": "analyze", "arguments": {"what": "error_clusters"}}))

            d = clusters(1)
            workers = app.daemon.workers._workers
            assert len(workers) == 1 and workers[0].job is not None  # running in a worker
            os.kill(workers[0].transport.pid, signal.SIGKILL)
            answer = (await d)["result"]
            assert answer["isError"] is True
            assert "worker process ended during this call" in answer["content"][0]["text"]
            # The daemon answers the next calls, the same mode included (a new worker).
            observed = (await app.mcp.handle(s, jsonrpc.request(2, "tools/call", {
                "name": "observe", "arguments": {"what": "errors", "limit": 5}})))["result"]
            assert observed["isError"] is False
            again = (await clusters(3))["result"]
            assert again["isError"] is False and "cluster(s)" in again["content"][0]["text"]
            assert app.daemon.workers.crashed == 1 and app.daemon.workers.started == 2
        finally:
            app.mcp.close_all()
            await app.services.stopService()
        assert app.daemon.workers._workers == []


@pytest_twisted.ensureDeferred
async def test_a_large_body_is_redacted_in_a_worker_before_its_first_read():
    """A 1 MB JSON body costs ~200 ms of redaction: it is done in a worker process when stored,
    and the first read takes it from the cache (the same text the reactor would have made)."""
    from twisted.internet.task import deferLater

    from gasoline.core.redaction.once import OFFLOAD_MIN, REDACTOR, redact_entry
    from gasoline.core.storage.store import NETWORK_BODIES

    secret = "ghp_" + "a1B2c3D4e5" * 4
    body = orjson.dumps({"items": [{"id": i, "note": "lorem ipsum " * 8} for i in range(3000)],
                         "token": "s3cr3t-value", "nested": f"Authorization: token {secret}"})
    assert len(body) > OFFLOAD_MIN
    with tempfile.TemporaryDirectory(prefix="gasoline-workers-") as tmp:
        app = build(Config(state_dir=Path(tmp), persist=False), reactor)
        app.services.startService()
        try:
            app.store.add(NETWORK_BODIES, [{"url": "http://x/api", "method": "GET",
                                            "status": 200, "response_body": body.decode()}])
            cache = app.store.read_cache(NETWORK_BODIES)
            for _ in range(200):
                if cache.offloaded:
                    break
                await deferLater(reactor, 0.05, lambda: None)
            assert cache.offloaded == 1 and cache.redactions == 0
            raw = app.store.buffers[NETWORK_BODIES].get(0)
            assert cache.redacted(0, raw) == redact_entry(REDACTOR, raw)  # the same text
            assert cache.redactions == 0 and cache.hits == 1  # served, not redacted again
            s = session_for(app, "me")
            answer = (await app.mcp.handle(s, jsonrpc.request(1, "tools/call", {
                "name": "observe", "arguments": {"what": "network_bodies"}})))["result"]
            text = answer["content"][0]["text"]
            assert not answer["isError"] and "s3cr3t-value" not in text and secret not in text
            assert cache.redactions == 0
        finally:
            app.mcp.close_all()
            await app.services.stopService()

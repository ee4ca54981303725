"""
A process pool for CPU-heavy work, built for Twisted: worker processes started with the
reactor's C{spawnProcess}, spoken to with AMP over their stdin/stdout, one job at a time each.

The reactor thread must never be blocked, and one Python process uses one core: work that is
pure computation over JSON-like data (an analysis over thousands of entries) runs in a worker
instead, the reactor only encodes the input and decodes the answer. L{WorkerPool.run} names the
job as C{"module:function"} (a module under one of the pool's allowed prefixes, checked in the
worker too), passes JSON arguments and fires with the function's JSON result.

 - Size: one worker per core (C{os.cpu_count()}), started on first use (an idle daemon starts
   none), kept for the next job; jobs beyond the workers wait in a first-in-first-out queue.
 - A worker that dies (crash, kill, C{os._exit}) fails the job it was running with
   L{WorkerCrashed}, one error for that one call; it is replaced at the next job, and the
   daemon carries on. A job that runs past its timeout kills its worker the same way
   (L{WorkerTimeout}).
 - A job that raises answers L{JobFailed} with the exception's text; the worker stays.

Arguments and results are encoded with orjson and cut into AMP values of at most 60 000 bytes
(AMP's limit per value is 65 535), so a large input is no problem.

Why not ampoule (the AMP pool of the Twisted project): it reads the global reactor (for its
timeouts and to start processes), which the daemon never does outside its entry point, and its
last release is from 2024; this module is the same idea on the injected reactor.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from typing import Any

import orjson
from twisted.application.service import Service
from twisted.internet import protocol
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.error import ProcessDone
from twisted.logger import Logger
from twisted.protocols import amp
from twisted.python.failure import Failure

from gasoline.core.errors import GasolineError

log = Logger()

#: Modules a job may name (the worker checks again before importing).
ALLOWED = ("gasoline.analysis", "gasoline.core.redaction.redactor", "gasoline.core.redaction.once")
#: Seconds a job may run before its worker is killed.
JOB_TIMEOUT = 60.0
_CHUNK = 60_000


class BigBytes(amp.Argument):
    """Bytes of any length, as C{name} (the number of chunks) and C{name.0}, C{name.1}, ..."""

    def toBox(self, name: bytes, strings: Any, objects: Any, proto: Any) -> None:
        value: bytes = self.retrieve(objects, name.decode(), proto)
        chunks = [value[i:i + _CHUNK] for i in range(0, len(value), _CHUNK)] or [b""]
        strings[name] = str(len(chunks)).encode()
        for i, chunk in enumerate(chunks):
            strings[name + b"." + str(i).encode()] = chunk

    def fromBox(self, name: bytes, strings: Any, objects: Any, proto: Any) -> None:
        n = int(strings[name])
        objects[name.decode()] = b"".join(strings[name + b"." + str(i).encode()]
                                          for i in range(n))


class JobFailed(Exception):
    """The job raised (its text is the description)."""


class Run(amp.Command):
    arguments = [(b"job", amp.Unicode()), (b"payload", BigBytes())]
    response = [(b"result", BigBytes())]
    errors = {JobFailed: b"JOB_FAILED"}


class WorkerCrashed(GasolineError):
    code = "internal_error"
    retryable = True
    retry = "A worker process of the daemon ended during this call; call again."


class WorkerTimeout(GasolineError):
    code = "timeout"
    retry = "The work took too long; narrow the request (a smaller limit or window)."


class WorkerJobFailed(GasolineError):
    code = "internal_error"
    retry = "This is a Gasoline bug; the daemon log has the worker's error."


class _Worker(protocol.ProcessProtocol):
    """One worker process; its AMP connection rides on its stdin (ours: write) and stdout."""

    def __init__(self, pool: "WorkerPool") -> None:
        self.pool = pool
        self.amp = amp.AMP()
        self.job: Deferred | None = None
        self.timeout: Any = None
        self.ended = False
        self.ended_d: Deferred = Deferred()

    def start(self, job: Deferred, timeout: Any) -> None:
        """Run C{job}; C{timeout} (a delayed call) ends it if it runs too long."""
        self.job, self.timeout = job, timeout

    def finish(self, job: Deferred, *, keep: bool = False) -> bool:
        """C{job} ended: its timeout goes, and the job too unless C{keep} (the connection was
        lost with the process: L{processEnded} answers it). C{False} when it had already ended
        (a crash or the timeout answered it)."""
        if self.job is not job:
            return False
        if not keep:
            self.job = None
        self._drop_timeout()
        return True

    def take_job(self) -> Deferred | None:
        """The job the worker runs, if any, which is no longer its (it timed out or the
        process ended)."""
        job, self.job = self.job, None
        self._drop_timeout()
        return job

    def _drop_timeout(self) -> None:
        if self.timeout is not None and self.timeout.active():
            self.timeout.cancel()
        self.timeout = None

    # The transport AMP writes to.
    def write(self, data: bytes) -> None:
        if not self.ended:
            self.transport.write(data)  # type: ignore[union-attr]

    def writeSequence(self, data: list[bytes]) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        if not self.ended:
            self.transport.closeStdin()  # type: ignore[union-attr]

    def getPeer(self) -> Any:
        return None

    def getHost(self) -> Any:
        return None

    def connectionMade(self) -> None:
        self.amp.makeConnection(self)

    def outReceived(self, data: bytes) -> None:
        self.amp.dataReceived(data)

    def errReceived(self, data: bytes) -> None:
        log.warn("worker {pid}: {text}", pid=getattr(self.transport, "pid", None),
                 text=data.decode("utf-8", "replace").rstrip()[:2000])

    def kill(self) -> None:
        if not self.ended:
            try:
                self.transport.signalProcess("KILL")  # type: ignore[union-attr]
            except Exception:
                pass

    def processEnded(self, reason: Failure) -> None:
        self.ended = True
        self.amp.connectionLost(reason)
        self.pool._ended(self, reason)
        self.ended_d.callback(None)


class WorkerPool:
    """Worker processes on C{reactor} (C{IReactorProcess} and C{IReactorTime})."""

    def __init__(self, reactor: Any, size: int | None = None, allowed: tuple[str, ...] = ALLOWED,
                 timeout: float = JOB_TIMEOUT, python: str = sys.executable) -> None:
        self.reactor = reactor
        self.size = max(1, size if size is not None else (os.cpu_count() or 1))
        self.allowed = allowed
        self.timeout = timeout
        self.python = python
        self._workers: list[_Worker] = []
        self._idle: deque[_Worker] = deque()
        self._queue: deque[tuple[str, bytes, Deferred]] = deque()
        self.stopped = False
        #: Figures: jobs done, failed, crashed workers, workers started.
        self.done = 0
        self.failed = 0
        self.crashed = 0
        self.started = 0

    @property
    def queued(self) -> int:
        """Jobs waiting for a worker."""
        return len(self._queue)

    @property
    def busy(self) -> int:
        return len(self._workers) - len(self._idle)

    def run(self, job: str, *args: Any, **kwargs: Any) -> Deferred:
        """Run C{job} (C{"module:function"}) with JSON C{args}/C{kwargs} in a worker; fire with
        its JSON result, or fail with L{WorkerCrashed}, L{WorkerTimeout} or L{WorkerJobFailed}."""
        module = job.partition(":")[0]
        if not any(module == p or module.startswith(p + ".") for p in self.allowed):
            raise ValueError(f"job {job!r} is not under an allowed module")
        if self.stopped:
            raise GasolineError("the daemon is stopping", code="daemon_unavailable")
        payload = orjson.dumps({"args": args, "kwargs": kwargs}, default=str,
                               option=orjson.OPT_NON_STR_KEYS)
        d: Deferred = Deferred()
        self._queue.append((job, payload, d))
        self._dispatch()
        return d

    def _dispatch(self) -> None:
        while self._queue:
            if self._idle:
                worker = self._idle.popleft()
            elif len(self._workers) < self.size:
                worker = self._spawn()
            else:
                return
            job, payload, d = self._queue.popleft()
            self._start(worker, job, payload, d)

    def _spawn(self) -> _Worker:
        worker = _Worker(self)
        args = [self.python, "-m", "gasoline.core.worker_child", *self.allowed]
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        self.reactor.spawnProcess(worker, self.python, args, env=env,
                                  childFDs={0: "w", 1: "r", 2: "r"})
        self._workers.append(worker)
        self.started += 1
        return worker

    def _start(self, worker: _Worker, job: str, payload: bytes, d: Deferred) -> None:
        worker.start(d, self.reactor.callLater(self.timeout, self._timed_out, worker))
        call = worker.amp.callRemote(Run, job=job, payload=payload)
        call.addCallbacks(self._answered, self._refused, callbackArgs=(worker, d),
                          errbackArgs=(worker, d))

    def _finish(self, worker: _Worker, d: Deferred) -> bool:
        """The job's end: C{False} when it had already ended (crash or timeout answered it)."""
        return worker.finish(d)

    def _answered(self, response: dict[str, Any], worker: _Worker, d: Deferred) -> None:
        if not self._finish(worker, d):
            return
        self.done += 1
        self._idle.append(worker)
        self._dispatch()
        try:
            result = orjson.loads(response["result"])
        except orjson.JSONDecodeError as e:
            d.errback(Failure(WorkerJobFailed(f"a worker answered undecodable JSON: {e}")))
            return
        d.callback(result)

    def _refused(self, failure: Failure, worker: _Worker, d: Deferred) -> None:
        # The connection lost with the process: the job stays the worker's, _ended answers it.
        if not worker.finish(d, keep=worker.ended) or worker.ended:
            return
        self.failed += 1
        self._idle.append(worker)
        self._dispatch()
        log.warn("worker job failed: {why}", why=failure.getErrorMessage())
        d.errback(Failure(WorkerJobFailed(f"the work failed: {failure.getErrorMessage()}")))

    def _timed_out(self, worker: _Worker) -> None:
        d = worker.take_job()
        if d is not None:
            self.failed += 1
            d.errback(Failure(WorkerTimeout(f"the work ran past {self.timeout:g} s; "
                                            "its worker was stopped")))
        worker.kill()

    def _ended(self, worker: _Worker, reason: Failure) -> None:
        if worker in self._workers:
            self._workers.remove(worker)
        if worker in self._idle:
            self._idle.remove(worker)
        d = worker.take_job()
        if d is not None:
            self.crashed += 1
            why = reason.getErrorMessage() if not reason.check(ProcessDone) else "it exited"
            log.warn("a worker process ended during a job ({why}); the daemon carries on",
                     why=why)
            d.errback(Failure(WorkerCrashed(f"a worker process ended during this call ({why})")))
        elif not self.stopped:
            log.info("worker process ended: {why}", why=reason.getErrorMessage())
        if not self.stopped:
            self._dispatch()

    def service(self) -> Service:
        """A service whose stop stops the workers (the daemon waits for them)."""
        pool = self

        class _PoolService(Service):
            name = "worker-pool"

            def stopService(self) -> Deferred:
                super().stopService()
                return pool.stop()

        return _PoolService()

    def stop(self) -> Deferred:
        """Stop every worker; fail the jobs still waiting. Fires when the processes ended."""
        self.stopped = True
        queue, self._queue = self._queue, deque()
        for _, _, d in queue:
            d.errback(Failure(GasolineError("the daemon is stopping", code="daemon_unavailable")))
        ends = [w.ended_d for w in self._workers if not w.ended]
        for worker in list(self._workers):
            worker.kill()
        if not ends:
            return succeed(None)
        return DeferredList(ends).addCallback(lambda _: None)

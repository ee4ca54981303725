"""
The connector's core: stdin JSON-RPC lines <-> the daemon, surviving daemon restarts.

L{Bridge} is clock-injected and talks to the daemon only through a L{DaemonHTTP}-like object and a
L{Discovery}, so every behaviour below is unit-tested with C{task.Clock} and a fake daemon.

 - Each stdin line is parsed (bad JSON is answered locally with a JSON-RPC parse error) and queued.
   Notifications and C{initialize} are *barriers*: nothing queued after them is sent until the daemon
   has taken them, so C{initialize} -> C{notifications/initialized} -> C{tools/list} keep their
   order; requests between barriers are sent concurrently (a slow tool call never blocks a
   C{notifications/cancelled}).
 - Every JSON-RPC message in a reply, and every message on the C{GET /mcp} stream, is written to
   stdout as one line. Responses are written only for requests still pending (so a request already
   answered with an error never gets a second answer).
 - Connection failure (POST or stream) puts the bridge in *reconnecting*: the failed messages go back
   to the queue in their original order; the bridge probes C{/health} with exponential backoff
   (starting the daemon if allowed), re-registers (C{POST /clients}), replays the session it had
   (C{initialize} with an internal id, C{notifications/initialized}, the latest
   C{logging/setLevel}, resource subscriptions; their answers are swallowed), and resends the queue.
 - A request that is not delivered within C{bound} seconds of arriving is answered with a JSON-RPC
   error (code -32000, C{data.error = "daemon_unavailable"}): never silence.
 - Stdin EOF: wait (at most C{bound}) for pending requests, then C{DELETE /clients/<id>}, then
   L{closed} fires.
 - A problem waiting cannot fix (an HTTP server that is not Gasoline on the port; the daemon
   answering registration with 401, or 403 twice: L{PermanentProblem}) ends the bridge at once:
   every pending request gets the error (C{data.error = "daemon_refused"}), L{closed} fires and
   C{on_permanent} is called with the one-line reason (the connector exits non-zero). Anything
   else (nothing listening, a daemon starting, a 429, a 5xx) is retried within C{bound}.
"""

from __future__ import annotations

import bisect
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Callable

import orjson
from twisted.internet.defer import Deferred, inlineCallbacks, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gasoline.common import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, SERVER_ERROR
from gasoline.connect.errors import PermanentProblem, RegistrationRefused
from gasoline.connect.messages import (
    Outgoing,
    Pending,
    _describe_refusal,
    _invalid_message,
    _key,
    _valid_id,
    error_message,
    sniff_id,
)

if TYPE_CHECKING:
    from gasoline.connect.client import DaemonHTTP, Reply, Stream
    from gasoline.connect.discovery import Discovery

log = Logger()

#: Server-defined error: the request could not be delivered to the daemon in time.
DAEMON_UNAVAILABLE = SERVER_ERROR

DEFAULT_BOUND = 30.0
MAX_QUEUE = 10_000
_REPLAY_PREFIX = "gasoline-connect-replay-"



class Bridge:
    def __init__(
        self,
        clock: IReactorTime,
        daemon: DaemonHTTP,
        discovery: Discovery,
        write: Callable[[bytes], None],
        *,
        cwd: str | None = None,
        bound: float = DEFAULT_BOUND,
        min_backoff: float = 0.1,
        max_backoff: float = 2.0,
        max_queue: int = MAX_QUEUE,
        on_permanent: Callable[[str], None] | None = None,
    ) -> None:
        self.clock = clock
        self.on_permanent = on_permanent
        #: Why the bridge gave up for good (L{PermanentProblem}), else None.
        self.permanent_problem: str | None = None
        self._proof_refusals = 0
        self.daemon = daemon
        self.discovery = discovery
        self._write = write
        self.cwd = cwd
        self.bound = bound
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.max_queue = max_queue

        #: "connecting" | "connected" | "reconnecting" | "closed"
        self.state = "connecting"
        self.last_problem = "the daemon has not been reached yet"
        self.closed: Deferred = Deferred()
        self._queue: list[Outgoing] = []
        self._pending: dict[bytes, Pending] = {}
        self._inflight: set[Outgoing] = set()
        self._barriers = 0
        self._seq = 0
        self._backoff = min_backoff
        self._retry: IDelayedCall | None = None
        self._drain_call: IDelayedCall | None = None
        self._attempting = False
        self._closing = False
        self._registered = False
        #: The session was opened before the bridge started (L{adopt_initialize}).
        self._adopted = False
        self._attempt_d: Deferred | None = None
        self.reconnects = 0

        # What is needed to re-create the MCP session on a restarted daemon.
        self._init_msg: dict[str, Any] | None = None
        self._init_key: bytes | None = None
        self._init_answered = False
        self._initialized = False
        self._log_level: dict[str, Any] | None = None
        self._subscriptions: dict[str, dict[str, Any]] = {}
        self._replay_n = 0

        self._stream: Stream | None = None
        self._stream_unsupported = False
        self._last_event_id: str | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._start_attempt()

    def _start_attempt(self) -> None:
        self._attempt_d = self._attempt()

    def adopt_initialize(self, message: dict[str, Any]) -> None:
        """C{message}, an C{initialize} request, was already sent and answered on this
        connection's session (L{gasoline.connect.fast}): keep it for replay as if sent here."""
        self._note_request(message, "initialize")
        self._init_answered = True
        self._adopted = True

    @property
    def pending_ids(self) -> list[Any]:
        return [p.id for p in self._pending.values()]

    # -- stdin side -------------------------------------------------------------------------------

    def line_received(self, line: bytes) -> None:
        line = line.strip()
        if not line or self._closing:
            return
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            self._emit(error_message(None, PARSE_ERROR, f"Parse error: {e}"))
            return
        if isinstance(msg, dict):
            messages = [msg]
        elif isinstance(msg, list) and msg and all(isinstance(m, dict) for m in msg):
            messages = msg
        else:
            self._emit(error_message(
                None, INVALID_REQUEST, "Invalid Request: expected a JSON-RPC object or batch"))
            return
        # JSON-RPC exactness, answered here without a round trip: a message that is neither a
        # request, a notification nor a response ({} or a non-string method) gets -32600 with its
        # id when the id is valid, else with a null id (an invalid id is never echoed back).
        valid: list[dict[str, Any]] = []
        for m in messages:
            problem = _invalid_message(m)
            if problem is None:
                valid.append(m)
            else:
                rid = m.get("id") if _valid_id(m.get("id")) else None
                self._emit(error_message(rid, INVALID_REQUEST, f"Invalid Request: {problem}"))
        if not valid:
            return
        if len(valid) != len(messages):
            line = orjson.dumps(valid if isinstance(msg, list) else valid[0])
            messages = valid
        ids: list[Any] = []
        barrier = False
        for m in messages:
            method = m.get("method")
            has_id = "id" in m
            if isinstance(method, str) and has_id:
                ids.append(m["id"])
                self._note_request(m, method)
            elif isinstance(method, str):
                barrier = True
                if method == "notifications/initialized":
                    self._initialized = True
        if any(m.get("method") == "initialize" for m in messages):
            barrier = True
        self._seq += 1
        item = Outgoing(self._seq, line, ids, barrier)
        if len(self._queue) >= self.max_queue:
            for rid in ids:
                self._emit(error_message(
                    rid, DAEMON_UNAVAILABLE,
                    "Gasoline connector queue is full while the daemon is unreachable",
                    error="queue_full"))
            log.warn("connector queue full: dropped a message")
            return
        for rid in ids:
            key = _key(rid)
            old = self._pending.pop(key, None)
            if old is not None and old.deadline is not None and old.deadline.active():
                old.deadline.cancel()
            self._pending[key] = Pending(
                rid, item, self.clock.callLater(self.bound, self._deadline_passed, key))
        self._queue.append(item)
        self._pump()

    def line_too_long(self, head: bytes, limit: int) -> None:
        """A stdin line exceeded the connector's line limit (the rest of it is discarded)."""
        rid = sniff_id(head[:65536])
        self._emit(error_message(
            rid, INVALID_REQUEST,
            f"Invalid Request: message larger than the connector's limit of {limit} bytes",
            error="message_too_large", limit=limit))

    def _agent_capabilities(self) -> dict[str, Any] | None:
        """What the agent's C{initialize} declared that a proxied server may use (sampling,
        elicitation), for its proxy session; None before the connector has seen it."""
        params = self._init_msg.get("params") if self._init_msg is not None else None
        declared = params.get("capabilities") if isinstance(params, dict) else None
        if not isinstance(declared, dict):
            return None
        return {k: declared[k] for k in ("sampling", "elicitation")
                if isinstance(declared.get(k), dict)} or None

    def _note_request(self, m: dict[str, Any], method: str) -> None:
        params = m.get("params")
        if method == "initialize":
            self._init_msg = m
            self._init_key = _key(m["id"])
            self._init_answered = False
        elif method == "logging/setLevel":
            self._log_level = params if isinstance(params, dict) else None
        elif method == "resources/subscribe" and isinstance(params, dict):
            self._subscriptions[str(params.get("uri"))] = params
        elif method == "resources/unsubscribe" and isinstance(params, dict):
            self._subscriptions.pop(str(params.get("uri")), None)

    # -- stdout side ------------------------------------------------------------------------------

    def _emit(self, message: Any) -> None:
        self._write(orjson.dumps(message))

    def _from_daemon(self, message: Any, item: "Outgoing | None" = None) -> None:
        """A JSON-RPC message (or batch) from the daemon: write what the client should see.

        C{item} is the message this is an answer to (C{None} on the C{GET /mcp} stream).
        """
        if isinstance(message, list):
            kept = [m for m in message if self._accept(m, item)]
            if kept:
                self._emit(kept)
        elif self._accept(message, item):
            self._emit(message)
        self._maybe_finish_drain()

    def _accept(self, m: Any, item: "Outgoing | None" = None) -> bool:
        if not isinstance(m, dict):
            return False
        if "method" in m:
            return True  # a notification or a server->client request
        if "result" not in m and "error" not in m:
            return True
        rid = m.get("id")
        if rid is None and item is not None and "error" in m:
            # The daemon refused the whole message (e.g. a batch in a protocol revision without
            # batches) with an unattached error: it answers each request the message carried, so
            # none of them waits for the deadline; a notification is never answered.
            self._refuse_item(item, m["error"])
            return False
        key = _key(rid)
        pending = self._pending.pop(key, None)
        if pending is None:
            if rid is None:
                return True  # an error the daemon could not attach to a request
            log.debug("dropping a reply to {id!r}: already answered", id=rid)
            return False
        if pending.deadline is not None and pending.deadline.active():
            pending.deadline.cancel()
        if key == self._init_key and "result" in m:
            self._init_answered = True
            self.clock.callLater(0, self._open_stream)
        return True

    def _answer_error(self, request_id: Any, code: int, message: str, **data: Any) -> None:
        pending = self._pending.pop(_key(request_id), None)
        if pending is None:
            return
        if pending.deadline is not None and pending.deadline.active():
            pending.deadline.cancel()
        self._emit(error_message(request_id, code, message, **data))
        self._maybe_finish_drain()

    def _refuse_item(self, item: "Outgoing", error: Any) -> None:
        """Answer every request of C{item} with the daemon's unattached C{error}."""
        code, message, data = INTERNAL_ERROR, "the daemon refused the message", {}
        if isinstance(error, dict):
            if isinstance(error.get("code"), int) and not isinstance(error.get("code"), bool):
                code = error["code"]
            if isinstance(error.get("message"), str):
                message = error["message"]
            if "data" in error:
                data = {"daemon": error["data"]}
        if not item.ids:
            log.warn("the daemon refused a notification/response: {message}", message=message)
        for rid in item.ids:
            self._answer_error(rid, code, message, **data)

    # -- sending ----------------------------------------------------------------------------------

    def _pump(self) -> None:
        while self.state == "connected" and self._queue and self._barriers == 0:
            item = self._queue.pop(0)
            if item.done:
                continue
            if item.ids and not any(_key(i) in self._pending for i in item.ids):
                item.finish()  # every request in it was already answered (timed out)
                continue
            self._send(item)

    def _send(self, item: Outgoing) -> None:
        self._inflight.add(item)
        if item.barrier:
            self._barriers += 1
        # An agent that never sent initialize speaks MCP 2026-07-28: each request stands alone.
        d = self.daemon.post_mcp(item.body, lambda message: self._from_daemon(message, item),
                                 stateless=self._init_msg is None)
        item.sending(d)
        d.addCallbacks(self._sent, self._send_failed, callbackArgs=(item,), errbackArgs=(item,))
        d.addErrback(lambda f: log.failure("connector send bookkeeping failed", f))

    def _settle(self, item: Outgoing) -> None:
        item.settled()
        self._inflight.discard(item)
        if item.barrier:
            self._barriers -= 1

    def _sent(self, reply: Reply, item: Outgoing) -> None:
        self._settle(item)
        self._backoff = self.min_backoff
        if reply.text and reply.status == 404 and item.session_retries < 2 and not self._closing:
            # The daemon does not know this connection's MCP session (it restarted between two
            # requests): re-create it, then send this message again.
            item.retry_for_session()
            self._requeue(item)
            self._lost(f"the daemon answered HTTP 404 ({reply.text[:120]!r}); re-creating the session")
            return
        item.finish()
        if reply.text or reply.status >= 400:
            code, message, data = _describe_refusal(reply)
            for rid in item.ids:
                self._answer_error(rid, code, message, **data)
            if not item.ids:
                # A refused notification/response: JSON-RPC never answers a notification (an
                # error with a null id here would confuse the client); the log says it.
                log.warn("the daemon refused a notification/response: {message}", message=message)
        self._pump()
        self._maybe_finish_drain()

    def _send_failed(self, failure: Failure, item: Outgoing) -> None:
        self._settle(item)
        reason = failure.getErrorMessage() or (failure.type.__name__ if failure.type else "error")
        if self._closing:
            return
        expired = [rid for rid in item.ids if self._is_expired(rid)]
        for rid in expired:
            self._answer_error(
                rid, DAEMON_UNAVAILABLE,
                f"Gasoline daemon unreachable: request not answered within {self.bound:g}s ({reason})",
                error="daemon_unavailable")
        if item.ids and not any(_key(i) in self._pending for i in item.ids):
            item.finish()
        else:
            self._requeue(item)
        self._lost(f"sending to the daemon failed: {reason}")

    def _is_expired(self, rid: Any) -> bool:
        p = self._pending.get(_key(rid))
        return p is not None and p.expired

    def _requeue(self, item: Outgoing) -> None:
        seqs = [i.seq for i in self._queue]
        self._queue.insert(bisect.bisect_left(seqs, item.seq), item)

    def _deadline_passed(self, key: bytes) -> None:
        pending = self._pending.get(key)
        if pending is None:
            return
        pending.deadline_passed()
        if pending.item.inflight and self.state == "connected":
            # The daemon has it and is working on it: its answer (or a failure) decides. If the
            # daemon has silently gone (a hung process), the health probe below finds out.
            pending.expire()
            self._check_health().addErrback(lambda f: log.failure("health probe failed", f))
            return
        self._answer_error(
            pending.id, DAEMON_UNAVAILABLE,
            f"Gasoline daemon unreachable: request not delivered within {self.bound:g}s "
            f"({self.last_problem})",
            error="daemon_unavailable")
        if self.state == "connected" and self._inflight:
            # Connected, yet the request waited behind something in flight: make sure the daemon
            # is alive (a hung daemon holding a barrier would otherwise stall the queue).
            self._check_health().addErrback(lambda f: log.failure("health probe failed", f))

    @inlineCallbacks
    def _check_health(self) -> Generator[Deferred[Any], Any, None]:
        health = yield self.daemon.health()
        if health is None or health.get("service-name") != "gasoline":
            for item in list(self._inflight):
                if item.d is not None:
                    item.d.cancel()

    # -- connecting -------------------------------------------------------------------------------

    def _lost(self, why: str) -> None:
        if self._closing:
            return
        self.last_problem = why
        if self.state != "connected":
            return
        log.warn("lost the Gasoline daemon: {why}; reconnecting", why=why)
        self.state = "reconnecting"
        self.reconnects += 1
        self._close_stream()
        self._schedule_attempt()

    def _schedule_attempt(self) -> None:
        if self._closing or self._retry is not None or self._attempting:
            return
        delay = self._backoff
        self._backoff = min(self._backoff * 2, self.max_backoff)
        self._retry = self.clock.callLater(delay, self._start_attempt)

    def _attempt_again(self, backoff: float | None = None) -> None:
        """This attempt is over without a connection: schedule the next (after C{backoff})."""
        self._attempting = False
        if backoff is not None:
            self._backoff = backoff
        self._schedule_attempt()

    @inlineCallbacks
    def _attempt(self) -> Generator[Deferred[Any], Any, None]:
        self._retry = None
        if self._closing or self._attempting:
            return
        self._attempting = True
        try:
            status = yield self.discovery.check()
            if status != "up":
                self.last_problem = self.discovery.problem
                if self.discovery.permanent:
                    raise PermanentProblem(self.discovery.problem)
                if status == "starting":
                    self._backoff = self.min_backoff
                raise _NotYet(self.discovery.problem)
            yield self.daemon.register(self.cwd)
            self._registered = True
            if self._closing:
                raise _NotYet("closing")
            # (never fails: docs/proxy.md)
            yield self.daemon.ensure_proxy_session(self.cwd, self._agent_capabilities())
            yield self._restore_session()
        except _NotYet:
            self._attempt_again()
            return
        except PermanentProblem as e:
            self._give_up(str(e))
            return
        except RegistrationRefused as e:
            self.last_problem = f"the daemon refused registration: {e}"
            if e.status == 401:
                self._give_up(f"the Gasoline daemon at {self.daemon.base_url} refused this "
                              f"connector ({e}): give the daemon's key with --api-key or "
                              "$GASOLINE_API_KEY")
                return
            if e.status == 403:
                # The first refusal re-reads the client key (it may just have been made).
                self._proof_refusals += 1
                if self._proof_refusals >= 2:
                    self._give_up(f"the Gasoline daemon at {self.daemon.base_url} refused this "
                                  f"connector ({e}): run it as the daemon's user, with the "
                                  "daemon's --state-dir (its client key), and --api-key if the "
                                  "daemon has one")
                    return
                self._attempt_again(backoff=self.min_backoff)
                return
            log.warn("{problem}", problem=self.last_problem)
            self._attempt_again(backoff=self.max_backoff)
            return
        except Exception as e:
            self.last_problem = f"{type(e).__name__}: {e}"
            log.info("connecting to the daemon failed: {problem}", problem=self.last_problem)
            self._attempt_again()
            return
        self._attempting = False
        self._proof_refusals = 0
        if self._closing:
            return
        was = self.state
        self.state = "connected"
        self._stream_unsupported = False
        self._backoff = self.min_backoff
        if was == "reconnecting":
            log.info("reconnected to the Gasoline daemon; resending {n} message(s)", n=len(self._queue))
        self._open_stream()
        self._pump()

    def _give_up(self, problem: str) -> None:
        """A L{PermanentProblem}: answer everything pending with it and end (see the module
        docstring)."""
        self._attempting = False
        self.last_problem = self.permanent_problem = problem
        for p in list(self._pending.values()):
            self._answer_error(p.id, DAEMON_UNAVAILABLE, f"Gasoline connector: {problem}",
                               error="daemon_refused")
        self._finish()
        if self.on_permanent is not None:
            self.on_permanent(problem)

    @inlineCallbacks
    def _restore_session(self) -> Generator[Deferred[Any], Any, None]:
        """Re-create the MCP session on a (possibly restarted) daemon, swallowing the answers."""
        if self._init_msg is None or not self._init_answered:
            return
        replies: list[Any] = []
        init = dict(self._init_msg)
        init["id"] = self._replay_id()
        reply = yield self.daemon.post_mcp(orjson.dumps(init), replies.append)
        ok = any(isinstance(r, dict) and "result" in r for r in replies)
        if not ok:
            raise RuntimeError(f"replaying initialize failed (HTTP {reply.status}): {replies or reply.text[:200]!r}")
        if self._initialized:
            yield self.daemon.post_mcp(
                b'{"jsonrpc":"2.0","method":"notifications/initialized"}', replies.append)
        if self._log_level is not None:
            yield self.daemon.post_mcp(orjson.dumps({
                "jsonrpc": "2.0", "id": self._replay_id(), "method": "logging/setLevel",
                "params": self._log_level}), replies.append)
        for params in list(self._subscriptions.values()):
            yield self.daemon.post_mcp(orjson.dumps({
                "jsonrpc": "2.0", "id": self._replay_id(), "method": "resources/subscribe",
                "params": params}), replies.append)

    def _replay_id(self) -> str:
        self._replay_n += 1
        return f"{_REPLAY_PREFIX}{self._replay_n}"

    # -- server->client stream ------------------------------------------------------------------

    def _open_stream(self) -> None:
        if (self._stream is not None or self._stream_unsupported or self.state != "connected"
                or not self._init_answered or self._closing):
            return
        stream = self.daemon.open_stream(self._from_daemon, self._last_event_id)
        self._stream = stream
        stream.opened.addCallback(self._stream_opened, stream)
        stream.opened.addErrback(lambda f: None)  # the `done` errback reports it
        stream.done.addBoth(self._stream_ended, stream)

    def _stream_opened(self, status: int, stream: Stream) -> None:
        if status != 200 or not stream.streaming:
            self._stream_unsupported = True
            log.warn("the daemon offers no server->client stream (GET /mcp answered {status}); "
                     "notifications will not be forwarded", status=status)

    def _stream_ended(self, result: object, stream: Stream) -> None:
        if stream.last_event_id:
            self._last_event_id = stream.last_event_id
        if self._stream is not stream:
            return None  # closed on purpose
        self._stream = None
        if self._stream_unsupported or self._closing:
            return None
        reason = result.getErrorMessage() if isinstance(result, Failure) else "it ended"
        self._lost(f"the server->client stream closed: {reason}")
        return None

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    # -- shutting down ----------------------------------------------------------------------------

    def stdin_closed(self) -> Deferred:
        """Stdin reached EOF: answer what is pending (at most C{bound}), unregister, finish."""
        if self._closing or self._drain_call is not None:
            return self.closed
        if not self._pending:
            self._finish()
            return self.closed
        self._drain_call = self.clock.callLater(self.bound, self._drain_timeout)
        return self.closed

    def _maybe_finish_drain(self) -> None:
        if self._drain_call is not None and not self._pending and not self._closing:
            self._drain_call.cancel()
            self._drain_call = None
            self._finish()

    def _drain_timeout(self) -> None:
        self._drain_call = None
        for p in list(self._pending.values()):
            self._answer_error(
                p.id, DAEMON_UNAVAILABLE,
                f"Gasoline connector is exiting (stdin closed) and the daemon did not answer within "
                f"{self.bound:g}s", error="daemon_unavailable")
        self._finish()

    def shutdown(self) -> Deferred:
        """Stop now (process shutdown): unregister if possible, drop the rest."""
        return self._finish()

    def _finish(self) -> Deferred:
        if self._closing:
            return self.closed
        self._closing = True
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None
        if self._drain_call is not None and self._drain_call.active():
            self._drain_call.cancel()
        self._drain_call = None
        for p in self._pending.values():
            if p.deadline is not None and p.deadline.active():
                p.deadline.cancel()
        self._pending.clear()
        self._close_stream()
        for item in list(self._inflight):
            if item.d is not None:
                item.d.cancel()
        # An adopted session exists on the daemon even before this bridge has connected.
        owns_session = (self._registered and self.state == "connected") or self._adopted
        if owns_session and self._attempting and self._attempt_d is not None:
            # A registration may be on its way: unregister after it, or it would undo this.
            d: Deferred[Any] = Deferred()

            def attempted(result: object) -> object:
                d.callback(None)
                return result

            self._attempt_d.addBoth(attempted)
            d.addCallback(lambda _: self.daemon.unregister())
        else:
            d = self.daemon.unregister() if owns_session else succeed(None)

        def done(_: object) -> None:
            self.state = "closed"
            if not self.closed.called:
                self.closed.callback(None)

        d.addErrback(lambda f: log.info("unregistering failed: {e}", e=f.getErrorMessage()))
        d.addBoth(done)
        return self.closed


class _NotYet(Exception):
    pass

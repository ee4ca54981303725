"""
The relay's requests to the extension: one extension connection at a time, every request under a
relay-global id (one counter for the whole relay), each answer routed back by that id only.

A request fails with a L{CDPError} after C{request_timeout} seconds, at once when no extension is
connected, and at once when the link goes (L{RelayLink.drop}): nothing waits forever. What the
requests are for (forwarded commands, attaching, creating tabs) is the callers' business
(L{gasoline.relay.sessions}, L{gasoline.relay.targets}); replacing a connection and telling the
clients is the hub's (L{gasoline.relay.hub}).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

import attrs
from twisted.internet.defer import Deferred, fail
from twisted.internet.defer import TimeoutError as DeferredTimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from gasoline.common import SERVER_ERROR
from gasoline.relay.model import CDPError, IRelayPeer, is_int

#: Seconds a forwarded command waits for the extension before the client gets a CDP error.
DEFAULT_REQUEST_TIMEOUT = 30.0


@attrs.define(eq=False)
class RelayLink:
    """The extension's connection as the relay's parts use it: requests out, answers in."""

    clock: IReactorTime
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    #: Why the extension is not connected when the daemon knows better than "not connected"
    #: (it waits for the user to pair it): a sentence, or None.
    not_connected_why: Callable[[], str | None] = lambda: None
    #: The extension's connection (C{None}: not connected).
    peer: IRelayPeer | None = None
    #: Requests sent to the extension, and connections it opened (for C{/metrics}).
    requests: int = 0
    links: int = 0
    _ids: Iterator[int] = attrs.Factory(lambda: itertools.count(1))
    _pending: dict[int, Deferred] = attrs.Factory(dict)

    @property
    def pending(self) -> int:
        """Requests awaiting the extension's answer."""
        return len(self._pending)

    def open(self, peer: IRelayPeer) -> None:
        """C{peer} is the extension's connection from now on (the caller dropped the old one)."""
        self.peer = peer
        self.links += 1

    def drop(self, why: str) -> None:
        """The connection is gone: every request waiting on it fails with C{why}."""
        self.peer = None
        pending, self._pending = self._pending, {}
        for d in pending.values():
            d.errback(CDPError(why))

    def answer(self, message: dict) -> None:
        """An answer C{{id, result}} or C{{id, error}} from the extension: fire its request."""
        d = self._pending.pop(mid, None) if is_int(mid := message.get("id")) else None
        if d is None:
            return
        error = message.get("error")
        if error is not None:
            err = error if isinstance(error, dict) else {}
            code = raw_code if is_int(raw_code := err.get("code")) else SERVER_ERROR
            d.errback(CDPError(str(err.get("message") or error), code))
        else:
            result = message.get("result")
            d.callback(result if isinstance(result, dict) else {})

    def request(self, method: str, params: dict) -> Deferred:
        """Send a request to the extension; the Deferred fires with its result or a L{CDPError}."""
        if self.peer is None:
            why = self.not_connected_why()
            return fail(CDPError(f"Gasoline extension is not connected: {why}" if why else
                                 "Gasoline extension is not connected (open the browser with the "
                                 "Gasoline extension and point it at this daemon)"))
        request_id = next(self._ids)
        self.requests += 1

        def cancel(_d: Deferred) -> None:
            self._pending.pop(request_id, None)

        d: Deferred = Deferred(cancel)
        self._pending[request_id] = d
        self.peer.send({"id": request_id, "method": method, "params": params})

        def timed_out(failure: Failure) -> Any:
            failure.trap(DeferredTimeoutError)
            raise CDPError(f"Gasoline extension did not answer {params.get('method', method)} "
                           f"within {self.request_timeout:g} s")

        d.addTimeout(self.request_timeout, self.clock)
        d.addErrback(timed_out)
        return d

    def fire_and_forget(self, method: str, params: dict) -> None:
        """A request whose answer (or failure) nobody waits for: the relay's own bookkeeping."""
        self.request(method, params).addErrback(lambda f: None)

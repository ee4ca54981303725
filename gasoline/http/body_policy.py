"""
The request-body policy's parts (L{gasoline.http.request.GasolineChannel} applies them): the body
deadline (L{BodyPolicy}), the size from which a body is decided on its headers, and the view of a
request whose headers are in and whose body is not (L{Head}), which the route policy reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.python.components import Componentized
from twisted.web.http_headers import Headers

if TYPE_CHECKING:
    from twisted.web.server import Request

#: Seconds a request's body may take before the minimum rate applies.
BODY_GRACE = 10.0
#: After the grace period the body must have come at least this fast on average (bytes a second,
#: counted from the end of the headers): 1 byte every 20 s is cut at once, a 10 MB body from the
#: extension over loopback takes milliseconds.
BODY_MIN_RATE = 64 * 1024
#: Seconds from the end of the headers to the end of the body, whatever the rate.
BODY_DEADLINE = 60.0
#: How often a body still arriving is checked once the grace period is over.
BODY_CHECK_EVERY = 1.0
#: A body declared longer than this (or of unknown length: chunked) is decided on its headers,
#: before any of it is read. A shorter one is read first (it costs less to read it than to decide
#: twice; it counts in the in-flight budget and has the body deadline), then decided by the same
#: checks, on the whole request, before any route runs.
POLICY_ON_HEADERS_FROM = 64 * 1024


class BodyPolicy:
    """The body deadline of L{GasolineChannel}: a grace period, then a minimum average rate, and
    an absolute cap (C{None} in a field turns that part off; L{OFF} turns it all off)."""

    __slots__ = ("grace", "min_rate", "deadline", "every")

    def __init__(self, grace: float | None = BODY_GRACE, min_rate: int | None = BODY_MIN_RATE,
                 deadline: float | None = BODY_DEADLINE,
                 every: float = BODY_CHECK_EVERY) -> None:
        self.grace = grace
        self.min_rate = min_rate
        self.deadline = deadline
        self.every = every

    def first_check(self) -> float | None:
        """Seconds after the headers of the first check, or C{None} (no deadline at all)."""
        times = [t for t in (self.grace, self.deadline) if t is not None]
        if not times:
            return None
        return min(times) if self.min_rate is not None else (self.deadline or min(times))

    def too_slow(self, elapsed: float, received: int) -> str | None:
        """Why a body that has received C{received} bytes C{elapsed} seconds after its headers
        is too slow, or C{None}."""
        if self.deadline is not None and elapsed >= self.deadline:
            return f"not complete {self.deadline:g} s after its headers"
        if self.min_rate is not None and self.grace is not None and elapsed > self.grace \
                and received < self.min_rate * (elapsed - self.grace):
            return (f"{received} bytes in {elapsed:.0f} s (the minimum is {self.min_rate} bytes "
                    f"a second after {self.grace:g} s)")
        return None


OFF = BodyPolicy(None, None, None)


class Head(Componentized):
    """A request whose headers are in and whose body is not: what the route policy and the
    guards read (and what a refusal sets) before the body is read (L{GasolineRoot.policy}).
    As twisted.web's C{Request}, it is C{Componentized}: the guards note its facts
    (L{gasoline.core.trust.request_facts}) on it."""

    content = None

    def __init__(self, request: Request, method: bytes, uri: bytes, length: int | None) -> None:
        super().__init__()
        self.method = method
        self.uri = uri
        self.path = uri.split(b"?", 1)[0]
        self.requestHeaders = request.requestHeaders
        self.responseHeaders = Headers()
        #: What the headers declare (a chunked body counts 0 here; its size is checked later).
        self.body_length = length or 0
        self.code = 200

    def getHeader(self, name: bytes) -> bytes | None:
        values = self.requestHeaders.getRawHeaders(name)
        return values[-1] if values else None

    def setHeader(self, name: bytes, value: bytes) -> None:
        self.responseHeaders.setRawHeaders(name, [value])

    def setResponseCode(self, code: int) -> None:
        self.code = code

"""
The extension ingest API: every route of extension-protocol.md §2 except C{/health}.

One object (L{IngestAPI}) whose Klein app declares the routes; the root resource runs the guards
first (Host, Origin, CORS, size, key) and calls the route's handler. The extension's (EXT) routes
need C{X-Gasoline-Client: gasoline-extension[/...]} (or C{gasoline-extension-offscreen}), else
403 (L{extension_only}); the admin routes here (C{/snapshot}, C{/clear}, C{/shutdown},
C{/test-boundary}, C{DELETE /logs}) are the operator's and CI's, gated by the route policy alone
(no browser origin, the key when one is set). Every answer is JSON, errors included
(C{{"error": ...}}; bad JSON / wrong types 400, over a rate limit 429 with C{Retry-After}; a
failed handler is answered by L{gasoline.http.dispatch.answer_failure}).

C{POST /logs} is the hot path (the extension streams every console line through it): one
C{orjson.loads}, one list comprehension of checks, one C{store.add}.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

import attrs
import orjson
from klein import Klein
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gasoline.core import validate
from gasoline.core.storage.boundaries import check_test_id
from gasoline.core.extension.link import ExtensionLink, rfc3339
from gasoline.core.redaction.fields import redact_typed_values
from gasoline.core.lifecycle import Shutdown
from gasoline.core.storage.screenshots import MIME_OF_EXT, ScreenshotStore
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)
from gasoline.core.interfaces import ITelemetryStore
from gasoline.core.validate import PayloadError
from gasoline.http.guards import JSON_VALUES_COUNTED_FROM, body_values_refusal
from gasoline.http.json import json_body, json_error

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred
    from twisted.web.server import Request

    from gasoline.core.extension.commands import CommandQueue
    from gasoline.core.trust.pairing import DaemonIdentity

log = Logger()

EXTENSION_CLIENT = b"gasoline-extension"
EXTENSION_OFFSCREEN = b"gasoline-extension-offscreen"
#: C{/websocket-events}: events accepted per one-second window.
WS_EVENTS_PER_SECOND = 1000
#: C{/screenshots}: minimum seconds between two uploads of one client.
SCREENSHOT_INTERVAL = 1.0

_DATA_URL = re.compile(r"data:image/(jpeg|jpg|png|webp);base64,", re.I)


def is_extension_client(value: bytes | None) -> bool:
    """The extension header gate of extension-protocol.md §1."""
    if value is None:
        return False
    return (
        value == EXTENSION_CLIENT
        or value.startswith(b"gasoline-extension/")
        or value == EXTENSION_OFFSCREEN
    )


#: The handlers that carry the extension's header gate, as L{extension_only} returned them: the
#: route policy's EXTENSION routes, and only they (tests/test_route_policy.py).
EXTENSION_GATED: set[Callable[..., Any]] = set()
#: The handlers that open a sealed body, as L{extension_session} returned them: the methods
#: L{gasoline.http.routes.Route.sealed} declares, and only they (tests/test_sealed_limits.py).
OPENS_SEALED: set[Callable[..., Any]] = set()


def extension_only(route: Callable[..., Any]) -> Callable[..., Any]:
    """Refuse (403) a request that does not carry the extension's C{X-Gasoline-Client}."""

    @functools.wraps(route)
    def gated(self: Any, request: Request, *args: Any, **kwargs: Any) -> Any:
        if not is_extension_client(request.getHeader(b"x-gasoline-client")):
            return json_error(
                request,
                403,
                "forbidden: this route is for the Gasoline extension "
                "(X-Gasoline-Client: gasoline-extension/<version>)",
            )
        return route(self, request, *args, **kwargs)

    EXTENSION_GATED.add(gated)
    return gated


def extension_session(route: Callable[..., Any]) -> Callable[..., Any]:
    """A capture or command route of the extension: once the daemon pins an extension, only its
    sealed requests pass; a sealed request is opened here (L{DaemonIdentity.admit}), and the route
    is called with the body it parses (a sealed body's plaintext, else the body as it came) after
    the request. The structural JSON limits are counted here, on that body: the guard skips these
    routes (L{gasoline.http.routes.Route.sealed})."""

    @functools.wraps(route)
    def gated(self: IngestAPI, request: Request, *args: Any, **kwargs: Any) -> Any:
        identity = self.identity
        if identity is None:
            content = request.content
            body = content.read() if content is not None else b""
        else:
            opened = identity.admit(request)
            if isinstance(opened, tuple):
                status, message, extra = opened
                return json_error(request, status, message, **extra)
            body = opened
        # (Most capture bodies are too short to hold too many values: they skip the count.)
        if len(body) > JSON_VALUES_COUNTED_FROM:
            too_many = body_values_refusal(request, body)
            if too_many is not None:
                return too_many
        return route(self, request, body, *args, **kwargs)

    checked = extension_only(gated)
    OPENS_SEALED.add(checked)
    return checked


def _ok(request: Request, **extra: Any) -> bytes:
    return json_body(request, {"status": "ok", **extra})


def _entry_time_ms(entry: dict[str, Any]) -> float | None:
    """An entry's time in epoch milliseconds (C{ts} RFC 3339 or C{timestamp}), if it has one."""
    value = entry.get("ts", entry.get("timestamp"))
    return _time_ms(value)


def _time_ms(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        # Milliseconds since the epoch unless it is clearly seconds.
        return float(value) if value > 1e11 else float(value) * 1000.0
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000.0
        except ValueError:
            try:
                return _time_ms(float(value))
            except ValueError:
                return None
    return None


@attrs.define(eq=False, slots=False)  # Klein binds its app on the instance's __dict__
class IngestAPI:
    """The extension's HTTP API (and the admin routes over its store); serve it with the root
    (L{gasoline.http.site.GasolineRoot})."""

    app = Klein()

    clock: IReactorTime
    store: ITelemetryStore
    extension: ExtensionLink
    screenshots: ScreenshotStore
    #: The daemon's graceful stop (C{POST /shutdown}).
    shutdown: Shutdown
    ws_events_per_second: int = WS_EVENTS_PER_SECOND
    screenshot_interval: float = SCREENSHOT_INTERVAL
    #: The daemon identity (gasoline.core.trust.pairing): signs C{/sync} answers to paired extensions.
    identity: DaemonIdentity | None = None
    _ws_window: float = attrs.field(default=-math.inf, init=False)
    _ws_count: int = attrs.field(default=0, init=False)
    _last_screenshot: dict[bytes, float] = attrs.field(factory=dict, init=False)
    #: Entries refused inside accepted batches, by buffer (C{/metrics}).
    rejected_entries: dict[str, int] = attrs.field(factory=dict, init=False)

    @property
    def commands(self) -> CommandQueue:
        return self.extension.commands

    # -- helpers ---------------------------------------------------------------------------------

    def _add(self, buffer: str, items: list[dict[str, Any]]) -> tuple[int, str | None]:
        """Store a batch; entries orjson cannot re-encode (too deeply nested) are dropped.

        @return: how many entries were dropped, and why the batch is not on disk (or None).
        """
        if not items:
            return 0, None
        try:
            return 0, self.store.add(buffer, items).persist_error
        except orjson.JSONEncodeError:  # nothing was written: encoding precedes the write
            items, dropped = validate.encodable(items)
            return dropped, self.store.add(buffer, items).persist_error

    def _count_rejected(self, buffer: str, n: int) -> None:
        self.rejected_entries[buffer] = self.rejected_entries.get(buffer, 0) + n

    @staticmethod
    def _durability(request: Request, body: dict[str, Any], error: str | None
                    ) -> dict[str, Any]:
        """Add C{"persisted": false} and the reason (C{error}) when the batch just stored is not
        on disk.

        With persistence on, L{_add} returns once the batch is handed to the OS, so the answer
        that follows acknowledges durable entries. When the journal could not take them, the
        entries are still kept in memory and readable (an error would make the extension send
        them again, duplicated), but the caller is told they would not survive a restart.
        """
        if error is not None:
            request.setHeader(b"x-gasoline-persisted", b"false")
            body["persisted"] = False
            body["warning"] = (f"kept in memory but NOT persisted ({error}); these entries "
                               "will be lost if the daemon stops")
        return body

    # -- console ---------------------------------------------------------------------------------

    @app.route("/logs", methods=["POST"])
    @extension_session
    def post_logs(self, request: Request, body: bytes) -> bytes:
        payload = validate.parse_object(body)
        items = validate.batch(payload, "entries")
        valid, rejected = validate.log_entries(items, len(body))
        test_set = self.store.test_boundaries.current_set()
        if test_set is not None:
            # By reference: the set of active test ids lives once in the store.
            for entry in valid:
                entry["test_set"] = test_set
        dropped, error = self._add(CONSOLE, valid)
        rejected += dropped
        received = len(items) - rejected
        if rejected:
            self._count_rejected(CONSOLE, rejected)
        return json_body(request, self._durability(
            request,
            {"received": received, "rejected": rejected, "entries": len(self.store.buffers[CONSOLE])},
            error,
        ))

    @app.route("/logs", methods=["DELETE"])
    def delete_logs(self, request: Request) -> bytes:
        self.store.clear(CONSOLE)
        return json_body(request, {"cleared": True})

    # -- other telemetry -------------------------------------------------------------------------

    def _store_batch(self, request: Request, body: bytes, field: str, buffer: str,
                     extra: Callable[[dict[str, Any], list[dict[str, Any]]], object] | None = None
                     ) -> bytes:
        payload = validate.parse_object(body)
        items = validate.batch(payload, field)
        valid, rejected = validate.objects(items)
        if extra is not None:
            extra(payload, valid)
        dropped, error = self._add(buffer, valid)
        rejected += dropped
        if rejected:
            self._count_rejected(buffer, rejected)
        return _ok(request, **self._durability(
            request, {"count": len(items) - rejected, "rejected": rejected}, error))

    @app.route("/network-bodies", methods=["POST"])
    @extension_session
    def network_bodies(self, request: Request, body: bytes) -> bytes:
        return self._store_batch(request, body, "bodies", NETWORK_BODIES)

    @app.route("/enhanced-actions", methods=["POST"])
    @extension_session
    def enhanced_actions(self, request: Request, body: bytes) -> bytes:
        # Typed values of password/OTP/PIN/token inputs are redacted before they are stored.
        return self._store_batch(request, body, "actions", ACTIONS,
                                 lambda payload, valid: redact_typed_values(valid))

    @app.route("/network-waterfall", methods=["POST"])
    @extension_session
    def network_waterfall(self, request: Request, body: bytes) -> bytes:
        def page_url(payload: dict[str, Any], entries: list[dict[str, Any]]) -> None:
            url = payload.get("page_url")
            if isinstance(url, str):
                for entry in entries:
                    entry.setdefault("page_url", url)

        return self._store_batch(request, body, "entries", WATERFALL, page_url)

    @app.route("/websocket-events", methods=["POST"])
    @extension_session
    def websocket_events(self, request: Request, body: bytes) -> bytes:
        payload = validate.parse_object(body)
        items = validate.batch(payload, "events")
        now = self.clock.seconds()
        if now - self._ws_window >= 1.0:
            self._ws_window, self._ws_count = now, 0
        if self._ws_count + len(items) > self.ws_events_per_second and items:
            retry = max(1, math.ceil(self._ws_window + 1.0 - now))
            request.setHeader(b"retry-after", str(retry).encode())
            return json_error(
                request, 429, "rate limited: too many WebSocket events",
                limit_per_second=self.ws_events_per_second, retry_after=retry,
            )
        self._ws_count += len(items)
        valid, rejected = validate.objects(items)
        dropped, error = self._add(WEBSOCKET_EVENTS, valid)
        rejected += dropped
        return _ok(request, **self._durability(
            request, {"count": len(items) - rejected, "rejected": rejected}, error))

    @app.route("/dom-changes", methods=["POST"])
    @extension_session
    def dom_changes(self, request: Request, body: bytes) -> bytes:
        """DOM watches met in a tracked tab (C{dom_change} streaming events, one agent each)."""
        payload = validate.parse_object(body)
        changes = validate.batch(payload, "changes")
        events = self.extension.dom_changes({**payload, "changes": changes})
        return _ok(request, count=len(changes), events=events)

    @app.route("/performance-snapshots", methods=["POST"])
    @extension_session
    def performance_snapshots(self, request: Request, body: bytes) -> bytes:
        payload = validate.parse_object(body)
        items = validate.batch(payload, "snapshots")
        valid, rejected = validate.objects(items)
        valid, dropped = validate.encodable(valid)
        rejected += dropped
        self.store.add_performance(valid)
        return _ok(request, count=len(valid), rejected=rejected)

    @app.route("/extension-logs", methods=["POST"])
    @extension_session
    def extension_logs(self, request: Request, body: bytes) -> bytes:
        payload = validate.parse_object(body)
        items = validate.batch(payload, "logs")
        kept, error = self.extension.add_extension_logs(items)
        return _ok(request, **self._durability(request, {"count": kept}, error))

    @app.route("/api/extension-status", methods=["POST"])
    @extension_session
    def extension_status(self, request: Request, body: bytes) -> bytes:
        payload = validate.parse_object(body)
        self.extension.set_status(payload)
        return _ok(request)

    # -- commands --------------------------------------------------------------------------------

    @app.route("/sync", methods=["POST"])
    @extension_session
    def sync(self, request: Request, body: bytes) -> Deferred[bytes]:
        payload = validate.parse_object(body)
        d = self.extension.sync(payload)
        d.addCallback(lambda response: self._signed(request, json_body(request, response)))
        return d

    def _signed(self, request: Request, body: bytes) -> bytes:
        if self.identity is not None:
            # A paired extension's /sync answer is sealed under its session and bound to the
            # request (its commands cannot come from anyone else); others are answered as before.
            return self.identity.seal_answer(request, body)
        return body

    @app.route("/pending-queries", methods=["GET"])
    @extension_session
    def pending_queries(self, request: Request, body: bytes) -> bytes:
        self.extension.touch()
        return json_body(
            request, {"queries": [c.to_json() for c in self.commands.deliverable()]}
        )

    def _resolve(self, request: Request, body: bytes) -> bytes:
        payload = validate.parse_object(body)
        command_id = payload.get("id")
        if not isinstance(command_id, str):
            raise PayloadError("field 'id' must be a command id string (q-<n>)")
        resolved = self.commands.resolve(payload)
        return _ok(request, resolved=resolved)

    @app.route("/query-result", methods=["POST"])
    @extension_session
    def query_result(self, request: Request, body: bytes) -> bytes:
        return self._resolve(request, body)

    @app.route("/dom-result", methods=["POST"])
    @extension_session
    def dom_result(self, request: Request, body: bytes) -> bytes:
        return self._resolve(request, body)

    # -- screenshots -----------------------------------------------------------------------------

    @app.route("/screenshots", methods=["POST"])
    @extension_session
    def post_screenshot(self, request: Request, body: bytes) -> bytes:
        payload = validate.parse_object(body)

        def field(*names: str) -> Any:
            for name in names:
                value = payload.get(name)
                if value is not None:
                    return value
            return None

        data_url = field("data_url", "dataUrl")
        if not isinstance(data_url, str):
            raise PayloadError("field 'data_url' (or 'dataUrl') must be a data: URL string")
        m = _DATA_URL.match(data_url)
        if m is None:
            raise PayloadError("data_url must be a base64 data:image/jpeg|png|webp URL")
        try:
            image = base64.b64decode(data_url[m.end():], validate=True)
        except (binascii.Error, ValueError):
            raise PayloadError("data_url is not valid base64") from None
        if not image:
            raise PayloadError("data_url holds an empty image")
        client = request.getHeader(b"x-gasoline-client") or b""
        now = self.clock.seconds()
        last = self._last_screenshot.get(client)
        query_id = field("query_id", "queryId")
        # An upload answering a pending screenshot command is never rate limited: two agents may
        # ask within one second, and a refused upload would leave the command to time out.
        answers_query = isinstance(query_id, str) and self.commands.get(query_id) is not None
        if last is not None and now - last < self.screenshot_interval and not answers_query:
            retry = max(1, math.ceil(last + self.screenshot_interval - now))
            request.setHeader(b"retry-after", str(retry).encode())
            return json_error(request, 429, "rate limited: one screenshot per second",
                              retry_after=retry)
        self._note_screenshot(client, now)
        url = field("url")
        correlation_id = field("correlation_id", "correlationId", "errorId")
        ext = m.group(1).lower().replace("jpeg", "jpg")
        path = self.screenshots.save(image, ext, url, correlation_id, now)
        # What the waiting tool call inlines (MCP image content): the extension's scaled-down
        # preview when it sent one, else the image itself when it is small enough.
        preview = field("preview_data_url")
        pm = _DATA_URL.match(preview) if isinstance(preview, str) else None
        small = b""
        if pm is not None:
            try:
                small = base64.b64decode(pm.string[pm.end():], validate=True)
            except (binascii.Error, ValueError):
                small = b""
        if pm is not None and small:
            self.screenshots.keep_preview(path, small, MIME_OF_EXT[pm.group(1).lower()])
        else:
            self.screenshots.keep_preview(path, image, MIME_OF_EXT[ext])
        out = {
            "filename": path.name,
            "path": str(path),
            "correlation_id": correlation_id if isinstance(correlation_id, str) else None,
        }
        if isinstance(query_id, str):
            self.commands.resolve(
                {"id": query_id, "status": "complete", "result": dict(out, url=url)}
            )
        return json_body(request, out)

    def _note_screenshot(self, client: bytes, now: float) -> None:
        if len(self._last_screenshot) > 100:
            horizon = now - self.screenshot_interval
            self._last_screenshot = {
                k: t for k, t in self._last_screenshot.items() if t > horizon
            }
        self._last_screenshot[client] = now

    # -- CI support ------------------------------------------------------------------------------

    @app.route("/test-boundary", methods=["POST"])
    def test_boundary(self, request: Request) -> bytes:
        content = request.content
        payload = validate.parse_object(content.read() if content is not None else b"")
        test_id = payload.get("test_id")
        action = payload.get("action")
        problem = check_test_id(test_id)
        if problem is not None or not isinstance(test_id, str):  # (check_test_id refuses non-str)
            raise PayloadError(problem or "field 'test_id' must be a non-empty string")
        if action not in ("start", "end"):
            raise PayloadError("field 'action' must be \"start\" or \"end\"")
        now = self.clock.seconds()
        if action == "start":
            self.store.test_boundaries.start(test_id, now)
        else:
            self.store.test_boundaries.end(test_id)
        return json_body(request, {"test_id": test_id, "action": action, "timestamp": rfc3339(now)})

    @app.route("/snapshot", methods=["GET"])
    def snapshot(self, request: Request) -> bytes:
        since_arg = request.args.get(b"since", [b""])[0].decode("utf-8", "replace")
        test_id = request.args.get(b"test_id", [b""])[0].decode("utf-8", "replace") or None
        since = _time_ms(since_arg) if since_arg else None
        if since_arg and since is None:
            raise PayloadError("'since' must be an RFC 3339 time or epoch milliseconds")

        def select(buffer: str) -> list[dict[str, Any]]:
            items = self.store.read(buffer).items
            if since is not None:
                items = [e for e in items if (_entry_time_ms(e) or math.inf) >= since]
            if test_id is not None:
                items = [e for e in items if test_id in ids_of(e.get("test_set"))]
            for e in items:
                if "test_set" in e:
                    e["test_ids"] = list(ids_of(e.pop("test_set")))
            return items

        ids_of = self.store.test_boundaries.ids_of

        logs = select(CONSOLE)
        websocket_events = select(WEBSOCKET_EVENTS)
        network_bodies = select(NETWORK_BODIES)
        enhanced_actions = select(ACTIONS)
        out: dict[str, Any] = {
            "timestamp": rfc3339(self.clock.seconds()),
            "test_id": test_id,
            "logs": logs,
            "websocket_events": websocket_events,
            "network_bodies": network_bodies,
            "enhanced_actions": enhanced_actions,
        }
        out["stats"] = {
            "total_logs": len(logs),
            "errors": sum(1 for e in logs if e.get("level") == "error"),
            "warnings": sum(1 for e in logs if e.get("level") == "warn"),
            "websocket_events": len(websocket_events),
            "network_bodies": len(network_bodies),
            "enhanced_actions": len(enhanced_actions),
        }
        return json_body(request, out)

    @app.route("/clear", methods=["POST", "DELETE"])
    def clear(self, request: Request) -> bytes:
        removed = self.store.clear()
        return json_body(request, {"cleared": True, "entries_removed": removed})

    @app.route("/shutdown", methods=["POST"])
    def post_shutdown(self, request: Request) -> bytes:
        if not self.shutdown.request("POST /shutdown"):
            return json_error(request, 503, "shutdown is not available in this daemon")
        return json_body(request, {"status": "shutting_down"})


__all__ = ["IngestAPI", "is_extension_client", "extension_only", "extension_session"]

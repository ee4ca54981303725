"""
The live status page: C{GET /} and its state, for a person to read at a glance (docs/status-page.md).

Routes (declared with this object's Klein app, served by the root):

  - C{GET /}: the page (HTML). Public: it holds no state, only the code that fetches it.
  - C{GET /ui/status.css}, C{GET /ui/status.js}: its style and script, served from the package
    (no build step, no CDN).
  - C{GET /ui/state}: the state as one JSON object (L{StatusPage.state}).
  - C{GET /ui/stream}: the same state as server-sent events (C{event: state}), sent at once and
    again whenever anything but C{now} changed (checked every L{TICK} seconds), else a comment
    every L{KEEPALIVE} seconds; at most L{MAX_STREAMS} open at once. Times are epoch seconds of
    the daemon's clock, so an idle daemon's state does not change; the page counts ages itself.

State and counts only: ids, flags, sizes, counts, ages, project directories, tool names and
outcomes; never captured content (no log text, no URLs but the tracked tab's origin, no tool
arguments or results).

Every answer refuses framing (C{X-Frame-Options: DENY}, CSP C{frame-ancestors 'none'}) and carries
a strict CSP (C{default-src 'none'}; script, style and connections only from the daemon itself).
A request with an C{Origin} other than the daemon's own, or a C{Sec-Fetch-Site} other than
C{same-origin} / C{none}, is refused (403) on the state routes; the page itself is refused inside
a frame and to a foreign C{Origin}. With C{--api-key}, the state routes need the key
(C{X-Gasoline-Key} or C{Authorization: Bearer}); the page asks for it and keeps it in the tab's
C{sessionStorage}. The root's guard (Host, Origin, sizes) runs first, as for every route.
"""

from __future__ import annotations

import hmac
import os
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
from klein import Klein
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from gasoline._version import __version__
from gasoline.core.lifecycle import ClockedTimer
from gasoline.core.clients.session_ids import session_label
from gasoline.http.json import json_body, json_error
from gasoline.stream import request_writer

if TYPE_CHECKING:
    from twisted.web.server import Request

    from gasoline.core.daemon import Daemon
    from gasoline.core.trust.pairing import DaemonIdentity
    from gasoline.mcp.tools import ToolRegistry
    from gasoline.proxy.session import ProxyManager
    from gasoline.relay.hub import Relay
    from gasoline.streaming.hub import Streaming

log = Logger()

#: Seconds between checks for a changed state (and buffer-rate samples) while a stream is open.
TICK = 1.0
#: Seconds between keep-alive comments on an idle stream.
KEEPALIVE = 15.0
#: Open streams at most (a page per tab is the expected use).
MAX_STREAMS = 16
#: Bytes a paused status stream keeps (L{gasoline.stream.BoundedWriter}): a few states; a reader
#: that does not keep up misses intermediate states, and one that takes nothing is dropped.
STREAM_LIMIT = 256 * 1024
#: Recent tool calls shown per agent.
LAST_CALLS = 5

CSP = (b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       b"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_FILES = {"status.css": b"text/css; charset=utf-8",
          "status.js": b"text/javascript; charset=utf-8"}


def _static(name: str) -> bytes:
    return (resources.files("gasoline.http") / "static" / name).read_bytes()


def _origin_only(url: Any) -> str | None:
    """C{scheme://host[:port]} of a URL (the rest may be captured content), or None."""
    if not isinstance(url, str) or not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme in ("http", "https") and parts.netloc:
        return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}:" if parts.scheme else None


class StatusPage:
    """The status page of one daemon; collaborators by name, all but C{daemon} optional."""

    app = Klein()

    def __init__(self, daemon: Daemon, *, identity: DaemonIdentity | None = None,
                 tools: ToolRegistry | None = None, streaming: Streaming | None = None,
                 relay: Relay | None = None, proxy: ProxyManager | None = None,
                 api_key: str | None = None) -> None:
        self.daemon = daemon
        self.clock = daemon.clock
        self.identity = identity
        self.tools = tools
        self.streaming = streaming
        self.relay = relay
        self.proxy = proxy
        self.api_key = api_key or None
        #: Open streams -> (what was last sent to it, without C{now}; seconds since a write).
        self.streams: dict[Any, list] = {}
        #: buffer name -> (time, head) of the last sample, and the rates they gave.
        self._samples: dict[str, tuple[float, int]] = {}
        self._rates: dict[str, float] = {}
        self.timer = ClockedTimer(TICK, self.clock, self._tick)
        self.timer.setName("status-page")

    # -- state -----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything the page shows (see the module docstring for what is never in it)."""
        now = self.clock.seconds()
        return {
            "version": __version__,
            "pid": os.getpid(),
            # Times are the daemon's clock (epoch seconds); the page shows ages against C{now}.
            "now": round(now, 3),
            "started_at": round(self.daemon.started_at, 3),
            "api_key": self.api_key is not None,
            "extension": self._extension(now),
            "agents": self._agents(now),
            "buffers": self._buffers(now),
            "relay": self._relay(),
            "proxy": self._proxy(),
            "errors": self._errors(),
        }

    def _extension(self, now: float) -> dict[str, Any]:
        link = self.daemon.extension
        settings = link.settings or {}
        # The identity's public read-only summary (gasoline.core.trust.pairing.DaemonIdentity.summary).
        pairing = self.identity.summary() if self.identity is not None else {}
        return {
            "connected": bool(link.connected),
            "last_seen": round(link.last_sync, 3) if link.last_sync else None,
            "version": link.extension_version,
            "daemon_fingerprint": pairing.get("daemon_fingerprint"),
            # Extensions that proved the daemon's identity (challenge sessions alive now).
            "paired": pairing.get("paired"),
            "paired_sessions": pairing.get("sessions"),
            "extension_fingerprint": pairing.get("extension_fingerprint"),
            "launched_extensions": pairing.get("launched_extensions") or [],
            "refused_extensions": pairing.get("refused_extensions") or [],
            # What the extension last said of its tab and pilot holds only while it syncs: a
            # browser that went away (closed, killed) is shown gone, not "pilot: on" and its tab.
            "gone": bool(link.last_sync) and not link.connected,
            "tracking": settings.get("tracking_enabled") if link.connected else None,
            "tracked_tab": (settings.get("tracked_tab_id") or None) if link.connected else None,
            "tracked_origin": (_origin_only(settings.get("tracked_tab_url"))
                               if link.connected else None),
            "pilot": settings.get("pilot_enabled") if link.connected else None,
            "pending_commands": len(link.commands.outstanding()),
        }

    def _agents(self, now: float) -> list[dict[str, Any]]:
        registry = self.daemon.registry
        states = sorted(registry.list(), key=lambda s: (s.connected_at, s.client_id))
        out = []
        for s in states:
            agent: dict[str, Any] = {
                "id": s.client_id,
                "project": s.cwd,
                "connected": bool(s.live),
                "connections": s.connections,
                "last_seen": round(s.last_seen, 3),
                "subscription": None,
                "last_calls": [],
                "rate_limit": None,
            }
            stream = self.streaming.agent(s) if self.streaming is not None else None
            if stream is not None:
                sub = stream.subscription
                agent["subscription"] = {
                    "types": list(sub.types), "severity": sub.severity,
                    "rate_limit": sub.rate_limit, "unread": len(stream.inbox),
                    "pushed": stream.pushed, "throttled": stream.throttled_total,
                }
            if self.tools is not None:
                agent["last_calls"] = [
                    {"tool": r["tool"], "what": r["mode"], "outcome": r["outcome"],
                     **({"error": r["error"]} if r.get("error") else {}),
                     "ms": r["duration_ms"], "at": round(r["ts"], 3)}
                    for r in reversed(self.tools.audit_log(s.client_id, LAST_CALLS))]
                limiter = self.tools.limiter
                if limiter is not None:
                    agent["rate_limit"] = limiter.usage(s.client_id)
            out.append(agent)
        return out

    def _buffers(self, now: float) -> dict[str, Any]:
        out = {}
        for name, st in self.daemon.store.stats().items():
            capacity = st.get("capacity") or 0
            out[name] = {
                "used": st.get("used", 0), "capacity": capacity,
                "fill": round(st.get("used", 0) / capacity, 4) if capacity else 0.0,
                "bytes": st.get("bytes"), "max_bytes": st.get("max_bytes"),
                "total": st.get("head", 0),
                "rate_per_s": self._rates.get(name, 0.0),
            }
        return out

    def _sample(self, now: float) -> None:
        """Update the write rates (entries per second since the previous sample)."""
        for name, st in self.daemon.store.stats().items():
            head = st.get("head", 0)
            last = self._samples.get(name)
            if last is not None and now > last[0]:
                self._rates[name] = round(max(0, head - last[1]) / (now - last[0]), 2)
            self._samples[name] = (now, head)

    def _relay(self) -> dict[str, Any] | None:
        relay = self.relay
        if relay is None:
            return None
        by_tab: dict[int, list[str]] = {}
        for client in relay.clients.values():
            tabs = {s.target.tab_id for s in client.sessions.values() if s.target is not None}
            for tab in tabs:
                by_tab.setdefault(tab, []).append(client.client_id)
        return {
            "extension_connected": relay.extension_connected,
            "clients": [{"id": c.client_id, "sessions": len(c.sessions), "commands": c.commands}
                        for c in relay.clients.values()],
            "tabs": [{"tab": tab, "clients": sorted(ids)} for tab, ids in sorted(by_tab.items())],
            "targets": len(relay.targets),
        }

    def _proxy(self) -> dict[str, Any] | None:
        proxy = self.proxy
        if proxy is None:
            return None
        sessions = []
        for session in proxy.sessions.values():
            children = []
            for name, entry in session.servers.items():
                child = entry.child
                children.append({"server": name, "context": entry.context,
                                 "enabled": entry.enabled,
                                 "state": child.state if child is not None else None,
                                 "restarts": child.restarts if child is not None else 0})
            # A label, never the id: the id is the session's credential (gasoline.core.clients.session_ids).
            sessions.append({"id": session_label(session.session_id), "client": session.client_id,
                             "project": session.working_directory, "children": children})
        return {"sessions": sessions, "shared": len(proxy.shared)}

    def _errors(self) -> dict[str, int]:
        """Failed tool calls so far, by error code."""
        errors = dict(self.tools.errors) if self.tools is not None else {}
        return dict(sorted(errors.items(), key=lambda kv: (-kv[1], kv[0])))

    def state_bytes(self) -> tuple[bytes, bytes]:
        """The state as JSON, and the same without C{now} (what L{_tick} compares)."""
        state = self.state()
        data = orjson.dumps(state, option=orjson.OPT_NON_STR_KEYS, default=str)
        del state["now"]
        return data, orjson.dumps(state, option=orjson.OPT_NON_STR_KEYS, default=str)

    # -- guards ----------------------------------------------------------------------------------

    def _headers(self, request: Request) -> None:
        request.setHeader(b"content-security-policy", CSP)
        request.setHeader(b"x-frame-options", b"DENY")
        request.setHeader(b"x-content-type-options", b"nosniff")
        request.setHeader(b"referrer-policy", b"no-referrer")
        request.setHeader(b"cross-origin-resource-policy", b"same-origin")
        request.setHeader(b"cache-control", b"no-store")

    def _foreign(self, request: Request, page: bool = False) -> bytes | None:
        """The refusal of a request from another origin or a frame, else None."""
        origin = request.getHeader(b"origin")
        host = (request.getHeader(b"host") or b"").strip().lower()
        if origin is not None and origin.lower() != b"http://" + host:
            return json_error(request, 403, "forbidden: the status page answers only itself")
        if request.getHeader(b"sec-fetch-dest") in (b"iframe", b"frame", b"embed", b"object"):
            return json_error(request, 403, "forbidden: the status page is not framed")
        site = request.getHeader(b"sec-fetch-site")
        if not page and site is not None and site not in (b"same-origin", b"none"):
            return json_error(request, 403, "forbidden: the status page answers only itself")
        return None

    def _unkeyed(self, request: Request) -> bytes | None:
        if self.api_key is None:
            return None
        given = request.getHeader(b"x-gasoline-key")
        if given is None:
            auth = request.getHeader(b"authorization") or b""
            if auth[:7].lower() == b"bearer ":
                given = auth[7:].strip()
        if given is not None and hmac.compare_digest(given, self.api_key.encode()):
            return None
        return json_error(request, 401, "unauthorized: this daemon needs its API key",
                          needs_key=True)

    # -- routes ----------------------------------------------------------------------------------

    @app.route("/", methods=["GET", "HEAD"])
    def page(self, request: Request) -> bytes:
        self._headers(request)
        refused = self._foreign(request, page=True)
        if refused is not None:
            return refused
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return _static("status.html")

    @app.route("/ui/state", methods=["GET", "HEAD"])
    def state_json(self, request: Request) -> bytes:
        refused = self._refused(request, keyed=True)
        return refused if refused is not None else json_body(request, self.state())

    @app.route("/ui/stream", methods=["GET", "HEAD"])
    def stream(self, request: Request) -> bytes | Resource:
        refused = self._refused(request, keyed=True)
        return refused if refused is not None else self._stream(request)

    @app.route("/ui/status.css", methods=["GET", "HEAD"])
    def style(self, request: Request) -> bytes:
        return self._file(request, "status.css")

    @app.route("/ui/status.js", methods=["GET", "HEAD"])
    def script(self, request: Request) -> bytes:
        return self._file(request, "status.js")

    def _refused(self, request: Request, keyed: bool = False) -> bytes | None:
        """The page's headers, then the refusal of a foreign or (when C{keyed}) unkeyed request."""
        self._headers(request)
        refused = self._foreign(request)
        if refused is None and keyed:
            refused = self._unkeyed(request)
        return refused

    def _file(self, request: Request, name: str) -> bytes:
        refused = self._refused(request)
        if refused is not None:
            return refused
        request.setHeader(b"content-type", _FILES[name])
        return _static(name)

    def _stream(self, request: Request) -> bytes | Resource:
        if len(self.streams) >= MAX_STREAMS:
            return json_error(request, 503, f"at most {MAX_STREAMS} status streams at once")
        request.setHeader(b"content-type", b"text/event-stream")
        request.setHeader(b"x-accel-buffering", b"no")
        data, compared = self.state_bytes()
        writer = request_writer(request, self.clock, limit=STREAM_LIMIT)
        writer.send(b"retry: 2000\nevent: state\ndata: " + data + b"\n\n")
        self.streams[writer] = [compared, 0.0]
        request.notifyFinish().addBoth(lambda _: self.streams.pop(writer, None))
        return _Pending()

    def _tick(self) -> None:
        """Sample the rates; send the state to every open stream if it changed. Never raises."""
        try:
            self._sample(self.clock.seconds())
            if not self.streams:
                return
            data, compared = self.state_bytes()
            for writer, sent in list(self.streams.items()):
                sent[1] += TICK
                if compared != sent[0]:
                    message = b"event: state\ndata: " + data + b"\n\n"
                elif sent[1] >= KEEPALIVE:
                    message = b": keep-alive\n\n"
                else:
                    continue
                sent[0], sent[1] = compared, 0.0
                writer.send(message)
        except Exception:
            log.failure("status page tick failed")


class _Pending(Resource):
    """What a streaming route answers: the response stays open (its writes were made)."""

    isLeaf = True

    def render(self, request: Request) -> int:
        return NOT_DONE_YET

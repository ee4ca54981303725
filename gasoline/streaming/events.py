"""
Stream events: what a buffer write means for subscribers (the event types agents subscribe to).

L{classify} turns one L{gasoline.core.storage.store.BufferWrite} into the L{StreamEvent}s it carries, once per
write whatever the number of subscribers. It only reads the entry dicts the store already holds
(no decoding, no I/O). Event types and how each is recognised:

 - C{error}: console entries of level C{error} (C{type: "exception"} for uncaught exceptions and
   unhandled rejections, which are C{high}; other console errors are C{medium});
 - C{network_failure}: the console's C{type: "network"} entries (the extension logs every request
   that failed or answered 4xx/5xx there): 5xx and failed requests C{high}, 4xx C{medium};
 - C{network_slow}: waterfall entries whose C{duration} is over the subscriber's budget
   (C{low}; the budget is a per-subscription filter, so this type is produced with its duration and
   each subscription compares it with its own budget);
 - C{websocket_close}: WebSocket C{close} events (C{medium} for an abnormal code, else C{low});
 - C{performance_degradation}: a performance snapshot with a Web Vital over its "needs improvement"
   threshold (C{high} when one is "poor", else C{medium});
 - C{security_violation}: console entries that report a Content-Security-Policy violation or mixed
   content (C{type: "csp_violation"} / C{"security"}, or the browser's own wording), C{high};
 - C{accessibility_violation}: published by an accessibility audit (L{audit_events}), severity
   from axe's impact;
 - C{websocket_message}: a WebSocket C{message} event, C{low}, with its C{direction}, C{size} and
   a C{preview} of its data (L{WS_PREVIEW} characters, redacted like every event); streamed only
   to agents that name the type (L{OPT_IN_TYPES});
 - C{dom_change}: reported by the extension for an agent's own DOM watch
   (L{gasoline.core.extension.link.ExtensionLink.dom_changes}), C{low} unless the watch says
   otherwise; only to that agent.

Every event also names the MCP log level its severity maps to (C{critical} -> C{critical},
C{high} -> C{error}, C{medium} -> C{warning}, C{low} -> C{notice}).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable

from gasoline.analysis.perf import vital
from gasoline.common import rfc3339

EVENT_TYPES = (
    "error", "network_failure", "network_slow", "websocket_close", "performance_degradation",
    "security_violation", "accessibility_violation", "websocket_message", "dom_change",
)
#: Types streamed only to an agent that names them: C{all} does not include them (a busy socket
#: sends hundreds of messages a second; a DOM watch needs its own selectors).
OPT_IN_TYPES = frozenset({"websocket_message", "dom_change"})
#: What C{all} subscribes to.
ALL_TYPES = frozenset(t for t in EVENT_TYPES if t not in OPT_IN_TYPES)
#: Characters of a WebSocket message's data a C{websocket_message} event previews (redacted).
WS_PREVIEW = 200
#: Least severe first.
SEVERITIES = ("low", "medium", "high", "critical")
SEVERITY_RANK = {name: i for i, name in enumerate(SEVERITIES)}
LOG_LEVEL = {"low": "notice", "medium": "warning", "high": "error", "critical": "critical"}

#: Longest message / stack trace an event carries (the full entry stays in the buffer).
MAX_MESSAGE = 2000
MAX_STACK = 4000

# Buffer names (gasoline.core.storage.store), repeated here as plain strings to keep this module free of
# anything but the entries it reads.
_CONSOLE = CONSOLE = "console"
_WATERFALL = "network_waterfall"
_WEBSOCKET = "websocket_events"
_PERFORMANCE = "performance"

#: Web Vitals: (path in the snapshot, needs-improvement threshold, poor threshold, label).
_VITALS = {
    "lcp": (("timing", "largest_contentful_paint"), 2500, 4000, "Largest Contentful Paint"),
    "inp": (("timing", "interaction_to_next_paint"), 200, 500, "Interaction to Next Paint"),
    "cls": (("cumulative_layout_shift",), 0.1, 0.25, "Cumulative Layout Shift"),
    "fcp": (("timing", "first_contentful_paint"), 1800, 3000, "First Contentful Paint"),
    "ttfb": (("timing", "time_to_first_byte"), 800, 1800, "Time to First Byte"),
}


#: The browser's wording of a Content-Security-Policy violation or of mixed content, lower case.
SECURITY_PHRASES = ("content security policy", "content-security-policy", "mixed content")
#: Console entry types the extension gives security reports.
_SECURITY_KINDS = ("csp_violation", "security")


def _security_words(message: Any) -> bool:
    """Whether C{message} is a string with the browser's wording of a security violation in its
    first 500 characters."""
    if not isinstance(message, str):
        return False
    low = message[:500].lower()
    return "content" in low and any(phrase in low for phrase in SECURITY_PHRASES)


_NORMAL_WS_CLOSE = (1000, 1001)
_IMPACT = {"critical": "critical", "serious": "high", "moderate": "medium", "minor": "low"}


class StreamEvent:
    """One event a subscriber may receive: what matching reads (type, severity, URL, message,
    duration), and C{data}, what the notification's C{data} carries (without C{seq}, which is
    per agent). C{data} is built on first use: most events of a busy page are refused by every
    filter or throttled, and never need it."""

    __slots__ = ("event_type", "severity", "rank", "url", "message", "duration_ms", "_entry",
                 "_at", "_stack", "_extra", "_data")

    def __init__(self, event_type: str, severity: str, url: str, message: str,
                 duration_ms: float | None, entry: dict[str, Any], at: float, stack: Any = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.event_type = event_type
        self.severity = severity
        #: C{SEVERITY_RANK[severity]}, once (every agent's severity filter compares it).
        self.rank = SEVERITY_RANK[severity]
        #: The URL the patterns are matched against ("" when the entry has none).
        self.url = url
        #: The message exclude patterns are matched against (capped).
        self.message = message
        #: Request duration in ms for C{network_slow} candidates (None otherwise).
        self.duration_ms = duration_ms
        self._entry = entry
        self._at = at
        self._stack = stack
        self._extra = extra
        self._data: dict[str, Any] | None = None

    @property
    def level(self) -> str:
        return LOG_LEVEL[self.severity]

    @property
    def data(self) -> dict[str, Any]:
        data = self._data
        if data is None:
            entry = self._entry
            ts = entry.get("ts", entry.get("timestamp"))
            data = self._data = {
                "event_type": self.event_type,
                "timestamp": ts if isinstance(ts, str) and len(ts) <= 64 else iso_time(self._at),
                "message": self.message,
                "url": _text(self.url, MAX_MESSAGE),
                "severity": self.severity,
                "stack_trace": _text(self._stack, MAX_STACK),
                "tabId": _tab(entry),
            }
            if self._extra:
                data.update(self._extra)
        return data

    def __repr__(self) -> str:
        return f"StreamEvent({self.event_type!r}, {self.severity!r}, {self.url!r})"


def iso_time(seconds: float) -> str:
    """RFC 3339 UTC with milliseconds (the project's one formatter, L{gasoline.common.rfc3339})."""
    return rfc3339(seconds) or ""


def _text(value: Any, cap: int) -> str:
    if value is None:
        return ""
    s = value if isinstance(value, str) else str(value)
    return s if len(s) <= cap else s[:cap] + "…"


def _tab(entry: dict[str, Any]) -> Any:
    tab = entry.get("tabId")
    return entry.get("tab_id") if tab is None else tab


def _url(entry: dict[str, Any]) -> str:
    """The entry's first non-empty string of C{url}, C{page_url}, C{pageUrl} ("" if none)."""
    value = entry.get("url")
    if value.__class__ is str and value:  # the usual case, in one test
        return value
    for key in ("url", "page_url", "pageUrl"):
        value = entry.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _event(kind: str, severity: str, entry: dict[str, Any], at: float, message: Any,
           url: str, stack: Any = None, duration: float | None = None,
           **extra: Any) -> StreamEvent:
    if not isinstance(message, str) or len(message) > MAX_MESSAGE:
        message = _text(message, MAX_MESSAGE)
    return StreamEvent(kind, severity, url, message, duration, entry, at, stack, extra)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value)


#: Severity ranks the console rule assigns.
_MEDIUM, _HIGH = SEVERITY_RANK["medium"], SEVERITY_RANK["high"]
#: The levels of the console entries that can be events: any of them when security violations
#: are wanted (a warning can be one), else errors only (L{console_kind}).
_EVENT_LEVELS = {True: ("error", "warn"), False: ("error",)}


def console_kind(entry: dict[str, Any], security: bool = True) -> tuple[str, int] | None:
    """The console rule: the event type and severity rank of one console entry, or None when it
    is no event. Every console path goes through it (L{classify} and L{entry_event} building
    events, L{console_keys} making the keys the streaming tally counts).

    A C{security_violation} (C{high}) is an C{error} or C{warn} entry of a security C{type} or
    whose message has the browser's wording (L{SECURITY_PHRASES}); then, of C{error} entries
    only, a C{network} one is a C{network_failure} (C{high} for no answer or a 5xx, else
    C{medium}), any other an C{error} (C{high} for an uncaught C{exception}, else C{medium}).
    With C{security} false (nobody wants security violations), C{warn} entries, which can be
    nothing else, are not looked at.
    """
    level = entry.get("level")
    if level not in _EVENT_LEVELS[security]:
        return None
    kind = entry.get("type")
    if kind in _SECURITY_KINDS or _security_words(entry.get("message")):
        return "security_violation", _HIGH
    if level != "error":
        return None
    if kind == "network":
        return "network_failure", _HIGH if _failed(entry) else _MEDIUM
    return "error", _HIGH if kind == "exception" else _MEDIUM


def _console(entry: dict[str, Any], at: float) -> StreamEvent | None:
    found = console_kind(entry)
    if found is None:
        return None
    event, rank = found
    severity, message = SEVERITIES[rank], entry.get("message")
    if event == "network_failure":
        status = _number(entry.get("status"))
        return _event(event, severity, entry, at, message, _url(entry),
                      status=int(status) if status is not None else None,
                      method=_text(entry.get("method"), 16))
    return _event(event, severity, entry, at, message, _url(entry),
                  entry.get("stack") if event == "error" else None)


def _failed(entry: dict[str, Any]) -> bool:
    """Whether a failed request's console entry means no answer or a server error (C{high}), as
    opposed to a 4xx (C{medium})."""
    status = _number(entry.get("status"))
    return bool(entry.get("error")) or status is None or status == 0 or status >= 500


def _waterfall(entry: dict[str, Any], at: float) -> StreamEvent | None:
    duration = _number(entry.get("duration"))
    if duration is None:
        return None
    url = _url(entry)
    return _event("network_slow", "low", entry, at,
                  f"{_text(entry.get('method') or 'GET', 16)} {_text(url, 500)} took "
                  f"{duration:.0f} ms", url, duration=duration)


def _websocket(entry: dict[str, Any], at: float) -> StreamEvent | None:
    kind = entry.get("event")
    if kind == "message":
        direction = entry.get("direction")
        direction = direction if direction in ("incoming", "outgoing") else "incoming"
        size = _number(entry.get("size"))
        size_n = int(size) if size is not None and size >= 0 else 0
        preview = _text(entry.get("data"), WS_PREVIEW)
        url = _url(entry)
        return _event("websocket_message", "low", entry, at,
                      f"WebSocket {direction} message, {size_n} bytes, on {_text(url, 500)}: "
                      f"{preview}", url, direction=direction, size=size_n, preview=preview,
                      binary=entry.get("binary") is True)
    if kind != "close":
        return None
    code = entry.get("code")
    severity = "low" if code in _NORMAL_WS_CLOSE else "medium"
    reason = _text(entry.get("reason"), 200)
    url = _url(entry)
    return _event("websocket_close", severity, entry, at,
                  f"WebSocket {_text(url, 500)} closed (code {code}{': ' + reason if reason else ''})",
                  url, code=code if isinstance(code, int) else None)


def _performance(snapshot: dict[str, Any], at: float) -> StreamEvent | None:
    over: dict[str, Any] = {}
    poor = False
    for name, (path, needs, bad, label) in _VITALS.items():
        value = vital(snapshot, path)
        if value is None or value <= needs:
            continue
        rating = "poor" if value > bad else "needs-improvement"
        poor = poor or rating == "poor"
        over[name] = {"value": value, "rating": rating, "threshold": needs, "label": label}
    if not over:
        return None
    url = _url(snapshot)
    parts = ", ".join(f"{v['label']} {v['value']:g} ({v['rating']})" for v in over.values())
    return _event("performance_degradation", "high" if poor else "medium", snapshot, at,
                  f"{parts} on {_text(url, 500)}", url, vitals=over)


_BY_BUFFER = {
    _CONSOLE: _console,
    _WATERFALL: _waterfall,
    _WEBSOCKET: _websocket,
    _PERFORMANCE: _performance,
}

#: The buffers whose writes can carry events (others are skipped without looking at entries).
SOURCE_BUFFERS = frozenset(_BY_BUFFER)
#: The buffer whose writes can carry each event type (C{accessibility_violation} comes from
#: audits, not from a buffer).
TYPE_BUFFER = {
    "error": _CONSOLE,
    "network_failure": _CONSOLE,
    "security_violation": _CONSOLE,
    "network_slow": _WATERFALL,
    "websocket_close": _WEBSOCKET,
    "websocket_message": _WEBSOCKET,
    "performance_degradation": _PERFORMANCE,
}


def buffers_for(types: Iterable[str] | None) -> frozenset[str]:
    """The buffers whose writes can carry events of C{types} (None: every type)."""
    if types is None:
        return SOURCE_BUFFERS
    return frozenset(TYPE_BUFFER[t] for t in types if t in TYPE_BUFFER)


def classify(buffer: str, entries: Iterable[Any], at: float,
             types: Iterable[str] | None = None) -> list[StreamEvent]:
    """The events in one write of C{entries} to C{buffer} at clock time C{at}.

    @param types: the event types anyone wants (None: all); events of other types are left out.
    """
    fn = _BY_BUFFER.get(buffer)
    if fn is None:
        return []
    out = []
    for entry in entries:
        if isinstance(entry, dict):
            try:
                event = fn(entry, at)
            except Exception:  # a hostile entry must not stop the others
                continue
            if event is not None and (types is None or event.event_type in types):
                out.append(event)
    return out


def entry_event(buffer: str, entry: Any, at: float) -> StreamEvent | None:
    """The event one entry of C{buffer} is (what L{classify} makes of it alone), or None."""
    fn = _BY_BUFFER.get(buffer)
    if fn is None or not isinstance(entry, dict):
        return None
    try:
        return fn(entry, at)
    except Exception:  # a hostile entry
        return None


#: Exclude pattern tests per event type: C{(bit, words, search)} (see L{console_keys}).
Exclusions = dict[str, tuple[tuple[int, "tuple[str, ...] | None", Callable[[str], bool]], ...]]


def console_keys(entries: Iterable[Any], types: frozenset[str] | None, excl: Exclusions
                 ) -> tuple[list[tuple], list[int]]:
    """The bucket keys of the events in one console write, and each one's index in C{entries}:
    what L{classify} makes of them (the same rule, L{console_kind}), reduced to what matching
    reads, without building any L{StreamEvent}.

    A key is C{(event_type, rank, url, xmask, None)}: C{xmask} has the bit of every exclude
    pattern in C{excl[event_type]} that the event's message matches, each given as
    C{(bit, words, search)}: C{words}, when not None, are literals of which the message must
    contain one (the pattern's whole meaning, see
    L{gasoline.streaming.subscription.literal_alternatives}), else C{search(message)} decides.
    The last field is the budget index, None for events without a duration (see
    L{gasoline.streaming.tally}). Events of types not in C{types} (None: every type) are left
    out; a C{warn} entry is only looked at if C{security_violation} is wanted."""
    security = types is None or "security_violation" in types
    levels = _EVENT_LEVELS[security]
    keys: list[tuple] = []
    where: list[int] = []
    for i, entry in enumerate(entries):
        try:
            # Most console lines are logs: the rule's first test, without a call for them.
            if entry.get("level") not in levels:
                continue
            found = console_kind(entry, security)
            if found is None:
                continue
            event, rank = found
            if types is not None and event not in types:
                continue
            xmask = 0
            tests = excl.get(event)
            if tests:
                xmask = _excluded(entry.get("message"), tests)
            keys.append((event, rank, _url(entry), xmask, None))
            where.append(i)
        except Exception:  # a hostile entry (not a dict...) must not stop the others
            continue
    return keys, where


def _excluded(message: Any, tests: tuple[tuple[int, "tuple[str, ...] | None",
                                               Callable[[str], bool]], ...]) -> int:
    """The bits of the exclude C{tests} that an event's C{message} matches (capped as the event
    caps it)."""
    if not isinstance(message, str) or len(message) > MAX_MESSAGE:
        message = _text(message, MAX_MESSAGE)
    xmask = 0
    for bit, words, search in tests:
        if words is None:
            if search(message):
                xmask |= bit
        else:
            # The capped message is shorter than the searched prefix (MAX_MATCH_URL):
            # containment of a literal in it is the pattern's verdict.
            for word in words:
                if word in message:
                    xmask |= bit
                    break
    return xmask


class ConsoleCounts:
    """Console writes whose events are only counted (the streaming tally's deferred writes):
    L{add} makes a write's keys at once (L{console_keys}, for the key spec it was made with:
    C{types} and C{excl}, see L{gasoline.streaming.tally.KeySpec}) and keeps only their counts;
    C{take()} gives the number of events per bucket key. Nothing of a write is kept but its
    keys: holding the writes until the fold (megabytes of entries that have left the caches)
    made the subscriber path twice as slow."""

    __slots__ = ("types", "excl", "counted", "entries")

    def __init__(self, types: frozenset[str] | None, excl: Exclusions) -> None:
        self.types = types
        self.excl = excl
        #: Events per key of the writes added since the last L{take}.
        self.counted: Counter = Counter()
        #: Entries added since the last L{take}.
        self.entries = 0

    def __len__(self) -> int:
        return self.entries

    def add(self, entries: Any) -> None:
        """One console write's entries (a list or tuple)."""
        self.entries += len(entries)
        self.counted.update(console_keys(entries, self.types, self.excl)[0])

    def take(self) -> Counter:
        """The keys of every event added (counted), and empty."""
        counts, self.counted = self.counted, Counter()
        self.entries = 0
        return counts


def audit_events(violations: Iterable[Any], url: str, tab_id: Any, at: float) -> list[StreamEvent]:
    """C{accessibility_violation} events from an axe result's C{violations} list."""
    out = []
    for v in violations:
        if not isinstance(v, dict):
            continue
        severity = _IMPACT.get(str(v.get("impact")), "medium")
        nodes = v.get("nodes")
        count = len(nodes) if isinstance(nodes, list) else 0
        message = f"{_text(v.get('id'), 100)}: {_text(v.get('help') or v.get('description'), 500)}"
        if count:
            message += f" ({count} element{'s' if count != 1 else ''})"
        out.append(_event("accessibility_violation", severity, {"tabId": tab_id}, at, message,
                          url, rule=_text(v.get("id"), 100), impact=v.get("impact")))
    return out

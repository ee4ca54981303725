"""
Stream events: what a buffer write means for subscribers (seed 004's event types).

L{classify} turns one L{gasoline.core.store.BufferWrite} into the L{StreamEvent}s it carries, once per
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
   from axe's impact.

Every event also names the MCP log level its severity maps to (C{critical} -> C{critical},
C{high} -> C{error}, C{medium} -> C{warning}, C{low} -> C{notice}).
"""

from __future__ import annotations

from collections import Counter
from itertools import repeat
from typing import Any, Callable, Iterable

from gasoline.analysis.perf import vital
from gasoline.common import rfc3339

EVENT_TYPES = (
    "error", "network_failure", "network_slow", "websocket_close", "performance_degradation",
    "security_violation", "accessibility_violation",
)
#: Least severe first.
SEVERITIES = ("low", "medium", "high", "critical")
SEVERITY_RANK = {name: i for i, name in enumerate(SEVERITIES)}
LOG_LEVEL = {"low": "notice", "medium": "warning", "high": "error", "critical": "critical"}

#: Longest message / stack trace an event carries (the full entry stays in the buffer).
MAX_MESSAGE = 2000
MAX_STACK = 4000

# Buffer names (gasoline.core.store), repeated here as plain strings to keep this module free of
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


def _security_words(message: str) -> bool:
    """The browser's wording for CSP violations and mixed content (in the first 500 chars)."""
    low = message[:500].lower()
    return "content security policy" in low or "content-security-policy" in low \
        or "mixed content" in low


def _may_hold_security_words(text: str) -> bool:
    """Whether some message in C{text} (messages joined) could be one L{_security_words}
    recognises: True for every such message, and perhaps for others (then look at each).

    ASCII-only lowering of the UTF-8 bytes: every phrase L{_security_words} finds in a lowered
    message is found here too (no other character lowers to ASCII letters of the phrases), and
    it stays fast when a message has a non-ASCII character (str.lower would not). Every phrase
    holds "content", searched first."""
    lowered = text.encode("utf-8", "surrogatepass").lower()
    return b"content" in lowered and (
        b"content security policy" in lowered or b"content-security-policy" in lowered
        or b"mixed content" in lowered)


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


def _console(entry: dict[str, Any], at: float) -> StreamEvent | None:
    level = entry.get("level")
    if level != "error" and level != "warn":
        return None
    kind = entry.get("type")
    message = entry.get("message")
    if kind in ("csp_violation", "security") or (
            isinstance(message, str) and _security_words(message)):
        return _event("security_violation", "high", entry, at, message, _url(entry))
    if level != "error":
        return None
    if kind == "network":
        status = _number(entry.get("status"))
        severity = "high" if _failed(entry) else "medium"
        return _event("network_failure", severity, entry, at, message,
                      _url(entry), status=int(status) if status is not None else None,
                      method=_text(entry.get("method"), 16))
    severity = "high" if kind == "exception" else "medium"
    return _event("error", severity, entry, at, message, _url(entry), entry.get("stack"))


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
    if entry.get("event") != "close":
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

    @param types: the event types anyone wants (None: all). Console entries that cannot be one
        of them are skipped before any per-entry call: without C{security_violation} only
        C{error} entries are looked at (most console lines are neither errors nor warnings).
    """
    fn = _BY_BUFFER.get(buffer)
    if fn is None:
        return []
    if fn is _console:
        # A comprehension, not a call per entry: the cheap pre-filter by level (a tuple, so an
        # unhashable level cannot raise).
        levels = ("error", "warn") if types is None or "security_violation" in types \
            else ("error",)
        entries = [e for e in entries if isinstance(e, dict) and e.get("level") in levels]
    out = []
    for entry in entries:
        if isinstance(entry, dict):
            try:
                event = fn(entry, at)
            except Exception:  # a hostile entry must not stop the others  # noqa: BLE001
                continue
            if event is not None:
                out.append(event)
    return out


def entry_event(buffer: str, entry: Any, at: float) -> StreamEvent | None:
    """The event one entry of C{buffer} is (what L{classify} makes of it alone), or None."""
    fn = _BY_BUFFER.get(buffer)
    if fn is None or not isinstance(entry, dict):
        return None
    try:
        return fn(entry, at)
    except Exception:  # a hostile entry  # noqa: BLE001
        return None


#: Exclude pattern tests per event type: C{(bit, words, search)} (see L{console_keys}).
Exclusions = dict[str, tuple[tuple[int, "tuple[str, ...] | None", Callable[[str], bool]], ...]]
#: Severity ranks the console classifier assigns (SEVERITY_RANK, as constants for its loop).
_MEDIUM, _HIGH = SEVERITY_RANK["medium"], SEVERITY_RANK["high"]
_SECURITY_KINDS = ("csp_violation", "security")
#: The rank of an C{error} event for the usual entry types (others are looked at one by one).
_PLAIN_ERROR_RANK = {"console": _MEDIUM, "exception": _HIGH, None: _MEDIUM}


def console_keys(entries: Iterable[Any], types: frozenset[str] | None, excl: Exclusions
                 ) -> tuple[list[tuple], list[int]]:
    """The bucket keys of the events in one console write, and each one's index in C{entries}:
    what L{classify} would make of them (same type, severity, URL and message, see
    L{_console}), reduced to what matching reads, without building any L{StreamEvent}.

    A key is C{(event_type, rank, url, xmask, None)}: C{xmask} has the bit of every exclude
    pattern in C{excl[event_type]} that the event's message matches, each given as
    C{(bit, words, search)}: C{words}, when not None, are literals of which the message must
    contain one (the pattern's whole meaning, see
    L{gasoline.streaming.subscription.literal_alternatives}), else C{search(message)} decides.
    The last field is the budget index, None for events without a duration (see
    L{gasoline.streaming.tally}). Events of types not in C{types} (None: every type) are left
    out; a C{warn} entry is only looked at if C{security_violation} is wanted.

    What depends on the message text (the browser's wording of a security violation, an
    exclude pattern's literals) is looked for once in the write's messages joined by newlines
    (no phrase or literal contains one, so what is found is inside one message), not once per
    entry: only when something is found, or anything is unusual (a message that is not a
    string, a security C{type}, an entry that is not a dict), does L{_console_keys_loop} look
    at each entry. The tests check that both give the same keys for arbitrary entries."""
    if not isinstance(entries, (list, tuple)):
        entries = list(entries)
    security = types is None or "security_violation" in types
    keys: list[tuple] = []
    where: list[int] = []
    messages: list[Any] = []
    add_key, add_index, add_message = keys.append, where.append, messages.append
    unusual = False
    for i, entry in enumerate(entries):
        try:
            level = entry.get("level")
            if level == "error":
                kind = entry.get("type")
                add_message(entry.get("message"))
                rank = _PLAIN_ERROR_RANK.get(kind)  # the usual types, in one lookup
                if rank is not None:
                    event = "error"
                elif kind == "network":
                    event, rank = "network_failure", _HIGH if _failed(entry) else _MEDIUM
                elif kind in _SECURITY_KINDS:
                    unusual = True
                    break
                else:
                    event, rank = "error", _HIGH if kind == "exception" else _MEDIUM
                if types is not None and event not in types:
                    continue
                url = entry.get("url")
                if not isinstance(url, str) or not url:
                    url = _url(entry)
                add_key((event, rank, url, 0, None))
                add_index(i)
            elif level == "warn" and security:
                if entry.get("type") in _SECURITY_KINDS:
                    unusual = True
                    break
                add_message(entry.get("message"))
        except Exception:  # noqa: BLE001 - a hostile entry: the loop skips just that one
            unusual = True
            break
    if unusual:
        return _console_keys_loop(entries, types, excl)
    if not messages:
        return keys, where
    try:
        text = "\n".join(messages)
    except TypeError:  # a message that is not a string
        return _console_keys_loop(entries, types, excl)
    if _may_hold_security_words(text):
        return _console_keys_loop(entries, types, excl)
    if excl and keys:
        try:
            _exclusions(entries, keys, where, text, messages, excl)
        except Exception:  # noqa: BLE001 - a pattern failed on a message: entry by entry
            return _console_keys_loop(entries, types, excl)
    return keys, where


def _exclusions(entries: list[Any] | tuple[Any, ...], keys: list[tuple], where: list[int],
                text: str, messages: list[str], excl: Exclusions) -> None:
    """Set the exclusion bits of C{keys} (made with none) from their entries' messages."""
    capped = max(map(len, messages)) > MAX_MESSAGE  # "…" appended: the text is not the same
    # Per event type, the tests that may match some message: a literal test only if one of
    # its words is in the write's text.
    live: dict[str, tuple[tuple[int, tuple[str, ...] | None, Callable[[str], bool]], ...]] = {}
    found: dict[int, bool] = {}
    for kind, tests in excl.items():
        keep = []
        for test in tests:
            bit, words = test[0], test[1]
            if words is not None and not capped:
                hit = found.get(bit)
                if hit is None:
                    hit = found[bit] = any(word in text for word in words)
                if not hit:
                    continue
            keep.append(test)
        if keep:
            live[kind] = tuple(keep)
    if not live:
        return
    for j, key in enumerate(keys):
        tests = live.get(key[0])
        if not tests:
            continue
        message = entries[where[j]].get("message")
        if len(message) > MAX_MESSAGE:
            message = _text(message, MAX_MESSAGE)
        xmask = 0
        for bit, words, search in tests:
            if any(word in message for word in words) if words is not None else search(message):
                xmask |= bit
        if xmask:
            keys[j] = (key[0], key[1], key[2], xmask, None)


def _console_keys_loop(entries: Iterable[Any], types: frozenset[str] | None, excl: Exclusions
                       ) -> tuple[list[tuple], list[int]]:
    """L{console_keys}, one entry at a time: the reference, and the path for writes with
    anything unusual.

    The loop repeats L{_console}'s decisions inline (one function call per entry would double
    its cost); the tests check that both agree on every entry. L{console_keys} calls it when
    its faster path does not apply."""
    security = types is None or "security_violation" in types
    keys: list[tuple] = []
    where: list[int] = []
    add_key, add_index = keys.append, where.append
    for i, entry in enumerate(entries):
        try:
            level = entry.get("level")
            if level != "error" and (level != "warn" or not security):
                continue
            kind = entry.get("type")
            message = entry.get("message")
            if kind in _SECURITY_KINDS:
                event, rank = "security_violation", _HIGH
            elif isinstance(message, str) and "content" in (low := message[:500].lower()) \
                    and ("content security policy" in low or "content-security-policy" in low
                         or "mixed content" in low):
                event, rank = "security_violation", _HIGH
            elif level != "error":
                continue
            elif kind == "network":
                event, rank = "network_failure", _HIGH if _failed(entry) else _MEDIUM
            else:
                event, rank = "error", _HIGH if kind == "exception" else _MEDIUM
            if types is not None and event not in types:
                continue
            url = entry.get("url")
            if not isinstance(url, str) or not url:
                url = _url(entry)
            xmask = 0
            tests = excl.get(event)
            if tests:
                if not isinstance(message, str) or len(message) > MAX_MESSAGE:
                    message = _text(message, MAX_MESSAGE)
                for bit, words, search in tests:
                    if words is None:
                        if search(message):
                            xmask |= bit
                    else:
                        # The capped message is shorter than the searched prefix
                        # (MAX_MATCH_URL): containment in it is the pattern's verdict.
                        for word in words:
                            if word in message:
                                xmask |= bit
                                break
            add_key((event, rank, url, xmask, None))
            add_index(i)
        except Exception:  # a hostile entry must not stop the others  # noqa: BLE001
            continue
    return keys, where


class _Odd(Exception):
    """A write L{count_usual_py} leaves to L{console_keys}."""


def count_usual_py(entries: Any, security: bool, words: tuple[str, ...] | None, capped: bool,
                   max_message: int, consoles: Counter, exceptions: Counter,
                   requests: Counter) -> bool:
    """Count a usual console write's error entries for the streaming tally, or say that it is
    not usual (and count nothing): the reference for C{gasoline/streaming/_counting.c}, which
    does the same in C and is used instead when it is built (L{count_usual}).

    Usual: every entry a dict with a C{level}; every C{error} entry has a C{type} of
    C{console}, C{exception} or C{network}, a message and a non-empty string URL (and, for a
    failed request, a status that is not a bool and a hashable status and error); every C{warn}
    entry, when C{security} (someone wants C{security_violation} events), has a C{type} that is
    not a security one and a message; and no message could change the write's keys: none is
    anything but a string or could hold the browser's wording of a security violation, and,
    when C{capped} (exclude patterns read messages), none is over C{max_message} characters or
    holds one of the C{words} one of which a message must hold for a pattern to match (None:
    some pattern is not literal, any message may match). The error entries are then counted by
    URL into C{consoles} (type C{console}) and C{exceptions}, and by (URL, status, error) into
    C{requests}. An unusual write is classified entry by entry instead (L{console_keys}): saying
    False is always safe, the answer only picks which exact path counts the write.

    One Python loop reading the fields by subscript; what depends on the messages is decided on
    them joined (one search for the security wording, one per word)."""
    found_consoles: list[Any] = []
    found_exceptions: list[Any] = []
    messages: list[Any] = []
    networks: list[Any] | None = None
    add_console, add_exception, add_message = found_consoles.append, found_exceptions.append, \
        messages.append
    try:
        for entry in entries:
            level = entry["level"]
            if level == "error":
                kind = entry["type"]
                add_message(entry["message"])
                if kind == "console":
                    add_console(entry["url"])
                elif kind == "exception":
                    add_exception(entry["url"])
                elif kind == "network":
                    if networks is None:
                        networks = [entry]
                    else:
                        networks.append(entry)
                else:
                    raise _Odd
            elif level == "warn" and security:
                if entry["type"] in _SECURITY_KINDS:
                    raise _Odd
                add_message(entry["message"])
        if messages and _messages_matter(messages, words, capped, max_message):
            return False
        found_requests = None
        if networks:
            # A few per write: a plain loop costs less than C-level passes set up for them.
            found_requests = []
            for entry in networks:
                url = entry["url"]
                status = entry.get("status")
                # True would count with 1 (equal keys) but ranks otherwise
                if status.__class__ is bool or not isinstance(url, str) or not url:
                    return False
                found_requests.append((url, status, entry.get("error")))
            hash(tuple(found_requests))  # an unhashable status or error: TypeError, unusual
        urls = found_consoles + found_exceptions
        if "" in urls or not all(map(isinstance, urls, repeat(str))):
            return False
    except Exception:  # noqa: BLE001 - anything unusual: this write goes entry by entry
        return False
    consoles.update(found_consoles)
    exceptions.update(found_exceptions)
    if found_requests:
        requests.update(found_requests)
    return True


def _messages_matter(messages: list[Any], words: tuple[str, ...] | None, capped: bool,
                     max_message: int) -> bool:
    """Whether a usual write's C{messages} could change its keys: a security wording, a
    message an exclude pattern could match, a message that is not a string."""
    try:
        text = "\n".join(messages)
    except TypeError:  # a message that is not a string
        return True
    if _may_hold_security_words(text):
        return True
    if capped:
        if words is None:
            return True
        # A message over the cap is searched with "…" appended (not a text of this write).
        if len(text) > max_message and max(map(len, messages)) > max_message:
            return True
        for word in words:
            if word in text:
                return True
    return False


try:
    from gasoline.streaming._counting import count_usual as _count_usual_c
except ImportError:  # not built (no C compiler where it was installed): the reference
    _count_usual_c = None

#: How L{ConsoleCounts} counts usual writes: the C extension when it is built, else
#: L{count_usual_py}; both give the same answers (tests/test_streaming_tally.py).
count_usual: Callable[..., bool] = _count_usual_c or count_usual_py
#: C{"c"} or C{"python"}: which L{count_usual} this process uses (on C{/metrics}; the hub logs a
#: warning when the first agent subscribes if it is the reference).
COUNTING = "c" if _count_usual_c is not None else "python"


class ConsoleCounts:
    """Console writes whose events are only counted (the streaming tally's deferred writes):
    C{take()} gives the number of events per bucket key, what C{Counter(console_keys(...)[0])}
    over every added entry gives, for the key spec it was made with (C{types}, C{excl} and
    C{needs}, see L{gasoline.streaming.tally.KeySpec}).

    L{add} looks at a write once, on the reactor turn right after the request that brought it.
    A usual write (L{count_usual}) is counted there and then, by URL (and, for failed requests,
    status and error), and nothing of it is kept; L{take} turns those counts into keys, a few
    per URL. An unusual one has its keys made by L{console_keys}, entry by entry, at once.
    Holding the writes until the fold instead (megabytes of entries that have left the caches)
    made the subscriber path twice as slow on real processors for the same instruction count.
    The tests check that L{take} and L{console_keys} agree on arbitrary entries, with either
    implementation of L{count_usual}."""

    __slots__ = ("types", "excl", "security", "errors", "failures", "capped", "words",
                 "consoles", "exceptions", "requests", "counted", "entries", "count")

    def __init__(self, types: frozenset[str] | None, excl: Exclusions,
                 needs: dict[str, tuple[str, ...] | None],
                 count: Callable[..., bool] | None = None) -> None:
        self.types = types
        self.excl = excl
        #: Whether C{warn} entries can be events (a security violation is wanted), and whether
        #: C{error} and C{network_failure} events are.
        self.security = types is None or "security_violation" in types
        self.errors = types is None or "error" in types
        self.failures = types is None or "network_failure" in types
        tested = [kind for kind, wanted in (("error", self.errors),
                                            ("network_failure", self.failures))
                  if wanted and kind in excl]
        #: Whether exclude patterns read the messages of usual writes (a message over the cap
        #: is then unusual: the searched text gets "…"), and the texts one of which a message
        #: must hold for any of them to match (None: some pattern is not literal).
        self.capped = bool(tested)
        words: tuple[str, ...] | None = ()
        for kind in tested:
            more = needs.get(kind)
            words = None if words is None or more is None else words + more
        self.words = words
        #: L{count_usual}, or another implementation of it (the tests pass each).
        self.count = count or count_usual
        #: Error entries of usual writes: of type C{console} and of type C{exception} by URL,
        #: of type C{network} by (URL, status, error).
        self.consoles: Counter = Counter()
        self.exceptions: Counter = Counter()
        self.requests: Counter = Counter()
        #: The keys of the unusual writes (made at once by L{console_keys}).
        self.counted: Counter = Counter()
        #: Entries added since the last L{take}.
        self.entries = 0

    def __len__(self) -> int:
        return self.entries

    def add(self, entries: Any) -> None:
        """One console write's entries (a list or tuple)."""
        self.entries += len(entries)
        try:
            if self.count(entries, self.security, self.words, self.capped, MAX_MESSAGE,
                          self.consoles, self.exceptions, self.requests):
                return
        except Exception:  # noqa: BLE001 - not a list or tuple of entries: entry by entry
            pass
        self.counted.update(console_keys(entries, self.types, self.excl)[0])

    def take(self) -> Counter:
        """The keys of every event added (counted), and empty."""
        counts, self.counted = self.counted, Counter()
        if self.errors:
            for rank, urls in ((_MEDIUM, self.consoles), (_HIGH, self.exceptions)):
                for url, n in urls.items():
                    counts["error", rank, url, 0, None] += n
        if self.failures:
            for (url, status, error), n in self.requests.items():
                failed = _failed({"status": status, "error": error})
                counts["network_failure", _HIGH if failed else _MEDIUM, url, 0, None] += n
        self.consoles, self.exceptions, self.requests = Counter(), Counter(), Counter()
        self.entries = 0
        return counts


def audit_events(violations: Iterable[Any], url: str, tab_id: Any, at: float) -> list[StreamEvent]:
    """C{accessibility_violation} events from an axe result's C{violations} list."""
    out = []
    for v in violations:
        if not isinstance(v, dict):
            continue
        severity = _IMPACT.get(v.get("impact"), "medium")
        nodes = v.get("nodes")
        count = len(nodes) if isinstance(nodes, list) else 0
        message = f"{_text(v.get('id'), 100)}: {_text(v.get('help') or v.get('description'), 500)}"
        if count:
            message += f" ({count} element{'s' if count != 1 else ''})"
        out.append(_event("accessibility_violation", severity, {"tabId": tab_id}, at, message,
                          url, rule=_text(v.get("id"), 100), impact=v.get("impact")))
    return out

"""
Redact once: stored entries redacted the first time anyone reads them and kept so, and the type
that marks a tool result's text as built only from redacted pieces.

Every exit redacts what it sends (L{gasoline.mcp.tools.ToolRegistry.finish}, docs/security.md,
"Redaction"). Done on the whole result, that is the same stored entry redacted again for every
agent and every read. Here instead:

 - L{ReadCache} keeps, per ring slot, the entry's redacted form (compact JSON C{bytes}: the stored
   bytes themselves when redaction changed nothing) and the noise verdicts already computed for
   it, one per rule-set key. A read looks the entry up (C{seq} and the identity of the stored
   bytes must match, so an evicted, cleared or restored slot is never served stale), and
   redacts it on a miss only.
 - L{RedactedEntries} is the list of such entries a reader hands back (a list subclass, so every
   consumer still sees a list). Items taken from the cache only: anything derived from them
   (a transform, a cut) is a plain list and takes the exit's full redaction.
 - L{compose_text} builds a result text (summary line, then compact JSON) from a body whose
   L{RedactedEntries} values are spliced as they are, everything else in the body redacted
   exactly as the exit would, and returns a L{RedactedText}. The exit takes a
   L{RedactedText} as proven (it only caps it).

Why the splice equals the exit's redaction: the exit walks the decoded JSON
(L{gasoline.core.redaction.redactor.Redactor.redact_value}), so it reaches a list under key C{k} of the
body at depth 1 and its entries at depth 2, after checking the key rules of the body's own
level (a sensitive key, a name/value pair, a typed secret field, C{cookies}). Entries are
redacted here at depth 2 (L{ENTRY_DEPTH}), so the walk would give each back unchanged (the
redaction is idempotent); the key rules are applied to the body with a one-item placeholder
list in place of each spliced list, and a list whose placeholder came back changed is not
spliced but replaced by what the rules made of it (a marker). C{cookies} is never spliced.
C{tests/test_redact_once.py} checks the equality on the secret corpus.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import orjson

from gasoline.core.redaction.fields import TYPED_VALUES
from gasoline.core.redaction.keys import SENSITIVE_KEYS, SENSITIVE_SUFFIXES
from gasoline.core.redaction.redactor import Redactor
from gasoline.core.redaction.scan import no_candidates, prefilter_with

#: Depth at which a reader's entries sit in a result body: C{body[key][i]}.
ENTRY_DEPTH = 2
#: Rule sets whose noise verdicts are kept (distinct rule sets reading a buffer; most clients
#: share one): past this many, every verdict is forgotten and found again.
MAX_VERDICTS = 128

_PLACEHOLDER = [0]
#: The redactor of the read caches and of L{compose_text}'s callers (stateless, shared).
REDACTOR = Redactor()


class RedactedText(str):
    """A result text built by L{compose_text}: every part of it went through the redactor."""

    __slots__ = ()


class RedactedEntries(list):
    """Entries decoded from L{ReadCache}'s redacted bytes (at L{ENTRY_DEPTH})."""

    __slots__ = ()


def encode(data: Any) -> str:
    """Compact JSON as tool results carry it (the standard library for what orjson refuses)."""
    try:
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS, default=str).decode()
    except orjson.JSONEncodeError:
        return json.dumps(data, default=str, separators=(",", ":"))


def compose_text(redactor: Redactor, summary: str, body: dict[str, Any]) -> str:
    """C{summary + "\\n" + JSON(body)} redacted as L{gasoline.mcp.tools.ToolRegistry.finish}
    would redact it, splicing C{body}'s L{RedactedEntries} values in without walking them: a
    L{RedactedText}. A summary of several lines (the exit would take its second line for the
    start of the JSON) gets the plain text, which the exit redacts the full way."""
    if "\n" in summary:
        return summary + "\n" + encode(body)
    shallow: dict[Any, Any] = {}
    spliced: dict[Any, RedactedEntries] = {}
    for key, value in body.items():
        if type(value) is RedactedEntries and key != "cookies":
            shallow[key] = _PLACEHOLDER
            spliced[key] = value
        else:
            shallow[key] = value
    redacted = redactor.redact_value(shallow)
    for key, value in spliced.items():
        if redacted.get(key) == _PLACEHOLDER:
            redacted[key] = value
    return RedactedText(redactor.redact_value(summary) + "\n" + encode(redacted))


#: Separators a key name may hold anywhere without changing what it names
#: (L{gasoline.core.redaction.keys}: C{-}, C{.} and whitespace read as C{_}, which the flat form
#: drops; camelCase adds only C{_}).
_SEP = r"[-_.\s]*"


def _spelled(word: str) -> str:
    """An RE2 pattern for C{word}'s letters (its C{_} dropped) with L{_SEP} between them."""
    return _SEP.join(c if c.isalnum() else "\\" + c for c in word.replace("_", ""))


#: What in an entry's JSON bytes makes the walk do more than scan its strings, or may (a
#: superset: a match is only "maybe"), for L{proves_clean}:
#:  - a backslash (an escape: a string's bytes are no longer the string);
#:  - C{=} (the walk splits a query string or a form body);
#:  - a string that starts with C{[} or C{{} and ends with C{]} or C{}} past whitespace (it may
#:    be JSON, which the walk parses; C{"[vite] connected"} is not). Without a backslash a string
#:    is exactly C{"[^"]*"}; what C{str.strip} removes is ASCII space and controls or not ASCII;
#:  - a key (a string, then C{:}) that is not plain: one holding anything not ASCII (case and
#:    whitespace beyond ASCII: not worth reasoning about), C{cookies} or a typed value's name
#:    (C{value} included: it makes a name/value pair), or a name L{is_sensitive_key} may take:
#:    its letters, separators aside, those of a sensitive name (the name equal to one of
#:    L{SENSITIVE_KEYS}, in its own or flat form) or ending in those of one of
#:    L{SENSITIVE_SUFFIXES}, in any ASCII case.
_ENTRY_HAZARDS = "|".join([
    r"[\\=]",
    r'"[^\x21-\x7f]*[\[{][^"]*[\]}][^\x21-\x7f]*"',
    r'"[^"]*[^\x00-\x7f][^"]*"\s*:',
    '"(?:' + "|".join(["cookies", *TYPED_VALUES]) + r')"\s*:',
    '(?i:"' + _SEP + "(?:" + "|".join(_spelled(w) for w in sorted(SENSITIVE_KEYS)) + ")"
    + _SEP + r'"\s*:)',
    '(?i:"[^"]*(?:' + "|".join(_spelled(w) for w in SENSITIVE_SUFFIXES) + ")" + _SEP
    + r'"\s*:)',
])
_CLEAN_ENTRY = prefilter_with(_ENTRY_HAZARDS)


def proves_clean(redactor: Redactor, raw: bytes, depth: int = ENTRY_DEPTH) -> bool:
    """Whether walking the JSON document C{raw} (UTF-8) at C{depth} (L{Redactor}'s walk, as
    L{Redactor.redact_value} starts it at 0) certainly gives back an equal value, decided on
    the bytes in one search: C{True} is a proof, C{False} only "maybe not" (then the caller
    walks).

    The walk changes a value only where a string is parsed as JSON, split as a query or scanned
    into a marker, where a key is sensitive, makes a name/value pair, a typed secret field or a
    cookie list, or past the redactor's depth. The search finds every one of these that the
    bytes can show (L{_ENTRY_HAZARDS}), and every place where a rule of the text scan could
    start: without a backslash each string's bytes appear verbatim, between two quotes
    (non-word characters, like the ends of a text; no rule uses C{^} or C{$}), so a candidate
    in a string is a candidate in C{raw}. The depth: nothing sits deeper than the brackets
    counted. C{tests/test_redact_entry_fastpath.py} compares it with the walk."""
    if _CLEAN_ENTRY.search(raw) is not None:
        return False
    return depth + raw.count(b"[") + raw.count(b"{") <= redactor.max_depth


def redact_entry(redactor: Redactor, raw: bytes) -> bytes:
    """C{raw} (one stored entry's JSON) redacted at L{ENTRY_DEPTH}; C{raw} itself when nothing
    changed (no second copy kept)."""
    # The proof knows the walk of L{Redactor} itself (its rules, keys and scan), not a subclass's.
    if type(redactor) is Redactor and proves_clean(redactor, raw):
        return raw
    return walk_entry(redactor, raw)


def walk_entry(redactor: Redactor, raw: bytes) -> bytes:
    """L{redact_entry} without the proof on the bytes (the decoded walk; the reference)."""
    entry = orjson.loads(raw)
    # The redactor's own proof that the walk would change nothing (one walk building nothing,
    # one scan over every string), at the entry's depth: most entries have nothing to redact.
    strings: list[str] = []
    if redactor._plain(entry, ENTRY_DEPTH, strings) and (not strings or no_candidates(strings)):
        return raw
    redacted = redactor._walk(entry, ENTRY_DEPTH)
    if redacted == entry:
        return raw
    return bytes(memoryview(orjson.dumps(redacted, option=orjson.OPT_NON_STR_KEYS, default=str)))


class ReadCache:
    """Per ring slot (the sequence number modulo the capacity): the sequence number and stored
    bytes it was made for, the redacted bytes, and the noise verdicts as two bit masks (a bit
    per rule-set key: known, hidden). Kept in parallel lists of numbers and bytes, not an object
    per slot: a full buffer is then a handful of containers for the garbage collector to walk,
    not tens of thousands of short-lived ones (each collection of the oldest generation walks
    every tracked object: a tail-latency cost)."""

    __slots__ = ("capacity", "redactor", "_seq", "_raw", "_red", "_known", "_hide", "_keys",
                 "redactions", "hits", "offloaded")

    def __init__(self, capacity: int, redactor: Redactor | None = None) -> None:
        self.capacity = capacity
        self.redactor = redactor if redactor is not None else REDACTOR
        #: Rule-set keys to their bit in the verdict masks (at most L{MAX_VERDICTS}).
        self._keys: dict[Any, int] = {}
        self.clear()
        #: Entries redacted (cache misses) and served from the cache, for the figures.
        self.redactions = 0
        self.hits = 0
        #: Entries whose redaction came from a worker process (L{put}).
        self.offloaded = 0

    def _index(self, seq: int, raw: bytes) -> int:
        i = seq % self.capacity
        if self._seq[i] == seq and self._raw[i] is raw:
            self.hits += 1
            return i
        redacted = redact_entry(self.redactor, raw)
        self._fill(i, seq, raw, redacted)
        self.redactions += 1
        return i

    def _fill(self, i: int, seq: int, raw: bytes, redacted: bytes) -> None:
        self._seq[i] = seq
        self._raw[i] = raw
        self._red[i] = redacted
        self._known[i] = self._hide[i] = 0

    def redacted(self, seq: int, raw: bytes) -> bytes:
        """The redacted JSON of the entry stored as C{raw} at C{seq}."""
        return self._red[self._index(seq, raw)]  # type: ignore[return-value]

    def hidden(self, seq: int, raw: bytes, key: Any,
               test: Callable[[dict[str, Any], bytes], bool], entry: dict[str, Any]) -> bool:
        """Whether the rule set C{key} hides the entry: C{test(entry, its JSON)} (on the
        redacted entry) the first time for this rule set, then the kept verdict."""
        i = self._index(seq, raw)
        bit = self._keys.get(key)
        if bit is None:
            if len(self._keys) >= MAX_VERDICTS:
                # More rule sets than bits: forget every verdict (they are found again).
                self._keys.clear()
                self._known = [0] * self.capacity
            bit = self._keys[key] = 1 << len(self._keys)
        if self._known[i] & bit:
            return bool(self._hide[i] & bit)
        verdict = bool(test(entry, self._red[i]))  # type: ignore[arg-type]
        self._known[i] |= bit
        if verdict:
            self._hide[i] |= bit
        else:
            self._hide[i] &= ~bit
        return verdict

    def put(self, seq: int, raw: bytes, redacted: bytes) -> bool:
        """Keep C{redacted} (made elsewhere: a worker process, L{Offload}) as the redacted form
        of the entry stored as C{raw} at C{seq}, unless its slot already holds it or a newer
        entry. C{True} when kept."""
        i = seq % self.capacity
        if self._seq[i] >= seq:
            return False
        self._fill(i, seq, raw, redacted)
        self.offloaded += 1
        return True

    def clear(self) -> None:
        self._seq = [-1] * self.capacity
        self._raw: list[bytes | None] = [None] * self.capacity
        self._red: list[bytes | None] = [None] * self.capacity
        self._known = [0] * self.capacity
        self._hide = [0] * self.capacity


def redact_json(text: str) -> str | None:
    """A worker's job (L{Offload}): L{redact_entry} of one stored entry's JSON text, as text;
    C{None} when nothing changed."""
    raw = text.encode("utf-8")
    out = redact_entry(REDACTOR, raw)
    return None if out is raw else out.decode("utf-8")


#: Entries at least this large (bytes of JSON: a big network body) are redacted in a worker
#: process as soon as they are stored, not on the reactor at their first read.
OFFLOAD_MIN = 64 * 1024
#: ... unless this many jobs already wait for a worker (then the first read does it).
OFFLOAD_QUEUE = 64


class Offload:
    """Redacts large stored entries in the worker pool ahead of their first read
    (L{gasoline.core.storage.store.TelemetryStore.offload}): a 1 MB JSON body costs ~200 ms of redaction,
    which the reactor must not spend. A read that comes first redacts the entry itself, as
    always; the worker's answer then finds the slot filled and is dropped."""

    def __init__(self, pool: Any, min_bytes: int = OFFLOAD_MIN) -> None:
        self.pool = pool
        self.min_bytes = min_bytes
        self.submitted = 0
        self.skipped = 0

    def __call__(self, cache: ReadCache, first_seq: int, encoded: list[bytes]) -> None:
        for i, raw in enumerate(encoded):
            if len(raw) < self.min_bytes:
                continue
            if self.pool.queued >= OFFLOAD_QUEUE or self.pool.stopped:
                self.skipped += 1
                continue
            seq = first_seq + i
            try:
                d = self.pool.run("gasoline.core.redaction.once:redact_json", raw.decode("utf-8"))
            except Exception:
                self.skipped += 1
                continue
            self.submitted += 1
            d.addCallback(lambda text, seq=seq, raw=raw, cache=cache: cache.put(
                seq, raw, raw if text is None else text.encode("utf-8")))
            d.addErrback(lambda failure: None)  # the first read redacts it instead

"""
The text scan: every secret shape of L{gasoline.core.redaction.shapes.RULES} found in a text and
replaced with its marker, in one pass.

The scan has two stages. RE2 (a DFA: linear time, one pass for all rules) finds the next position
where any rule I{could} start, using each pattern with its look-around assertions dropped (so it
matches a superset) and its quantifiers made lazy (see L{_lazy}). Python's C{re} then tries the
exact rules, in order, at that position only. Text without candidates costs one RE2 pass.

 - L{redact_text}: the text with every secret shape replaced by C{[REDACTED:<kind>]} (a marker
   is never redacted again).
 - L{no_candidates}: the cheap proof that L{redact_text} would leave a set of texts as they are
   (the prefilter finds no place where a rule could start).

Scanning is over the UTF-8 bytes of the text; a value's structure (JSON, query strings, header
lists) is L{gasoline.core.redaction.redactor}'s job.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

import re2

from gasoline.core.redaction.shapes import RULES

_LOOKAHEAD_NEG = re.compile(r"\(\?<?!(?:[^()\\]|\\.|\([^()]*\))*\)")
_LOOKAHEAD_POS = re.compile(r"\(\?=((?:[^()\\]|\\.)*)\)")


_QUANT_BRACES = re.compile(r"\{(\d+)(?:(,)(\d*))?\}")


def _lazy(pattern: str) -> str:
    """Make every quantifier lazy (and cap repetition counts RE2 refuses, > 1000).

    Only the start of a candidate matters to the scan; lazy quantifiers let RE2 stop at the
    shortest candidate instead of running to the end of, say, a 100 kB run of digits, which would
    make re-scanning after a rejected candidate quadratic.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            for literal in ("^", "]"):
                if i < n and pattern[i] == literal:
                    out.append(literal)
                    i += 1
            continue
        braces = _QUANT_BRACES.match(pattern, i) if c == "{" else None
        if c in "*+" or (c == "?" and out and out[-1] != "(") or braces:
            if braces:
                low, comma, high = braces.groups()
                if comma and high and int(high) > 1000:
                    out.append("{%s,}" % low)
                else:
                    out.append(braces.group(0))
                i = braces.end()
            else:
                out.append(c)
                i += 1
            if i < n and pattern[i] == "?":
                i += 1
            out.append("?")
            continue
        out.append(c)
        i += 1
    return "".join(out)


_CAPTURING_GROUP = re.compile(r"(?<!\\)\((?!\?)|(?<!\\)\(\?P<[a-z0-9_]+>")


def _superset(pattern: str) -> str:
    pattern = _LOOKAHEAD_NEG.sub("", pattern)
    pattern = _LOOKAHEAD_POS.sub(r"\1", pattern)
    pattern = _CAPTURING_GROUP.sub("(?:", pattern)
    return _lazy(pattern)


def _compile_prefilter(groups: bool = True, extra: str = "") -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 64 << 20
    # One capturing group per rule (and none inside: see _superset) tells which rule's superset
    # matched first at the candidate's start; rules before it cannot match there.
    group = "({})" if groups else "(?:{})"
    alternatives = [group.format(_superset(p)) for _, p, _ in RULES]
    if extra:
        alternatives.append(f"(?:{extra})")
    return re2.compile("|".join(alternatives), options)


_PREFILTER = _compile_prefilter()
#: The same candidates without the groups, for a yes/no answer (L{no_candidates}): RE2 then
#: reports one span instead of one per rule, about half the cost of a search on a short text.
_PREFILTER_ANY = _compile_prefilter(groups=False)
_EXACT = [(re.compile(p.encode("ascii")), handler) for _, p, handler in RULES]


#: An escape sequence of code or JSON text (C{\\n}, C{\\t}, ...): its letter is not a word
#: character as far as the text it escapes is concerned.
_ESCAPE = re.compile(rb"\\[nrtfvb0]")


def _escapes_as_spaces(data: bytes) -> bytes:
    """C{data} with each escape letter turned into a space (same length, same offsets), so a
    secret right after an escaped newline in generated code (C{"\\nghp_..."}) starts a word."""
    return _ESCAPE.sub(b"\\ ", data)


def _scan(data: bytes) -> bytes | None:
    """The redacted bytes, or None when nothing changed."""
    pieces: list[bytes] = []
    last = pos = 0
    changed = False
    search = _PREFILTER.search
    original = data
    if b"\\" in data:
        data = _escapes_as_spaces(data)
    while True:
        candidate = search(data, pos)
        if candidate is None:
            break
        start = candidate.start()
        first = (candidate.lastindex or 1) - 1
        for exact, handler in _EXACT[first:]:
            m = exact.match(data, start)
            if m is not None:
                replacement = handler(m)
                if replacement is None:  # the rule does not apply here after all: the next one
                    continue
                if replacement != m.group(0):
                    pieces.append(original[last:start])
                    pieces.append(replacement)
                    last = m.end()
                    changed = True
                pos = max(m.end(), start + 1)
                break
        else:
            pos = start + 1
    if not changed:
        return None
    pieces.append(original[last:])
    return b"".join(pieces)


def redact_text(text: str) -> str:
    """C{text} with every secret shape the scan knows replaced by its marker (C{text} itself when
    nothing changed)."""
    if not text:
        return text
    data = text.encode("utf-8", errors="surrogatepass")
    out = _scan(data)
    if out is None:
        return text
    return out.decode("utf-8", errors="surrogatepass")


def no_candidates(texts: Iterable[str]) -> bool:
    """Whether no rule can even start in any of C{texts}: then L{redact_text} gives each back
    unchanged. C{False} is only "maybe" (a candidate may be rejected by its exact rule).

    The texts are scanned joined by newlines, in one search: no rule uses C{^} or C{$}, and a
    newline is a non-word character like the ends of a text, so a candidate in any one text is a
    candidate in the joined text (the converse need not hold: a false alarm only costs the
    caller the full path)."""
    data = "\n".join(texts).encode("utf-8", errors="surrogatepass")
    if b"\\" in data:
        data = _escapes_as_spaces(data)
    return _PREFILTER_ANY.search(data) is None


def prefilter_with(extra: str) -> Any:
    """The candidates of every rule (as L{no_candidates} searches them) or the RE2 pattern
    C{extra}, in one automaton: one search both looks for a place where a rule could start and
    for whatever else the caller must not miss (L{gasoline.core.redaction.once.proves_clean})."""
    return _compile_prefilter(groups=False, extra=extra)

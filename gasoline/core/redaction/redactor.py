"""
Secret redaction for every text an agent receives, and the result-size cap.

The one redaction pass that every exit applies (tool results, notifications, streaming events,
artefacts, proxied servers' answers: docs/security.md, "Redaction"), on decoded values:

 - L{Redactor.redact_value} walks a JSON-like structure (dicts, lists, strings, numbers) and
   replaces the value under any sensitive key name (C{password}, C{token}, C{authorization},
   C{cookie}, ...; case-insensitive, at any depth: L{gasoline.core.redaction.keys}), including
   header lists of C{{name, value}} pairs, cookies and typed values of secret fields
   (L{gasoline.core.redaction.fields}). A string that itself parses as JSON (a network body
   C{'{"password":"x"}'}) is parsed and walked; a URL's query string or a form body is split
   into its decoded parameters. Every other string goes through L{Redactor.redact_text}.
 - L{Redactor.redact_text} finds secret-shaped text (the shapes are
   L{gasoline.core.redaction.shapes}, the scan L{gasoline.core.redaction.scan}) and replaces each with
   C{[REDACTED:<kind>]}.
 - L{Redactor.unchanged} proves, cheaply, that there is nothing to redact.

Both are idempotent: a redaction marker is never redacted again. What the exits use around them
is here too: L{clip} and L{redact_entries} (redact before a cut or a template), L{drop_cut_tail}
(a text cut before redaction), L{secret_kinds}, and L{cap_text}, which cuts an over-long result
at a line (or word) boundary and says so; redact first, then cap, so the cut can never leave
half a secret unredacted.
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import orjson

from gasoline.core.redaction.fields import FIELD_DESCRIBERS, TYPED_VALUES, describes_secret_field
from gasoline.core.redaction.keys import (
    is_marker,
    is_sensitive_key,
    is_sensitive_param,
    key_label,
    marker,
)
from gasoline.core.redaction.scan import no_candidates
from gasoline.core.redaction.scan import redact_text as scan_text


class Redactor:
    """Redacts secrets from text and JSON-like values. Stateless; one instance may be shared."""

    #: Strings longer than this are not parsed as JSON when walking values (still pattern-redacted).
    max_json_string = 1_000_000
    #: Nesting deeper than this is replaced rather than walked (hostile input).
    max_depth = 64

    def redact_text(self, text: str) -> str:
        """C{text} with every secret shape replaced by its marker (the text scan,
        L{gasoline.core.redaction.scan.redact_text}); C{text} itself when nothing changed."""
        return scan_text(text)

    def redact_value(self, value: Any) -> Any:
        """A new structure with sensitive values replaced; the input is not modified."""
        return self._walk(value, 0)

    # -- the fast path: proving there is nothing to redact --------------------------------------

    def unchanged(self, value: Any, texts: tuple[str, ...] = ()) -> bool:
        """Whether L{redact_value} would give C{value} back unchanged (an equal structure), and
        L{redact_text} every one of C{texts}: C{True} is a proof, C{False} only "maybe not" (the
        caller then takes the full path).

        Cheaper than redacting: one walk that builds nothing, and one scan for the prefilter's
        candidates (where L{redact_text} starts) over every string at once. The walk gives up
        (C{False}) wherever the full path would look closer: a sensitive key, a name/value pair
        or a typed field that may hold a secret, a C{cookies} list, a string that may be JSON
        (it starts with a brace or a bracket), a query string or a form body (it holds C{=}),
        a tuple or anything else not JSON (NaN included), nesting deeper than L{max_depth}.
        Every other string is only scanned by the full path, and left as it is when no rule
        can even start in it (L{gasoline.core.redaction.scan.no_candidates}, one search over all
        of them).
        """
        strings = list(texts)
        if not self._plain(value, 0, strings):
            return False
        if not strings:
            return True
        return no_candidates(strings)

    def _plain(self, value: Any, depth: int, strings: list[str]) -> bool:
        """Collect C{value}'s strings into C{strings}; C{False} where L{_walk} would do more
        than scan them (see L{unchanged})."""
        if isinstance(value, str):
            if "=" in value:
                return False
            if value.lstrip()[:1] in ("{", "[") and len(value) <= self.max_json_string:
                # JSON inside the string is walked by the full path; text that only starts
                # like JSON ("[vite] connected") is scanned like any other.
                try:
                    if isinstance(orjson.loads(value), (dict, list)):
                        return False
                except orjson.JSONDecodeError:
                    pass
            strings.append(value)
            return True
        if depth > self.max_depth:
            return False
        if isinstance(value, dict):
            if "value" in value and is_sensitive_param(value.get("name")):
                return False
            if any(k in value for k in TYPED_VALUES) and any(
                    describes_secret_field(value.get(k)) for k in FIELD_DESCRIBERS):
                return False
            for key, item in value.items():
                if isinstance(key, str) and (is_sensitive_key(key) or key == "cookies"):
                    return False
                if not self._plain(item, depth + 1, strings):
                    return False
            return True
        if isinstance(value, list):
            for item in value:
                if not self._plain(item, depth + 1, strings):
                    return False
            return True
        if value is None or isinstance(value, (bool, int)):
            return True
        if isinstance(value, float):
            return math.isfinite(value)  # JSON has no NaN: leave such values to the full path
        return False  # a tuple (the full path makes it a list), or not JSON at all

    def _walk(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self._redact_string(value, depth)
        if depth > self.max_depth:
            return marker("too_deep")
        if isinstance(value, dict):
            return self._walk_dict(value, depth)
        if isinstance(value, (list, tuple)):
            return [self._walk(v, depth + 1) for v in value]
        return value

    def _walk_dict(self, value: dict[Any, Any], depth: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        # Header, cookie and parameter lists as name/value pairs: {"name": "Authorization",
        # "value": "..."} (HAR, CDP); query/form parameters use the wider parameter list.
        pair_name = value.get("name") if "value" in value else None
        pair_sensitive = is_sensitive_param(pair_name)
        # A typed value of a field that says it is secret (a password, OTP or PIN input):
        # {"type": "input", "selector": "#password", "value": "..."}.
        typed_secret = any(k in value for k in TYPED_VALUES) and any(
            describes_secret_field(value.get(k)) for k in FIELD_DESCRIBERS)
        for key, item in value.items():
            if isinstance(key, str) and is_sensitive_key(key):
                out[key] = self._secret(key, item)
            elif pair_sensitive and key == "value":
                out[key] = self._secret(str(pair_name), item)
            elif typed_secret and key in TYPED_VALUES and isinstance(item, (str, int, float)):
                out[key] = self._secret("password", item)
            elif key == "cookies" and isinstance(item, list):
                out[key] = [self._cookie(c, depth + 2) for c in item]
            else:
                out[key] = self._walk(item, depth + 1)
        return out

    def _cookie(self, cookie: Any, depth: int) -> Any:
        """Every cookie value is a credential as far as an agent is concerned."""
        if isinstance(cookie, dict) and "value" in cookie:
            walked = self._walk(cookie, depth)
            walked["value"] = self._secret("cookie", cookie["value"])
            return walked
        return self._walk(cookie, depth)

    def _secret(self, key: str, item: Any) -> Any:
        if item is None or isinstance(item, bool) or item == "" or item == [] or item == {}:
            return item
        if isinstance(item, str) and is_marker(item):
            return item
        return marker(key_label(key))

    def _redact_string(self, value: str, depth: int) -> str:
        """Redact one string on its decoded values: JSON inside it is parsed and walked, a URL's
        query string or a form body is split into parameters (each decoded, then redacted by
        name and scanned), and whatever text remains is scanned by L{redact_text}."""
        if depth > self.max_depth:
            return self.redact_text(value)
        stripped = value.lstrip()
        if stripped[:1] in ("{", "[") and len(value) <= self.max_json_string:
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, (dict, list)):
                redacted = self._walk(parsed, depth + 1)
                if redacted != parsed:
                    return orjson.dumps(redacted).decode("utf-8")
                return value
        if "=" in value and len(value) <= self.max_json_string:
            # Every whitespace-free run holding "=" may be a URL with a query string or a form
            # body (also inside prose: "GET /api?token=... failed").
            def query(m: "re.Match[str]") -> str:
                redacted = self._redact_query(m.group(0), depth)
                return m.group(0) if redacted is None else redacted

            value = _QUERY_TOKEN.sub(query, value)
        return self.redact_text(value)

    def _redact_query(self, value: str, depth: int) -> str | None:
        """C{value} with its query string / form parameters redacted, or C{None} when it is not
        a URL with a query or a form body (or nothing in it changed)."""
        m = _QUERY_CARRIER.fullmatch(value)
        if m is None:
            return None
        prefix, query, fragment = m.group(1) or "", m.group(2), m.group(3) or ""
        if not prefix:
            # Only a URL has a fragment: in a bare form body or an assignment a "#" is part of
            # the value (a form body would have it percent-encoded; SECRET_KEY=django-...#...).
            query, fragment = query + fragment, ""
        if "=" not in query:
            return None
        changed = False
        parts: list[str] = []
        for piece in query.split("&"):
            name, eq, raw = piece.partition("=")
            if not eq:
                parts.append(piece)
                continue
            decoded_name = unquote_plus(name)
            decoded = unquote_plus(raw)
            if is_sensitive_param(decoded_name) and decoded and not is_marker(decoded):
                parts.append(f"{name}={marker(key_label(decoded_name))}")
                changed = True
                continue
            if "+" in raw:
                # "+" is a space in a form body but a base64 character in a key that was never
                # form-encoded (AccountKey=ab+cd/...): a secret found with "+" kept is taken so.
                literal = unquote(raw)
                redacted = self._redact_string(literal, depth + 1)
                if redacted != literal:
                    parts.append(f"{name}={quote(redacted, safe='[]:')}")
                    changed = True
                    continue
            redacted = self._redact_string(decoded, depth + 1) if decoded else decoded
            if redacted != decoded:
                parts.append(f"{name}={quote_plus(redacted, safe='[]:')}")
                changed = True
            else:
                parts.append(piece)
        if not changed:
            return None
        return prefix + "&".join(parts) + fragment


#: A URL with a query string (C{scheme://...?q#f} or C{/path?q}) or a bare form body
#: (C{a=1&b=2}, no whitespace).
_QUERY_CARRIER = re.compile(
    r"((?:[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s?#]*|/[^\s?#]*|[^\s?#=&]*)\?)?"
    r"([^\s#?]*=[^\s#]*)(#\S*)?", re.S)

_QUERY_TOKEN = re.compile(r"[^\s\"'<>`=]*=[^\s\"'<>`]*")

_DEFAULT = Redactor()
redact_text = _DEFAULT.redact_text
redact_value = _DEFAULT.redact_value


_CUT_TAIL = re.compile(r"[^\s\"'<>`]*…$")


def drop_cut_tail(text: str) -> str:
    """C{text}, which was cut and ends in C{…}, without its last word (unless it is a marker):
    a secret cut in half has lost the shape the redactor knows, so what is left of it goes too."""
    m = _CUT_TAIL.search(text)
    if m is None or m.start() == m.end() - 1 or is_marker(text[m.start():m.end() - 1]):
        return text
    return text[:m.start()] + "…"


def clip(value: Any, limit: int) -> str:
    """C{str(value)} cut to C{limit} characters, redacted before the cut when it is cut: a cut
    made before the exit's own redaction could otherwise split a secret and let its first part
    through (the exit then sees a shape it does not know). Text within the limit is returned as
    it is (the exit redacts it)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return redact_value(text[:limit + _CLIP_CONTEXT])[:limit]


#: How much past a cut L{clip} redacts: a secret that starts before the cut ends within it.
_CLIP_CONTEXT = 8192


def redact_entries(entries: Any) -> list[Any]:
    """Each entry redacted (L{Redactor.redact_value}; an entry proven clean is kept as it is).

    For whatever derives text from entries before the result's own redaction (templates,
    clusters, summaries, cut samples): redacting the values first means no cut or template can
    break a secret's shape and let part of it through."""
    unchanged, redact = _DEFAULT.unchanged, _DEFAULT.redact_value
    return [e if unchanged(e) else redact(e) for e in entries]

# -- result cap -------------------------------------------------------------------------------

DEFAULT_LIMIT = 100_000


def cap_text(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """
    Return C{text} unchanged when its UTF-8 size is at most C{limit} bytes; otherwise cut it at the
    last line break (or space) before the limit and append an explicit note, the whole staying
    within C{limit} bytes.
    """
    encoded = text.encode("utf-8", errors="surrogatepass")
    total = len(encoded)
    if total <= limit:
        return text
    note_template = (
        "\n[truncated: showing {shown} of {total} bytes; "
        "narrow the request (limit, filters, cursors) to see the rest]"
    )
    budget = max(0, limit - len(note_template.format(shown=total, total=total)))
    # Decode the prefix dropping a partial multi-byte character at the end.
    head = encoded[:budget].decode("utf-8", errors="ignore")  # drops a cut character
    window = max(0, len(head) - 4096)
    cut = head.rfind("\n", window)
    if cut <= 0:
        cut = head.rfind(" ", window)
    if cut > 0:
        head = head[:cut]
    shown = len(head.encode("utf-8", errors="surrogatepass"))
    return head + note_template.format(shown=shown, total=total)


_MARKER_RE = re.compile(r"\[REDACTED:([a-z0-9_]+)\]")


def secret_kinds(text: str) -> list[str]:
    """The kinds of secret C{redact_text} would remove from C{text} (one per occurrence)."""
    if not text:
        return []
    before = _MARKER_RE.findall(text)
    after = _MARKER_RE.findall(redact_text(text))
    for kind in before:
        if kind in after:
            after.remove(kind)
    return after

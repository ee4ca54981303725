"""
Noise rules: patterns that hide uninteresting telemetry (favicon 404s, HMR chatter, extension
messages, ...) from an agent's reads.

A rule matches one field of an entry (C{message}, C{url}, C{source} or C{any}), optionally only
at one C{level}, by RE2 regular expression or plain substring (case-insensitive). Rules come in
two scopes: each client has its own L{NoiseRules} (C{scope="client"}) and the daemon has one
global set (C{scope="global"}) that every client's set consults after its own. Built-in rules
apply to every client unless that client removes them (which disables them for that client only).

User patterns are hostile input: they are compiled with RE2 (linear time, bounded memory, no
look-around or back-references), limited in length, and the number of rules per set is capped.
An invalid pattern raises L{InvalidParam}.

L{normalize_message} (numbers, ids, URLs, quoted strings → placeholders) is shared with
L{gasoline.analysis} for fingerprints; L{auto_detect} proposes rules for messages that repeat often.
"""

from __future__ import annotations

import builtins

import re
from collections import Counter
from typing import Any, Iterable

import attrs
import re2

from gasoline.core.errors import InvalidParam
from gasoline.core.redaction.redactor import redact_value

MAX_PATTERN_LENGTH = 512
MAX_RULES = 100
MAX_REASON_LENGTH = 300
MAX_ID_LENGTH = 80
FIELDS = ("message", "url", "source", "any")
KINDS = ("regex", "substring")
SCOPES = ("client", "global")
LEVELS = ("error", "warn", "info", "debug", "log")
#: Longest field text a rule looks at (a megabyte message is not scanned whole for noise).
MAX_MATCH_TEXT = 16_384


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = False
    options.max_mem = 1 << 20
    return options


_OPTIONS = _re2_options()


def compile_pattern(pattern: str) -> Any:
    """Compile a user-supplied RE2 pattern or raise L{InvalidParam}."""
    if not isinstance(pattern, str) or not pattern:
        raise InvalidParam("pattern must be a non-empty string", param="pattern")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise InvalidParam(
            f"pattern is longer than {MAX_PATTERN_LENGTH} characters", param="pattern"
        )
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        detail = e.args[0] if e.args else "invalid"
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise InvalidParam(
            f"invalid pattern: {detail}",
            param="pattern",
            retry="Use RE2 syntax (no look-around, no back-references) or kind:'substring'.",
        ) from None


@attrs.frozen
class NoiseRule:
    id: str
    pattern: str
    field: str = "any"
    kind: str = "regex"
    level: str | None = None
    reason: str = ""
    scope: str = "client"
    built_in: bool = False
    _compiled: Any = attrs.field(default=None, eq=False, repr=False)

    @classmethod
    def create(
        cls,
        id: str,
        pattern: str,
        field: str = "any",
        kind: str = "regex",
        level: str | None = None,
        reason: str = "",
        scope: str = "client",
        built_in: bool = False,
    ) -> "NoiseRule":
        """Validate every part and compile the pattern; raise L{InvalidParam} on bad input."""
        if not isinstance(id, str) or not id or len(id) > MAX_ID_LENGTH:
            raise InvalidParam(f"id must be a string of 1..{MAX_ID_LENGTH} characters", param="id")
        if field not in FIELDS:
            raise InvalidParam(f"field must be one of {', '.join(FIELDS)}", param="field")
        if kind not in KINDS:
            raise InvalidParam(f"kind must be one of {', '.join(KINDS)}", param="kind")
        if level is not None and level not in LEVELS:
            raise InvalidParam(f"level must be one of {', '.join(LEVELS)}", param="level")
        if scope not in SCOPES:
            raise InvalidParam(f"scope must be one of {', '.join(SCOPES)}", param="scope")
        if not isinstance(reason, str) or len(reason) > MAX_REASON_LENGTH:
            raise InvalidParam(
                f"reason must be a string of at most {MAX_REASON_LENGTH} characters",
                param="reason",
            )
        if kind == "regex":
            compiled = compile_pattern(pattern)
        else:
            if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN_LENGTH:
                raise InvalidParam(
                    f"pattern must be a string of 1..{MAX_PATTERN_LENGTH} characters",
                    param="pattern",
                )
            compiled = pattern.lower()
        return cls(id, pattern, field, kind, level, reason, scope, built_in, compiled)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "NoiseRule":
        if not isinstance(data, dict):
            raise InvalidParam("a noise rule must be an object", param="rule")
        return cls.create(
            id=data.get("id"),  # type: ignore[arg-type]
            pattern=data.get("pattern"),  # type: ignore[arg-type]
            field=data.get("field", "any"),
            kind=data.get("kind", "regex"),
            level=data.get("level"),
            reason=data.get("reason", ""),
            scope=data.get("scope", "client"),
            built_in=bool(data.get("built_in", False)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pattern": self.pattern,
            "field": self.field,
            "kind": self.kind,
            "level": self.level,
            "reason": self.reason,
            "scope": self.scope,
            "built_in": self.built_in,
        }

    def published(self) -> dict[str, Any]:
        """L{to_json} plus the published Gasoline's shape of the same rule (C{category},
        C{classification}, C{match_spec}), as scripts written for it read a listed rule back.
        C{match_spec} is there when the rule is expressible in it (a regex on one field)."""
        out = {**self.to_json(), "category": "console", "classification": self.reason}
        key = {"message": "message_regex", "url": "url_regex", "source": "source_regex"}.get(
            self.field)
        if key is not None and self.kind == "regex":
            spec: dict[str, Any] = {key: self.pattern}
            if self.level:
                spec["level"] = self.level
            out["match_spec"] = spec
        return out

    def _test(self, text: str) -> bool:
        if not text:
            return False
        text = text[:MAX_MATCH_TEXT]
        if self.kind == "substring":
            return self._compiled in text.lower()
        return self._compiled.search(text) is not None

    def matches(self, entry: dict[str, Any]) -> bool:
        if self.level is not None and str(entry.get("level", "")).lower() != self.level:
            return False
        return any(self._test(text) for text in entry_fields(entry, self.field))


def entry_fields(entry: dict[str, Any], field: str) -> Iterable[str]:
    """The texts of C{entry} that a rule on C{field} looks at (any payload kind of §4)."""
    if field in ("message", "any"):
        for key in ("message", "statusText", "error", "data"):
            value = entry.get(key)
            if isinstance(value, str):
                yield value
        args = entry.get("args")
        if field == "any" and isinstance(args, list):
            for arg in args[:10]:
                if isinstance(arg, str):
                    yield arg
    if field in ("url", "any"):
        for key in ("url", "name", "page_url"):
            value = entry.get(key)
            if isinstance(value, str):
                yield value
    if field in ("source", "any"):
        for key in ("source", "filename", "stack"):
            value = entry.get(key)
            if isinstance(value, str):
                yield value


_BUILTIN_SPECS: list[dict[str, Any]] = [
    {
        "id": "builtin:favicon",
        "pattern": r"/favicon\.ico(?:[?#]|$)",
        "field": "url",
        "reason": "Browsers request /favicon.ico on their own; a 404 there is rarely the bug.",
    },
    {
        "id": "builtin:source-map",
        "pattern": r"\.map(?:[?#]|$)",
        "field": "url",
        "reason": "Source-map requests (often 404 in development) are tooling, not the app.",
    },
    {
        "id": "builtin:source-map-warning",
        "pattern": r"(?:devtools failed to load source ?map|source map error|sourcemap.*404)",
        "field": "message",
        "reason": "DevTools complaining about a missing source map.",
    },
    {
        "id": "builtin:hmr",
        "pattern": (
            r"(?:\[(?:hmr|wds|vite|webpack-dev-server|fast refresh)\]|hot module replacement"
            r"|\[webpack\]|webpack compiled|vite connected|vite\] connecting|server connection lost)"
        ),
        "field": "message",
        "reason": "Hot-reload / dev-server chatter (webpack, Vite, Fast Refresh).",
    },
    {
        "id": "builtin:hmr-endpoints",
        "pattern": (
            r"(?:/__webpack_hmr|/@vite/client|/sockjs-node|/_next/webpack-hmr"
            r"|hot-update\.(?:js|json)|livereload)"
        ),
        "field": "url",
        "reason": "Dev-server hot-reload endpoints.",
    },
    {
        "id": "builtin:react-devtools",
        "pattern": r"download the react devtools",
        "field": "message",
        "reason": "React's development-mode suggestion to install DevTools.",
    },
    {
        "id": "builtin:vue-devtools",
        "pattern": r"download the vue devtools|you are running vue in development mode",
        "field": "message",
        "reason": "Vue's development-mode banners.",
    },
    {
        "id": "builtin:extension",
        "pattern": r"(?:chrome|moz|safari-web)-extension://",
        "field": "any",
        "reason": "Messages and requests from browser extensions, not from the page.",
    },
    {
        "id": "builtin:violation",
        "pattern": r"^\[violation\]",
        "field": "message",
        "reason": "Chrome's [Violation] performance hints.",
    },
]

BUILTIN_RULES: tuple[NoiseRule, ...] = tuple(
    NoiseRule.create(scope="global", built_in=True, **spec) for spec in _BUILTIN_SPECS
)
_BUILTIN_BY_ID = {rule.id: rule for rule in BUILTIN_RULES}


def _builtin_prefilters() -> list[tuple[str, Any]]:
    """One combined pattern per field, to test all built-ins at once.

    Compiled with RE2: a case-insensitive alternation of a dozen patterns becomes one automaton,
    about 4x faster than Python's C{re} on a typical console message, and each field's texts are
    searched in one call (this runs on every entry an agent reads). The prefilter may over-match
    (a C{^} after a newline inside a message); a hit is confirmed rule by rule with the rule's own
    pattern, so the result is exactly the rules' semantics.
    """
    out = []
    for field in FIELDS:
        patterns = [r.pattern for r in BUILTIN_RULES if r.field == field]
        if patterns:
            # Multi-line: the prefilter searches a field's texts joined by newlines in one call.
            combined = "(?m)" + "|".join(f"(?:{p})" for p in patterns)
            out.append((field, re2.compile(combined, _OPTIONS)))
    return out


_BUILTIN_PREFILTERS = _builtin_prefilters()
#: An escape, a character class, or an anchor (L{_at_quotes}).
_PATTERN_PARTS = re.compile(r"\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|[\^$]", re.S)


def _at_quotes(pattern: str) -> str:
    """C{pattern} with each C{^} and C{$} (outside a class) also matching at a quote: searched
    over JSON bytes with no backslash, a text sits verbatim between two quotes."""
    quoted = {"^": '(?:^|")', "$": '(?:$|")'}
    return _PATTERN_PARTS.sub(lambda m: quoted.get(m.group(0), m.group(0)), pattern)


#: Every built-in in one automaton, searched once over every text any of them reads (the C{any}
#: field's texts, which hold each field's): most entries match none. A hit goes on as before.
_BUILTIN_ANY = re2.compile("(?m)" + "|".join(f"(?:{r.pattern})" for r in BUILTIN_RULES), _OPTIONS)
#: The same over an entry's JSON bytes with no backslash: its texts are in them verbatim, between
#: quotes (L{_at_quotes}); keys, numbers and other texts can only make a false alarm.
_BUILTIN_ANY_JSON = re2.compile(
    "(?m)" + "|".join(f"(?:{_at_quotes(r.pattern)})" for r in BUILTIN_RULES), _OPTIONS)


def _match_builtins(entry: dict[str, Any], disabled: set[str],
                    data: bytes | None = None) -> NoiseRule | None:
    """The first built-in not in C{disabled} that hides C{entry}; C{data}, when given, is
    C{entry}'s JSON (compact or not), which one search can clear it on."""
    if data is not None and b"\\" not in data:
        if _BUILTIN_ANY_JSON.search(data) is None:
            return None
    else:
        texts = "\n".join(t[:MAX_MATCH_TEXT] for t in entry_fields(entry, "any"))
        if not texts or _BUILTIN_ANY.search(texts) is None:
            return None
    for field, combined in _BUILTIN_PREFILTERS:
        found = "\n".join(t[:MAX_MATCH_TEXT] for t in entry_fields(entry, field))
        if found and combined.search(found):
            for rule in BUILTIN_RULES:
                if rule.field == field and rule.id not in disabled and rule.matches(entry):
                    return rule
    return None


@attrs.define
class NoiseRules:
    """
    One rule set: a client's (C{scope="client"}, with the built-ins and an optional link to the
    global set) or the daemon's global one (C{scope="global"}, user rules only).
    """

    scope: str = "client"
    rules: list[NoiseRule] = attrs.field(factory=list)
    disabled_builtins: set[str] = attrs.field(factory=set)
    #: The global set, consulted after this set's own rules (client sets only; not serialised).
    parent: "NoiseRules | None" = attrs.field(default=None, eq=False, repr=False)
    _counter: int = 0

    def active_builtins(self) -> list[NoiseRule]:
        if self.scope != "client":
            return []
        return [r for r in BUILTIN_RULES if r.id not in self.disabled_builtins]

    def matches(self, entry: dict[str, Any], data: bytes | None = None) -> NoiseRule | None:
        """The first rule (own, then built-in, then global) that hides C{entry}, or None;
        C{data}, when given, is C{entry}'s JSON (L{_match_builtins} searches it once)."""
        if not isinstance(entry, dict):
            return None
        for rule in self.rules:
            if rule.matches(entry):
                return rule
        if self.scope == "client":
            builtin = _match_builtins(entry, self.disabled_builtins, data)
            if builtin is not None:
                return builtin
        if self.parent is not None:
            return self.parent.matches(entry)
        return None

    def filter(self, entries: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """The entries no rule hides, and how many were hidden."""
        kept = []
        hidden = 0
        for entry in entries:
            if self.matches(entry) is None:
                kept.append(entry)
            else:
                hidden += 1
        return kept, hidden

    def add(
        self,
        pattern: str,
        field: str = "any",
        kind: str = "regex",
        level: str | None = None,
        reason: str = "",
        id: str | None = None,
    ) -> NoiseRule:
        if len(self.rules) >= MAX_RULES:
            raise InvalidParam(
                f"at most {MAX_RULES} noise rules per scope",
                retry="Remove rules you no longer need (noise_action:'remove').",
            )
        if id is None:
            self._counter += 1
            id = f"{self.scope}-{self._counter}"
            while self._find(id) is not None:
                self._counter += 1
                id = f"{self.scope}-{self._counter}"
        elif self._find(id) is not None or id in _BUILTIN_BY_ID:
            raise InvalidParam(f"a noise rule with id {id!r} already exists", param="id")
        rule = NoiseRule.create(
            id=id, pattern=pattern, field=field, kind=kind, level=level, reason=reason,
            scope=self.scope,
        )
        self.rules.append(rule)
        return rule

    def _find(self, rule_id: str) -> NoiseRule | None:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        return None

    def remove(self, rule_id: str) -> NoiseRule:
        """Remove a rule of this set; for a built-in id, disable it for this client only."""
        rule = self._find(rule_id)
        if rule is not None:
            self.rules.remove(rule)
            return rule
        builtin = _BUILTIN_BY_ID.get(rule_id)
        if builtin is not None and self.scope == "client":
            self.disabled_builtins.add(rule_id)
            return builtin
        raise InvalidParam(f"no noise rule {rule_id!r} in {self.scope} scope", param="rule_id")

    def list(self) -> "builtins.list[dict[str, Any]]":
        out = [r.to_json() for r in self.rules]
        out.extend(r.to_json() for r in self.active_builtins())
        return out

    def published_list(self) -> "builtins.list[dict[str, Any]]":
        """L{list} with each rule in the published shape too (L{NoiseRule.published})."""
        return [r.published() for r in (*self.rules, *self.active_builtins())]

    def reset(self) -> int:
        """Drop this set's own rules and re-enable every built-in; return how many were dropped."""
        dropped = len(self.rules)
        self.rules.clear()
        self.disabled_builtins.clear()
        return dropped

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "rules": [r.to_json() for r in self.rules],
            "disabled_builtins": sorted(self.disabled_builtins),
            "counter": self._counter,
        }

    @classmethod
    def from_json(cls, data: Any, parent: "NoiseRules | None" = None) -> "NoiseRules":
        """Rebuild a persisted set; rules that no longer validate are dropped, not fatal."""
        if not isinstance(data, dict):
            data = {}
        scope = data.get("scope") if data.get("scope") in SCOPES else "client"
        rules: list[NoiseRule] = []
        for item in data.get("rules", []) if isinstance(data.get("rules"), list) else []:
            try:
                rule = NoiseRule.from_json(item)
            except InvalidParam:
                continue
            if not rule.built_in and len(rules) < MAX_RULES:
                rules.append(attrs.evolve(rule, scope=scope))
        disabled = {d for d in data.get("disabled_builtins", []) or [] if d in _BUILTIN_BY_ID}
        counter = data.get("counter", 0)
        return cls(
            scope=scope,
            rules=rules,
            disabled_builtins=disabled,
            parent=parent,
            counter=counter if isinstance(counter, int) else 0,
        )


# -- fingerprints and auto-detection ----------------------------------------------------------

_NORMALISERS = [
    (re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>)]*[^\s\"'<>).,:;!?]", re.I), "<url>"),
    (re.compile(r"\"(?:[^\"\\\n]|\\.){0,200}\"|'(?:[^'\\\n]|\\.){0,200}'|`[^`\n]{0,200}`"), "<str>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I), "<id>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<num>"),
    (re.compile(r"(?<![A-Za-z_])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:ms|s|px|kb|mb|%)?\b", re.I), "<num>"),
    (re.compile(r"\s+"), " "),
]
MAX_FINGERPRINT_INPUT = 2000
#: How much of a message is redacted before its first L{MAX_FINGERPRINT_INPUT} characters are
#: templated: a secret that starts before the cut is redacted whole (secrets are shorter).
MAX_REDACT_INPUT = MAX_FINGERPRINT_INPUT + 8192


def normalize_message(message: Any) -> str:
    """A message with its variable parts replaced: URLs, quoted strings, ids, numbers.

    The message is redacted first, on its decoded values (C{gasoline.core.redaction.redactor.redact_value}), and only then cut and
    templated: a template never shows more of a secret than the redacted message does (digits
    turned into C{<num>} would otherwise break a key's shape and let the rest through)."""
    return _template(redacted_message(message))


def redacted_message(message: Any) -> str:
    """The part of C{message} templates are made from, redacted (see L{normalize_message})."""
    text = message if isinstance(message, str) else str(message)
    return redact_value(text[:MAX_REDACT_INPUT])


def _template(redacted: str) -> str:
    text = redacted[:MAX_FINGERPRINT_INPUT]
    for pattern, placeholder in _NORMALISERS:
        text = pattern.sub(placeholder, text)
    return text.strip()


#: Placeholders, and redaction markers (the rule must match the message as stored, secret and all).
_PLACEHOLDER = re.compile(r"<(?:url|str|id|num)>|\[REDACTED:[a-z0-9_]+\]")


def _template_pattern(template: str) -> str:
    """An RE2 pattern for messages of this template (placeholders become C{.+?})."""
    template = template[:200]
    parts = _PLACEHOLDER.split(template)
    escaped = [re.escape(p).replace("\\ ", "\\s+") for p in parts]
    return "^" + ".+?".join(escaped)


@attrs.frozen
class Proposal:
    rule: NoiseRule
    count: int
    sample: str

    def to_json(self) -> dict[str, Any]:
        return {**self.rule.to_json(), "count": self.count, "sample": self.sample[:300]}


def auto_detect(
    entries: Iterable[dict[str, Any]],
    rules: NoiseRules | None = None,
    threshold: int = 10,
    max_proposals: int = 20,
    apply: bool = False,
) -> list[Proposal]:
    """
    Propose rules for messages that repeat at least C{threshold} times (by normalised message)
    among entries no current rule hides. With C{apply=True} (and C{rules} given) the proposals are
    added to C{rules}; otherwise nothing changes.
    """
    counts: Counter[str] = Counter()
    samples: dict[str, str] = {}
    levels: dict[str, set[str]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        message = entry.get("message")
        if not isinstance(message, str) or not message.strip():
            continue
        if rules is not None and rules.matches(entry) is not None:
            continue
        redacted = redacted_message(message)
        key = _template(redacted)
        counts[key] += 1
        samples.setdefault(key, redacted)
        levels.setdefault(key, set()).add(str(entry.get("level", "")))
    proposals: list[Proposal] = []
    for template, count in counts.most_common():
        if count < threshold or len(proposals) >= max_proposals:
            break
        lvls = levels[template]
        level = next(iter(lvls)) if len(lvls) == 1 and next(iter(lvls)) in LEVELS else None
        pattern = _template_pattern(template)
        try:
            rule = NoiseRule.create(
                id=f"auto-{len(proposals) + 1}",
                pattern=pattern,
                field="message",
                level=level,
                reason=f"auto-detected: repeated {count} times",
                scope=rules.scope if rules is not None else "client",
            )
        except InvalidParam:
            continue
        proposals.append(Proposal(rule, count, samples[template]))
    if apply and rules is not None:
        applied = []
        for p in proposals:
            if len(rules.rules) >= MAX_RULES:
                break
            added = rules.add(
                pattern=p.rule.pattern, field=p.rule.field, level=p.rule.level,
                reason=p.rule.reason,
            )
            applied.append(Proposal(added, p.count, p.sample))
        return applied
    return proposals

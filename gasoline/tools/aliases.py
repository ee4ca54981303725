"""
The published Gasoline's parameter names, accepted as aliases: ONE table (L{ALIASES}).

Users of the published Gasoline 0.7.x have prompts, skills and scripts that name its tool
parameters. This project's schemas keep one name per thing (L{gasoline.tools.schemas}); the names
below are accepted as well, translated to ours before a mode runs, and the answer says which name
is preferred (an C{aliases} list in the result's JSON and a note in its summary line; on an error,
the same list in the error's JSON). C{docs/migrating.md} renders this table for people.

Each entry is an L{Alias}: the tool whose calls it looks at, how the published call says it, how
this project says it, and a pure C{rewrite(args)} that returns the translated argument objects
(usually one; a published C{rules:[...]} list becomes one C{noise_rule add} per rule), or C{None}
when the entry does not apply to these arguments. Our own names always win: an alias applies only
when the call does not already use the preferred name. L{translate} applies the entries in table
order, each at most once.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
import orjson
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.python.failure import Failure

from gasoline.core.errors import GasolineError, InvalidParam
from gasoline.tools.context import text_result

Args = dict[str, Any]
#: C{rewrite(args)} -> C{(tool, [args, ...])}, or None when the entry does not apply.
Rewrite = Callable[[Args], "tuple[str, list[Args]] | None"]


@attrs.frozen
class Alias:
    """One published name and its translation."""

    #: The tool whose calls this entry looks at.
    tool: str
    #: How the published Gasoline says it (shown to the caller and in docs/migrating.md).
    published: str
    #: How this project says it (the preferred name).
    preferred: str
    rewrite: Rewrite = attrs.field(repr=False)
    #: What differs, if anything (docs/migrating.md).
    note: str = ""

    def used(self) -> dict[str, str]:
        return {"published": self.published, "preferred": self.preferred}


@attrs.frozen
class Translation:
    """What L{translate} made of a call: the tool to run, one or more argument objects, and the
    aliases that were applied (empty: the call used this project's names only)."""

    tool: str
    calls: list[Args]
    used: list[Alias]


def _move_what(tool: str, name: str) -> Rewrite:
    def rewrite(args: Args) -> tuple[str, list[Args]] | None:
        if "what" in args or name not in args:
            return None
        out = {k: v for k, v in args.items() if k != name}
        out["what"] = args[name]
        return tool, [out]

    return rewrite


def _mode(tool: str, published: str, mode: str, **fixed: Any) -> Rewrite:
    """C{{what: published}} -> C{{what: mode, **fixed}} (on C{tool})."""

    def rewrite(args: Args) -> tuple[str, list[Args]] | None:
        if args.get("what") != published:
            return None
        out = {**args, "what": mode}
        for k, v in fixed.items():
            out.setdefault(k, v)
        return tool, [out]

    return rewrite


def _store_action(action: str) -> Rewrite:
    """Published C{configure {what:"store", store_action, key, data}}."""

    def rewrite(args: Args) -> tuple[str, list[Args]] | None:
        if args.get("what") != "store" or args.get("store_action") != action:
            return None
        out = {k: v for k, v in args.items() if k not in ("store_action", "data")}
        if action == "save":
            if "value" not in out and "data" in args:
                out["value"] = args["data"]
        elif action == "load":
            out["what"] = "load"
            if out.get("key") is None:
                raise InvalidParam("store_action 'load' needs 'key' (store_action 'list' lists "
                                   "the keys)", param="key")
        elif action == "list":
            out["what"] = "load"
            out.pop("key", None)
        elif action == "delete":
            out["value"] = None
        return "configure", [out]

    return rewrite


def _store_unknown(args: Args) -> tuple[str, list[Args]] | None:
    action = args.get("store_action")
    if args.get("what") != "store" or action is None or action in STORE_ACTIONS:
        return None
    raise InvalidParam(f"store_action {str(action)[:40]!r} has no equivalent here; use one of: "
                       f"{', '.join(STORE_ACTIONS)}", param="store_action",
                       valid=list(STORE_ACTIONS))


def _data_to_value(args: Args) -> tuple[str, list[Args]] | None:
    if args.get("what") != "store" or "data" not in args or "value" in args:
        return None
    out = {k: v for k, v in args.items() if k != "data"}
    out["value"] = args["data"]
    return "configure", [out]


#: Published C{match_spec} keys (and the flattened top-level helpers) -> our C{field}.
_SPEC_FIELDS = {"message_regex": "message", "url_regex": "url", "source_regex": "source"}
#: Published match_spec keys this project's noise rules cannot express.
_SPEC_UNSUPPORTED = ("method", "status_min", "status_max")


def _noise_from_spec(spec: Any, where: str) -> Args:
    """One published rule (C{{category, classification, match_spec:{...}}} or the flattened
    helpers) -> our C{noise_rule add} arguments."""
    if not isinstance(spec, dict):
        raise InvalidParam(f"{where} must be an object", param="rules")
    match = spec.get("match_spec", spec)
    if not isinstance(match, dict):
        raise InvalidParam(f"{where}.match_spec must be an object", param="rules")
    found = [(k, match[k]) for k in _SPEC_FIELDS if match.get(k) is not None]
    if len(found) != 1:
        raise InvalidParam(
            f"{where}: give exactly one of {', '.join(_SPEC_FIELDS)} per rule (this project's "
            "noise rules match one field each; add one rule per field)", param="rules")
    unsupported = [k for k in _SPEC_UNSUPPORTED if match.get(k) is not None]
    if unsupported:
        raise InvalidParam(f"{where}: {', '.join(unsupported)} cannot be matched by noise rules "
                           "here (they match console entries by message, url or source)",
                           param="rules")
    key, pattern = found[0]
    out: Args = {"pattern": pattern, "field": _SPEC_FIELDS[key], "kind": "regex"}
    if match.get("level") is not None:
        out["level"] = match["level"]
    reason = spec.get("classification") or spec.get("reason")
    if reason is not None:
        out["reason"] = reason
    return out


_PUBLISHED_NOISE_KEYS = ("rules", "classification", "category", "message_regex", "url_regex",
                         "source_regex", "match_spec")


def _noise_rules(args: Args) -> tuple[str, list[Args]] | None:
    if args.get("what") != "noise_rule" or "rules" not in args or "pattern" in args:
        return None
    rules = args["rules"]
    if not isinstance(rules, list) or not rules:
        raise InvalidParam("rules must be a non-empty list of {category, classification, "
                           "match_spec}", param="rules")
    if len(rules) > MAX_RULES_PER_CALL:
        raise InvalidParam(f"at most {MAX_RULES_PER_CALL} rules per call", param="rules")
    base = {k: v for k, v in args.items() if k not in _PUBLISHED_NOISE_KEYS}
    base["noise_action"] = "add"
    return "configure", [{**base, **_noise_from_spec(r, f"rules[{i}]")}
                         for i, r in enumerate(rules)]


def _noise_flat(args: Args) -> tuple[str, list[Args]] | None:
    if args.get("what") != "noise_rule" or "pattern" in args or "rules" in args:
        return None
    if not any(args.get(k) is not None for k in _SPEC_FIELDS):
        return None
    base = {k: v for k, v in args.items() if k not in _PUBLISHED_NOISE_KEYS}
    base.setdefault("noise_action", "add")
    return "configure", [{**base, **_noise_from_spec(args, "the rule")}]


#: The published streaming event categories -> this project's event types (None: no equivalent).
PUBLISHED_EVENTS: dict[str, tuple[str, ...] | None] = {
    "errors": ("error",),
    "network_errors": ("network_failure",),
    "performance": ("performance_degradation",),
    "regression": ("performance_degradation",),
    "security": ("security_violation",),
    "anomaly": ("error", "network_failure"),
    "ci": None,
    "user_frustration": None,
}


def _streaming_events(args: Args) -> tuple[str, list[Args]] | None:
    """Published C{configure {what:"streaming", events:[...]}} names -> our event types."""
    if args.get("what") != "streaming":
        return None
    key = "subscribe" if "subscribe" in args else "events"
    names = args.get(key)
    listed = [names] if isinstance(names, str) else names
    if not isinstance(listed, list) or not any(
            isinstance(n, str) and n in PUBLISHED_EVENTS for n in listed):
        return None
    out: list[Any] = []
    for name in listed:
        mapped = PUBLISHED_EVENTS.get(name, (name,)) if isinstance(name, str) else (name,)
        if mapped is None:
            raise InvalidParam(f"the published event category {name!r} has no equivalent here "
                               "(this daemon streams browser events, not CI or frustration "
                               "signals)", param=key)
        out.extend(m for m in mapped if m not in out)
    return "configure", [{**args, key: out}]


STORE_ACTIONS = ("save", "load", "list", "delete")
#: The most rules one published C{rules:[...]} call may add.
MAX_RULES_PER_CALL = 100

#: THE alias table. Order matters: the C{what} aliases come first so the later entries see C{what}.
ALIASES: tuple[Alias, ...] = (
    Alias("configure", "action", "what", _move_what("configure", "action"),
          "The published server's deprecated alias of what."),
    Alias("interact", "action", "what", _move_what("interact", "action"),
          "The published server's deprecated alias of what."),
    Alias("generate", "format", "what", _move_what("generate", "format"),
          "The published server's deprecated alias of what."),
    Alias("configure", 'store_action:"save" + data', 'what:"store" + value',
          _store_action("save"), "value keeps any JSON value, as data did."),
    Alias("configure", 'store_action:"load"', 'what:"load" + key', _store_action("load")),
    Alias("configure", 'store_action:"list"', 'what:"load" without key', _store_action("list"),
          "Also lists your namespaces."),
    Alias("configure", 'store_action:"delete"', 'what:"store" + value:null',
          _store_action("delete")),
    Alias("configure", "store_action (other values)", "(none)", _store_unknown,
          "store_action:\"stats\" has no equivalent: an invalid_param error names the valid ones."),
    Alias("configure", "data (store)", "value", _data_to_value),
    Alias("configure", "rules:[{category, classification, match_spec:{message_regex / url_regex "
          "/ source_regex, level}}]", 'noise_action:"add" + pattern, field, kind:"regex", level, '
          "reason (one call per rule)", _noise_rules,
          "Each rule matches one field (message, url or source); match_spec method / status_min "
          "/ status_max and category are not expressible and are refused or ignored (category)."),
    Alias("configure", "message_regex / url_regex / source_regex, classification (flattened "
          "noise_rule add)", "pattern + field, reason", _noise_flat),
    Alias("configure", "events / subscribe: errors, network_errors, performance, regression, "
          "security, anomaly (streaming)", "subscribe: error, network_failure, "
          "performance_degradation, security_violation", _streaming_events,
          "anomaly means error + network_failure; ci and user_frustration have no equivalent "
          "(refused)."),
    Alias("configure", 'what:"get_sequence"', 'what:"save_sequence" + sequence_action:"get"',
          _mode("configure", "get_sequence", "save_sequence", sequence_action="get")),
    Alias("configure", 'what:"list_sequences"', 'what:"save_sequence" + sequence_action:"list"',
          _mode("configure", "list_sequences", "save_sequence", sequence_action="list")),
    Alias("configure", 'what:"delete_sequence"',
          'what:"save_sequence" + sequence_action:"delete"',
          _mode("configure", "delete_sequence", "save_sequence", sequence_action="delete")),
    Alias("generate", 'what:"annotation_report"', 'analyze {what:"annotations"}',
          _mode("analyze", "annotation_report", "annotations"),
          "The annotations drawn in the tab, as data (no markdown report)."),
    Alias("generate", 'what:"annotation_issues"', 'analyze {what:"annotations"}',
          _mode("analyze", "annotation_issues", "annotations"),
          "The annotations drawn in the tab, as data (one per issue)."),
)


def translate(tool: str, args: Args, table: tuple[Alias, ...] = ALIASES) -> Translation:
    """Apply the table's entries for C{tool} to C{args}, in order, each at most once.

    @raise InvalidParam: a published form this project cannot express (the message says why).
    """
    used: list[Alias] = []
    calls = [args]
    current = tool
    for alias in table:
        if alias.tool != tool:
            continue
        out: list[Args] = []
        applied = False
        for call in calls:
            try:
                rewritten = alias.rewrite(call)
            except GasolineError as e:  # a published form with no equivalent: say which
                e.add_details(aliases=[a.used() for a in (*used, alias)])
                raise
            if rewritten is None:
                out.append(call)
                continue
            current, new_calls = rewritten
            out.extend(new_calls)
            applied = True
        if applied:
            used.append(alias)
            calls = out
    return Translation(current, calls, used)


def notice(used: list[Alias]) -> str:
    """The summary-line note naming the preferred names."""
    return "; ".join(f"{a.published} -> {a.preferred}" for a in used)


def _annotate(result: Any, used: list[dict[str, str]], note: str) -> Any:
    """Add C{aliases} to a result's JSON and the preferred names to its summary line."""
    if not isinstance(result, dict) or not isinstance(result.get("content"), list):
        return result
    blocks = result["content"]
    if not blocks or not isinstance(blocks[0], dict) or blocks[0].get("type") != "text":
        return result
    summary, _, rest = str(blocks[0].get("text", "")).partition("\n")
    try:
        body = orjson.loads(rest) if rest else {}
    except orjson.JSONDecodeError:
        body = None
    summary += f" [published names accepted; preferred here: {note}]"
    if isinstance(body, dict):
        body["aliases"] = used
        text = summary + "\n" + orjson.dumps(body, default=str).decode()
    else:
        text = summary + ("\n" + rest if rest else "")
    return {**result, "content": [{**blocks[0], "text": text}, *blocks[1:]]}


def _body_of(result: Any) -> Any:
    try:
        text = result["content"][0]["text"]
        summary, _, rest = text.partition("\n")
        return {"summary": summary, **(orjson.loads(rest) if rest else {})}
    except (KeyError, IndexError, TypeError, orjson.JSONDecodeError):
        return result


def with_alias_notice(run: Callable[[Args], Any], translation: Translation) -> Deferred:
    """Run C{translation}'s calls one after the other with C{run(args)}; fire with the result
    (or, for several calls, one result listing each), annotated with the aliases used. An error
    carries the same C{aliases} list (and, after several calls, how many were done)."""
    used = [a.used() for a in translation.used]
    note = notice(translation.used)
    calls = translation.calls
    results: list[Any] = []

    def failed(failure: Failure) -> Failure:
        error = failure.value
        if isinstance(error, GasolineError):
            error.add_details(aliases=used)
            if len(calls) > 1:
                error.add_details(done=len(results))
        return failure

    def step(result: Any = None) -> Any:
        if result is not None:
            results.append(result)
        if len(results) < len(calls):
            return maybeDeferred(run, calls[len(results)]).addCallback(step)
        if len(calls) == 1:
            return results[0]
        bodies = [_body_of(r) for r in results]
        return text_result(f"{len(calls)} calls done",
                           {"results": bodies, "count": len(calls)})

    d = maybeDeferred(step)
    d.addCallback(_annotate, used, note)
    d.addErrback(failed)
    return d

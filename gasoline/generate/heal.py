"""
Heal a broken selector (C{generate {what:"test_heal"}}): ranked replacements, and the test code
with the selector replaced.

Where candidates come from:

  1. B{Recorded actions.} The extension records every element a user (or agent) acted on with
     several selectors at once (C{selectors}: C{testId}, C{role: {role, name}}, C{ariaLabel},
     C{placeholder}, C{text}, C{id}, C{name}, C{css}). An element I{matches} the broken selector
     when one of its recorded selectors equals the broken selector's value (match 1.0), or, failing
     that, when their words overlap (the best Jaccard similarity between the broken selector's
     lower-cased words and those of one recorded selector, at least L{MIN_SIMILARITY}; the match is
     the similarity times 0.8). Each matched element proposes one
     candidate per strategy it recorded, except the broken selector itself.
  2. B{The live page} (when the extension is connected): C{list_interactive} elements whose
     accessible name / selector words overlap the broken selector's propose their role+name and
     their test-id or CSS selector; recorded candidates seen in that list are marked
     C{live: "listed"}.
  3. B{Live counts}: the best few candidates are checked with the C{dom} command: one match is
     verified, zero matches demote the candidate, several matches mark it ambiguous.

Confidence = strategy weight (L{WEIGHTS}: test id 0.95 > role+name 0.85 > aria-label 0.8 >
placeholder 0.7 > text 0.65 > id 0.6 > name 0.55 > CSS path 0.4) x match, plus 0.02 per extra
time the element was recorded (at most +0.1), adjusted by the live checks (listed +0.05,
one match +0.05, no match x0.3, several matches -0.2), clipped to [0, 0.99].
"""

from __future__ import annotations

import json
import re
from typing import Any

from gasoline.analysis._util import dicts
from gasoline.common import unquote
from gasoline.generate.scripts import js

WEIGHTS = {"testId": 0.95, "role": 0.85, "ariaLabel": 0.8, "placeholder": 0.7, "text": 0.65,
           "id": 0.6, "name": 0.55, "css": 0.4}
ORDER = {s: i for i, s in enumerate(WEIGHTS)}
MIN_SIMILARITY = 0.34
MAX_CANDIDATES = 10
MAX_ACTIONS = 2000
_SIMPLE_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


# -- the broken selector -------------------------------------------------------------------------


_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("testId", re.compile(r"""^\[\s*data-(?:testid|test-id|test|cy)\s*=\s*(.+?)\s*\]$""")),
    ("testId", re.compile(r"""^(?:data-testid|internal:testid)\s*=\s*(.+)$""")),
    ("testId", re.compile(r"""^(?:page\.)?getByTestId\(\s*(.+?)\s*\)$""")),
    ("ariaLabel", re.compile(r"""^\[\s*aria-label\s*=\s*(.+?)\s*\]$""")),
    ("ariaLabel", re.compile(r"""^(?:aria-label|label)\s*=\s*(.+)$""")),
    ("ariaLabel", re.compile(r"""^(?:page\.)?getByLabel\(\s*(.+?)\s*\)$""")),
    ("placeholder", re.compile(r"""^\[\s*placeholder\s*=\s*(.+?)\s*\]$""")),
    ("placeholder", re.compile(r"""^placeholder\s*=\s*(.+)$""")),
    ("placeholder", re.compile(r"""^(?:page\.)?getByPlaceholder\(\s*(.+?)\s*\)$""")),
    ("text", re.compile(r"""^text\s*=\s*(.+)$""")),
    ("text", re.compile(r"""^(?:page\.)?getByText\(\s*(['"`].*?['"`])\s*(?:,.*)?\)$""")),
    ("name", re.compile(r"""^\[\s*name\s*=\s*(.+?)\s*\]$""")),
)
_ROLE = re.compile(r"""^role\s*=\s*([a-zA-Z-]+)\s*(?:\[\s*name\s*=\s*(.+?)\s*\])?$""")
_GET_BY_ROLE = re.compile(r"""^(?:page\.)?getByRole\(\s*(['"`])([a-zA-Z-]+)\1\s*"""
                          r"""(?:,\s*\{\s*name\s*:\s*(['"`])(.*?)\3.*\})?\s*\)$""")


def parse_selector(selector: str) -> dict[str, Any]:
    """What a selector names: C{{kind, value}} (C{role} adds C{role}; kinds as L{WEIGHTS})."""
    s = selector.strip()
    for kind, pattern in _PATTERNS:
        m = pattern.match(s)
        if m:
            return {"kind": kind, "value": unquote(m.group(1))}
    m = _ROLE.match(s)
    if m:
        return {"kind": "role", "role": m.group(1), "value": unquote(m.group(2) or "")}
    m = _GET_BY_ROLE.match(s)
    if m:
        return {"kind": "role", "role": m.group(2), "value": m.group(4) or ""}
    if s.startswith("#") and _SIMPLE_ID.match(s[1:]):
        return {"kind": "id", "value": s[1:]}
    return {"kind": "css", "value": s}


def words(value: str) -> set[str]:
    """Lower-cased words of C{value}, splitting camelCase, digits and punctuation."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", value)
    return {w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if len(w) >= 2}


def _similarity(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


# -- candidate selectors -------------------------------------------------------------------------


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def forms(strategy: str, value: str, role: str | None = None) -> dict[str, str]:
    """One candidate in three notations: the extension's (C{selector}, for interact), a
    Playwright selector string (C{playwright}) and a Playwright locator (C{locator})."""
    if strategy == "testId":
        return {"selector": f"[data-testid={_q(value)}]", "playwright": f"[data-testid={_q(value)}]",
                "locator": f"page.getByTestId({js(value)})"}
    if strategy == "role":
        named = f"[name={_q(value)}]" if value else ""
        loc = f"page.getByRole({js(role)}, {{ name: {js(value)} }})" if value else \
            f"page.getByRole({js(role)})"
        return {"selector": f"role={role}{named}", "playwright": f"role={role}{named}",
                "locator": loc}
    if strategy == "ariaLabel":
        return {"selector": f"aria-label={value}", "playwright": f"[aria-label={_q(value)}]",
                "locator": f"page.getByLabel({js(value)})"}
    if strategy == "placeholder":
        return {"selector": f"placeholder={value}", "playwright": f"[placeholder={_q(value)}]",
                "locator": f"page.getByPlaceholder({js(value)})"}
    if strategy == "text":
        return {"selector": f"text={value}", "playwright": f"text={_q(value)}",
                "locator": f"page.getByText({js(value)}, {{ exact: true }})"}
    if strategy == "id":
        css = f"#{value}" if _SIMPLE_ID.match(value) else f"[id={_q(value)}]"
        return {"selector": css, "playwright": css, "locator": f"page.locator({js(css)})"}
    if strategy == "name":
        css = f"[name={_q(value)}]"
        return {"selector": css, "playwright": css, "locator": f"page.locator({js(css)})"}
    return {"selector": value, "playwright": value, "locator": f"page.locator({js(value)})"}


def element_selectors(selectors: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """C{(strategy, value, role)} for every usable selector an element recorded."""
    out: list[tuple[str, str, str | None]] = []
    test_id = selectors.get("testId") or selectors.get("test_id")
    if isinstance(test_id, str) and test_id:
        out.append(("testId", test_id[:300], None))
    role = selectors.get("role")
    if isinstance(role, dict) and isinstance(role.get("role"), str) and role["role"] \
            and isinstance(role.get("name"), str) and role["name"].strip():
        out.append(("role", role["name"].strip()[:300], role["role"][:50]))
    for key, strategy in (("ariaLabel", "ariaLabel"), ("placeholder", "placeholder"),
                          ("text", "text"), ("id", "id"), ("name", "name"), ("css", "css")):
        value = selectors.get(key)
        if isinstance(value, str) and value.strip():
            out.append((strategy, value.strip()[:500], None))
    return out


def _matches(target: dict[str, Any], broken: str, sels: list[tuple[str, str, str | None]]
             ) -> tuple[float, str]:
    """How well an element's recorded selectors match the broken selector: (match, why)."""
    value = target["value"]
    for strategy, v, role in sels:
        if v == broken or (v == value and value and (strategy == target["kind"] or
                                                      target["kind"] in ("css", "text"))):
            return 1.0, f"the element recorded {strategy} {v!r}, which the broken selector names"
        if strategy == "id" and target["kind"] == "css" and broken == f"#{v}":
            return 1.0, f"the element recorded id {v!r}"
    wanted = words(value or broken)
    best, shared = 0.0, set()
    for _, v, role in sels:
        have = words(v) | (words(role) if role else set())
        sim = _similarity(wanted, have)
        if sim > best:
            best, shared = sim, wanted & have
    if best >= MIN_SIMILARITY:
        return round(best * 0.8, 3), f"one of the element's recorded selectors shares words " \
                                     f"with the broken one ({', '.join(sorted(shared)[:6])})"
    return 0.0, ""


def rank_candidates(broken: str, actions: Any, live_elements: Any = None) -> list[dict[str, Any]]:
    """Replacement candidates for C{broken}, best first (see the module docstring)."""
    target = parse_selector(broken)
    found: dict[str, dict[str, Any]] = {}

    def propose(strategy: str, value: str, role: str | None, match: float, reason: str,
                source: str, seen: int = 1) -> None:
        f = forms(strategy, value, role)
        if f["selector"] == broken or f["playwright"] == broken or f["locator"] == broken:
            return
        confidence = WEIGHTS[strategy] * match + 0.02 * min(max(seen - 1, 0), 5)
        key = f["selector"]
        old = found.get(key)
        if old is not None and old["confidence"] >= confidence:
            if source not in old["sources"]:
                old["sources"].append(source)
            return
        found[key] = {**f, "strategy": strategy, "confidence": round(min(0.99, confidence), 3),
                      "reason": reason, "sources": [source] if old is None
                      else sorted({source, *old["sources"]}), "seen": seen}

    # Recorded actions, grouped by element (the same selectors dict counts once, with a tally).
    elements: dict[str, tuple[dict[str, Any], int]] = {}
    for action in dicts(actions)[-MAX_ACTIONS:]:
        sels = action.get("selectors")
        if not isinstance(sels, dict):
            continue
        try:
            key = json.dumps(sels, sort_keys=True, default=str)[:4000]
        except (TypeError, ValueError):
            continue
        prior = elements.get(key)
        elements[key] = (sels, (prior[1] if prior else 0) + 1)
    for sels, seen in elements.values():
        listed = element_selectors(sels)
        match, why = _matches(target, broken, listed)
        if match <= 0:
            continue
        for strategy, value, role in listed:
            propose(strategy, value, role, match,
                    f"{why}; {strategy} is {'the most' if strategy == 'testId' else 'a'} stable "
                    f"way to address it", "recorded", seen)

    # The live page: elements whose name/selector share words with the broken selector.
    live = dicts(live_elements)
    wanted = words(target["value"] or broken)
    for el in live[:500]:
        name = raw_name if isinstance(raw_name := el.get("name"), str) else ""
        role = raw_role if isinstance(raw_role := el.get("role"), str) else ""
        sel = raw_sel if isinstance(raw_sel := el.get("selector"), str) else ""
        exact = bool(target["value"]) and target["value"] in (name.strip(), sel)
        sim = 1.0 if exact else max(_similarity(wanted, words(name)),
                                    _similarity(wanted, words(sel)))
        if sim < MIN_SIMILARITY:
            continue
        match = 1.0 if exact else round(sim * 0.8, 3)
        why = "on the live page now" + (" (same name/selector)" if exact else
                                         " (its name/selector shares words with the broken one)")
        if role and name.strip():
            propose("role", name.strip()[:300], role[:50], match, why, "live")
        if sel:
            m = re.match(r'^\[data-testid="(.*)"\]$', sel)
            if m:
                propose("testId", m.group(1), None, match, why, "live")
            else:
                propose("css", sel[:500], None, match, why, "live")
    if live:
        listed_keys = _live_keys(live)
        for cand in found.values():
            if "live" not in cand["sources"] and _key_of(cand) in listed_keys:
                cand["sources"].append("live")
                cand["confidence"] = round(min(0.99, cand["confidence"] + 0.05), 3)
                cand["live"] = "listed"
    ranked = sorted(found.values(), key=lambda c: (-c["confidence"], ORDER[c["strategy"]],
                                                    c["selector"]))
    return ranked[:MAX_CANDIDATES]


def _key_of(cand: dict[str, Any]) -> str:
    return cand["selector"]


def _live_keys(live: list[dict[str, Any]]) -> set[str]:
    keys = set()
    for el in live:
        role, name, sel = el.get("role"), el.get("name"), el.get("selector")
        if isinstance(role, str) and role and isinstance(name, str) and name.strip():
            keys.add(forms("role", name.strip(), role)["selector"])
        if isinstance(sel, str) and sel:
            keys.add(sel)
    return keys


def apply_count(cand: dict[str, Any], count: Any) -> None:
    """Adjust a candidate by how many elements it matched on the live page (C{dom} count)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        cand["live_count"] = None
        return
    cand["live_count"] = count
    if count == 1:
        cand["confidence"] = round(min(0.99, cand["confidence"] + 0.05), 3)
        cand["live"] = "unique"
    elif count == 0:
        cand["confidence"] = round(cand["confidence"] * 0.3, 3)
        cand["live"] = "no_match"
    else:
        cand["confidence"] = round(max(0.0, cand["confidence"] - 0.2), 3)
        cand["live"] = "ambiguous"


def rerank(cands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(cands, key=lambda c: (-c["confidence"], ORDER[c["strategy"]], c["selector"]))


# -- healing code ------------------------------------------------------------------------------


def _literal(value: str, quote: str) -> str:
    if quote == '"':
        return json.dumps(value, ensure_ascii=False)
    body = value.replace("\\", "\\\\").replace(quote, "\\" + quote).replace("\n", "\\n")
    if quote == "`":
        body = body.replace("${", "\\${")
    return quote + body + quote


def heal_code(code: str, broken: str, cand: dict[str, Any]) -> dict[str, Any]:
    """C{code} with C{broken} replaced by C{cand}: C{page.locator('<broken>')} (and
    C{getByTestId('<id>')} for a broken test id) become the candidate's locator; any other string
    literal exactly equal to the broken selector becomes its Playwright selector string."""
    target = parse_selector(broken)
    replacements: list[dict[str, Any]] = []
    esc = re.escape(broken)

    def line_of(pos: int) -> int:
        return code.count("\n", 0, pos) + 1

    def sub_locator(m: re.Match[str]) -> str:
        replacements.append({"line": line_of(m.start()), "from": m.group(0),
                             "to": cand["locator"]})
        return cand["locator"]

    pattern = re.compile(r"page\.locator\(\s*(['\"`])" + esc + r"\1\s*\)")
    out = pattern.sub(sub_locator, code)
    if target["kind"] == "testId" and target["value"]:
        tid = re.compile(r"page\.getByTestId\(\s*(['\"`])" + re.escape(target["value"]) +
                         r"\1\s*\)")
        out = tid.sub(sub_locator, out)

    def sub_literal(m: re.Match[str]) -> str:
        quote = m.group(1)
        new = _literal(cand["playwright"], quote)
        replacements.append({"line": out.count("\n", 0, m.start()) + 1, "from": m.group(0),
                             "to": new})
        return new

    out = re.sub(r"(['\"`])" + esc + r"\1", sub_literal, out)
    return {"code": out, "replacements": replacements}

"""
SARIF 2.1.0 from an axe-style accessibility result.

Input: C{{"violations": [{"id", "impact", "description", "help", "helpUrl", "tags",
"nodes": [{"target": [selector, ...], "html", "failureSummary"?, "impact"?}]}], "url"?}}.
One rule per violation id, one result per node. Impact maps to level: critical and serious →
C{error}, moderate → C{warning}, minor (or none) → C{note}. The page URL is the artifact; the
node's CSS selector is a logical location and its HTML the snippet.
"""

from __future__ import annotations

from typing import Any

from gasoline._version import __version__
from gasoline.analysis._util import dicts, text
from gasoline.core.redaction.redactor import clip, redact_text

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
_LEVELS = {"critical": "error", "serious": "error", "moderate": "warning", "minor": "note"}
_SECURITY_SEVERITY = {"critical": "9.0", "serious": "7.0", "moderate": "4.0", "minor": "1.0"}
MAX_RESULTS = 5000


def level_of(impact: Any) -> str:
    return _LEVELS.get(str(impact).lower(), "note") if impact else "note"


def _tags(tags: Any) -> list[str]:
    """At most 30 tags, in order; SARIF's property bag requires them to be unique."""
    if not isinstance(tags, list):
        return []
    return list(dict.fromkeys(text(t, 100) for t in tags if isinstance(t, str)))[:30]


def _rule(violation: dict[str, Any]) -> dict[str, Any]:
    rule_id = text(violation.get("id"), 200) or "unknown-rule"
    help_text = text(violation.get("help"), 1000) or rule_id
    rule: dict[str, Any] = {
        "id": rule_id,
        "name": rule_id,
        "shortDescription": {"text": help_text},
        "fullDescription": {"text": text(violation.get("description"), 2000) or help_text},
        "defaultConfiguration": {"level": level_of(violation.get("impact"))},
        "properties": {"tags": _tags(violation.get("tags"))},
    }
    help_url = violation.get("helpUrl")
    if isinstance(help_url, str) and help_url.startswith(("http://", "https://")):
        rule["helpUri"] = help_url[:2000]
        rule["help"] = {"text": f"{help_text} ({help_url[:2000]})"}
    impact = violation.get("impact")
    if isinstance(impact, str) and impact.lower() in _SECURITY_SEVERITY:
        rule["properties"]["impact"] = impact.lower()
    return rule


def _targets(node: dict[str, Any]) -> list[str]:
    target = node.get("target")
    if isinstance(target, str):
        return [target[:1000]]
    if isinstance(target, list):
        # axe nests iframe / shadow-DOM paths as lists of selectors.
        joined = (" >>> ".join(map(str, t)) if isinstance(t, list) else text(t, 1000) for t in target)
        # SARIF requires a location's logical locations to be unique.
        return list(dict.fromkeys(joined))[:10]
    return []


def sarif(a11y_result: Any, page_url: str | None = None) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run of the Gasoline accessibility audit."""
    result = a11y_result if isinstance(a11y_result, dict) else {}
    url = page_url or (result.get("url") if isinstance(result.get("url"), str) else None)
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    results: list[dict[str, Any]] = []
    for violation in dicts(result.get("violations")):
        rule = _rule(violation)
        if rule["id"] not in index:
            index[rule["id"]] = len(rules)
            rules.append(rule)
        for node in dicts(violation.get("nodes")) or [{}]:
            if len(results) >= MAX_RESULTS:
                break
            impact = node.get("impact") or violation.get("impact")
            summary = text(node.get("failureSummary"), 2000)
            message = rule["shortDescription"]["text"] + (f"\n{summary}" if summary else "")
            location: dict[str, Any] = {}
            if url:
                location["physicalLocation"] = {"artifactLocation": {"uri": url[:2000]}}
                html = node.get("html")
                if isinstance(html, str) and html:
                    location["physicalLocation"]["region"] = {
                        "startLine": 1, "snippet": {"text": redact_text(clip(html, 2000))}}
            targets = _targets(node)
            if targets:
                location["logicalLocations"] = [
                    {"fullyQualifiedName": t, "kind": "element"} for t in targets]
            item: dict[str, Any] = {
                "ruleId": rule["id"],
                "ruleIndex": index[rule["id"]],
                "level": level_of(impact),
                "message": {"text": redact_text(message)},
            }
            if location:
                item["locations"] = [location]
            results.append(item)
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": "Gasoline accessibility audit",
            "version": __version__,
            "rules": rules,
        }},
        "results": results,
    }
    if url:
        run["artifacts"] = [{"location": {"uri": url[:2000]}}]
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}

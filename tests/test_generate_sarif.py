"""SARIF 2.1.0 export (gasoline.generate.sarif), validated against the vendored SARIF schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from gasoline.generate import sarif

SCHEMA = json.loads((Path(__file__).parent / "schemas" / "sarif-2.1.0-rtm.5.json").read_text())
VALIDATOR = jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def assert_valid_sarif(doc):
    errors = sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


AXE = {
    "url": "https://app.test/signup",
    "violations": [
        {"id": "color-contrast", "impact": "serious",
         "description": "Ensures the contrast between foreground and background colors meets WCAG 2 AA",
         "help": "Elements must have sufficient color contrast",
         "helpUrl": "https://dequeuniversity.com/rules/axe/4.8/color-contrast",
         "tags": ["cat.color", "wcag2aa", "wcag143"],
         "nodes": [{"target": [".btn-primary"], "html": "<button class=\"btn-primary\">Go</button>",
                    "failureSummary": "Fix any of the following: contrast 2.1:1"},
                   {"target": [["iframe#pay", "#card"]], "html": "<input id=\"card\">"}]},
        {"id": "image-alt", "impact": "critical", "description": "Images need alt text",
         "help": "Images must have alternate text", "helpUrl": "https://dequeuniversity.com/rules/axe/4.8/image-alt",
         "tags": ["wcag2a"], "nodes": [{"target": ["img.logo"], "html": "<img class=\"logo\" src=\"l.png\">"}]},
        {"id": "region", "impact": "moderate", "help": "Content should be in landmarks", "nodes": []},
        {"id": "meta-viewport-large", "impact": "minor", "help": "Users should be able to zoom",
         "nodes": [{"target": ["meta"], "html": "<meta name=viewport>"}]},
    ],
}


def test_axe_violations_become_a_valid_sarif_2_1_0_log():
    doc = sarif(AXE)
    assert_valid_sarif(doc)
    assert doc["version"] == "2.1.0"
    [run] = doc["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["color-contrast", "image-alt", "region", "meta-viewport-large"]
    assert rules[0]["helpUri"] == AXE["violations"][0]["helpUrl"]
    assert rules[0]["properties"]["tags"] == ["cat.color", "wcag2aa", "wcag143"]


def test_one_result_per_node_with_level_from_impact_and_element_locations():
    run = sarif(AXE)["runs"][0]
    results = run["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [
        ("color-contrast", "error"), ("color-contrast", "error"), ("image-alt", "error"),
        ("region", "warning"), ("meta-viewport-large", "note")]
    first = results[0]
    assert first["ruleIndex"] == 0
    assert "contrast 2.1:1" in first["message"]["text"]
    location = first["locations"][0]
    assert location["physicalLocation"]["artifactLocation"]["uri"] == "https://app.test/signup"
    assert location["physicalLocation"]["region"]["snippet"]["text"].startswith("<button")
    assert location["logicalLocations"] == [{"fullyQualifiedName": ".btn-primary", "kind": "element"}]
    assert results[1]["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == "iframe#pay >>> #card"


def test_no_violations_is_a_valid_empty_run():
    doc = sarif({"violations": []}, page_url="https://app.test/")
    assert_valid_sarif(doc)
    assert doc["runs"][0]["results"] == []


def test_secrets_in_node_html_are_redacted():
    doc = sarif({"violations": [{"id": "label", "impact": "critical", "help": "Form elements must have labels",
                                 "nodes": [{"target": ["#k"], "html": "<input value=\"api_key=ABC123SECRET\">"}]}]},
                page_url="https://app.test/")
    assert "ABC123SECRET" not in json.dumps(doc)


values = st.one_of(st.none(), st.text(max_size=20), st.integers(), st.lists(st.text(max_size=5), max_size=3),
                   st.lists(st.lists(st.text(max_size=5), max_size=2), max_size=2))


@given(st.dictionaries(st.sampled_from(["violations", "url"]), st.one_of(values, st.lists(
    st.dictionaries(st.sampled_from(["id", "impact", "help", "helpUrl", "description", "tags", "nodes"]),
                    st.one_of(values, st.lists(st.dictionaries(
                        st.sampled_from(["target", "html", "failureSummary", "impact"]), values), max_size=3))),
    max_size=4))))
@settings(max_examples=150, deadline=None)
def test_any_a11y_result_gives_a_valid_sarif(result):
    assert_valid_sarif(sarif(result))


def test_the_vendored_schema_rejects_a_broken_log():
    doc = sarif(AXE)
    doc["runs"][0]["results"][0]["level"] = "fatal"
    del doc["runs"][0]["tool"]["driver"]["name"]
    assert len(list(VALIDATOR.iter_errors(doc))) >= 2


def test_duplicate_axe_tags_still_give_a_valid_sarif():
    """Found by hypothesis: SARIF requires a rule's tags to be unique."""
    doc = sarif({"violations": [{"id": "x", "tags": ["wcag2a", "wcag2a", "", ""]}]})
    assert_valid_sarif(doc)
    assert doc["runs"][0]["tool"]["driver"]["rules"][0]["properties"]["tags"] == ["wcag2a", ""]


def test_duplicate_node_targets_still_give_a_valid_sarif():
    """Found by hypothesis: SARIF requires a location's logical locations to be unique."""
    assert_valid_sarif(sarif({"violations": [{"id": "x", "nodes": [{"target": ["#a", "#a"]}]}]}))

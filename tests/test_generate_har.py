"""HAR 1.2 export (gasoline.generate.har), validated against the vendored har-schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT6

from gasoline.generate import har

SCHEMA_DIR = Path(__file__).parent / "schemas" / "har"


def _validator():
    resources = []
    for path in SCHEMA_DIR.glob("*.json"):
        contents = json.loads(path.read_text())
        resources.append((path.name, Resource.from_contents(contents, default_specification=DRAFT6)))
        resources.append((path.name + "#", Resource.from_contents(contents, default_specification=DRAFT6)))
    registry = Registry().with_resources(resources)
    schema = json.loads((SCHEMA_DIR / "har.json").read_text())
    return jsonschema.Draft6Validator(schema, registry=registry,
                                      format_checker=jsonschema.Draft6Validator.FORMAT_CHECKER)


VALIDATOR = _validator()


def assert_valid_har(doc):
    errors = sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


BODIES = [
    {"method": "POST", "url": "https://app.test/api/login?next=%2Fhome&token=SECRET123",
     "status": 200, "content_type": "application/json", "duration": 120.5,
     "request_body": json.dumps({"user": "bob", "password": "hunter2"}),
     "response_body": json.dumps({"ok": True}), "ts": "2026-01-01T00:00:01.500Z",
     "request_headers": {"Authorization": "Bearer abc.def.ghi123", "Accept": "application/json"},
     "response_headers": [{"name": "Set-Cookie", "value": "sid=1"}]},
    {"method": "GET", "url": "https://app.test/api/items/1", "status": 404,
     "response_body": "not found", "response_truncated": True},
]
WATERFALL = [
    {"name": "https://app.test/api/items/1", "url": "https://app.test/api/items/1",
     "initiator_type": "fetch", "duration": 80, "start_time": 100, "fetch_start": 105,
     "response_end": 180, "transfer_size": 300, "decoded_body_size": 9, "encoded_body_size": 9},
    {"name": "https://cdn.test/lib.js", "url": "https://cdn.test/lib.js", "initiator_type": "script",
     "duration": 40, "start_time": 10, "fetch_start": 12, "response_end": 50,
     "transfer_size": 5000, "decoded_body_size": 15000, "encoded_body_size": 4800},
]


def test_har_from_bodies_and_waterfall_is_valid_har_1_2():
    doc = har(BODIES, WATERFALL, page_url="https://app.test/", started_at=1_767_225_600.0)
    assert_valid_har(doc)
    log = doc["log"]
    assert log["version"] == "1.2" and log["creator"]["name"] == "Gasoline"
    assert len(log["entries"]) == 3, "two bodies plus one waterfall-only resource"
    urls = [e["request"]["url"] for e in log["entries"]]
    assert "https://cdn.test/lib.js" in urls


def test_har_entries_carry_bodies_status_timings_and_are_redacted():
    doc = har(BODIES, WATERFALL, started_at=1_767_225_600.0)
    text = json.dumps(doc)
    for secret in ("hunter2", "SECRET123", "abc.def.ghi123"):
        assert secret not in text
    by_url = {e["request"]["url"].split("?")[0]: e for e in doc["log"]["entries"]}
    login = by_url["https://app.test/api/login"]
    assert login["request"]["method"] == "POST"
    assert json.loads(login["request"]["postData"]["text"]) == {"user": "bob", "password": "[REDACTED:password]"}
    assert login["response"]["content"]["text"] == '{"ok": true}'
    assert login["startedDateTime"] == "2026-01-01T00:00:01.500Z"
    assert {"name": "next", "value": "/home"} in login["request"]["queryString"]
    item = by_url["https://app.test/api/items/1"]
    assert item["response"]["status"] == 404 and item["response"]["statusText"] == "Not Found"
    assert item["timings"]["wait"] == 75 and item["timings"]["blocked"] == 5
    assert "truncated" in item["comment"]
    lib = by_url["https://cdn.test/lib.js"]
    assert lib["response"]["status"] == 0 and "resource timing only" in lib["comment"]
    assert lib["startedDateTime"] == "2026-01-01T00:00:00.010Z"


def test_empty_capture_is_still_a_valid_har():
    assert_valid_har(har([], [], page_url=None))


entry_values = st.one_of(st.none(), st.integers(-5, 700), st.text(max_size=30), st.booleans(),
                         st.floats(allow_nan=True, allow_infinity=True),
                         st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2))


@given(st.lists(st.dictionaries(st.sampled_from(
    ["method", "url", "status", "request_body", "response_body", "content_type", "duration",
     "ts", "response_headers", "request_headers", "response_truncated"]), entry_values), max_size=5),
    st.lists(st.dictionaries(st.sampled_from(
        ["url", "name", "duration", "start_time", "fetch_start", "response_end", "transfer_size",
         "decoded_body_size", "encoded_body_size", "initiator_type"]), entry_values), max_size=5))
@settings(max_examples=150, deadline=None)
def test_any_captured_data_gives_a_valid_har(bodies, waterfall):
    assert_valid_har(har(bodies, waterfall, started_at=1_767_225_600.0))


def test_the_vendored_schema_rejects_a_broken_har():
    doc = har(BODIES, WATERFALL, started_at=1_767_225_600.0)
    doc["log"]["entries"][0]["startedDateTime"] = "yesterday"
    del doc["log"]["entries"][1]["response"]["status"]
    assert len(list(VALIDATOR.iter_errors(doc))) >= 2


def test_infinite_or_huge_sizes_and_timings_still_give_a_valid_har():
    """Found by hypothesis: a non-finite size from a hostile page must not crash the generator."""
    waterfall = [{"url": None, "name": "", "encoded_body_size": float("inf"),
                  "decoded_body_size": float("-inf"), "duration": float("nan")},
                 {"url": "https://a.test/x", "name": "https://a.test/x", "decoded_body_size": 10**400}]
    assert_valid_har(har([], waterfall, page_url="https://a.test/"))


def test_a_non_ascii_digit_status_is_treated_as_unknown():
    """Found by hypothesis: "²".isdigit() is True but int("²") fails."""
    doc = har([{"url": "https://a.test/", "method": "GET", "status": "²"}], [], page_url="https://a.test/")
    assert_valid_har(doc)

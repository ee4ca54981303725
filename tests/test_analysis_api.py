"""API response validation (gasoline.analysis.api)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gasoline.analysis import api_validation, normalize_path


def response(path, body, status=200, method="GET", content_type="application/json"):
    return {"method": method, "url": f"https://api.test{path}", "status": status,
            "content_type": content_type,
            "response_body": body if isinstance(body, str) else json.dumps(body)}


def test_ids_in_paths_are_normalised():
    assert normalize_path("https://x/users/42/orders/9f8e7d6c-1a2b-4c3d-8e9f-001122334455") == \
        "/users/{id}/orders/{uuid}"
    assert normalize_path("https://x/blobs/0123456789abcdef0123?x=1") == "/blobs/{hash}"
    assert normalize_path("https://x/s/aB3dE5gH7jK9") == "/s/{id}"
    assert normalize_path("https://x/api/v2/users") == "/api/v2/users"


def test_consistent_responses_have_no_violations_and_an_inferred_shape():
    bodies = [response(f"/users/{i}", {"id": i, "name": f"u{i}", "tags": ["a"] if i % 2 else []})
              for i in range(4)]
    out = api_validation(bodies)
    assert out["violation_count"] == 0
    [endpoint] = out["endpoints"]
    assert endpoint["endpoint"] == "GET /users/{id}" and endpoint["calls"] == 4
    assert endpoint["shape"]["$.id"] == "number" and endpoint["shape"]["$.name"] == "string"


def test_type_changes_nulls_missing_fields_and_non_json_are_violations():
    bodies = [response(f"/users/{i}", {"id": i, "name": "n", "profile": {"age": 3}}) for i in range(5)]
    bodies.append(response("/users/99", {"id": "99", "profile": None}))
    bodies.append(response("/users/98", "<html>502 Bad Gateway</html>"))
    out = api_validation(bodies)
    violations = {(v["kind"], v.get("path")) for v in out["endpoints"][0]["violations"]}
    assert violations == {("type_mismatch", "$.id"), ("null_value", "$.profile"),
                          ("missing_field", "$.name"), ("not_json", None)}
    assert out["violation_count"] == 4


def test_optional_fields_are_not_required():
    bodies = [response("/items/1", {"id": 1, "note": "x"})] + \
        [response(f"/items/{i}", {"id": i}) for i in range(2, 6)]
    out = api_validation(bodies)
    assert out["violation_count"] == 0
    assert out["endpoints"][0]["shape"]["$.note"] == "string?"


def test_endpoints_are_separated_by_method_and_errors_are_not_shapes():
    bodies = [response("/things", {"ok": True}, method="POST"), response("/things", [1, 2]),
              response("/things", {"error": "nope"}, status=500)]
    out = api_validation(bodies)
    assert sorted(e["endpoint"] for e in out["endpoints"]) == ["GET /things", "POST /things"]
    assert out["violation_count"] == 0


def test_a_single_response_cannot_violate_anything():
    assert api_validation([response("/a", {"x": 1})])["violation_count"] == 0


@given(st.lists(st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.text(max_size=4), children, max_size=3)),
    max_leaves=15), max_size=8))
def test_any_json_bodies_give_a_well_formed_report(bodies):
    out = api_validation([response("/x", b) for b in bodies])
    assert out["violation_count"] == sum(len(e["violations"]) for e in out["endpoints"])
    json.dumps(out)

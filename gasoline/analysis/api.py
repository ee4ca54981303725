"""
API response validation: infer a response shape per endpoint and report responses that break it.

An endpoint is the method plus the URL path with ids normalised (C{/users/42} and C{/users/43}
are C{GET /users/{id}}). Every successful (2xx) JSON response of an endpoint is flattened into
C{path → type} (C{$.items[].id → number}); the expected type of a path is the one most responses
agree on, and a path is required when more than half of the responses that have its parent carry
it. A response violates the shape when it lacks a required path, has a different type at a
path, or is not JSON where the others are. With a single response there is nothing to disagree
with, so nothing is reported.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import orjson

from gasoline.analysis._util import dicts, status_of, text
from gasoline.core.validate import json_type

MAX_DEPTH = 8
MAX_PATHS = 300
MAX_BODY = 1_000_000
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_HEX = re.compile(r"^[0-9a-f]{16,}$", re.I)
_NUMBER = re.compile(r"^\d+$")
_MIXED_ID = re.compile(r"^(?=.*\d)[A-Za-z0-9_-]{12,}$")


def normalize_path(url: str) -> str:
    """The path of C{url} with numeric, UUID, hash and token-like segments replaced."""
    try:
        path = urlsplit(url).path or "/"
    except ValueError:
        path = "/"
    out = []
    for segment in path.split("/"):
        if _NUMBER.match(segment):
            out.append("{id}")
        elif _UUID.match(segment):
            out.append("{uuid}")
        elif _HEX.match(segment):
            out.append("{hash}")
        elif _MIXED_ID.match(segment):
            out.append("{id}")
        else:
            out.append(segment)
    return "/".join(out)[:300]


def endpoint_of(entry: dict[str, Any]) -> str:
    method = text(entry.get("method") or "GET", 10).upper()
    return f"{method} {normalize_path(text(entry.get('url'), 4000))}"


def flatten(value: Any, path: str = "$", depth: int = 0,
            out: dict[str, str] | None = None) -> dict[str, str]:
    """C{path → type} for a JSON value; array items share the path C{parent[]}."""
    if out is None:
        out = {}
    if len(out) >= MAX_PATHS:
        return out
    out.setdefault(path, json_type(value))
    if depth >= MAX_DEPTH:
        return out
    if isinstance(value, dict):
        for key, item in list(value.items())[:100]:
            flatten(item, f"{path}.{text(key, 60)}", depth + 1, out)
    elif isinstance(value, list):
        for item in value[:20]:
            flatten(item, f"{path}[]", depth + 1, out)
    return out


def _parent(path: str) -> str:
    if path.endswith("[]"):
        return path[:-2]
    return path.rsplit(".", 1)[0] if "." in path[1:] else "$"


def _json_body(entry: dict[str, Any]) -> tuple[bool, Any]:
    body = entry.get("response_body")
    if isinstance(body, (dict, list)):
        return True, body
    if not isinstance(body, str) or not body.strip() or len(body) > MAX_BODY:
        return False, None
    if entry.get("response_truncated"):
        return False, None
    try:
        return True, orjson.loads(body)
    except orjson.JSONDecodeError:
        return False, None


def _is_json_type(entry: dict[str, Any]) -> bool:
    return "json" in text(entry.get("content_type"), 200).lower()


def api_validation(network_bodies: Any, limit: int = 50) -> dict[str, Any]:
    """Per endpoint: calls, inferred shape, and the responses that violate it."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in dicts(network_bodies):
        status = status_of(entry)
        if status is None or not 200 <= status < 300:
            continue
        groups.setdefault(endpoint_of(entry), []).append(entry)
    endpoints = []
    total_violations = 0
    for endpoint, entries in groups.items():
        report = _validate_endpoint(endpoint, entries, limit)
        if report is None:
            continue
        total_violations += len(report["violations"])
        endpoints.append(report)
    endpoints.sort(key=lambda e: (-len(e["violations"]), -e["calls"], e["endpoint"]))
    return {
        "endpoint_count": len(endpoints),
        "violation_count": total_violations,
        "endpoints": endpoints[:limit],
        "truncated": len(endpoints) > limit,
    }


def _validate_endpoint(endpoint: str, entries: list[dict[str, Any]],
                       limit: int) -> dict[str, Any] | None:
    parsed = [(entry, *_json_body(entry)) for entry in entries]
    json_responses = [(entry, flatten(value)) for entry, ok, value in parsed if ok]
    if not json_responses:
        return None
    type_votes: dict[str, Counter[str]] = {}
    for _, shape in json_responses:
        for path, kind in shape.items():
            type_votes.setdefault(path, Counter())[kind] += 1
    expected = {path: votes.most_common(1)[0][0] for path, votes in type_votes.items()}
    required = set()
    for path, votes in type_votes.items():
        parent = _parent(path)
        if path == "$" or path.endswith("[]"):
            continue  # an empty array is not a missing item
        with_parent = sum(
            1 for _, shape in json_responses
            if shape.get(parent) == expected.get(parent) and parent in shape
        )
        if with_parent and sum(votes.values()) * 2 > with_parent:
            required.add(path)
    violations: list[dict[str, Any]] = []
    for entry, ok, _ in parsed:
        if not ok and _is_json_type(entry) and not entry.get("response_truncated"):
            violations.append({"url": text(entry.get("url"), 500), "kind": "not_json",
                               "detail": "Content-Type says JSON but the body does not parse."})
    if len(json_responses) >= 2:
        for entry, shape in json_responses:
            for problem in _compare(shape, expected, required):
                if len(violations) >= limit:
                    break
                violations.append({"url": text(entry.get("url"), 500), **problem})
    return {
        "endpoint": endpoint,
        "calls": len(entries),
        "json_responses": len(json_responses),
        "shape": {p: (t if p in required or p == "$" else t + "?")
                  for p, t in list(expected.items())[:100]},
        "violations": violations,
    }


def _compare(shape: dict[str, str], expected: dict[str, str],
             required: set[str]) -> list[dict[str, Any]]:
    problems = []
    for path, kind in shape.items():
        want = expected.get(path)
        if want is not None and kind != want:
            problems.append({"kind": "null_value" if kind == "null" else "type_mismatch",
                             "path": path, "expected": want, "actual": kind})
    for path in sorted(required):
        parent = _parent(path)
        if path not in shape and shape.get(parent) == expected.get(parent) and parent in shape:
            problems.append({"kind": "missing_field", "path": path, "expected": expected[path]})
    return problems

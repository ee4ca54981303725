"""Tool schemas that every client can use: one type per property, ``what`` required with its enum.

The portability rules strict clients apply (Anthropic's and OpenAI's strict tool modes, Gemini's
schema subset): every property says its type, as one JSON type (no ``["integer", "string"]``
unions, no untyped ``value``), no ``anyOf``/``oneOf``/``allOf``, no bare boolean schema, no
``$ref``, and every array says what its items are (object items are checked the same way, at any
depth). This is stricter than the MCP Inspector's ``--strict`` check, which
tests/test_schema_portability.py runs as well (it warns on unions and untyped schemas but accepts
``anyOf``).
"""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.tools.schemas import TOOL_MODES

JSON_TYPES = {"string", "integer", "number", "boolean", "object", "array"}


@pytest.fixture(scope="module")
def definitions(tmp_path_factory):
    app = build(Config(state_dir=tmp_path_factory.mktemp("s"), persist=False), Clock())
    return {d["name"]: d for d in app.mcp.tools.definitions()}


def _problems(schema: dict, where: str) -> list[str]:
    found = []
    for name, prop in schema.get("properties", {}).items():
        here = f"{where}.{name}"
        if not isinstance(prop, dict):
            found.append(f"{here}: bare {prop!r} where a schema object is expected")
            continue
        if "$ref" in prop:
            found.append(f"{here}: $ref (clients do not resolve references)")
        kind = prop.get("type")
        if not isinstance(kind, str):
            found.append(f"{here}: type {kind!r} (one JSON type is required)")
        elif kind not in JSON_TYPES:
            found.append(f"{here}: unknown type {kind!r}")
        for key in ("anyOf", "oneOf", "allOf"):
            if key in prop:
                found.append(f"{here}: {key}")
        if kind == "array":
            items = prop.get("items")
            if not isinstance(items, dict) or not isinstance(items.get("type"), str):
                found.append(f"{here}: array without a typed 'items'")
            elif items["type"] == "object":
                found.extend(_problems(items, f"{here}[]"))
        if kind == "object" and "properties" in prop:
            found.extend(_problems(prop, here))
    return found


@pytest.mark.parametrize("tool", sorted(TOOL_MODES))
def test_every_property_has_one_json_type(definitions, tool):
    assert _problems(definitions[tool]["inputSchema"], tool) == []


@pytest.mark.parametrize("tool", sorted(TOOL_MODES))
def test_what_is_required_and_carries_the_mode_enum(definitions, tool):
    schema = definitions[tool]["inputSchema"]
    assert schema["type"] == "object"
    assert "what" in schema.get("required", [])
    assert schema["properties"]["what"]["enum"] == list(TOOL_MODES[tool][0])

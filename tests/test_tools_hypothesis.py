"""Hypothesis: tool arguments of every JSON type, for every tool and every mode, always get a
well-formed answer (a result or a JSON-RPC error), and the daemon stays healthy afterwards."""

from __future__ import annotations

import json
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from gasoline.app import Config, build
from gasoline.core.storage.store import ACTIONS, CONSOLE, NETWORK_BODIES, WEBSOCKET_EVENTS
from gasoline.mcp import jsonrpc
from gasoline.tools.schemas import TOOL_MODES

json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=4),
    max_leaves=12,
)


def _property_names() -> list[str]:
    app = build(Config(state_dir=tempfile.mkdtemp(), persist=False), Clock())
    names = set()
    for d in app.mcp.tools.definitions():
        names.update(d["inputSchema"].get("properties", {}))
    return sorted(names)


PROPERTY_NAMES = _property_names()
TOOLS = sorted(TOOL_MODES)


@st.composite
def tool_calls(draw):
    tool = draw(st.sampled_from(TOOLS))
    modes, alias = TOOL_MODES[tool]
    args = draw(st.dictionaries(st.sampled_from(PROPERTY_NAMES) | st.text(max_size=12),
                                json_values, max_size=6))
    what = draw(st.sampled_from(modes) | json_values)
    key = draw(st.sampled_from(["what"] + ([alias] if alias else [])))
    if draw(st.booleans()) or key != "what":
        args[key] = what
    else:
        args["what"] = draw(st.sampled_from(modes))
    return tool, args


def _seeded_app():
    clock = Clock()
    clock.advance(1_700_000_000)
    app = build(Config(state_dir=tempfile.mkdtemp(), persist=False, tool_rate_limit=0), clock)
    app.store.add(CONSOLE, [
        {"level": "error", "message": "boom", "url": "http://localhost:3000/", "tabId": 1,
         "ts": "2023-11-14T22:13:20.000Z"},
        {"level": "log", "message": "hello", "ts": "2023-11-14T22:13:21.000Z"}])
    app.store.add(NETWORK_BODIES, [{"method": "POST", "url": "http://localhost:3000/api",
                                    "status": 500, "response_body": '{"a": {"b": [1]}}'}])
    app.store.add(WEBSOCKET_EVENTS, [{"event": "open", "id": "w", "url": "ws://x/"}])
    app.store.add(ACTIONS, [{"type": "navigate", "timestamp": 1, "to_url": "http://x/"}])
    return app, clock


def _session(app, client_id):
    session = app.mcp.open_session(client_id, "streamable")
    app.mcp.handle(session, jsonrpc.request(0, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}))
    return session


def _well_formed(response, tool) -> None:
    assert isinstance(response, dict) and response.get("jsonrpc") == "2.0"
    if "error" in response:
        assert isinstance(response["error"]["code"], int)
        assert isinstance(response["error"]["message"], str)
        return
    result = response["result"]
    assert isinstance(result["isError"], bool)
    assert isinstance(result["content"], list) and result["content"]
    for block in result["content"]:
        assert block["type"] in ("text", "image", "resource", "resource_link", "audio")
    text = result["content"][0]["text"]
    json.dumps(response)  # serialisable as it would go on the wire
    if result["isError"]:
        payload = json.loads(text.partition("\n")[2])
        assert isinstance(payload["error"], str) and payload["message"]
        if tool in ("observe", "configure"):
            assert payload["error"] != "internal_error", payload


def _exercise(app, clock, session, tool, args):
    out = []
    app.mcp.handle(session, jsonrpc.request(5, "tools/call", {"name": tool, "arguments": args})
                   ).addCallback(out.append)
    if not out:
        # Waiting on the extension: the router's timeout (at most 120 s) answers it.
        clock.advance(130)
    assert out, f"{tool} {args!r} never answered"
    _well_formed(out[0], tool)


def _healthy(app, bystander, cursor_before) -> None:
    out = []
    app.mcp.handle(bystander, jsonrpc.request(9, "tools/call", {
        "name": "configure", "arguments": {"what": "health"}})).addCallback(out.append)
    assert out[0]["result"]["isError"] is False
    assert bystander.state.cursors.get(CONSOLE, 0) == cursor_before


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(tool_calls(), min_size=1, max_size=5))
def test_any_arguments_get_a_well_formed_answer_extension_disconnected(calls):
    app, clock = _seeded_app()
    session = _session(app, "fuzzer")
    bystander = _session(app, "bystander")
    for tool, args in calls:
        _exercise(app, clock, session, tool, args)
    _healthy(app, bystander, 0)
    app.extension.stop()
    app.router.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=tool_calls())
def test_any_arguments_get_a_well_formed_answer_extension_connected(call):
    app, clock = _seeded_app()
    app.extension.sync({"settings": {"tracked_tab_id": 1, "pilot_enabled": True,
                                     "tracked_tab_url": "http://localhost:3000/"}})
    session = _session(app, "fuzzer")
    bystander = _session(app, "bystander")
    tool, args = call
    _exercise(app, clock, session, tool, args)
    _healthy(app, bystander, 0)
    app.extension.stop()
    app.router.close()

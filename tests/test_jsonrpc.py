"""JSON-RPC 2.0 message validation as MCP narrows it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gasoline.mcp import jsonrpc
from gasoline.mcp.jsonrpc import JsonRpcError, Notification, Request, Response


def test_request_notification_and_response_are_told_apart():
    assert jsonrpc.classify({"jsonrpc": "2.0", "id": 1, "method": "ping"}) == Request(1, "ping", {})
    assert jsonrpc.classify({"jsonrpc": "2.0", "id": "a", "method": "m", "params": {"x": 1}}) == Request("a", "m", {"x": 1})
    assert jsonrpc.classify({"jsonrpc": "2.0", "method": "n"}) == Notification("n", {})
    assert jsonrpc.classify({"jsonrpc": "2.0", "id": 3, "result": {}}) == Response(3, {}, None)
    err = {"code": -1, "message": "no"}
    assert jsonrpc.classify({"jsonrpc": "2.0", "id": 3, "error": err}) == Response(3, None, err)


@pytest.mark.parametrize("message,code,id", [
    ([1], jsonrpc.INVALID_REQUEST, None),
    ("ping", jsonrpc.INVALID_REQUEST, None),
    ({"id": 1, "method": "ping"}, jsonrpc.INVALID_REQUEST, 1),
    ({"jsonrpc": "2.1", "id": 1, "method": "ping"}, jsonrpc.INVALID_REQUEST, 1),
    ({"jsonrpc": "2.0", "id": 1, "method": ""}, jsonrpc.INVALID_REQUEST, 1),
    ({"jsonrpc": "2.0", "id": 1, "method": 5}, jsonrpc.INVALID_REQUEST, 1),
    ({"jsonrpc": "2.0", "id": None, "method": "ping"}, jsonrpc.INVALID_REQUEST, None),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, jsonrpc.INVALID_REQUEST, None),
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, jsonrpc.INVALID_REQUEST, None),
    ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}, jsonrpc.INVALID_PARAMS, 1),
    ({"jsonrpc": "2.0", "method": "n", "params": "x"}, jsonrpc.INVALID_REQUEST, None),
    ({"jsonrpc": "2.0", "id": 1}, jsonrpc.INVALID_REQUEST, 1),
    ({"jsonrpc": "2.0", "id": 1, "result": 1, "error": {}}, jsonrpc.INVALID_REQUEST, 1),
])
def test_invalid_messages_raise_the_right_code_and_keep_a_usable_id(message, code, id):
    with pytest.raises(JsonRpcError) as e:
        jsonrpc.classify(message)
    assert e.value.code == code
    response = e.value.response()
    assert response["id"] == id and response["error"]["code"] == code
    assert response["jsonrpc"] == "2.0"


def test_decode_errors_are_parse_errors():
    with pytest.raises(JsonRpcError) as e:
        jsonrpc.decode(b'{"jsonrpc": ')
    assert e.value.code == jsonrpc.PARSE_ERROR
    with pytest.raises(JsonRpcError):
        jsonrpc.decode(b"\xff\xfe")


def test_builders_produce_spec_shaped_messages():
    assert jsonrpc.result(1, {}) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert jsonrpc.error(None, -32600, "bad") == {"jsonrpc": "2.0", "id": None,
                                                  "error": {"code": -32600, "message": "bad"}}
    assert jsonrpc.error(2, 1, "m", {"d": 1})["error"]["data"] == {"d": 1}
    assert jsonrpc.notification("n") == {"jsonrpc": "2.0", "method": "n"}
    assert jsonrpc.request("s-1", "m", {})["id"] == "s-1"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=10,
)


@given(json_values)
def test_classify_either_accepts_or_raises_jsonrpc_error(value):
    try:
        message = jsonrpc.classify(value)
    except JsonRpcError as e:
        assert e.code in (jsonrpc.INVALID_REQUEST, jsonrpc.INVALID_PARAMS)
    else:
        assert isinstance(message, (Request, Notification, Response))


@given(st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"]),
                       json_values, max_size=6))
def test_messages_built_from_mcp_fields_never_crash_the_validator(value):
    try:
        message = jsonrpc.classify(value)
    except JsonRpcError as e:
        assert e.response()["error"]["code"] in (jsonrpc.INVALID_REQUEST, jsonrpc.INVALID_PARAMS)
    else:
        assert value.get("jsonrpc") == "2.0"
        if isinstance(message, Request):
            assert isinstance(message.params, dict) and message.method == value["method"]


@given(st.binary(max_size=64))
def test_decode_of_arbitrary_bytes_is_a_value_or_a_parse_error(data):
    try:
        jsonrpc.decode(data)
    except JsonRpcError as e:
        assert e.code == jsonrpc.PARSE_ERROR

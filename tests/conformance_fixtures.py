"""
The fixtures the official MCP conformance suite (``@modelcontextprotocol/conformance``) calls.

Registered only by ``tests/conformance.tac`` (never by the daemon itself), so the suite can
score Gasoline's real transports and lifecycle code: tools ``test_simple_text``,
``test_image_content``, ... ``test_reconnection``, ``json_schema_2020_12_tool``; resources
``test://static-text``, ``test://static-binary``, ``test://watched-resource`` and the template
``test://template/{id}/data``; prompts ``test_simple_prompt``, ``test_prompt_with_arguments``, ...
Contents follow each scenario's stated requirements.
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import orjson
from twisted.internet.task import deferLater

from gasoline.core.errors import GasolineError
from gasoline.mcp.resources import Prompt, PromptRegistry, Resource, ResourceRegistry, ResourceTemplate
from gasoline.mcp.tools import Tool, ToolRegistry


def _png_1x1_red() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    raw = b"\x00\xff\x00\x00"  # filter byte, then one RGB pixel
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def _wav_silence(samples: int = 800, rate: int = 8000) -> bytes:
    data = b"\x00\x00" * samples
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


PNG_B64 = base64.b64encode(_png_1x1_red()).decode()
WAV_B64 = base64.b64encode(_wav_silence()).decode()
NO_ARGS = {"type": "object", "properties": {}}


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def _tools(registry: ToolRegistry) -> None:
    def add(name: str, description: str, handler, schema: dict[str, Any] = NO_ARGS) -> None:
        registry.add(Tool(name, description, schema, handler))

    add("test_simple_text", "Returns simple text.",
        lambda ctx, a: _text("This is a simple text response for testing."))
    add("test_image_content", "Returns a 1x1 red PNG.",
        lambda ctx, a: {"content": [{"type": "image", "data": PNG_B64, "mimeType": "image/png"}]})
    add("test_audio_content", "Returns a short silent WAV.",
        lambda ctx, a: {"content": [{"type": "audio", "data": WAV_B64, "mimeType": "audio/wav"}]})
    add("test_embedded_resource", "Returns an embedded resource.",
        lambda ctx, a: {"content": [{"type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain",
            "text": "This is an embedded resource content."}}]})
    add("test_multiple_content_types", "Returns text, image and resource content.",
        lambda ctx, a: {"content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG_B64, "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                                              "mimeType": "application/json",
                                              "text": '{"test":"data","value":123}'}}]})

    def error_handling(ctx, a):
        return {"content": [{"type": "text",
                             "text": "This tool intentionally returns an error for testing"}],
                "isError": True}

    add("test_error_handling", "Always fails (isError).", error_handling)

    async def with_logging(ctx, a):
        ctx.log("info", "Tool execution started", logger="conformance")
        await deferLater(ctx.clock, 0.05, lambda: None)
        ctx.log("info", "Tool processing data", logger="conformance")
        await deferLater(ctx.clock, 0.05, lambda: None)
        ctx.log("info", "Tool execution completed", logger="conformance")
        return _text("Tool with logging executed successfully")

    add("test_tool_with_logging", "Sends three log messages while it runs.",
        lambda ctx, a: _ensure(with_logging(ctx, a)))

    async def with_progress(ctx, a):
        ctx.progress(0, 100)
        await deferLater(ctx.clock, 0.05, lambda: None)
        ctx.progress(50, 100)
        await deferLater(ctx.clock, 0.05, lambda: None)
        ctx.progress(100, 100)
        return _text("Tool with progress executed successfully")

    add("test_tool_with_progress", "Reports progress 0, 50, 100 of 100.",
        lambda ctx, a: _ensure(with_progress(ctx, a)))

    def _needs(ctx, capability: str) -> None:
        if capability not in ctx.session.client_capabilities:
            raise GasolineError(f"the client does not support {capability}",
                                code="unsupported_by_client")

    async def sampling(ctx, a):
        _needs(ctx, "sampling")
        prompt = a.get("prompt")
        if not isinstance(prompt, str):
            raise GasolineError("prompt must be a string", code="invalid_param")
        result = await ctx.request_client("sampling/createMessage", {
            "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
            "maxTokens": 100})
        content = (result or {}).get("content") or {}
        text = content.get("text") if isinstance(content, dict) else orjson.dumps(content).decode()
        return _text(f"LLM response: {text}")

    add("test_sampling", "Asks the client's LLM (sampling/createMessage).",
        lambda ctx, a: _ensure(sampling(ctx, a)),
        {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]})

    async def elicit(ctx, message: str, schema: dict[str, Any], label: str):
        _needs(ctx, "elicitation")
        result = await ctx.request_client("elicitation/create",
                                          {"message": message, "requestedSchema": schema})
        result = result or {}
        return _text(f"{label}: action={result.get('action')}, "
                     f"content={orjson.dumps(result.get('content')).decode()}")

    def elicitation(ctx, a):
        message = a.get("message")
        if not isinstance(message, str):
            raise GasolineError("message must be a string", code="invalid_param")
        return _ensure(elicit(ctx, message, {
            "type": "object",
            "properties": {"username": {"type": "string", "description": "User's response"},
                           "email": {"type": "string", "description": "User's email address"}},
            "required": ["username", "email"]}, "User response"))

    add("test_elicitation", "Asks the user for input (elicitation/create).", elicitation,
        {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]})
    add("test_elicitation_sep1034_defaults", "Elicitation with defaults for every primitive type.",
        lambda ctx, a: _ensure(elicit(ctx, "Please review your information", {
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"],
                           "default": "active"},
                "verified": {"type": "boolean", "default": True}}}, "Elicitation completed")))
    add("test_elicitation_sep1330_enums", "Elicitation with every enum schema variant.",
        lambda ctx, a: _ensure(elicit(ctx, "Please choose", {
            "type": "object",
            "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"}]},
                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                               "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "items": {
                    "type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "items": {"anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"}]}}}},
            "Elicitation completed")))
    add("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features",
        lambda ctx, a: _text(f"Received: {orjson.dumps(a).decode()}"),
        {"$schema": "https://json-schema.org/draft/2020-12/schema",
         "type": "object",
         "$defs": {"address": {"type": "object", "properties": {
             "street": {"type": "string"}, "city": {"type": "string"}}}},
         "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
         "additionalProperties": False})

    async def reconnection(ctx, a):
        # Close this request's SSE stream before answering: the client reconnects with
        # Last-Event-ID (GET /mcp) and receives the result from the replay log.
        if ctx.close_stream is not None:
            ctx.close_stream()
        await deferLater(ctx.clock, 0.1, lambda: None)
        return _text("Reconnection test completed")

    add("test_reconnection", "Closes its SSE stream mid-call, then answers (SEP-1699).",
        lambda ctx, a: _ensure(reconnection(ctx, a)))


def _ensure(coro):
    from twisted.internet.defer import Deferred

    return Deferred.fromCoroutine(coro)


def _resources(registry: ResourceRegistry) -> None:
    registry.add(Resource("test://static-text", "static-text", "A static text resource.",
                          "text/plain", lambda ctx, uri: [{
                              "uri": uri, "mimeType": "text/plain",
                              "text": "This is the content of the static text resource."}]))
    registry.add(Resource("test://static-binary", "static-binary", "A static binary resource.",
                          "image/png", lambda ctx, uri: [{
                              "uri": uri, "mimeType": "image/png", "blob": PNG_B64}]))
    registry.add(Resource("test://watched-resource", "watched-resource",
                          "A resource clients may subscribe to.", "text/plain",
                          lambda ctx, uri: [{"uri": uri, "mimeType": "text/plain",
                                             "text": "Watched resource content."}]))
    registry.add_template(ResourceTemplate(
        "test://template/{id}/data", "template-data", "Data for an id.", "application/json",
        lambda ctx, uri, id: [{"uri": uri, "mimeType": "application/json",
                               "text": orjson.dumps({"id": id, "templateTest": True,
                                                     "data": f"Data for ID: {id}"}).decode()}]))


def _prompts(registry: PromptRegistry) -> None:
    def user(content: dict[str, Any]) -> dict[str, Any]:
        return {"role": "user", "content": content}

    registry.add(Prompt("test_simple_prompt", "A simple prompt without arguments.", (),
                        lambda a: [user({"type": "text",
                                         "text": "This is a simple prompt for testing."})]))
    registry.add(Prompt(
        "test_prompt_with_arguments", "A prompt with two arguments.",
        ({"name": "arg1", "description": "First test argument", "required": True},
         {"name": "arg2", "description": "Second test argument", "required": True}),
        lambda a: [user({"type": "text", "text": f"Prompt with arguments: arg1='{a['arg1']}', "
                                                  f"arg2='{a['arg2']}'"})],
        completions={"arg1": ("paris", "park", "party", "test", "testing"),
                     "arg2": ("world", "work", "test")}))
    registry.add(Prompt(
        "test_prompt_with_embedded_resource", "A prompt embedding a resource.",
        ({"name": "resourceUri", "description": "URI of the resource to embed", "required": True},),
        lambda a: [user({"type": "resource", "resource": {
            "uri": a["resourceUri"], "mimeType": "text/plain",
            "text": "Embedded resource content for testing."}}),
            user({"type": "text", "text": "Please process the embedded resource above."})]))
    registry.add(Prompt("test_prompt_with_image", "A prompt with an image.", (),
                        lambda a: [user({"type": "image", "data": PNG_B64, "mimeType": "image/png"}),
                                   user({"type": "text", "text": "Please analyze the image above."})]))


def register_fixtures(tools: ToolRegistry, resources: ResourceRegistry, prompts: PromptRegistry) -> None:
    """Add every conformance fixture to the registries."""
    _tools(tools)
    _resources(resources)
    _prompts(prompts)

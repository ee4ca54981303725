"""
Gasoline's own MCP resources.

C{gasoline://guide} (the usage guide, C{gasoline/resources/guide.md}), C{gasoline://quickstart}
(C{gasoline/resources/quickstart.md}) and C{gasoline://capabilities} (JSON generated from the tool
tables: every mode of every tool and which ones are built).
"""

from __future__ import annotations

from importlib import resources as importlib_resources
from typing import TYPE_CHECKING, Any

import orjson

from gasoline.mcp.resources import Resource, ResourceRegistry

if TYPE_CHECKING:
    from gasoline.mcp.tools import ToolRegistry
    from gasoline.tools import GasolineTools

GUIDE_URI = "gasoline://guide"
CAPABILITIES_URI = "gasoline://capabilities"
QUICKSTART_URI = "gasoline://quickstart"
EVENTS_URI = "gasoline://events"


def resource_text(name: str) -> str:
    return (importlib_resources.files("gasoline") / "resources" / name).read_text("utf-8")


def guide_text() -> str:
    return resource_text("guide.md")


def gasoline_resources(tools: ToolRegistry,
                       gasoline_tools: GasolineTools | None = None) -> ResourceRegistry:
    """The daemon's own resources. C{tools} is the L{gasoline.mcp.tools.ToolRegistry};
    C{gasoline_tools} (L{gasoline.tools.GasolineTools}) says which modes are built."""
    registry = ResourceRegistry()
    guide = guide_text()
    quickstart = resource_text("quickstart.md")

    def read_guide(ctx: Any, uri: str) -> list[dict[str, Any]]:
        return [{"uri": uri, "mimeType": "text/markdown", "text": guide}]

    def read_quickstart(ctx: Any, uri: str) -> list[dict[str, Any]]:
        return [{"uri": uri, "mimeType": "text/markdown", "text": quickstart}]

    def read_capabilities(ctx: Any, uri: str) -> list[dict[str, Any]]:
        tools_out = {}
        for d in tools.definitions():
            props = d["inputSchema"].get("properties", {})
            modes = props.get("what", {}).get("enum", [])
            entry: dict[str, Any] = {"description": d["description"], "modes": modes}
            if gasoline_tools is not None and d["name"] in gasoline_tools.tables:
                built = gasoline_tools.built(d["name"])
                entry["built"] = built
                entry["not_built"] = [m for m in modes if m not in built]
            entry["arguments"] = sorted(k for k in props if k != "what")
            tools_out[d["name"]] = entry
        return [{"uri": uri, "mimeType": "application/json",
                 "text": orjson.dumps({"tools": tools_out}).decode()}]

    registry.add(Resource(GUIDE_URI, "guide", "How to use Gasoline's five tools: modes, "
                          "cursors, per-client state, errors (markdown).", "text/markdown",
                          read_guide, title="Gasoline usage guide"))
    registry.add(Resource(QUICKSTART_URI, "quickstart", "The five calls that cover most "
                          "debugging sessions (markdown).", "text/markdown", read_quickstart,
                          title="Gasoline quickstart"))
    def read_events(ctx: Any, uri: str) -> list[dict[str, Any]]:
        # The caller's own streaming inbox; reading it does not acknowledge anything.
        streaming = gasoline_tools.streaming if gasoline_tools is not None else None
        body = streaming.resource(ctx.session.state) if streaming is not None else {
            "streaming_enabled": False, "events": []}
        return [{"uri": uri, "mimeType": "application/json",
                 "text": orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS, default=str).decode()}]

    registry.add(Resource(EVENTS_URI, "events", "Your unread browser events (context streaming: "
                          "subscribe with configure {what:\"streaming\"}; resources/subscribe "
                          "to be told when new ones arrive). JSON.", "application/json",
                          read_events, title="Your browser events"))
    registry.add(Resource(CAPABILITIES_URI, "capabilities", "The tools, every mode each one "
                          "accepts and which modes are built in this version (JSON).",
                          "application/json", read_capabilities,
                          title="Gasoline capabilities"))
    return registry

"""
MCP resources and prompts: generic registries (Gasoline's own resources: L{gasoline.tools.resources}).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import attrs

from gasoline.mcp.jsonrpc import INVALID_PARAMS, RESOURCE_NOT_FOUND, JsonRpcError

#: C{read(ctx, uri, **template_values) -> list of content dicts} (C{{uri, mimeType, text|blob}}).
Reader = Callable[..., list[dict[str, Any]]]


@attrs.frozen
class Resource:
    uri: str
    name: str
    description: str
    mime_type: str
    read: Reader
    title: str | None = None

    def definition(self) -> dict[str, Any]:
        d = {"uri": self.uri, "name": self.name, "description": self.description,
             "mimeType": self.mime_type}
        if self.title:
            d["title"] = self.title
        return d


@attrs.frozen
class ResourceTemplate:
    uri_template: str
    name: str
    description: str
    mime_type: str
    read: Reader
    pattern: re.Pattern = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        parts = re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", self.uri_template)
        regex = "".join(
            f"(?P<{p[1:-1]}>[^/]+)" if p.startswith("{") else re.escape(p) for p in parts
        )
        object.__setattr__(self, "pattern", re.compile(f"^{regex}$"))

    def definition(self) -> dict[str, Any]:
        return {"uriTemplate": self.uri_template, "name": self.name,
                "description": self.description, "mimeType": self.mime_type}


class ResourceRegistry:
    def __init__(self) -> None:
        self.resources: dict[str, Resource] = {}
        self.templates: list[ResourceTemplate] = []

    def add(self, resource: Resource) -> None:
        self.resources[resource.uri] = resource

    def add_template(self, template: ResourceTemplate) -> None:
        self.templates.append(template)

    def definitions(self) -> list[dict[str, Any]]:
        return [r.definition() for r in self.resources.values()]

    def template_definitions(self) -> list[dict[str, Any]]:
        return [t.definition() for t in self.templates]

    def _find(self, uri: str) -> tuple[Reader, dict[str, str]] | None:
        resource = self.resources.get(uri)
        if resource is not None:
            return resource.read, {}
        for template in self.templates:
            m = template.pattern.match(uri)
            if m:
                return template.read, m.groupdict()
        return None

    def require(self, uri: str) -> None:
        """@raise JsonRpcError: C{RESOURCE_NOT_FOUND} unless C{uri} names a resource."""
        if self._find(uri) is None:
            raise JsonRpcError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}", {"uri": uri})

    def read(self, ctx: Any, uri: str) -> dict[str, Any]:
        found = self._find(uri)
        if found is None:
            raise JsonRpcError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}", {"uri": uri})
        reader, values = found
        return {"contents": reader(ctx, uri, **values)}


@attrs.frozen
class Prompt:
    name: str
    description: str
    #: C{[{name, description, required}]}
    arguments: tuple[dict[str, Any], ...]
    render: Callable[[dict[str, str]], list[dict[str, Any]]]
    #: argument name -> candidate values for C{completion/complete}
    completions: dict[str, tuple[str, ...]] = attrs.field(factory=dict)

    def definition(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.arguments:
            d["arguments"] = list(self.arguments)
        return d


class PromptRegistry:
    def __init__(self) -> None:
        self.prompts: dict[str, Prompt] = {}

    def add(self, prompt: Prompt) -> None:
        self.prompts[prompt.name] = prompt

    def definitions(self) -> list[dict[str, Any]]:
        return [p.definition() for p in self.prompts.values()]

    def get(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        prompt = self.prompts.get(name)
        if prompt is None:
            raise JsonRpcError(INVALID_PARAMS, f"Unknown prompt: {name}")
        missing = [a["name"] for a in prompt.arguments if a.get("required") and a["name"] not in args]
        if missing:
            raise JsonRpcError(INVALID_PARAMS, f"Missing required arguments: {', '.join(missing)}")
        values = {k: str(v) for k, v in args.items()}
        return {"description": prompt.description, "messages": prompt.render(values)}

    def complete(self, ref: dict[str, Any], argument: dict[str, Any]) -> dict[str, Any]:
        """Candidate values for a prompt argument that start with the typed prefix."""
        candidates: tuple[str, ...] = ()
        if ref.get("type") == "ref/prompt":
            prompt = self.prompts.get(str(ref.get("name")))
            if prompt is None:
                raise JsonRpcError(INVALID_PARAMS, f"Unknown prompt: {ref.get('name')}")
            candidates = prompt.completions.get(str(argument.get("name")), ())
        prefix = str(argument.get("value", ""))
        values = [c for c in candidates if c.startswith(prefix)][:100]
        return {"values": values, "total": len(values), "hasMore": False}

"""A remote MCP server for the proxy's tests, built with the official ``mcp`` Python SDK (an
independent implementation of both HTTP transports).

Usage: ``remote_server.py streamable-http|sse PORT``. Tools: ``echo``, ``whoami`` (the request's
``Authorization`` header), ``slow`` (progress steps, a short sleep each), ``roots`` (asks the
client for its roots), ``grow`` (adds a tool and announces ``tools/list_changed``), ``sample``
(asks the client to sample, on the call's own answer stream, and returns the text it got).
"""

import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("gasoline-test-remote")


@server.tool()
def echo(message: str) -> str:
    """Echo the message back."""
    return f"echo: {message}"


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header this request came with."""
    headers = ctx.headers or {}
    return headers.get("authorization", "<none>")


@server.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Report progress C{steps} times, 0.1 s apart."""
    import anyio

    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps)
        await anyio.sleep(0.1)
    return f"done after {steps} steps"


@server.tool()
async def roots(ctx: Context) -> str:
    """The client's roots (a request from the server to the client, on the response stream)."""
    result = await ctx.session.list_roots()
    return " ".join(str(r.uri) for r in result.roots) or "<none>"


@server.tool()
async def sample(prompt: str, ctx: Context) -> str:
    """Ask the client for a sampling, tied to this call (its answer stream); return the text."""
    from mcp.types import SamplingMessage, TextContent

    result = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=5, related_request_id=ctx.request_id)
    return result.content.text


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool ``grown`` and tell the client its tool list changed."""

    def grown() -> str:
        return "grown"

    server.add_tool(grown, name="grown", description="Added at run time.")
    await ctx.session.send_tool_list_changed()
    return "grew"


if __name__ == "__main__":
    transport, port = sys.argv[1], int(sys.argv[2])
    server.run(transport, host="127.0.0.1", port=port)

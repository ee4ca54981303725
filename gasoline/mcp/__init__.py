"""MCP: JSON-RPC messages, lifecycle and sessions, the five tools and the resources (docs/mcp.md)."""

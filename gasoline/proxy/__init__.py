"""
The session-based MCP proxy (C{docs/proxy.md}): per-agent sessions that own a working
directory, allowed directories and child MCP servers, whose tools are aggregated into the
session's MCP tool list as C{<server>__<tool>}.
"""

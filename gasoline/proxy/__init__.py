"""
The session-based MCP proxy (seed 003, ``docs/proxy.md``): per-agent sessions that own a working
directory, allowed directories and child MCP servers, whose tools are aggregated into the
session's MCP tool list as ``<server>__<tool>``.
"""

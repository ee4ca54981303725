"""
The HTTP layer: one Klein app per object (ingest, MCP over HTTP, the relay's routes, pairing,
admin, events), the site and its guards (Host, Origin, body limits, API key).
"""

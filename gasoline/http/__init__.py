"""
The HTTP layer: one object per API, each declaring its routes with Klein (ingest, MCP over HTTP,
the relay's routes, pairing, admin, events, ...); the site, its root (the route policy, its guards:
Host, Origin, body limits, API key; and the one dispatcher that calls the handlers).
"""

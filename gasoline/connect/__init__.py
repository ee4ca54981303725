"""
``gasoline connect``: the stdio MCP connector (see docs/clients-and-connector.md).

``main`` (program entry, resolves the reactor) wires ``protocol.StdioLines`` (stdin/stdout lines)
to ``bridge.Bridge`` (queue, replay, bounds), which talks to the daemon through
``client.DaemonHTTP`` (treq) and finds or starts it with ``discovery``.
"""

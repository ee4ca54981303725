"""
C{gasoline connect}: the stdio MCP connector (see docs/clients-and-connector.md).

C{main} (program entry, resolves the reactor) wires C{protocol.StdioLines} (stdin/stdout lines)
to C{bridge.Bridge} (queue, replay, bounds), which talks to the daemon through
C{client.DaemonHTTP} (treq) and finds or starts it with C{discovery}.
"""

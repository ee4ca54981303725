"""A stdio MCP server for the network-policy tests (standard library only): tool ``connect``
(``{port}``: a TCP connection to the host's 127.0.0.1:port) and ``own_loopback`` (listens on its
own 127.0.0.1 and connects to itself). Each answers ``connected`` or ``failed: <reason>``."""

import json
import socket
import sys


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def attempt(fn):
    try:
        fn()
    except OSError as e:
        return f"failed: {e.strerror or e}"
    return "connected"


def connect(port):
    with socket.create_connection(("127.0.0.1", port), timeout=3):
        pass


def own_loopback():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=3):
            pass


TOOLS = [{"name": "connect", "inputSchema": {"type": "object"}},
         {"name": "own_loopback", "inputSchema": {"type": "object"}}]

for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "net", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
        text = attempt(lambda: connect(int(args["port"]))) if name == "connect" \
            else attempt(own_loopback)
        result = {"content": [{"type": "text", "text": text}]}
    else:
        result = {}
    send({"jsonrpc": "2.0", "id": rid, "result": result})

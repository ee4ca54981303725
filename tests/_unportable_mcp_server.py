"""A minimal stdio MCP server whose one tool has the schema faults the MCP Inspector's ``--strict``
portability check reports (a ``type`` union, an untyped property): the negative control of
tests/test_schema_portability.py, so a check that reports nothing is known to be able to report."""

import json
import sys

TOOL = {
    "name": "unportable",
    "description": "A tool with an unportable input schema.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "id": {"type": ["integer", "string"], "description": "a type union"},
            "value": {"description": "no type at all"},
        },
    },
}

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    if message["method"] == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "unportable", "version": "1"}}
    elif message["method"] == "tools/list":
        result = {"tools": [TOOL]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()

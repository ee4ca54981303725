"""A naive stdio MCP server for the proxy's path tests (standard library only): its one tool,
``read``, opens whatever it is given. Every string of its arguments, object keys included, is
tried as a path in every reading a careless server might make of it (as it is, as a ``file:``
URL of any spelling, percent-decoded up to three times, with ``~`` expanded, normalised), from
its working directory; the first file that opens is returned. It checks nothing: the daemon's
path check is all that stands between it and the disk."""

import json
import os
import re
import sys
from urllib.parse import unquote_to_bytes


def strings(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, str):
        yield value


def decode(s):
    return os.fsdecode(unquote_to_bytes(s))


def readings(s):
    out = [s]
    for _ in range(3):
        s = decode(s)
        out.append(s)
    more = []
    for r in out:
        if r[:5].lower() == "file:":
            rest = r[5:]
            if rest.startswith("//"):
                _, _, rest = rest[2:].partition("/")
                rest = "/" + rest
            more.append(decode(re.split(r"[?#]", rest, maxsplit=1)[0]))
            more.append(decode(rest))
    out += more
    out += [os.path.expanduser(r) for r in out]
    out += [os.path.normpath(r) for r in out]
    return out


def read(arguments):
    for s in strings(arguments):
        for path in readings(s):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    return f.read()
            except (OSError, ValueError):
                continue
    return "nothing opened"


def main():
    for line in sys.stdin:
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if rid is None:
            continue
        if method == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"],
                      "capabilities": {"tools": {}},
                      "serverInfo": {"name": "naive", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "read", "description": "Reads whatever it is given.",
                                 "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            text = read(msg["params"].get("arguments") or {})
            result = {"content": [{"type": "text", "text": text}]}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

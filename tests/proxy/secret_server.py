"""A stdio MCP server for the proxy leak test (standard library only): its answers carry the
corpus secrets the call names (tests/secret_corpus.py, by C{indexes}) in every field a result,
an error or a notification has.

Tools: ``leak`` (a result with content of every type: text, an embedded resource's text, a
resource_link, an image and an audio block with metadata; structuredContent and result _meta;
a log notification and, when asked, a progress notification before it), ``fail`` (a JSON-RPC
error whose message and data hold the secret).
"""

import json
import os
import sys
from urllib.parse import quote

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from secret_corpus import corpus

CORPUS = corpus()
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def texts(params):
    """The corpus texts the call names (C{indexes}), one per line."""
    return "\n".join(CORPUS[int(i)].text for i in (params.get("arguments") or {})["indexes"])


def leak(rid, params):
    t = texts(params)
    token = (params.get("_meta") or {}).get("progressToken")
    if token is not None:
        send({"jsonrpc": "2.0", "method": "notifications/progress",
              "params": {"progressToken": token, "progress": 1, "total": 2, "message": t}})
    send({"jsonrpc": "2.0", "method": "notifications/message",
          "params": {"level": "error", "logger": "secret", "data": {"detail": t, "text": t}}})
    meta = {"note": t, "vendor.example/trace": t}
    send({"jsonrpc": "2.0", "id": rid, "result": {
        "content": [
            {"type": "text", "text": t, "annotations": {"audience": ["assistant"]}, "_meta": meta},
            {"type": "resource", "resource": {"uri": "file:///app/.env", "mimeType": "text/plain",
                                              "text": t, "_meta": meta}},
            {"type": "resource", "resource": {"uri": "file:///app/key.bin",
                                              "mimeType": "application/octet-stream",
                                              "blob": PNG}},
            {"type": "resource_link", "uri": "https://files.example/get?q=" + quote(t, safe=""),
             "name": t, "description": t, "mimeType": "text/plain", "_meta": meta},
            {"type": "image", "data": PNG, "mimeType": "image/png", "_meta": meta,
             "annotations": {"audience": ["user"], "note": t}},
            {"type": "audio", "data": PNG, "mimeType": "audio/wav", "_meta": meta},
        ],
        "structuredContent": {"detail": t, "items": [t]},
        "_meta": meta,
        "isError": False,
    }})


def fail(rid, params):
    t = texts(params)
    send({"jsonrpc": "2.0", "id": rid, "error": {
        "code": -32000, "message": "upstream refused: " + t,
        "data": {"detail": t, "stack": [t]}}})


def main():
    for line in sys.stdin:
        msg = json.loads(line)
        method = msg.get("method")
        rid = msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "secret", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
                {"name": n, "description": n, "inputSchema": {"type": "object"}}
                for n in ("leak", "fail")]}})
        elif method == "tools/call":
            {"leak": leak, "fail": fail}[msg["params"]["name"]](rid, msg["params"])
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif rid is not None and method is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "nope"}})


if __name__ == "__main__":
    main()

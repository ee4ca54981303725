"""A small stdio MCP server for the proxy's tests (standard library only; blocking is fine here).

Tools: ``echo``, ``whereami`` (cwd + env), ``slow`` (progress every 50 ms; honours cancellation),
``sample`` (asks the client for sampling), ``sample_progress`` (the same with a progress token;
returns the progress the client sent for it), ``elicit`` (asks for elicitation), ``roots`` (asks for roots/list), ``change`` (announces
tools/list_changed and adds a tool), ``crash`` (exits), ``sleep_forever`` with a child process.
"""

import json
import os
import select
import subprocess
import sys

tools = ["echo", "whereami", "slow", "sample", "sample_progress", "elicit", "sample_cancel", "roots", "change", "crash", "spawn_grandchild",
         "big", "burn", "allocate", "a" * 70]
cancelled = set()
#: The capabilities the client declared in its initialize (whereami reports them).
client_capabilities = {}
next_id = [1000]
buffered = []


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def read(timeout=None, fresh=False):
    if buffered and not fresh:
        return buffered.pop(0)
    if timeout is not None:
        r, _, _ = select.select([sys.stdin], [], [], timeout)
        if not r:
            return None
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def ask(method, params):
    next_id[0] += 1
    rid = next_id[0]
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    while True:
        msg = read(fresh=True)  # what arrives meanwhile waits in ``buffered``
        if msg.get("id") == rid and "method" not in msg:
            return msg
        buffered.append(msg)


def text(t):
    return {"content": [{"type": "text", "text": t}]}


def call(rid, params):
    name = params["name"]
    args = params.get("arguments") or {}
    token = (params.get("_meta") or {}).get("progressToken")
    if name == "echo":
        return text(json.dumps(args))
    if name == "whereami":
        return text(json.dumps({"cwd": os.getcwd(), "env": dict(os.environ), "pid": os.getpid(),
                                "pgid": os.getpgid(0), "capabilities": client_capabilities}))
    if name == "slow":
        steps = int(args.get("steps", 10))
        for i in range(steps):
            msg = read(timeout=0.05)
            if msg is not None:
                if msg.get("method") == "notifications/cancelled" and \
                        msg["params"].get("requestId") == rid:
                    with open(args["cancel_marker"], "w") if args.get("cancel_marker") else \
                            open(os.devnull, "w") as f:
                        f.write("cancelled")
                    return None
                buffered.append(msg)
            if token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": i + 1, "total": steps}})
        return text("done")
    if name == "sample":
        answer = ask("sampling/createMessage", {"messages": [
            {"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5})
        return text(json.dumps(answer))
    if name == "sample_progress":
        # A request with a progress token: the client's progress for it must reach us, with our
        # own token.
        answer = ask("sampling/createMessage", {"messages": [], "maxTokens": 1,
                                                "_meta": {"progressToken": "child-tok"}})
        progress = [{"for": m["params"]["progressToken"], "progress": m["params"]["progress"]}
                    for m in buffered if m.get("method") == "notifications/progress"]
        buffered[:] = [m for m in buffered if m.get("method") != "notifications/progress"]
        return text(json.dumps({"answer": answer, "progress": progress}))
    if name == "elicit":
        return text(json.dumps(ask("elicitation/create", {
            "message": "Which branch?", "requestedSchema": {"type": "object", "properties": {
                "branch": {"type": "string"}}}})))
    if name == "sample_cancel":
        next_id[0] += 1
        send({"jsonrpc": "2.0", "id": next_id[0], "method": "sampling/createMessage",
              "params": {"messages": [], "maxTokens": 1}})
        send({"jsonrpc": "2.0", "method": "notifications/cancelled",
              "params": {"requestId": next_id[0], "reason": "changed my mind"}})
        return text("asked and cancelled")
    if name == "roots":
        return text(json.dumps(ask("roots/list", {})))
    if name == "change":
        tools.append("added")
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text("changed")
    if name == "big":
        return text("x" * int(args["bytes"]))
    if name == "burn":  # CPU until a limit ends it
        while True:
            pass
    if name == "allocate":  # MB of memory, touched (a MemoryError over a limit ends it)
        block = bytearray(int(args["mb"]) * 1024 * 1024)
        return text(str(len(block)))
    if name == "crash":
        sys.stderr.write("fake server: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "spawn_grandchild":
        if args.get("detach"):
            # A daemonised grandchild: the intermediate process calls setsid (a session and
            # group of its own), forks it and exits, so it is nobody's child any more but
            # init's (or a subreaper's); optionally it ignores SIGTERM too.
            ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
                if args.get("ignore_term") else ""
            p = subprocess.Popen([sys.executable, "-c", (
                "import os, signal, sys, time\n"
                "os.setsid()\n"
                "r, w = os.pipe()\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                f"    {ignore}os.write(w, b'x'); time.sleep(600); os._exit(0)\n"
                "os.read(r, 1)\n"
                "print(pid, flush=True)\n"
                "os._exit(0)\n")],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
            grandchild = int(p.stdout.readline())
            p.stdout.close()
            p.wait()
            return text(json.dumps({"grandchild": grandchild}))
        if args.get("ignore_term"):
            # A grandchild that ignores SIGTERM; answered once it does.
            p = subprocess.Popen([sys.executable, "-c", (
                "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(600)")],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
            p.stdout.readline()
            p.stdout.close()
        else:
            p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        return text(json.dumps({"grandchild": p.pid}))
    return text(name)


def main():
    sys.stderr.write("fake server started\n")
    while True:
        msg = read()
        method = msg.get("method")
        rid = msg.get("id")
        if method == "initialize":
            client_capabilities.update(msg["params"]["capabilities"])
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "fake", "version": "1"},
                "_clientCapabilities": msg["params"]["capabilities"]}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
                {"name": t, "description": f"the {t} tool",
                 "inputSchema": {"type": "object"}} for t in tools]}})
        elif method == "tools/call":
            result = call(rid, msg["params"])
            if result is not None:
                send({"jsonrpc": "2.0", "id": rid, "result": result})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif rid is not None and method is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "nope"}})


if __name__ == "__main__":
    main()

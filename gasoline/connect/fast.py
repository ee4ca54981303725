"""
The connector's first exchange, before Twisted is imported.

An agent starts C{gasoline connect} and waits for the answer to its C{initialize} before it does
anything else; importing Twisted, treq and the bridge is most of the connector's start-up time.
So C{gasoline connect} first does this, with the standard library's small public modules only
(C{socket}, C{signal}, C{json}, and the C{hashlib}, C{hmac} and C{base64} of
L{gasoline.client_rules}, whose state-dir, client-id and proof rules it applies as the connector
and the daemon do: no Twisted, attrs or orjson). It used CPython's private
C{_socket}, C{_signal}, C{_sha256} and C{_json} to save the C{enum} and C{re} imports those pull
in; C{_sha256} is C{_sha2} since 3.12, so that saving is given up for names that stay (see
docs/clients-and-connector.md for the measured cost):

 1. read the agent's first stdin line;
 2. if it is an C{initialize} request, the daemon's client key can be read in the state dir
    (C{--state-dir}, C{$GASOLINE_STATE_DIR} or the default; when it holds no key, or the daemon
    refuses its proof and no C{--state-dir} was given, the one the daemon's C{/health} names,
    as the ordinary path does) and the daemon answers on its loopback
    port, POST it to C{/mcp} in the connector form (the same C{X-Gasoline-Client} /
    C{X-Gasoline-Client-Proof} / C{X-Gasoline-Connection} headers the bridge uses, so it is the
    same MCP session) and write the daemon's answer to stdout;
 3. hand everything to the Twisted connector (L{gasoline.connect.main}), which adopts the session
    (the bridge keeps the C{initialize} for replay after a daemon restart, as if it had sent it)
    and carries on with the bytes read after that first line.

Anything unexpected (an option this parser does not know, a first line that is not
C{initialize}, no daemon listening, an answer that is not a plain JSON C{result}) falls back to the
ordinary path with nothing written: the bridge then sends the line itself, starting the daemon if
needed. Only JSON-RPC lines are ever written to stdout.
"""

from __future__ import annotations

import json
import os
import signal
import socket

from gasoline.client_rules import (
    client_id_for_cwd,
    client_proof,
    default_state_dir_name,
    read_client_key,
)
from gasoline.connect.options import DEFAULT_PORT, FLAGS, VALUE_OPTIONS

#: The longest first line this path reads (a larger one goes to the ordinary path unread).
MAX_FIRST_LINE = 1 << 20
#: Seconds to wait for the daemon here before leaving it to the ordinary path.
TIMEOUT = 2.0
#: The options this parser knows (all of the connector's but --help and --version), spelled as
#: given, each to its long name.
_NAMES = {**{f"--{name}": f"--{name}" for name, _, _ in VALUE_OPTIONS},
          **{f"-{short}": f"--{name}" for name, short, _ in VALUE_OPTIONS if short}}
_FLAGS = {f"--{name}" for name, _, _ in FLAGS}


def loads(data: bytes):
    """C{json.loads} of a UTF-8 document; C{ValueError} when it is not exactly one JSON value, or
    nested too deeply."""
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


class Prelude:
    """What the first exchange did: bytes read from stdin that the connector must still handle
    (C{leftover}), and, when C{initialize} was answered, the message and the connection id that
    owns the session. (A plain class: importing attrs here would cost more than this module.)"""

    __slots__ = ("leftover", "init_message", "connection_id")

    def __init__(self, leftover: bytes, init_message: dict | None = None,
                 connection_id: str | None = None) -> None:
        self.leftover = leftover
        self.init_message = init_message
        self.connection_id = connection_id


def parse_args(argv: list[str]) -> dict[str, str] | None:
    """The connector's options as C{{name: value}}, or None for anything this parser does not
    know (the ordinary option parser deals with it, help and errors included)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in _FLAGS and not eq:
            out[name] = ""
            i += 1
            continue
        if name not in _NAMES:
            return None
        if not eq:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        out[_NAMES[name]] = value
        i += 1
    return out


def daemon_port(options: dict[str, str]) -> int | None:
    """The loopback port to try, or None (a non-loopback or https URL: ordinary path)."""
    url = options.get("--url")
    if url is not None:
        for prefix in ("http://127.0.0.1:", "http://localhost:"):
            if url.startswith(prefix):
                port = url[len(prefix):].rstrip("/")
                return int(port) if port.isdigit() and 0 < int(port) < 65536 else None
        return None
    port = options.get("--port", str(DEFAULT_PORT))
    return int(port) if port.isdigit() and 0 < int(port) < 65536 else None


def client_id(options: dict[str, str]) -> str | None:
    """--client-id, else the working directory's (L{gasoline.client_rules.client_id_for_cwd})."""
    explicit = options.get("--client-id")
    if explicit:
        return explicit
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    return client_id_for_cwd(cwd)


def state_dir(options: dict[str, str]) -> str:
    """--state-dir, else the default (L{gasoline.client_rules.default_state_dir_name})."""
    return options.get("--state-dir") or default_state_dir_name()


def proof_in(options: dict[str, str], cid: str, directory: str | None = None) -> str | None:
    """The proof of C{cid} under the client key in C{directory} (default: the options' state
    dir), or None when no key can be read there (L{gasoline.client_rules})."""
    try:
        key = read_client_key(directory or state_dir(options))
    except (OSError, ValueError):
        return None
    return client_proof(key, cid)


def read_first_line(fd: int = 0) -> tuple[bytes, bytes]:
    """C{(first line, everything read)} from C{fd}; the line is empty if none ended in time."""
    buf = b""
    while b"\n" not in buf and len(buf) < MAX_FIRST_LINE:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
    line, nl, _ = buf.partition(b"\n")
    return (line if nl else b""), buf


def post_mcp(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
    """One blocking HTTP/1.1 POST /mcp to 127.0.0.1:C{port}: C{(status, content type, body)}."""
    return _exchange(port, "POST", "/mcp", body, headers)


def reported_state_dir(port: int, headers: dict[str, str]) -> str | None:
    """The state dir the Gasoline daemon on C{port} names in its C{/health} (C{state_dir}), or
    None (no Gasoline daemon answers, or it names none): where the connector reads its client
    key when the daemon is not one it was told about (the rule of
    L{gasoline.connect.proof.ClientKeyFile})."""
    status, ctype, body = _exchange(port, "GET", "/health", None, headers)
    health = loads(body) if status == 200 and ctype == "application/json" else None
    if not isinstance(health, dict) or health.get("service-name") != "gasoline":
        return None
    path = health.get("state_dir")
    if not isinstance(path, str) or not path or "\x00" in path or not os.path.isabs(path):
        return None
    return path


def _exchange(port: int, method: str, path: str, body: bytes | None,
              headers: dict[str, str]) -> tuple[int, str, bytes]:
    """One blocking HTTP/1.1 request to 127.0.0.1:C{port}: C{(status, content type, body)}."""
    head = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    if body is not None:
        head.append(f"Content-Length: {len(body)}")
    else:
        body = b""
    head += [f"{k}: {v}" for k, v in headers.items()]
    request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(TIMEOUT)
        s.connect(("127.0.0.1", port))
        s.sendall(request)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        s.close()
    raw = b"".join(chunks)
    header_block, _, payload = raw.partition(b"\r\n\r\n")
    status, fields = parse_head(header_block)
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        payload = dechunk(payload)
    ctype = fields.get(b"content-type", b"").split(b";")[0].strip().decode("latin-1").lower()
    return status, ctype, payload


def parse_head(header_block: bytes) -> tuple[int, dict[bytes, bytes]]:
    """C{(status, fields)} of an HTTP/1.1 response head (the bytes before the blank line); field
    names lower-cased, values stripped."""
    lines = header_block.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    return status, fields


def dechunk(data: bytes) -> bytes:
    """The body of a chunked HTTP/1.1 payload C{data} (chunk extensions ignored, no trailers);
    the project's one chunk decoder (the tests' L{gasoline.testing.response_body} uses it)."""
    out = []
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out.append(rest[:size])
        data = rest[size + 2:]
    return b"".join(out)


#: Signals that arrived between the answer and the reactor taking over (re-sent by L{resend}).
caught: list[int] = []


def _remember(signum: int, _frame) -> None:
    caught.append(signum)


def hold_signals() -> None:
    """Once the agent has its answer it may stop the connector at any moment, before Twisted's
    handlers are installed: remember SIGTERM/SIGINT instead of dying without unregistering."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _remember)


def resend(reactor) -> None:
    """Deliver the remembered signals again once the reactor (and its handlers) runs."""
    for signum in caught:
        reactor.callWhenRunning(reactor.callLater, 0, os.kill, os.getpid(), signum)
    caught.clear()


def first_exchange(argv: list[str], stdin: int = 0, stdout: int = 1) -> Prelude | None:
    """Do the first exchange (see the module docstring). None: the options were not understood
    here and nothing was read; otherwise a L{Prelude} (C{init_message} None when the ordinary path
    must send what was read)."""
    options = parse_args(argv)
    if options is None:
        return None
    line, read = read_first_line(stdin)
    port = daemon_port(options)
    cid = client_id(options)
    if not line or port is None or cid is None:
        return Prelude(read)
    try:
        message = loads(line)
    except ValueError:
        return Prelude(read)
    if not isinstance(message, dict) or message.get("method") != "initialize" \
            or message.get("id") is None:
        return Prelude(read)
    connection_id = os.urandom(8).hex()
    api_key = options.get("--api-key") or os.environ.get("GASOLINE_API_KEY")
    keyed = {"X-Gasoline-Key": api_key} if api_key else {}
    proof = proof_in(options, cid)
    asked = False
    try:
        if proof is None:
            # No key where this connector would start its daemon: the daemon that answers says
            # where its state dir is (one round trip, as the ordinary path does through /health).
            asked = True
            reported = reported_state_dir(port, keyed)
            proof = proof_in(options, cid, reported) if reported else None
            if proof is None:
                return Prelude(read)  # the ordinary path finds the daemon, or says why not
        headers = {"Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json",
                   "X-Gasoline-Client": cid, "X-Gasoline-Client-Proof": proof,
                   "X-Gasoline-Connection": connection_id, **keyed}
        status, ctype, body = post_mcp(port, line, headers)
        if status == 403 and not asked:
            # A key, but not this daemon's (it runs on another state dir): ask it where.
            reported = reported_state_dir(port, keyed)
            other = proof_in(options, cid, reported) if reported else None
            if other is not None and other != proof:
                headers["X-Gasoline-Client-Proof"] = other
                status, ctype, body = post_mcp(port, line, headers)
        answer = loads(body) if status == 200 and ctype == "application/json" else None
    except (OSError, ValueError, IndexError):
        return Prelude(read)
    if not isinstance(answer, dict) or answer.get("id") != message["id"] \
            or "result" not in answer:
        return Prelude(read)
    hold_signals()
    # The daemon's own bytes, on one line: in valid JSON (just checked) CR and LF can only be
    # whitespace between tokens (strings hold them escaped), so removing them changes nothing else.
    data = body.strip().replace(b"\r", b"").replace(b"\n", b"") + b"\n"
    while data:
        data = data[os.write(stdout, data):]
    return Prelude(read[len(line) + 1:], message, connection_id)

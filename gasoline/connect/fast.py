"""
The connector's first exchange, before Twisted is imported.

An agent starts C{gasoline connect} and waits for the answer to its C{initialize} before it does
anything else; importing Twisted, treq and the bridge is most of the connector's start-up time.
So C{gasoline connect} first does this, with the standard library's small public modules only
(C{socket}, C{signal}, and the C{hashlib}, C{hmac} and C{binascii} of L{gasoline.client_rules},
whose state-dir, client-id and proof rules it applies as the connector and the daemon do: no
Twisted, attrs or orjson, and no C{json}, C{re} or C{typing}, whose imports would cost several
milliseconds of every start: the JSON it reads is parsed by L{loads}, which the tests hold to
C{json.loads}'s results; see docs/clients-and-connector.md for the measured start):

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

#: mypy reads the imports below; at run time they are skipped (this module imports no Twisted
#: and no C{typing}: see the module docstring).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

    from twisted.internet.interfaces import IReactorTime

#: The longest first line this path reads (a larger one goes to the ordinary path unread).
MAX_FIRST_LINE = 1 << 20
#: Seconds to wait for the daemon here before leaving it to the ordinary path.
TIMEOUT = 2.0
#: The options this parser knows (all of the connector's but --help and --version), spelled as
#: given, each to its long name.
_NAMES = {**{f"--{name}": f"--{name}" for name, _, _ in VALUE_OPTIONS},
          **{f"-{short}": f"--{name}" for name, short, _ in VALUE_OPTIONS if short}}
_FLAGS = {f"--{name}" for name, _, _ in FLAGS}


#: Deepest nesting L{loads} parses (deeper: C{ValueError}, so the ordinary path takes over).
MAX_DEPTH = 200
#: JSON's whitespace (a set: the empty slice past the end is not in it).
_WHITESPACE = frozenset(" \t\n\r")
_DIGITS = "0123456789"
_HEX = frozenset("0123456789abcdefABCDEF")
_CONTROL = frozenset(chr(c) for c in range(0x20))
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
            "t": "\t"}
_CONSTANTS = {"true": True, "false": False, "null": None, "NaN": float("nan"),
              "Infinity": float("inf"), "-Infinity": float("-inf")}


def loads(data: bytes) -> object:
    """C{json.loads} of a UTF-8 document: the same value, or C{ValueError} where C{json.loads}
    raises one (and where it would nest deeper than L{MAX_DEPTH}). Written here because the
    C{json} module imports C{re}, which would cost every start of the connector about 2 ms; the
    tests check it against C{json.loads} on generated documents."""
    text = data.decode("utf-8")
    value, i = _value(text, _skip(text, 0), 0)
    if _skip(text, i) != len(text):
        raise ValueError(f"extra data at {i}")
    return value


def _skip(text: str, i: int) -> int:
    """The index of the first non-whitespace character at or after C{i} (the callers test the
    first character inline: compact JSON has none)."""
    while text[i:i + 1] in _WHITESPACE:
        i += 1
    return i


def _value(text: str, i: int, depth: int) -> tuple[object, int]:
    """The JSON value starting at C{i} (no whitespace before it) and the index after it."""
    if i >= len(text):
        raise ValueError("a value was expected at the end")
    c = text[i]
    if c == '"':
        return _string(text, i + 1)
    if c == "{" or c == "[":
        if depth >= MAX_DEPTH:
            raise ValueError("JSON nested too deeply")
        i += 1
        if text[i:i + 1] in _WHITESPACE:
            i = _skip(text, i)
        return (_object if c == "{" else _array)(text, i, depth + 1)
    if c == "-" or c in _DIGITS:
        if text.startswith("-Infinity", i):
            return _CONSTANTS["-Infinity"], i + 9
        return _number(text, i)
    for word in ("true", "false", "null", "NaN", "Infinity"):
        if text.startswith(word, i):
            return _CONSTANTS[word], i + len(word)
    raise ValueError(f"a value was expected at {i}")


def _digits_end(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _DIGITS:
        i += 1
    return i


def _number(text: str, start: int) -> tuple[object, int]:
    """C{-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?}: an int without fraction or exponent."""
    i = start + 1 if text[start] == "-" else start
    if i < len(text) and text[i] == "0":
        i += 1
    else:
        end = _digits_end(text, i)
        if end == i:
            raise ValueError(f"a number was expected at {start}")
        i = end
    integer = True
    if i + 1 < len(text) and text[i] == "." and text[i + 1] in _DIGITS:
        i, integer = _digits_end(text, i + 1), False
    if i < len(text) and text[i] in "eE":
        j = i + 1
        if j < len(text) and text[j] in "+-":
            j += 1
        end = _digits_end(text, j)
        if end > j:
            i, integer = end, False
    return (int if integer else float)(text[start:i]), i


def _string(text: str, i: int) -> tuple[str, int]:
    """The string whose first character is at C{i} (after its quote) and the index after its
    closing quote; escapes as C{json} decodes them (a surrogate pair of C{\\u} escapes is one
    character, a lone surrogate stays)."""
    quote = text.find('"', i)
    if quote >= 0 and text.find("\\", i, quote) < 0:  # no escape: the common case
        chunk = text[i:quote]
        if not _CONTROL.isdisjoint(chunk):
            raise ValueError("a control character in a string")
        return chunk, quote + 1
    parts = []
    while True:
        quote = text.find('"', i)
        if quote < 0:
            raise ValueError("unterminated string")
        backslash = text.find("\\", i, quote)
        chunk = text[i:quote if backslash < 0 else backslash]
        if not _CONTROL.isdisjoint(chunk):
            raise ValueError("a control character in a string")
        parts.append(chunk)
        if backslash < 0:
            return "".join(parts), quote + 1
        esc = text[backslash + 1:backslash + 2]
        if esc in _ESCAPES:
            parts.append(_ESCAPES[esc])
            i = backslash + 2
            continue
        if esc != "u":
            raise ValueError(f"invalid escape at {backslash}")
        code = _hex4(text, backslash + 2)
        i = backslash + 6
        if 0xD800 <= code <= 0xDBFF and text.startswith("\\u", i):
            low = _hex4(text, i + 2)
            if 0xDC00 <= low <= 0xDFFF:
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                i += 6
        parts.append(chr(code))


def _hex4(text: str, i: int) -> int:
    digits = text[i:i + 4]
    if len(digits) != 4 or not _HEX.issuperset(digits):
        raise ValueError(f"invalid \\u escape at {i - 2}")
    return int(digits, 16)


def _array(text: str, i: int, depth: int) -> tuple[list[object], int]:
    """The array whose first element (or closing bracket) is at C{i}."""
    out: list[object] = []
    if text[i:i + 1] == "]":
        return out, i + 1
    while True:
        value, i = _value(text, i, depth)
        out.append(value)
        c = text[i:i + 1]
        if c in _WHITESPACE:
            i = _skip(text, i)
            c = text[i:i + 1]
        if c == "]":
            return out, i + 1
        if c != ",":
            raise ValueError(f"',' or ']' was expected at {i}")
        i += 1
        if text[i:i + 1] in _WHITESPACE:
            i = _skip(text, i)


def _object(text: str, i: int, depth: int) -> tuple[dict[str, object], int]:
    """The object whose first key (or closing brace) is at C{i}; a repeated key keeps its last
    value, as in C{json}."""
    out: dict[str, object] = {}
    if text[i:i + 1] == "}":
        return out, i + 1
    while True:
        if text[i:i + 1] != '"':
            raise ValueError(f"a key was expected at {i}")
        key, i = _string(text, i + 1)
        if text[i:i + 1] in _WHITESPACE:
            i = _skip(text, i)
        if text[i:i + 1] != ":":
            raise ValueError(f"':' was expected at {i}")
        i += 1
        if text[i:i + 1] in _WHITESPACE:
            i = _skip(text, i)
        out[key], i = _value(text, i, depth)
        c = text[i:i + 1]
        if c in _WHITESPACE:
            i = _skip(text, i)
            c = text[i:i + 1]
        if c == "}":
            return out, i + 1
        if c != ",":
            raise ValueError(f"',' or '}}' was expected at {i}")
        i += 1
        if text[i:i + 1] in _WHITESPACE:
            i = _skip(text, i)


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


def _remember(signum: int, _frame: FrameType | None) -> None:
    caught.append(signum)


def hold_signals() -> None:
    """Once the agent has its answer it may stop the connector at any moment, before Twisted's
    handlers are installed: remember SIGTERM/SIGINT instead of dying without unregistering."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _remember)


def resend(reactor: IReactorTime) -> None:
    """Deliver the remembered signals again once the reactor (and its handlers) runs: a delayed
    call runs only then."""
    for signum in caught:
        reactor.callLater(0, os.kill, os.getpid(), signum)
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

"""The connector's first exchange before Twisted is imported (gasoline.connect.fast): the agent's
initialize is answered by the daemon on the connector's own session and the rest is handed over;
anything unexpected falls back to the ordinary path having written nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import orjson
import pytest

from gasoline.connect.fast import daemon_port, first_exchange, parse_args

INIT = {"jsonrpc": "2.0", "id": 7, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}


def pipes(data: bytes):
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    out_r, out_w = os.pipe()
    return r, out_r, out_w


def run(argv, data: bytes):
    stdin, out_r, out_w = pipes(data)
    try:
        prelude = first_exchange(argv, stdin=stdin, stdout=out_w)
    finally:
        os.close(stdin)
        os.close(out_w)
    with os.fdopen(out_r, "rb") as f:
        written = f.read()
    return prelude, written


def test_initialize_is_answered_by_the_daemon_and_the_rest_handed_over(daemon):
    rest = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n{"jsonrpc":"2.0","id":8,'
    prelude, written = run(["--port", str(daemon.port), "--client-id", "fast-1",
                            "--state-dir", str(daemon.state_dir), "--no-autostart"],
                           json.dumps(INIT).encode() + b"\n" + rest)
    answer = orjson.loads(written)
    assert written.endswith(b"\n") and written.count(b"\n") == 1
    assert answer["id"] == 7 and answer["result"]["serverInfo"]["name"] == "gasoline"
    assert prelude.init_message == INIT and prelude.leftover == rest
    assert len(prelude.connection_id) == 16
    # The daemon has that connection's session: the client is live.
    import urllib.request

    with urllib.request.urlopen(f"{daemon.url}/health", timeout=5) as resp:
        ids = [c["id"] for c in json.loads(resp.read())["clients"]["list"]]
    assert "fast-1" in ids


def test_the_proof_is_made_with_the_key_of_the_state_dir_the_daemon_reports(daemon, tmp_path):
    """The fast path proves its client id with the key of the state dir it is given (the same
    HMAC as gasoline.common.client_proof); when that dir holds no key, or another dir's key (the
    daemon answers 403), it asks the daemon's /health where its state dir is and proves the id
    with the key there, as the ordinary path does: the agent's initialize is answered on the
    fast path either way."""
    from gasoline.common import client_proof as proof_of, read_client_key
    from gasoline.connect.fast import proof_in as client_proof

    key = read_client_key(daemon.state_dir)
    assert client_proof({"--state-dir": str(daemon.state_dir)}, "fast-2") == proof_of(key, "fast-2")
    assert client_proof({"--state-dir": str(tmp_path)}, "fast-2") is None
    data = json.dumps(INIT).encode() + b"\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cid, argv in [("fast-2", ["--state-dir", str(elsewhere)]),  # no key there
                      ("fast-3", [])]:  # only --port: the default dir (here, an empty one)
        env = dict(os.environ)
        os.environ["GASOLINE_STATE_DIR"] = str(elsewhere)
        try:
            prelude, written = run(["--port", str(daemon.port), "--client-id", cid, *argv], data)
        finally:
            os.environ.clear()
            os.environ.update(env)
        assert orjson.loads(written)["result"]["serverInfo"]["name"] == "gasoline"
        assert prelude.init_message == INIT
    (elsewhere / "client-key").write_bytes(b"A" * 43 + b"\n")  # a key, not the daemon's
    prelude, written = run(["--port", str(daemon.port), "--client-id", "fast-4",
                            "--state-dir", str(elsewhere)], data)
    assert orjson.loads(written)["id"] == 7 and prelude.init_message == INIT
    import urllib.request

    with urllib.request.urlopen(f"{daemon.url}/health", timeout=5) as resp:
        health = json.loads(resp.read())
    assert {"fast-2", "fast-3", "fast-4"} <= {c["id"] for c in health["clients"]["list"]}
    assert health["state_dir"] == str(daemon.state_dir)


def test_without_a_readable_key_anywhere_nothing_is_sent(tmp_path):
    """The daemon's state dir holds no key file either (the daemon keeps its key in memory): the
    fast path falls back having written nothing, and the daemon has no session for that id."""
    from support import DaemonProcess

    with DaemonProcess(state_dir=tmp_path / "state") as d:
        (Path(d.state_dir) / "client-key").unlink()
        data = json.dumps(INIT).encode() + b"\n"
        prelude, written = run(["--port", str(d.port), "--client-id", "fast-5",
                                "--state-dir", str(tmp_path)], data)
        assert written == b"" and prelude.init_message is None and prelude.leftover == data
        import urllib.request

        with urllib.request.urlopen(f"{d.url}/health", timeout=5) as resp:
            health = json.loads(resp.read())
        assert "fast-5" not in [c["id"] for c in health["clients"]["list"]]


@pytest.mark.parametrize("xdg", [None, "", "/tmp/xdg-state-elsewhere"])
def test_the_fast_paths_default_state_dir_is_the_connectors(monkeypatch, xdg):
    """The fast path finds the default state dir without importing platformdirs on Linux: the
    same dir as gasoline.common.default_state_dir, and as platformdirs' (nothing is read or
    written there)."""
    import platformdirs

    from gasoline.common import default_state_dir
    from gasoline.connect.fast import state_dir

    monkeypatch.delenv("GASOLINE_STATE_DIR", raising=False)
    if xdg is None:
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_STATE_HOME", xdg)
    assert state_dir({}) == str(default_state_dir()) == platformdirs.user_state_dir(
        "gasoline", appauthor=False)
    assert state_dir({"--state-dir": "/x"}) == "/x"
    monkeypatch.setenv("GASOLINE_STATE_DIR", "/y")
    assert state_dir({}) == "/y" == str(default_state_dir())


def test_no_daemon_falls_back_with_nothing_written():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    data = json.dumps(INIT).encode() + b"\n"
    prelude, written = run(["--port", str(port)], data)
    assert written == b""
    assert prelude.init_message is None and prelude.leftover == data


@pytest.mark.parametrize("first", [
    b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
    b'{"jsonrpc":"2.0","method":"initialize"}',  # a notification, not a request
    b'{broken',
    b'[{"jsonrpc":"2.0","id":1,"method":"initialize"}]',
])
def test_anything_but_an_initialize_request_falls_back(first):
    prelude, written = run(["--port", "1"], first + b"\nmore")
    assert written == b"" and prelude.init_message is None
    assert prelude.leftover == first + b"\nmore"


def test_unknown_options_skip_the_fast_path_without_reading_stdin():
    assert parse_args(["--help"]) is None
    assert parse_args(["--version"]) is None
    assert parse_args(["--port"]) is None
    assert parse_args(["--port", "7891", "--client-id=x", "--no-autostart"]) == {
        "--port": "7891", "--client-id": "x", "--no-autostart": ""}
    assert parse_args(["-p", "1234"]) == {"--port": "1234"}
    assert first_exchange(["--bogus"], stdin=-1, stdout=-1) is None  # never touched the fds


def test_only_plain_http_loopback_daemons_are_tried():
    assert daemon_port({}) == 7890
    assert daemon_port({"--url": "http://127.0.0.1:8123/"}) == 8123
    assert daemon_port({"--url": "http://localhost:8123"}) == 8123
    assert daemon_port({"--url": "https://127.0.0.1:8123"}) is None
    assert daemon_port({"--url": "http://10.0.0.2:8123"}) is None
    assert daemon_port({"--port": "99999"}) is None


# -- the first exchange's JSON -------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gasoline.connect.fast import loads  # noqa: E402

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_json_values, st.sampled_from(["", " ", "\t", "\r\n", "\n  "]), st.booleans())
def test_loads_parses_what_json_loads_parses(value, pad, ascii_only):
    text = pad + json.dumps(value, ensure_ascii=ascii_only, indent=1 if pad else None) + pad
    assert loads(text.encode()) == json.loads(text)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40) | st.text(alphabet='{}[]",:0123456789.eE-+ truefalsn\\\t\n',
                                        max_size=40).map(str.encode))
def test_loads_rejects_what_json_loads_rejects(data):
    # The connector's lines are UTF-8 (json.loads would also guess UTF-16/32 from bytes).
    try:
        expected = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        with pytest.raises(ValueError):
            loads(data)
    else:
        assert loads(data) == expected


@pytest.mark.parametrize("text", [
    '"\\ud83d\\ude00"', '"\\ud83d"', '"\\ud83dx"', '"\\ud83d\\u0041"', '"\\ude00\\ud83d"',
    '"\\ud83d\\uZZZZ"', '"\\u00e9\\u00E9"', '"\\u12"', '"\\u+123"', '"\\u 123"', '"\\x41"',
    '"a\\/b\\b\\f\\n\\r\\t\\"\\\\"', '"tab\there"', '"\x7f\u00e9\u2028"', '"',
    '"\\"', "NaN", "Infinity", "-Infinity", "[NaN,-Infinity]", "-", "-0", "-0.0", "0.5e-3",
    "1E+2", "01", "1.", ".5", "1e", "1e+", "-a", "1.5e400", "9" * 30, "true ", " false", "nul",
    "[1,]", "{,}", '{"a":1,}', '{"a" 1}', '{"a":1 "b":2}', '{"a":1,"a":2}', "[]", "{}",
    "[ ]", "{ }", '{"a":[{}]}', "\ufeff{}", "", " ", "[1 2]", '{1:2}', "tru", "truex",
])
def test_loads_agrees_with_json_loads_on_the_edges(text):
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            loads(text.encode("utf-8", "surrogatepass"))
    else:
        got = loads(text.encode("utf-8", "surrogatepass"))
        assert repr(got) == repr(expected)  # repr: NaN equals nothing, -0.0 equals 0


def test_loads_turns_hostile_nesting_into_value_error():
    with pytest.raises(ValueError):
        loads(b"[" * 200_000)
    with pytest.raises(ValueError):
        loads(b'{"a": 1} {"b": 2}')


def test_the_first_exchange_imports_no_twisted_and_no_private_module():
    """What C{gasoline connect} imports before it answers initialize (the cost of start-up):
    neither Twisted, attrs nor orjson, and no private module of CPython's (C{_json},
    C{_socket}, ... are imported by the public modules, never by name here)."""
    import subprocess
    import sys

    def modules(imports: str) -> set[str]:
        code = f"import sys; {imports}; print(' '.join(sorted(sys.modules)))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        return set(out.stdout.split())

    # What this interpreter loads anyway (its site and .pth files) is not the fast path's cost.
    loaded = modules("import gasoline.cli, gasoline.connect.fast") - modules("pass")
    assert "gasoline.connect.fast" in loaded
    for heavy in ("twisted", "attrs", "orjson", "treq", "klein"):
        assert heavy not in loaded, f"{heavy} is imported before initialize is answered"
    # Standard-library modules that cost milliseconds and that the fast path does without
    # (typing: annotations only; re: through json and base64; the JSON parse is fast.loads).
    for costly in ("typing", "re", "json", "base64", "pathlib", "platformdirs", "argparse"):
        assert costly not in loaded, f"{costly} is imported before initialize is answered"
    import ast
    import inspect

    import gasoline.connect.fast

    tree = ast.parse(inspect.getsource(gasoline.connect.fast))
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names]
    imported += [node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module]
    assert [name for name in imported if name.startswith("_") and name != "__future__"] == []


def test_a_multi_line_daemon_answer_is_written_as_one_line(tmp_path):
    """The daemon's answer is passed on as its own bytes, with JSON's CR/LF whitespace removed."""
    import socket
    import threading

    answer = {"jsonrpc": "2.0", "id": 7,
              "result": {"serverInfo": {"name": "gasoline", "version": "x"},
                         "instructions": "line one\nline two\r\n"}}
    body = json.dumps(answer, indent=2, ensure_ascii=False).encode() + b"\r\n"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]

    def serve():
        conn, _ = server.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        (tmp_path / "client-key").write_bytes(b"A" * 43 + b"\n")
        prelude, written = run(["--port", str(port), "--client-id", "fast-ml",
                                "--state-dir", str(tmp_path)],
                               json.dumps(INIT).encode() + b"\n")
    finally:
        thread.join(5)
        server.close()
    assert written.endswith(b"\n") and written.count(b"\n") == 1
    assert json.loads(written) == answer
    assert prelude.init_message == INIT


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.text(max_size=64), st.sampled_from(["", "\n", "=\n"]))
def test_the_first_exchanges_proof_is_the_daemons(tmp_path_factory, key, cid, tail):
    from gasoline.common import client_proof as proof_of, encode_client_key, read_client_key
    from gasoline.connect.fast import proof_in as client_proof

    state = tmp_path_factory.mktemp("key")
    encoded = encode_client_key(key).strip()
    (state / "client-key").write_bytes(encoded + tail.encode())
    got = client_proof({"--state-dir": str(state)}, cid)
    if tail == "=\n":  # padding the daemon never writes, and refuses to read
        with pytest.raises(ValueError):
            read_client_key(state)
        assert got is None
        return
    assert read_client_key(state) == key
    assert got == proof_of(key, cid)
    (state / "client-key").write_bytes(encoded[:-2] + b"!!")
    assert client_proof({"--state-dir": str(state)}, cid) is None


def test_the_first_exchange_knows_exactly_the_connectors_options():
    """One declaration (gasoline.connect.options) for both parsers: every option of
    C{gasoline connect} but --help/--version is parsed by the first exchange too, under its long
    name, short spellings included; anything else is left to the ordinary parser."""
    from gasoline.connect.main import ConnectOptions

    options = ConnectOptions()
    takes_value = {name[:-1] for name in options.longOpt if name.endswith("=")}
    flags = {name for name in options.longOpt if not name.endswith("=")} - {"help", "version"}
    assert takes_value and flags
    for name in takes_value:
        assert parse_args([f"--{name}", "v"]) == parse_args([f"--{name}=v"]) == {f"--{name}": "v"}
    for name in flags:
        assert parse_args([f"--{name}"]) == {f"--{name}": ""}
    for short in options.shortOpt.replace(":", ""):
        if short not in "hV":  # --help, --version
            long_name = options.synonyms[short]
            assert parse_args([f"-{short}", "v"]) == {f"--{long_name}": "v"}
    assert parse_args(["--help"]) is None and parse_args(["--version"]) is None
    assert parse_args(["--no-such-option"]) is None

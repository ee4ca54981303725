"""C{--state-key-file}: journals, client state and documents encrypted at rest (AES-GCM), checked
by writing entries with known plaintext markers and searching every file of the state dir."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import orjson
import pytest
from twisted.internet.task import Clock

from _mcp_calls import call, session_for
from gasoline.app import Config, build
from gasoline.core.storage.atrest import CHECK_FILE, AtRest, StateKeyError, load_state_key
from gasoline.core.storage.store import ACTIONS, CONSOLE, NETWORK_BODIES, WEBSOCKET_EVENTS

MARKERS = {
    CONSOLE: "PLAINTEXT-CONSOLE-MARKER-7f3a",
    NETWORK_BODIES: "PLAINTEXT-BODY-MARKER-91c2",
    ACTIONS: "PLAINTEXT-ACTION-MARKER-44d0",
    WEBSOCKET_EVENTS: "PLAINTEXT-WS-MARKER-0be8",
}
KV_MARKER = "PLAINTEXT-KV-MARKER-5e61"
NOISE_MARKER = "PLAINTEXT-NOISE-MARKER-c3d9"


def key_file(tmp_path: Path, name: str = "key", key: str | None = None) -> Path:
    path = tmp_path / name
    path.write_text((key or secrets.token_hex(32)) + "\n")
    path.chmod(0o600)
    return path


def entries(buffer: str, n: int, start: int = 0) -> list[dict]:
    marker = MARKERS[buffer]
    if buffer == NETWORK_BODIES:
        return [{"url": f"http://x/{i}", "method": "POST", "status": 200,
                 "request_body": f"{marker} {i}", "response_body": f"ok {marker}"}
                for i in range(start, start + n)]
    if buffer == WEBSOCKET_EVENTS:
        return [{"event": "message", "id": "c", "url": "ws://x", "data": f"{marker} {i}"}
                for i in range(start, start + n)]
    if buffer == ACTIONS:
        return [{"type": "input", "value": f"{marker} {i}", "url": "http://x/"}
                for i in range(start, start + n)]
    return [{"level": "log", "message": f"{marker} {i}"} for i in range(start, start + n)]


def files_holding(root: Path, needles: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits = [n for n in needles if n.encode() in data]
            if hits:
                found[str(path.relative_to(root))] = hits
    return found


def run(state: Path, key: Path | None, clock: Clock, work) -> None:
    app = build(Config(state_dir=state, persist=True, max_entries=200, state_key_file=key), clock)
    app.services.startService()
    try:
        work(app)
        clock.advance(6)  # syncs, a compaction check, client state flush
    finally:
        app.services.stopService()
        app.mcp.close_all()
        app.streaming.stop()
        app.extension.stop()
        app.router.close()


def test_nothing_is_written_in_clear_and_everything_comes_back(tmp_path):
    state, key, clock = tmp_path / "state", key_file(tmp_path), Clock()
    clock.advance(1_700_000_000)
    needles = [*MARKERS.values(), KV_MARKER, NOISE_MARKER]

    def first(app):
        for buffer in MARKERS:
            app.store.add(buffer, entries(buffer, 150))
        me = session_for(app, "agent-a")
        assert not call(app, me, "configure", {"what": "store", "key": "k",
                                               "value": KV_MARKER})[0]
        assert not call(app, me, "configure", {"what": "noise_rule", "action": "add", "scope":
                                               "global", "rules": [{"message_regex": NOISE_MARKER}]})[0]

    run(state, key, clock, first)
    assert files_holding(state, needles) == {}
    journal = (state / "console.jsonl").read_bytes().splitlines()
    assert journal and all(line.startswith((b"!", b"#seq ")) for line in journal)

    # Restart with the same key: every entry, the kv value and the noise rule are back; more
    # writes and a compaction (the console file holds 450 > 2 x 200 lines) stay sealed.
    def second(app):
        for buffer in MARKERS:
            assert MARKERS[buffer] in orjson.loads(app.store.buffers[buffer].get(
                app.store.buffers[buffer].head - 1)).__repr__()
        me = session_for(app, "agent-a")
        _, _, loaded = call(app, me, "configure", {"what": "load", "key": "k"})
        assert KV_MARKER in orjson.dumps(loaded).decode()
        assert NOISE_MARKER in orjson.dumps(app.noise_global.to_json()).decode()
        app.store.add(CONSOLE, entries(CONSOLE, 300, 150))
        clock.advance(6)
        assert app.persistence.journals[CONSOLE].compactions >= 1

    run(state, key, clock, second)
    assert files_holding(state, needles) == {}


def test_clear_state_written_before_the_key_is_rewritten_sealed(tmp_path):
    state, clock = tmp_path / "state", Clock()
    clock.advance(1_700_000_000)

    def clear(app):
        app.store.add(CONSOLE, entries(CONSOLE, 10))
        me = session_for(app, "agent-a")
        call(app, me, "configure", {"what": "store", "key": "k", "value": KV_MARKER})

    run(state, None, clock, clear)
    assert files_holding(state, [MARKERS[CONSOLE], KV_MARKER])  # in clear: no key yet

    def sealed(app):
        ring = app.store.buffers[CONSOLE]
        assert len(ring) == 10  # read from the clear journal
        session_for(app, "agent-a")  # its state is read, then rewritten sealed

    run(state, key_file(tmp_path), clock, sealed)
    assert files_holding(state, [MARKERS[CONSOLE], KV_MARKER]) == {}


def test_a_wrong_missing_or_unsafe_key_is_one_clear_line(tmp_path):
    state, clock = tmp_path / "state", Clock()
    run(state, key_file(tmp_path), clock, lambda app: app.store.add(CONSOLE, entries(CONSOLE, 3)))
    assert (state / CHECK_FILE).exists()
    with pytest.raises(StateKeyError, match="wrong key"):
        build(Config(state_dir=state, persist=True, state_key_file=key_file(tmp_path, "other")),
              clock)
    with pytest.raises(StateKeyError, match="holds encrypted state: start with --state-key-file"):
        build(Config(state_dir=state, persist=True), clock)
    loose = key_file(tmp_path, "loose")
    loose.chmod(0o644)
    with pytest.raises(StateKeyError, match="readable by others"):
        load_state_key(loose)
    with pytest.raises(StateKeyError, match="no such file"):
        load_state_key(tmp_path / "nope")
    with pytest.raises(StateKeyError, match="64 hexadecimal"):
        load_state_key(key_file(tmp_path, "short", "abcd"))
    for error in (StateKeyError,):
        assert "\n" not in str(error("x"))


def test_the_daemon_options_refuse_with_one_line(tmp_path):
    from gasoline.tap import OptionError, Options

    state = tmp_path / "state"
    key = key_file(tmp_path)
    AtRest(load_state_key(key)).check_state_dir(state)
    cases = [
        (["--state-dir", str(state), "--state-key-file", str(key_file(tmp_path, "k2"))],
         "wrong key"),
        (["--state-dir", str(state)], "holds encrypted state"),
        (["--state-dir", str(state), "--state-key-file", str(key), "--log-dir",
          str(tmp_path / "logs")], "--log-dir writes plain-text logs"),
    ]
    for argv, words in cases:
        with pytest.raises(OptionError) as e:
            Options().parseOptions(argv)
        assert words in str(e.value) and "\n" not in str(e.value)
    ok = Options()
    ok.parseOptions(["--state-dir", str(state), "--state-key-file", str(key)])
    assert ok.config().state_key_file == key


def test_a_sealed_line_is_bound_to_its_journal_and_fresh_per_generation():
    at_rest = AtRest(os.urandom(32))
    one, two = at_rest.line_sealer(b"journal:console"), at_rest.line_sealer(b"journal:console")
    line = b'{"message":"hello"}'
    a, b = one.seal(line), two.seal(line)
    assert a != b  # another generation: another salt, another key
    assert at_rest.open_line(a, b"journal:console") == line
    assert at_rest.open_line(a, b"journal:actions") is None  # not another journal's line
    assert at_rest.open_line(a[:-4] + b"AAAA", b"journal:console") is None
    assert AtRest(os.urandom(32)).open_line(a, b"journal:console") is None

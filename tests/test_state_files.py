"""
Every state file, corrupted: one line naming it and the fix, never a traceback, never failing open.

The state files are enumerated from a state dir a daemon really filled (every buffer journaled,
an extension pinned, a launched browser's grant, a client's saved state, the daemon-wide noise
rules, the proxy's sessions, the sequence numbers, the key files): each must be classified in
L{STATE_FILES} (a new file fails here until it is). Then each is corrupted (garbage bytes, and
JSON of the wrong shape) and the daemon is built again through C{makeService}:

 - the three files that say who may do what (C{identity.pem}, C{extension-pin.json},
   C{client-key}) stop the start with one line (L{gasoline.tap.OptionError}) naming the file and
   the fix; a corrupt pin file used to read as "nothing pinned": unpaired capture was accepted
   and the next extension key pinned itself;
 - every other file is set aside (C{<name>.corrupt}) with one warning naming it, what the daemon
   goes on without and the fix, and the daemon starts (journals skip their corrupt lines and say
   the next compaction rewrites them).

Then through the real C{twistd}: the start-stoppers are one line on the terminal; and a pin file
corrupted while the daemon runs fails closed (pairing and unpaired capture refused with the line,
the pinned extension's own session goes on, the file is not overwritten) until `gasoline pair
forget` replaces it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from test_startup_errors import one_line, start
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import globalLogPublisher

from gasoline.core.trust.pairing import ChallengeRefused
from gasoline.core.trust.pins import PIN_REFRESH, pair_command, write_launch_grant
from gasoline.core.storage.store import DEFAULT_BUFFERS
from gasoline.tap import OptionError, Options, makeService
from gasoline.testing import PairedExtensionKeys

#: pattern (relative path, ids as <id>) -> "stops" (the start stops with one line), "aside"
#: (moved to .corrupt with one line), "journal" (corrupt lines skipped, one line), "rewritten"
#: (written at every start, never read by the daemon).
STATE_FILES = {
    "identity.pem": "stops",
    "extension-pin.json": "stops",
    "client-key": "stops",
    "sequence.json": "aside",
    "noise-global.json": "aside",
    "proxy-sessions.json": "aside",
    "clients/<id>.json": "aside",
    "launched/<id>.json": "aside",
    "daemon.json": "rewritten",
    **{f"{buffer}.jsonl": "journal" for buffer in DEFAULT_BUFFERS},
}


class Logged:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, event) -> None:
        from twisted.logger import formatEvent

        if event.get("log_level") is not None and event["log_level"].name in ("warn", "error",
                                                                               "critical"):
            self.lines.append(formatEvent(event))

    def __enter__(self) -> "Logged":
        globalLogPublisher.addObserver(self)
        return self

    def __exit__(self, *exc) -> None:
        globalLogPublisher.removeObserver(self)


def make(state: Path, proxy_config: Path):
    options = Options()
    options.parseOptions(["--state-dir", str(state), "--listen", "tcp:0:interface=127.0.0.1",
                          "--proxy-config", str(proxy_config)])
    reactor = MemoryReactorClock()
    top = makeService(options, reactor=reactor)
    return top, reactor


def fill(tmp_path: Path) -> tuple[Path, Path, PairedExtensionKeys, PairedExtensionKeys]:
    """A state dir a daemon filled: every file it keeps."""
    state = tmp_path / "state"
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"fs": {"command": "fs-server"}}}))
    top, reactor = make(state, servers)
    top.startService()
    app = top.gasoline
    for buffer in DEFAULT_BUFFERS:
        app.daemon.store.add(buffer, [{"level": "info", "message": "m", "url": "http://x/"}])
    ident = app.daemon.extension.identity
    ext = PairedExtensionKeys(ident.public_key)
    assert ext.finish(ident.challenge(ext.challenge()))  # pins it
    launched = PairedExtensionKeys(ident.public_key)
    write_launch_grant(state, launched.public, os.getpid())
    app.daemon.registry.register("agent-one").mark_dirty()
    app.noise_global.add("boring")
    app.daemon.noise_file.mark_dirty()
    (state / "proxy-sessions.json").write_text('{"version": 1, "sessions": []}')
    reactor.advance(5)
    RUNNING[str(state)] = set(files_of(state))  # daemon.json is there while the daemon runs
    top.stopService()
    return state, servers, ext, launched


RUNNING: dict[str, set[str]] = {}


def pattern_of(relative: str) -> str:
    return re.sub(r"^(clients|launched)/[^/]+\.json$", r"\1/<id>.json", relative)


def files_of(state: Path) -> dict[str, Path]:
    return {pattern_of(str(p.relative_to(state))): p for p in state.rglob("*") if p.is_file()}


def test_every_state_file_is_classified(tmp_path):
    state, *_ = fill(tmp_path)
    found = set(files_of(state)) | RUNNING[str(state)]
    assert found == set(STATE_FILES), (
        "state files the daemon keeps but this test does not classify (or no longer made): "
        f"{set(found) ^ set(STATE_FILES)}")


CORRUPTIONS = {"garbage": b"\x00\xff{not json at all\n", "wrong shape": b"[1, 2, 3]\n"}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
@pytest.mark.parametrize("name", sorted(STATE_FILES))
def test_a_corrupt_state_file_is_one_line_naming_it_and_the_fix(tmp_path, name, corruption):
    state, servers, _, launched = fill(tmp_path)
    path = files_of(state).get(name, state / name)
    path.write_bytes(CORRUPTIONS[corruption])
    kind = STATE_FILES[name]
    with Logged() as logged:
        if kind == "stops":
            with pytest.raises(OptionError) as stopped:
                make(state, servers)
            line = str(stopped.value.code)
            assert line.startswith("gasoline: ") and "\n" not in line, line
            assert str(path) in line, line
            assert re.search(r"remove it|move it aside|gasoline pair forget", line), line
            assert path.read_bytes() == CORRUPTIONS[corruption]  # left for the user
            return
        top, reactor = make(state, servers)
        top.startService()
        if name == "launched/<id>.json":  # read at the launched browser's challenge
            ident = top.gasoline.daemon.extension.identity
            browser = PairedExtensionKeys(ident.public_key, extension_key=launched.private)
            with pytest.raises(ChallengeRefused) as refused:
                ident.challenge(browser.challenge())
            assert refused.value.status == 403  # no grant: refused, never pinned
        reactor.advance(5)
        running = path.read_bytes() if path.exists() else b""
        top.stopService()
    mine = [line for line in logged.lines if str(path) in line]
    if kind == "rewritten":
        assert json.loads(running)["pid"] == os.getpid()  # the start wrote it anew
        assert mine == []
        return
    assert len(mine) == 1, logged.lines
    line = mine[0]
    assert "\n" not in line
    if kind == "journal":
        assert "corrupt" in line and "nothing to do" in line, line
        return
    aside = path.with_name(path.name + ".corrupt")
    assert aside.read_bytes() == CORRUPTIONS[corruption], line
    assert f"moved to {aside}" in line and "goes on without" in line, line
    assert f"remove {aside.name}" in line, line


@pytest.mark.parametrize("name", ["identity.pem", "extension-pin.json", "client-key"])
def test_the_real_daemon_stops_with_one_line(tmp_path, name):
    state, *_ = fill(tmp_path)
    (state / name).write_bytes(b"\x00garbage\n")
    proc = start(["gasoline", "--state-dir", str(state), "--listen",
                  "tcp:0:interface=127.0.0.1"], tmp_path)
    line = one_line(proc)
    assert str(state / name) in line, line


def test_a_pin_file_corrupted_while_running_fails_closed_until_pair_forget(tmp_path):
    state, servers, ext, _ = fill(tmp_path)
    top, reactor = make(state, servers)
    top.startService()
    ident = top.gasoline.daemon.extension.identity
    worker = PairedExtensionKeys(ident.public_key, extension_key=ext.private)
    assert worker.finish(ident.challenge(worker.challenge()))
    pin = state / "extension-pin.json"
    pin.write_bytes(b"{broken")
    reactor.advance(PIN_REFRESH + 0.1)
    with Logged() as logged:
        for challenge in (PairedExtensionKeys(ident.public_key).challenge(),
                          PairedExtensionKeys(ident.public_key).challenge(with_key=False)):
            with pytest.raises(ChallengeRefused) as refused:
                ident.challenge(challenge)
            assert refused.value.status == 503 and str(pin) in str(refused.value)
            assert "gasoline pair forget" in str(refused.value)

        class Unpaired:
            def getHeader(self, name):
                return None

        status, message, extra = ident.admit(Unpaired())
        assert status == 503 and extra["code"] == "pin_file_corrupt" and str(pin) in message
    assert len([line for line in logged.lines if str(pin) in line]) <= 1
    assert ident.session(worker.session) is not None  # the proven session goes on
    assert pin.read_bytes() == b"{broken"  # never overwritten: the user's to fix
    code, text = pair_command(state, None)
    assert code == 1 and "gasoline pair forget" in text
    code, text = pair_command(state, "forget")
    assert code == 0, text
    reactor.advance(PIN_REFRESH + 0.1)
    newcomer = PairedExtensionKeys(ident.public_key)
    assert newcomer.finish(ident.challenge(newcomer.challenge()))  # pinned anew
    top.stopService()


def test_an_identity_whose_private_part_is_damaged_refuses_pairing_with_the_line(tmp_path):
    """The start reads only the public key (cryptography is imported at the first challenge): a
    key file whose public part reads but whose private part is damaged is found then, and each
    challenge is refused (503) with the line naming the file and the fix, never a traceback."""
    from twisted.internet.task import Clock

    from gasoline.core.trust.pairing import DaemonIdentity

    DaemonIdentity.from_state_dir(tmp_path / "good", Clock())
    pem = (tmp_path / "good" / "identity.pem").read_bytes()
    damaged = None
    for n in range(40, len(pem) - 40):
        candidate = pem[:n] + bytes([pem[n] ^ 0x21]) + pem[n + 1:]
        state = tmp_path / f"d{n}"
        state.mkdir()
        (state / "identity.pem").write_bytes(candidate)
        try:
            ident = DaemonIdentity.from_state_dir(state, Clock())
        except Exception:
            continue  # refused at start: the other test's case
        try:
            ident._private_key()
        except ChallengeRefused:
            damaged = (state, ident)
            break
    assert damaged is not None
    state, _ = damaged
    ident = DaemonIdentity.from_state_dir(state, Clock())  # a fresh start on that file
    with Logged() as logged:
        for _ in range(3):
            with pytest.raises(ChallengeRefused) as refused:
                ident.challenge(PairedExtensionKeys(ident.public_key).challenge())
            assert refused.value.status == 503 and refused.value.code == "identity_file_corrupt"
            assert str(state / "identity.pem") in str(refused.value)
            assert "move it aside" in str(refused.value)
    assert len([line for line in logged.lines if "identity.pem" in line]) == 1
    assert ident.pins.pinned is None  # nothing pinned over a key that cannot answer


@pytest.mark.parametrize("content", [b"", b"garbage\n", b"\x00\xff"])
def test_the_connector_sets_aside_a_pid_file_twistd_would_refuse(tmp_path, content):
    """gasoline.pid is the connector's (twistd's --pidfile): one that holds no number made twistd
    refuse to start ("contains non-numeric value") on every attempt. The connector moves it aside
    with one line; a number (live or stale) is left for twistd to judge."""
    from gasoline.connect.discovery import Spawner

    class Recording:
        spawned = 0

        def spawnProcess(self, *args, **kwargs):
            Recording.spawned += 1

    state = tmp_path / "state"
    state.mkdir()
    (state / "gasoline.pid").write_bytes(content)
    with Logged() as logged:
        Spawner(Recording(), 7891, state)()
    assert not (state / "gasoline.pid").exists()
    assert (state / "gasoline.pid.corrupt").read_bytes() == content
    mine = [line for line in logged.lines if "gasoline.pid" in line]
    assert len(mine) == 1 and "remove that file" in mine[0] and Recording.spawned == 1
    (state / "gasoline.pid").write_bytes(b"12345\n")
    Spawner(Recording(), 7891, state)()
    assert (state / "gasoline.pid").read_bytes() == b"12345\n"

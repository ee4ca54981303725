"""Launched browsers beside the pinned extension: `gasoline browser` grants the launched extension's
key for the launch (gasoline.core.trust.pins launch grants) without displacing the user's pin."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_identity import Daemon, Extension

from gasoline.cli import main as cli_main
from gasoline.core.trust.identity import PairingError, b64u
from gasoline.core.trust.pairing import MAX_LAUNCHED_SESSIONS
from gasoline.core.trust.pins import (
    LAUNCHED_DIR,
    MAX_LAUNCHED,
    PIN_FILE,
    launch_grant_path,
    live_launch_grants,
    read_launch_grant,
    write_launch_grant,
)
from gasoline.testing import PairedExtensionKeys


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def pairing(d: Daemon) -> dict:
    return json.loads(d.call("GET", "/health")[1])["capture"]["pairing"]


def logs(d: Daemon) -> list[str]:
    return [e.get("message") for e in json.loads(d.call("GET", "/snapshot")[1])["logs"]]


def challenge(d: Daemon, ext: Extension):
    r, body = d.call("POST", "/pairing/challenge", ext.challenge())
    return r.code, json.loads(body)


def test_a_granted_launch_pairs_beside_the_pin_and_ends_with_its_grant(tmp_path, capsys):
    d = Daemon(tmp_path)
    user = Extension(d.public_key)
    assert user.pair(d)
    pin_before = (tmp_path / PIN_FILE).read_bytes()
    launched = Extension(d.public_key)
    code, answer = challenge(d, launched)
    assert code == 403 and answer["code"] == "extension_not_pinned"  # no grant: refused as before

    grant = write_launch_grant(tmp_path, launched.public, pid=os.getpid())
    assert oct(grant.stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / LAUNCHED_DIR).stat().st_mode & 0o777) == "0o700"
    code, answer = challenge(d, launched)
    assert code == 200 and answer["launched"] is True
    assert answer["extension_fingerprint"] == launched.fingerprint
    assert launched.finish(answer)
    r, body, _ = launched.post(d, "/logs", {"entries": [{"level": "error", "message": "from the launch"}]})
    assert r.code == 200 and "from the launch" in logs(d)
    # the user's extension keeps its pin and its session
    r, _, _ = user.post(d, "/logs", {"entries": [{"level": "info", "message": "user still"}]})
    assert r.code == 200
    summary = pairing(d)
    assert summary["extension_fingerprint"] == user.fingerprint
    assert summary["launched_extensions"] == [launched.fingerprint]
    assert summary["sessions_by_kind"]["launched"] == 1 and summary["paired"] is True
    assert json.loads((tmp_path / PIN_FILE).read_text())["pinned"] == json.loads(pin_before)["pinned"]

    assert cli_main(["pair", "--state-dir", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    assert f"launched browser's extension: {launched.fingerprint}" in listing
    assert f"pinned extension: {user.fingerprint}" in listing

    grant.unlink()  # the launcher ended the browser
    d.clock.advance(1.5)
    assert pairing(d)["launched_extensions"] == []  # gone from the summary before any use
    r, body, _ = launched.post(d, "/logs", {"entries": [{"level": "error", "message": "after"}]})
    assert r.code == 401 and json.loads(body)["code"] == "unknown_session"
    code, answer = challenge(d, launched)
    assert code == 403 and answer["code"] == "extension_not_pinned"
    assert pairing(d)["launched_extensions"] == []
    r, _, _ = user.post(d, "/logs", {"entries": [{"level": "info", "message": "user after"}]})
    assert r.code == 200


def test_a_launched_key_never_takes_the_first_pin(tmp_path):
    """On a daemon nothing is pinned on yet, the launched browser's key must not become the pin:
    the user's own extension, pairing later, is pinned."""
    d = Daemon(tmp_path)
    launched = Extension(d.public_key)
    write_launch_grant(tmp_path, launched.public, pid=os.getpid())
    assert launched.pair(d)
    assert pairing(d)["extension_fingerprint"] is None
    user = Extension(d.public_key)
    assert user.pair(d)
    assert pairing(d)["extension_fingerprint"] == user.fingerprint
    r, _, _ = launched.post(d, "/logs", {"entries": [{"level": "info", "message": "launch"}]})
    assert r.code == 200


def test_void_grants_open_nothing(tmp_path):
    """Every way a grant file can be void: its launcher is gone (the file is removed), it names
    another key, it is not JSON, it is too large, its pid is not a number."""
    d = Daemon(tmp_path)
    assert Extension(d.public_key).pair(d)  # the user's pin
    launched = Extension(d.public_key)
    other = PairedExtensionKeys(d.public_key)
    path = launch_grant_path(tmp_path, launched.fingerprint)
    path.parent.mkdir(mode=0o700)
    me = os.getpid()
    path.write_text(json.dumps({"key": b64u(launched.public), "pid": dead_pid()}))
    code, answer = challenge(d, launched)
    assert code == 403 and answer["code"] == "extension_not_pinned"
    assert not path.exists()  # the daemon removed the grant of a launcher that is gone
    variants = {
        "another key": {"key": b64u(other.public), "pid": me},
        "pid not a number": {"key": b64u(launched.public), "pid": str(me)},
        "pid a bool": {"key": b64u(launched.public), "pid": True},
        "pid 0 (a process group)": {"key": b64u(launched.public), "pid": 0},
        "pid negative": {"key": b64u(launched.public), "pid": -1},
        "not an object": [b64u(launched.public), me],
    }
    for what, content in variants.items():
        path.write_text(json.dumps(content))
        code, answer = challenge(d, launched)
        assert code == 403 and answer["code"] == "extension_not_pinned", what
    for raw in (b"{not json", b'{"key": "' + b"A" * 5000 + b'", "pid": 1}'):
        path.write_bytes(raw)
        code, _ = challenge(d, launched)
        assert code == 403
    assert read_launch_grant(tmp_path, launched.public) is None


def test_launch_grants_are_bounded_and_dead_ones_swept(tmp_path):
    me = os.getpid()
    keys = [PairedExtensionKeys(b"").public for _ in range(MAX_LAUNCHED + 1)]
    dead = write_launch_grant(tmp_path, keys[-1], pid=dead_pid())
    for key in keys[:MAX_LAUNCHED]:
        write_launch_grant(tmp_path, key, pid=me)
    assert not dead.exists()  # swept when the last live one was written
    assert len(live_launch_grants(tmp_path)) == MAX_LAUNCHED
    with pytest.raises(PairingError, match="already hold a grant"):
        write_launch_grant(tmp_path, keys[-1], pid=me)
    with pytest.raises(PairingError, match="P-256"):
        write_launch_grant(tmp_path, b"\x04" + b"x" * 10, pid=me)


def test_sessions_of_launched_keys_are_bounded_and_leave_the_pinned_ones(tmp_path):
    d = Daemon(tmp_path)
    user = Extension(d.public_key)
    assert user.pair(d)
    launched = Extension(d.public_key)
    write_launch_grant(tmp_path, launched.public, pid=os.getpid())
    for _ in range(MAX_LAUNCHED_SESSIONS + 5):
        assert Extension(d.public_key, extension_key=launched.private).pair(d)
    kinds = pairing(d)["sessions_by_kind"]
    assert kinds["launched"] == MAX_LAUNCHED_SESSIONS and kinds["pinned"] == 1
    r, _, _ = user.post(d, "/logs", {"entries": [{"level": "info", "message": "user"}]})
    assert r.code == 200

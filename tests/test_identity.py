"""The daemon identity and the pairing handshake (gasoline.core.trust.identity and .pairing, /pairing, signed /sync)."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
from _stub_daemon import StubDaemon
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from twisted.internet.task import Clock

from gasoline.cli import main as cli_main
from gasoline.core.trust.identity import b64u, challenge_proof, derive_session_key, fingerprint_of
from gasoline.core.trust.pairing import DaemonIdentity
from gasoline.testing import EXTENSION_HEADERS, PairedExtensionKeys
from gasoline.testing import stub_request

URL = "http://127.0.0.1:7890"


def unb64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Daemon(StubDaemon):
    def call(self, method, path, body=None, headers=EXTENSION_HEADERS, raw=None):
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        # /sync long-polls: let its hold time pass
        return stub_request(self.treq, method, URL + path, data=data, headers=headers,
                            clock=self.clock, wait=12)

    @property
    def public_key(self) -> bytes:
        return unb64u(json.loads(self.call("GET", "/pairing")[1])["key"])

    @property
    def fingerprint(self) -> str:
        return json.loads(self.call("GET", "/pairing")[1])["fingerprint"]


class Extension(PairedExtensionKeys):
    """What the extension does (lib/pairing.js), in Python (gasoline.testing.PairedExtensionKeys)."""

    def __init__(self, pinned_key: bytes, **kw):
        super().__init__(pinned_key, **kw)
        self.pinned = pinned_key

    def pair(self, daemon: Daemon, with_key: bool = True) -> bool:
        r, body = daemon.call("POST", "/pairing/challenge", self.challenge(with_key))
        assert r.code == 200, body
        return self.finish(json.loads(body))

    def post(self, daemon: Daemon, path: str, payload, method="POST"):
        headers, data, iv = self.seal(method, path, json.dumps(payload).encode())
        r, body = daemon.call(method, path, raw=data, headers=headers)
        return r, body, iv

    def sync(self, daemon: Daemon, payload=None):
        r, body, iv = self.post(daemon, "/sync", payload or {"ext_session_id": "ext_1", "settings": {}})
        return r, body, iv


def test_identity_is_created_once_0600_and_kept_across_restarts(tmp_path):
    first = Daemon(tmp_path)
    path = tmp_path / "identity.pem"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = Daemon(tmp_path)
    assert first.public_key == second.public_key and first.fingerprint == second.fingerprint
    assert Daemon(tmp_path / "other").public_key != first.public_key


def test_get_pairing_describes_the_key_and_its_fingerprint(tmp_path):
    d = Daemon(tmp_path)
    r, body = d.call("GET", "/pairing")
    info = json.loads(body)
    assert r.code == 200 and info["protocol"] == "gasoline-pairing-v1"
    key = unb64u(info["key"])
    assert len(key) == 65 and key[0] == 4
    assert info["fingerprint"] == fingerprint_of(key)
    assert len(info["fingerprint"]) == 19 and info["fingerprint"].count("-") == 3
    # the identity is public: a local tool (gasoline identity) reads it as itself, without the
    # extension's header; a web page is refused by the route policy
    r, body = d.call("GET", "/pairing", headers={})
    assert r.code == 200 and json.loads(body)["fingerprint"] == info["fingerprint"]
    r, _ = d.call("GET", "/pairing", headers={"Origin": "http://localhost:3000"})
    assert r.code == 403


def test_challenge_proves_the_key_and_seals_every_sync_answer(tmp_path):
    d = Daemon(tmp_path)
    ext = Extension(unb64u(json.loads(d.call("GET", "/pairing")[1])["key"]))
    assert ext.pair(d)
    r, body, iv = ext.sync(d)
    assert r.code == 200, body
    assert r.headers.getRawHeaders("x-gasoline-sealed") == ["1"]
    assert b"ack" not in body  # nobody on the way reads it
    assert json.loads(ext.open_answer(iv, body))["ack"] is True
    # the answer is bound to its request: it does not open as the answer to another request
    with pytest.raises(InvalidTag):
        ext.open_answer(os.urandom(12), body)


def test_an_impostor_key_fails_the_challenge(tmp_path):
    real = Daemon(tmp_path / "real")
    impostor = Daemon(tmp_path / "impostor")
    ext = Extension(real.public_key)
    assert ext.pair(real)
    assert not Extension(real.public_key).pair(impostor)


def test_a_restarted_daemon_says_the_session_is_unknown_and_answers_nothing(tmp_path):
    d = Daemon(tmp_path)
    ext = Extension(d.public_key)
    assert ext.pair(d)
    restarted = Daemon(tmp_path)  # same key, same pin, no sessions
    r, body, _ = ext.sync(restarted)
    assert r.code == 401 and json.loads(body)["code"] == "unknown_session"
    assert r.headers.getRawHeaders("x-gasoline-session-status") == ["unknown"]
    assert ext.pair(restarted)  # the same pinned keys pair again
    assert ext.sync(restarted)[0].code == 200


def test_a_client_that_does_not_know_pairing_is_served_as_before(tmp_path):
    """The published 0.7.9 extension sends no pairing headers: same answers, no proof headers."""
    d = Daemon(tmp_path)
    r, body = d.call("POST", "/sync", {"ext_session_id": "ext_old", "extension_version": "0.7.9", "settings": {}},
                     headers={"X-Gasoline-Client": "gasoline-extension/0.7.9", "Content-Type": "application/json"})
    assert r.code == 200 and json.loads(body)["ack"] is True
    assert r.headers.getRawHeaders("x-gasoline-proof") is None
    assert r.headers.getRawHeaders("x-gasoline-session-status") is None
    r, body = d.call("POST", "/logs", {"entries": [{"level": "info", "message": "hi"}]},
                     headers={"X-Gasoline-Client": "gasoline-extension/0.7.9"})
    assert r.code == 200 and json.loads(body)["received"] == 1


@pytest.mark.parametrize("payload, status", [
    ({}, 400),
    ({"key": "not base64 !", "nonce": "AAAAAAAAAAAAAAAAAAAAAA"}, 400),
    ({"key": b64u(b"\x04" + b"\x01" * 64), "nonce": b64u(b"n" * 32)}, 400),   # not a curve point
    ({"key": 5, "nonce": b64u(b"n" * 32)}, 400),
    ({"key": "A" * 5000, "nonce": "B"}, 413),
])
def test_malformed_challenges_get_a_clear_error(tmp_path, payload, status):
    d = Daemon(tmp_path)
    r, body = d.call("POST", "/pairing/challenge", payload)
    assert r.code == status and "error" in json.loads(body)
    r, _ = d.call("POST", "/pairing/challenge", raw=b"{not json")
    assert r.code == 400


def test_short_nonce_and_session_bounds(tmp_path):
    clock = Clock()
    ident = DaemonIdentity(ec.generate_private_key(ec.SECP256R1()), clock, max_sessions=2, session_idle=10)
    eph = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    with pytest.raises(ValueError, match="16 to 64"):
        ident.challenge({"key": b64u(eph), "nonce": b64u(b"short")})
    sessions = [ident.challenge({"key": b64u(eph), "nonce": b64u(os.urandom(32))})["session"] for _ in range(3)]
    assert ident.session_key(sessions[0]) is None  # the oldest was dropped
    assert ident.session_key(sessions[2]) is not None
    clock.advance(11)
    assert ident.session_key(sessions[2]) is None  # idle too long


def test_cli_never_creates_a_key_and_reads_a_stopped_daemons_key_file(tmp_path, capsys):
    """With no daemon running for the state dir, ``gasoline identity`` reads its key file; with
    none there, it says so and creates nothing (the running daemon is asked first:
    tests/test_lifecycle_cli.py)."""
    assert cli_main(["identity", "--state-dir", str(tmp_path)]) == 3
    assert not (tmp_path / "identity.pem").exists()
    assert "no daemon runs for state dir" in capsys.readouterr().err
    fingerprint = Daemon(tmp_path).fingerprint  # creates the key, as a daemon's start does
    assert cli_main(["identity", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert fingerprint in out and "no daemon runs" in out


# -- start-up reads the public key from the key file; HKDF from the standard library ----------

def test_the_public_key_is_read_from_the_key_file_as_cryptography_reads_it(tmp_path):
    from gasoline.core.trust.identity import public_key_from_pem, raw_public_key

    for _ in range(5):
        key = ec.generate_private_key(ec.SECP256R1())
        for fmt in (serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL):
            pem = key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
            assert public_key_from_pem(pem) == raw_public_key(key)
    other_curve = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    assert public_key_from_pem(other_curve) is None
    for junk in (b"", b"garbage", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                 b"-----BEGIN PRIVATE KEY-----\n!!\n-----END PRIVATE KEY-----\n", bytes(range(256))):
        assert public_key_from_pem(junk) is None


def test_session_keys_are_hkdf_sha256_byte_for_byte():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    for _ in range(20):
        shared, nonce = os.urandom(32), os.urandom(int.from_bytes(os.urandom(1), "big") % 49 + 16)
        daemon_key, eph = os.urandom(65), os.urandom(65)
        info = b"gasoline-pairing-v1" + daemon_key + eph
        expected = HKDF(algorithm=hashes.SHA256(), length=32, salt=nonce, info=info).derive(shared)
        assert derive_session_key(shared, nonce, daemon_key, eph) == expected


def test_a_started_daemon_loads_its_private_key_only_at_the_first_challenge(tmp_path,
                                                                           monkeypatch):
    """Start-up reads the existing key file for its public key alone; the private key is loaded
    (once) by the first challenge, which then works."""
    from twisted.internet.task import Clock

    from gasoline.core.trust import pairing
    from gasoline.core.trust.identity import b64u

    Daemon(tmp_path)  # creates identity.pem
    loaded = []
    real_load_key = pairing.load_key
    monkeypatch.setattr(pairing, "load_key",
                        lambda data, path: loaded.append(path) or real_load_key(data, path))
    identity = pairing.DaemonIdentity.from_state_dir(tmp_path, Clock())
    assert loaded == []
    assert identity.public_key == Daemon(tmp_path).public_key
    for n in (b"n", b"m"):
        eph = ec.generate_private_key(ec.SECP256R1())
        raw = eph.public_key().public_bytes(serialization.Encoding.X962,
                                            serialization.PublicFormat.UncompressedPoint)
        answer = identity.challenge({"key": b64u(raw), "nonce": b64u(n * 32)})
        assert answer["session"] and answer["proof"]
    assert loaded == [tmp_path / "identity.pem"]


def test_a_first_start_creates_the_key_that_the_first_challenge_proves(tmp_path):
    """A new state dir: the key is made (0600, no temporary file left); the first challenge
    proves the key on disk."""
    import subprocess
    import sys

    code = f"""
import sys, json
from twisted.internet.task import Clock
from gasoline.core.trust.pairing import DaemonIdentity
identity = DaemonIdentity.from_state_dir({str(tmp_path)!r}, Clock())
before = sorted(m for m in sys.modules if m.split(".")[0] in ("cryptography", "OpenSSL"))
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
eph = ec.generate_private_key(ec.SECP256R1())
raw = eph.public_key().public_bytes(serialization.Encoding.X962,
                                    serialization.PublicFormat.UncompressedPoint)
from gasoline.core.trust.identity import b64u
answer = identity.challenge({{"key": b64u(raw), "nonce": b64u(b"n" * 32)}})
print(json.dumps({{"before": before, "key": b64u(identity.public_key), "answer": answer,
                  "eph": b64u(eph.private_bytes(serialization.Encoding.PEM,
                                                serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    path = tmp_path / "identity.pem"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["identity.pem"]  # no temporary file left
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1)
    public = key.public_key().public_bytes(serialization.Encoding.X962,
                                           serialization.PublicFormat.UncompressedPoint)
    assert unb64u(result["key"]) == public == Daemon(tmp_path).public_key
    # The proof the daemon sent is the one the extension computes with the key on disk.
    eph = serialization.load_pem_private_key(unb64u(result["eph"]), password=None)
    eph_raw = eph.public_key().public_bytes(serialization.Encoding.X962,
                                            serialization.PublicFormat.UncompressedPoint)
    shared = eph.exchange(ec.ECDH(), key.public_key())
    session_key = derive_session_key(shared, b"n" * 32, public, eph_raw)
    assert unb64u(result["answer"]["proof"]) == challenge_proof(session_key, b"n" * 32)


def test_a_key_another_process_created_meanwhile_is_kept(tmp_path):
    from gasoline.core.trust.identity import _new_key_pem, _store_key, public_key_from_pem

    path = tmp_path / "identity.pem"
    first = _store_key(path, _new_key_pem())
    assert _store_key(path, _new_key_pem()) == first == path.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["identity.pem"]
    assert public_key_from_pem(first) is not None

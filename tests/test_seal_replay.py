"""Replay protection of sealed requests: each request of a pairing session carries its number
(the IV's last 8 bytes, authenticated as associated data); the daemon opens each number once,
within a sliding window (gasoline.core.trust.seal.Session)."""

from __future__ import annotations

import io
import json
import os
import random

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from test_identity import Daemon, Extension
from twisted.internet.task import Clock
from twisted.python.components import Componentized

from gasoline.core.trust.identity import PairingError
from gasoline.core.trust.pairing import DaemonIdentity
from gasoline.core.trust.request_facts import facts_of
from gasoline.core.trust.seal import REPLAY_WINDOW, Replayed, Session, request_aad, seal_key_of
from gasoline.testing import PairedExtensionKeys


def logs(d: Daemon) -> list[str]:
    return [e.get("message") for e in json.loads(d.call("GET", "/snapshot")[1])["logs"]]


def sealed_log(ext: Extension, message: str):
    return ext.seal("POST", "/logs", json.dumps({"entries": [{"level": "info", "message": message}]}).encode())


def test_a_replayed_sealed_request_is_refused_with_a_clear_error(tmp_path):
    d = Daemon(tmp_path)
    ext = Extension(d.public_key)
    assert ext.pair(d)
    headers, body, _ = sealed_log(ext, "once")
    assert d.call("POST", "/logs", raw=body, headers=headers)[0].code == 200
    r, answer = d.call("POST", "/logs", raw=body, headers=headers)
    error = json.loads(answer)
    assert r.code == 400 and error["code"] == "replayed"
    assert "already received" in error["error"]
    assert logs(d).count("once") == 1
    health = json.loads(d.call("GET", "/health")[1])["capture"]["pairing"]
    assert health["refused_challenges"]["replayed_request"] == 1
    # the session goes on: the next number is accepted
    headers, body, _ = sealed_log(ext, "next")
    assert d.call("POST", "/logs", raw=body, headers=headers)[0].code == 200


def test_requests_sealed_at_once_may_arrive_in_any_order(tmp_path):
    """The worker sends several requests in parallel: 50 sealed in order, delivered shuffled,
    are all accepted, each once."""
    d = Daemon(tmp_path)
    ext = Extension(d.public_key)
    assert ext.pair(d)
    sealed = [sealed_log(ext, f"m{i}") for i in range(50)]
    random.Random(7).shuffle(sealed)
    for headers, body, _ in sealed:
        r, answer = d.call("POST", "/logs", raw=body, headers=headers)
        assert r.code == 200, answer
    assert sorted(m for m in logs(d) if m.startswith("m")) == sorted(f"m{i}" for i in range(50))
    for headers, body, _ in sealed:
        assert json.loads(d.call("POST", "/logs", raw=body, headers=headers)[1])["code"] == "replayed"


def test_a_request_older_than_the_window_is_refused(tmp_path):
    d = Daemon(tmp_path)
    ext = Extension(d.public_key)
    assert ext.pair(d)
    old_headers, old_body, _ = sealed_log(ext, "old")
    later = [sealed_log(ext, f"later{i}") for i in range(REPLAY_WINDOW)]
    for headers, body, _ in later:
        assert d.call("POST", "/logs", raw=body, headers=headers)[0].code == 200
    r, answer = d.call("POST", "/logs", raw=old_body, headers=old_headers)
    assert r.code == 400 and json.loads(answer)["code"] == "replayed"
    assert "too old" in json.loads(answer)["error"]
    assert "old" not in logs(d)


def test_a_forged_number_does_not_open_and_does_not_move_the_window(tmp_path):
    d = Daemon(tmp_path)
    ext = Extension(d.public_key)
    assert ext.pair(d)
    headers, body, _ = sealed_log(ext, "real")
    forged = body[:4] + (10**9).to_bytes(8, "big") + body[12:]  # another number, same ciphertext
    r, answer = d.call("POST", "/logs", raw=forged, headers=headers)
    assert r.code == 400 and json.loads(answer)["code"] == "bad_seal"
    assert d.call("POST", "/logs", raw=body, headers=headers)[0].code == 200
    zero = body[:4] + bytes(8) + body[12:]
    r, answer = d.call("POST", "/logs", raw=zero, headers=headers)
    assert r.code == 400 and "starts at 1" in json.loads(answer)["error"]


def test_the_window_enumerated():
    """Session._accept against a plain set model, over every case: ahead, jump past the window,
    behind within it, exactly at its edge, duplicates."""
    s = Session("s", b"k" * 32, None, 0.0)
    seen: set[int] = set()
    top = 0
    rng = random.Random(11)
    numbers = [rng.randint(1, 40) for _ in range(300)] + [1000, 1000 - REPLAY_WINDOW + 1,
                                                          1000 - REPLAY_WINDOW, 999, 5000, 1001]
    for seq in numbers:
        expected_ok = seq not in seen and (seq > top or top - seq < REPLAY_WINDOW)
        try:
            s._accept(seq)
            ok = True
        except Replayed:
            ok = False
        assert ok == expected_ok, (seq, top)
        if ok:
            seen.add(seq)
            top = max(top, seq)
    assert issubclass(Replayed, PairingError)


def test_a_recorded_cdp_link_opening_is_refused_when_sent_again():
    """The link's opening (session, nonce, proof) opens once: sent again it is refused; the
    remembered nonces are bounded (MAX_LINK_NONCES per session)."""
    import os

    from cryptography.hazmat.primitives.asymmetric import ec
    from twisted.internet.task import Clock

    from gasoline.core.trust.identity import b64u
    from gasoline.core.trust.pairing import DaemonIdentity
    from gasoline.core.trust.seal import MAX_LINK_NONCES, extension_link_proof
    from gasoline.testing import PairedExtensionKeys

    ident = DaemonIdentity(ec.generate_private_key(ec.SECP256R1()), Clock())
    ext = PairedExtensionKeys(ident.public_key)
    assert ext.finish(ident.challenge(ext.challenge()))
    nonce = b64u(os.urandom(24)).encode()
    proof = extension_link_proof(ext.key, nonce)
    assert ident.link_proof(ext.session, nonce, proof) is not None
    assert ident.link_proof(ext.session, nonce, proof) is None
    assert ident.summary()["refused_challenges"]["replayed_link"] == 1
    for _ in range(MAX_LINK_NONCES * 2):
        fresh = b64u(os.urandom(24)).encode()
        assert ident.link_proof(ext.session, fresh, extension_link_proof(ext.key, fresh)) is not None
    assert len(ident.session(ext.session).link_nonces) == MAX_LINK_NONCES


def _sealed(key: bytes, sid: str, seq: int, body: bytes, path: bytes = b"/logs") -> bytes:
    """A request body sealed as the extension seals it (lib/pairing.js), request number C{seq}."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    iv = os.urandom(4) + seq.to_bytes(8, "big")
    return iv + AESGCM(seal_key_of(key)).encrypt(iv, body, request_aad(b"POST", path, sid.encode(),
                                                                        seq))


def test_open_enumerated_over_real_sealed_bodies_as_bytes_and_as_views():
    """Session.open (the path every sealed request takes) against a plain set model: numbers
    ahead, behind within the window, at its edge, past it, duplicates, and forged or tampered
    bodies, which never move the window; each body given as bytes and as a memoryview (the
    daemon opens twisted.web's body buffer in place)."""
    key = os.urandom(32)
    s = Session("sid-1", key, None, 0.0)
    seen: set[int] = set()
    top = 0
    rng = random.Random(5)
    numbers = ([rng.randint(1, 60) for _ in range(200)]
               + [700, 700 - REPLAY_WINDOW + 1, 700 - REPLAY_WINDOW, 699, 3000, 2999, 3001])
    for i, seq in enumerate(numbers):
        body = json.dumps({"n": seq, "i": i}).encode()
        sealed = _sealed(key, "sid-1", seq, body)
        given = memoryview(sealed) if i % 2 else sealed
        if i % 7 == 3:  # tampered: one ciphertext byte changed; refused, the window unchanged
            bad = bytearray(sealed)
            bad[20] ^= 1
            with pytest.raises(PairingError, match="does not open") as e:
                s.open(b"POST", b"/logs", memoryview(bytes(bad)) if i % 2 else bytes(bad))
            assert not isinstance(e.value, Replayed)
        if i % 11 == 5:  # sealed for another route: refused, the window unchanged
            with pytest.raises(PairingError, match="does not open"):
                s.open(b"POST", b"/sync", given)
        expected_ok = seq not in seen and (seq > top or top - seq < REPLAY_WINDOW)
        try:
            plain, iv = s.open(b"POST", b"/logs", given)
        except Replayed:
            assert not expected_ok, (seq, top)
            continue
        assert expected_ok, (seq, top)
        assert plain == body and iv == sealed[:12] and type(iv) is bytes
        seen.add(seq)
        top = max(top, seq)
    assert s.seq_top == top == 3001


class _Request(Componentized):
    """The parts of a twisted.web request that DaemonIdentity.admit reads (and, as twisted.web's
    C{Request}, a C{Componentized}: the request's facts are its component)."""

    def __init__(self, headers: dict[bytes, bytes], content) -> None:
        super().__init__()
        self.headers, self.content = headers, content
        self.method, self.path = b"POST", b"/logs"
        self.answer_headers: dict[bytes, bytes] = {}

    def getHeader(self, name: bytes) -> bytes | None:
        return self.headers.get(name)

    def setHeader(self, name: bytes, value: bytes) -> None:
        self.answer_headers[name] = value


@pytest.mark.parametrize("content", ["bytesio", "file"])
def test_admit_opens_the_body_in_place_or_from_any_file(tmp_path, content):
    """twisted.web's body (a BytesIO) is opened in place and released after; any other file
    object is read. Either way the plaintext is returned for the route, and the original buffer stays
    usable after (nothing holds a view of it)."""
    identity = DaemonIdentity(ec.generate_private_key(ec.SECP256R1()), Clock())
    ext = PairedExtensionKeys(identity.public_key)
    assert ext.finish(identity.challenge(ext.challenge()))
    body = json.dumps({"entries": [{"level": "info", "message": "in place"}]}).encode()
    headers, sealed, _ = ext.seal("POST", "/logs", body)
    if content == "bytesio":
        original = io.BytesIO()
        original.write(sealed)  # as GasolineRequest.handleContentChunk fills it
        original.seek(0)
    else:
        path = tmp_path / "body"
        path.write_bytes(sealed)
        original = open(path, "rb")  # closed below
    request = _Request({k.lower().encode(): v.encode() for k, v in headers.items()}, original)
    assert identity.admit(request) == body
    noted = facts_of(request).sealed
    assert noted is not None and noted[1] == sealed[:12]
    if content == "bytesio":
        original.write(b"more")  # would raise BufferError while a view of it were exported
    original.close()
    # the same bytes again: a replay, refused
    again = _Request(request.headers, io.BytesIO(sealed))
    refused = identity.admit(again)
    assert refused is not None and refused[2]["code"] == "replayed"

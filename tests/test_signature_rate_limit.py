"""
Rate limits in front of every signature check.

The daemon checks one public-key signature: the extension's ECDSA P-256 signature of a pairing
challenge (L{gasoline.core.trust.pins.verify_extension_signature}), followed by one ECDH with the
challenge's ephemeral key. A source scan finds every public-key operation in the package (so a
new one fails here until it is listed and tested), and each kind of challenge that reaches the
check, enumerated, is refused with 429 once its bucket is empty *without* the signature being
checked: no key, an unknown key, an unknown key with a forged signature, a launched browser's
key, a claim of the pinned key with a forged signature (these used to skip the limit: each cost
a verify, unlimited). The pinned extension itself is never limited.

The other checks of a proof are MACs (HMAC-SHA256: client proofs, the events token, the CDP link
proof, the API key; AES-GCM's tag on sealed bodies): microseconds each, the cost of parsing the
request, and each needs a secret only the daemon made.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from test_identity import Daemon, Extension
from twisted.internet.task import Clock

import gasoline
import gasoline.core.trust.pairing as pairing
from gasoline.core.trust.identity import b64u
from gasoline.core.trust.pairing import CHALLENGE_BURST, ChallengeRefused, DaemonIdentity
from gasoline.core.trust.pins import write_launch_grant
from gasoline.testing import PairedExtensionKeys

PACKAGE = Path(gasoline.__file__).parent

#: Every public-key operation of the package: (module, function, call). A new one must take a
#: rate-limit token first and be enumerated in the tests below.
KNOWN = {
    ("core/trust/pins.py", "verify_extension_signature", "verify"),
    ("core/trust/pairing.py", "challenge", "verify_extension_signature"),
    ("core/trust/pairing.py", "challenge", "exchange"),
}


def public_key_operations() -> set[tuple[str, str, str]]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name == "testing.py":  # the extension's side, for tests and benchmarks
            continue
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                    node.func.id if isinstance(node.func, ast.Name) else None
                text = ast.unparse(node)
                if name == "verify_extension_signature" or (
                        name == "verify" and "ECDSA" in text) or (
                        name == "exchange" and "ECDH" in text):
                    found.add((str(path.relative_to(PACKAGE)), func.name, name))
    return found


def test_every_public_key_operation_is_known():
    assert public_key_operations() == KNOWN


class Counting:
    def __init__(self, monkeypatch) -> None:
        self.verifies = 0
        real = pairing.verify_extension_signature

        def counted(*args):
            self.verifies += 1
            return real(*args)

        monkeypatch.setattr(pairing, "verify_extension_signature", counted)


def _forged(body: dict, key: bytes) -> dict:
    return {**body, "ext_key": b64u(key), "ext_sig": b64u(os.urandom(64))}


def _kinds(ident: DaemonIdentity, pinned: PairedExtensionKeys, launched: PairedExtensionKeys):
    """Every kind of challenge that reaches a signature check (or the ECDH), but the pinned
    extension's own: name -> a fresh challenge body."""
    def no_key():
        return PairedExtensionKeys(ident.public_key).challenge(with_key=False)

    def unknown_key():
        return PairedExtensionKeys(ident.public_key).challenge()

    def unknown_key_forged():
        other = PairedExtensionKeys(ident.public_key)
        return _forged(other.challenge(), other.public)

    def launched_key():
        return PairedExtensionKeys(ident.public_key, extension_key=launched.private).challenge()

    def pinned_key_forged():
        return _forged(PairedExtensionKeys(ident.public_key).challenge(), pinned.public)

    return {"no key": no_key, "no key, once an extension is pinned": no_key,
            "an unknown key": unknown_key,
            "an unknown key, forged signature": unknown_key_forged,
            "a launched browser's key": launched_key,
            "the pinned key, forged signature": pinned_key_forged}


KINDS = ["no key", "no key, once an extension is pinned", "an unknown key", "an unknown key, forged signature",
         "a launched browser's key", "the pinned key, forged signature"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_challenge_is_rate_limited_before_its_signature_is_checked(
        tmp_path, monkeypatch, kind):
    clock = Clock()
    ident = DaemonIdentity(ec.generate_private_key(ec.SECP256R1()), clock,
                           pin_file=tmp_path / "extension-pin.json", launch_dir=tmp_path)
    pinned = PairedExtensionKeys(ident.public_key)
    if kind != "no key":
        assert pinned.finish(ident.challenge(pinned.challenge()))  # pins it (takes one token)
        clock.advance(60)  # the bucket is full again
    launched = PairedExtensionKeys(ident.public_key)
    write_launch_grant(tmp_path, launched.public, os.getpid())
    make = _kinds(ident, pinned, launched)[kind]
    counting = Counting(monkeypatch)
    exchanges = []
    real_key = ident._private_key()

    class Spy:
        def exchange(self, *args):
            exchanges.append(1)
            return real_key.exchange(*args)

    monkeypatch.setattr(ident, "_private_key", lambda: Spy())
    outcomes = []
    for _ in range(CHALLENGE_BURST):
        try:
            ident.challenge(make())
            outcomes.append(200)
        except ChallengeRefused as e:
            outcomes.append(e.status)
        except pairing.PairingError:
            outcomes.append(400)
    assert 429 not in outcomes, outcomes
    checks = counting.verifies + len(exchanges)
    if kind == "no key, once an extension is pinned":
        assert checks == 0 and set(outcomes) == {403}  # refused before any check
    else:
        assert checks >= CHALLENGE_BURST  # each reached a check (signature or ECDH)
    for _ in range(200):
        with pytest.raises(ChallengeRefused) as refused:
            ident.challenge(make())
        assert refused.value.status == 429 and refused.value.extra["retry_after"] >= 1
    assert counting.verifies + len(exchanges) == checks  # none of the 200 was checked
    # the pinned extension itself is never limited, after any flood but its own key's forgeries
    if kind not in ("the pinned key, forged signature", "no key"):
        worker = PairedExtensionKeys(ident.public_key, extension_key=pinned.private)
        for _ in range(50):
            assert worker.finish(ident.challenge(worker.challenge()))
    # the bucket refills
    clock.advance(1)
    try:
        ident.challenge(make())
    except ChallengeRefused as e:
        assert e.status != 429
    except pairing.PairingError:
        pass


def test_forged_claims_of_the_pinned_key_do_not_drain_other_callers_bucket(tmp_path, monkeypatch):
    clock = Clock()
    ident = DaemonIdentity(ec.generate_private_key(ec.SECP256R1()), clock,
                           pin_file=tmp_path / "extension-pin.json")
    pinned = PairedExtensionKeys(ident.public_key)
    assert pinned.finish(ident.challenge(pinned.challenge()))
    clock.advance(60)
    for _ in range(100):
        try:
            ident.challenge(_forged(PairedExtensionKeys(ident.public_key).challenge(), pinned.public))
        except pairing.PairingError:
            pass
    assert ident.summary()["refused_challenges"]["rate_limited_claims"] == 100 - CHALLENGE_BURST
    # an unknown keyless caller (refused 403 once pinned) still gets its own tokens, not 429
    with pytest.raises(ChallengeRefused) as e:
        ident.challenge(PairedExtensionKeys(ident.public_key).challenge(with_key=False))
    assert e.value.status == 403


def test_a_flood_of_forged_pinned_claims_over_http_costs_at_most_the_bucket(tmp_path, monkeypatch):
    """Through the HTTP API: 500 challenges claiming the pinned key with forged signatures; the
    daemon checks at most the burst of them, the rest are 429 with Retry-After."""
    d = Daemon(tmp_path)
    user = Extension(d.public_key)
    assert user.pair(d)
    d.clock.advance(60)
    counting = Counting(monkeypatch)
    codes = []
    for _ in range(500):
        body = _forged(Extension(d.public_key).challenge(), user.public)
        r, _ = d.call("POST", "/pairing/challenge", body)
        codes.append(r.code)
        if r.code == 429:
            assert int(r.headers.getRawHeaders("retry-after")[0]) >= 1
    assert counting.verifies <= CHALLENGE_BURST + 1
    assert codes.count(429) >= 500 - CHALLENGE_BURST - 1 and 200 not in codes

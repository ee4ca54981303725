"""The daemon pins its extension: the extension's own key, trust on first use,
sealed capture and commands, `gasoline pair`, pairing state bounded per purpose."""

from __future__ import annotations

import json
import os

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from test_identity import Daemon, Extension
from twisted.internet.task import Clock

from gasoline.admin_cli import status as status_cli
from gasoline.cli import main as cli_main
from gasoline.core.trust.identity import b64u
from gasoline.core.trust.pairing import ChallengeRefused, DaemonIdentity
from gasoline.core.trust.pins import PIN_FILE
from gasoline.testing import EXTENSION_HEADERS, PairedExtensionKeys

OLD = {"X-Gasoline-Client": "gasoline-extension/0.7.9", "Content-Type": "application/json"}
#: Every capture and command route of the extension (the routes a pinned daemon keeps to it).
EXTENSION_ROUTES = [
    ("POST", "/logs", {"entries": [{"level": "info", "message": "x"}]}),
    ("POST", "/network-bodies", {"bodies": [{"url": "http://x/"}]}),
    ("POST", "/enhanced-actions", {"actions": [{"type": "click"}]}),
    ("POST", "/network-waterfall", {"entries": [{"url": "http://x/"}]}),
    ("POST", "/websocket-events", {"events": [{"type": "open"}]}),
    ("POST", "/performance-snapshots", {"snapshots": [{"url": "http://x/"}]}),
    ("POST", "/extension-logs", {"logs": [{"message": "x"}]}),
    ("POST", "/api/extension-status", {"type": "status"}),
    ("POST", "/sync", {"ext_session_id": "ext_x", "settings": {}}),
    ("GET", "/pending-queries", None),
    ("POST", "/query-result", {"id": "q-1", "status": "complete", "result": {}}),
    ("POST", "/dom-result", {"id": "q-1", "status": "complete", "result": {}}),
    ("POST", "/screenshots", {"data_url": "data:image/png;base64,iVBORw0KGgo="}),
]


def paired(d: Daemon) -> Extension:
    ext = Extension(d.public_key)
    assert ext.pair(d)
    return ext


def logs(d: Daemon) -> list[str]:
    return [e.get("message") for e in json.loads(d.call("GET", "/snapshot")[1])["logs"]]


def test_the_first_extension_key_is_pinned_and_kept_across_restarts(tmp_path):
    d = Daemon(tmp_path)
    assert json.loads(d.call("GET", "/health")[1])["capture"]["pairing"]["extension_fingerprint"] is None
    ext = paired(d)
    pairing = json.loads(d.call("GET", "/health")[1])["capture"]["pairing"]
    assert pairing["extension_fingerprint"] == ext.fingerprint
    assert pairing["daemon_fingerprint"] == d.fingerprint
    assert oct((tmp_path / PIN_FILE).stat().st_mode & 0o777) == "0o600"
    restarted = Daemon(tmp_path)
    assert Extension(restarted.public_key, extension_key=ext.private).pair(restarted)
    assert not _pairs(restarted, Extension(restarted.public_key))[0]


def _pairs(d: Daemon, ext: Extension) -> tuple[bool, dict]:
    r, body = d.call("POST", "/pairing/challenge", ext.challenge())
    return r.code == 200, {"status": r.code, **json.loads(body)}


def test_another_extension_key_is_refused_with_a_clear_error_until_the_user_accepts_it(tmp_path, capsys):
    d = Daemon(tmp_path)
    user = paired(d)
    other = Extension(d.public_key)
    ok, answer = _pairs(d, other)
    assert not ok and answer["status"] == 403 and answer["code"] == "extension_not_pinned" and answer["extension_fingerprint"] == other.fingerprint
    assert f"gasoline pair accept {other.fingerprint}" in answer["error"]
    assert user.fingerprint in answer["error"]
    # `gasoline pair` lists both; accepting the other one pins it instead
    assert cli_main(["pair", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert user.fingerprint in out and other.fingerprint in out
    assert cli_main(["pair", "accept", "NOPE-NOPE", "--state-dir", str(tmp_path)]) == 1
    assert cli_main(["pair", "accept", other.fingerprint, "--state-dir", str(tmp_path)]) == 0
    d.clock.advance(2)  # the daemon reads the pin file again within a second
    assert _pairs(d, other)[0]
    # the user's old key and its sessions are out
    assert user.sync(d)[0].code == 401
    assert not _pairs(d, Extension(d.public_key, extension_key=user.private))[0]
    # forget: the next extension that pairs is pinned
    assert cli_main(["pair", "forget", "--state-dir", str(tmp_path)]) == 0
    d.clock.advance(2)
    third = Extension(d.public_key)
    assert third.pair(d)
    assert json.loads(d.call("GET", "/health")[1])["capture"]["pairing"]["extension_fingerprint"] == third.fingerprint


@pytest.mark.parametrize("method, path, payload", EXTENSION_ROUTES, ids=[p for _, p, _ in EXTENSION_ROUTES])
def test_once_pinned_unpaired_traffic_is_refused_on_every_extension_route(tmp_path, method, path, payload):
    d = Daemon(tmp_path)
    before, _ = d.call(method, path, payload, headers=OLD)
    assert before.code != 403  # never pinned: the published extension is served as before
    paired(d)
    r, body = d.call(method, path, payload, headers=OLD)
    answer = json.loads(body)
    assert r.code == 403 and answer["code"] == "extension_not_paired", answer
    assert "gasoline pair forget" in answer["error"]


@pytest.mark.parametrize("method, path, payload", [r for r in EXTENSION_ROUTES if r[0] == "POST"],
                         ids=[p for m, p, _ in EXTENSION_ROUTES if m == "POST"])
def test_a_second_extension_that_paired_by_itself_cannot_use_a_session_of_its_own(tmp_path, method, path, payload):
    """Sessions opened before the pin (no extension key) end with it; an unsealed or mis-sealed
    request naming the pinned extension's session is refused."""
    d = Daemon(tmp_path)
    keyless = Extension(d.public_key)
    assert keyless.pair(d, with_key=False)  # allowed while nothing is pinned
    user = paired(d)
    assert keyless.post(d, path, payload, method)[0].code == 401
    headers, data, _ = user.seal(method, path, json.dumps(payload).encode())
    # the seal binds the route: a body sealed for /logs does not open at another route
    other_path = "/sync" if path != "/sync" else "/logs"
    r, body = d.call(method, other_path, raw=data, headers=headers)
    assert r.code == 400 and json.loads(body)["code"] == "bad_seal"
    tampered = data[:-1] + bytes([data[-1] ^ 1])
    assert d.call(method, path, raw=tampered, headers=headers)[0].code == 400
    r, _ = d.call(method, path, payload, headers={**EXTENSION_HEADERS, "X-Gasoline-Session": user.session})
    assert r.code == 400


def test_sealed_capture_is_stored_and_a_keyless_challenge_is_refused_once_pinned(tmp_path):
    d = Daemon(tmp_path)
    user = paired(d)
    r, body, _ = user.post(d, "/logs", {"entries": [{"level": "info", "message": "sealed hello"}]})
    assert r.code == 200 and json.loads(body)["received"] == 1
    assert "sealed hello" in logs(d)
    r, body = d.call("POST", "/pairing/challenge", Extension(d.public_key).challenge(with_key=False))
    assert r.code == 403 and json.loads(body)["code"] == "extension_key_required"


def test_a_bad_extension_signature_is_refused(tmp_path):
    d = Daemon(tmp_path)
    ext = Extension(d.public_key)
    payload = ext.challenge()
    payload["ext_key"] = b64u(Extension(d.public_key).public)  # signed by another key
    r, body = d.call("POST", "/pairing/challenge", payload)
    assert r.code == 400 and "signature does not verify" in json.loads(body)["error"]
    assert json.loads(d.call("GET", "/health")[1])["capture"]["pairing"]["extension_fingerprint"] is None


# -- item 3: pairing state bounded per purpose ------------------------------------------------------


def test_a_challenge_flood_neither_evicts_nor_locks_out_the_pinned_extension(tmp_path):
    """64 challenges (the flood of the issue) and 1000 more: the pinned extension's session stays
    and it pairs again at once; the flood is rate limited (429 with Retry-After)."""
    d = Daemon(tmp_path)
    user = paired(d)
    codes = []
    for i in range(64 + 1000):
        flood = Extension(d.public_key)
        r, _ = d.call("POST", "/pairing/challenge", flood.challenge(with_key=i % 2 == 0))
        codes.append(r.code)
        if r.code == 429:
            assert int(r.headers.getRawHeaders("retry-after")[0]) >= 1
    assert 200 not in codes and codes.count(429) > 1000
    r, body, _ = user.post(d, "/logs", {"entries": [{"level": "info", "message": "still here"}]})
    assert r.code == 200 and "still here" in logs(d)
    # the pinned extension's own challenges are never rate limited
    again = Extension(d.public_key, extension_key=user.private)
    assert all(again.pair(d) for _ in range(20))


def test_session_tables_are_bounded_per_purpose():
    """Before a pin, keyless sessions fill their own table only; the pinned extension's sessions
    have their own (a worker that restarts many times keeps the newest ones)."""
    clock = Clock()
    ident = DaemonIdentity(ec.generate_private_key(ec.SECP256R1()), clock, max_sessions=4,
                           max_pinned_sessions=2, challenge_burst=10_000)
    keyless = [PairedExtensionKeys(ident.public_key) for _ in range(6)]
    for k in keyless:
        assert k.finish(ident.challenge(k.challenge(with_key=False)))
    assert [ident.session(k.session) is not None for k in keyless] == [False, False, True, True, True, True]
    user = PairedExtensionKeys(ident.public_key)
    workers = []
    for _ in range(3):
        w = PairedExtensionKeys(ident.public_key, extension_key=user.private)
        assert w.finish(ident.challenge(w.challenge()))
        workers.append(w)
    assert [ident.session(w.session) is not None for w in workers] == [False, True, True]
    assert all(ident.session(k.session) is None for k in keyless)  # ended with the pin
    for _ in range(100):
        flood = PairedExtensionKeys(ident.public_key)
        with pytest.raises(ChallengeRefused):
            ident.challenge(flood.challenge())
    assert ident.session(workers[-1].session) is not None
    assert len(ident.pins.candidates) <= 8


def test_challenges_are_rate_limited_then_refilled():
    clock = Clock()
    ident = DaemonIdentity(ec.generate_private_key(ec.SECP256R1()), clock, challenge_burst=3,
                           challenge_rate=1.0)
    for _ in range(3):
        ident.challenge(PairedExtensionKeys(ident.public_key).challenge(with_key=False))
    with pytest.raises(ChallengeRefused) as e:
        ident.challenge(PairedExtensionKeys(ident.public_key).challenge(with_key=False))
    assert e.value.status == 429 and e.value.extra["retry_after"] == 1
    clock.advance(1)
    ident.challenge(PairedExtensionKeys(ident.public_key).challenge(with_key=False))


def test_the_cdp_link_opens_only_with_the_pinned_extension_s_proof():
    clock = Clock()
    ident = DaemonIdentity(ec.generate_private_key(ec.SECP256R1()), clock)
    ext = PairedExtensionKeys(ident.public_key)
    assert ext.finish(ident.challenge(ext.challenge()))
    nonce = b64u(os.urandom(24)).encode()
    from gasoline.core.trust.seal import extension_link_proof

    assert ident.link_proof(ext.session, nonce, extension_link_proof(ext.key, nonce)) is not None
    assert ident.link_proof(ext.session, nonce, None) is None
    assert ident.link_proof(ext.session, nonce, extension_link_proof(os.urandom(32), nonce)) is None


def test_status_and_configure_health_show_both_fingerprints(tmp_path):
    d = Daemon(tmp_path)
    ext = paired(d)
    pairing = json.loads(d.call("GET", "/health")[1])["capture"]["pairing"]
    assert pairing["daemon_fingerprint"] == d.fingerprint and pairing["extension_fingerprint"] == ext.fingerprint
    from gasoline.tools._diagnostics import configure_health

    class Ctx:
        app = d.app.daemon if hasattr(d.app, "daemon") else d.app
        extension_connected = False
        client_id = "c"
        session = None
        request = None
        state = type("S", (), {"cursors": {}})()

        def now(self):
            return d.clock.seconds()

        def ok(self, summary, data):
            return {"summary": summary, "data": data}

    out = configure_health(Ctx(), {})
    assert d.fingerprint in out["summary"] and ext.fingerprint in out["summary"]
    assert out["data"]["extension"]["pairing"]["extension_fingerprint"] == ext.fingerprint


def test_gasoline_status_prints_both_fingerprints(tmp_path, monkeypatch, capsys):
    d = Daemon(tmp_path)
    ext = paired(d)
    refused = Extension(d.public_key)
    _pairs(d, refused)
    health = json.loads(d.call("GET", "/health")[1])
    import gasoline.admin_cli as admin_cli

    monkeypatch.setattr(admin_cli, "health", lambda url, opts: health)
    assert status_cli(["--url", "http://127.0.0.1:1"]) == 0
    out = capsys.readouterr().out
    assert f"daemon identity: {d.fingerprint}" in out
    assert f"pinned extension: {ext.fingerprint}" in out
    assert f"gasoline pair accept {refused.fingerprint}" in out


def test_gasoline_pair_acts_only_on_the_named_daemon(tmp_path, capsys):
    """`gasoline pair --port N` edits the pins of the state dir only when the daemon on that port
    is the one whose identity the state dir holds; another daemon, or none, is a clear error and
    the pin file is left alone."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    ours, other = tmp_path / "ours", tmp_path / "other"
    d_ours, d_other = Daemon(ours), Daemon(other)
    user = paired(d_ours)
    before = (ours / PIN_FILE).read_bytes()
    answers = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = answers["pairing"] if self.path == "/pairing" else json.dumps(
                {"service-name": "gasoline", "state_dir": str(ours)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        # the daemon on the port is the other one: refused, nothing edited
        answers["pairing"] = d_other.call("GET", "/pairing")[1]
        assert cli_main(["pair", "forget", "--port", str(port), "--state-dir", str(ours)]) == 1
        err = capsys.readouterr().err
        assert d_other.fingerprint in err and d_ours.fingerprint in err and "--state-dir" in err
        assert (ours / PIN_FILE).read_bytes() == before
        # the daemon on the port is ours (--url names it too): the command acts
        answers["pairing"] = d_ours.call("GET", "/pairing")[1]
        assert cli_main(["pair", "--url", f"http://127.0.0.1:{port}", "--state-dir", str(ours)]) == 0
        assert user.fingerprint in capsys.readouterr().out
        assert cli_main(["pair", "forget", "--port", str(port), "--state-dir", str(ours)]) == 0
        assert json.loads((ours / PIN_FILE).read_text())["pinned"] is None
    finally:
        server.shutdown()
        server.server_close()
    # nothing answers on the port any more
    assert cli_main(["pair", "--port", str(port), "--state-dir", str(ours)]) == 1
    assert "no Gasoline daemon answers" in capsys.readouterr().err
    assert cli_main(["pair", "accept", "--state-dir", str(ours)]) == 2  # accept needs a fingerprint
    assert cli_main(["pair", "forget", "--port", "1", "--url", "http://x"]) == 2

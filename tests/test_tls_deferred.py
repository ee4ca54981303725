"""TLS loaded when first needed (gasoline._tls): a daemon starts without pyOpenSSL and
cryptography; once required, every TLS path the daemon may take works (an C{ssl:} listening
endpoint through C{posixbase}/C{endpoints}, C{wrapClientTLS}, C{twisted.web.client}'s browser-like
policy), with a real handshake in a process where TLS was deferred."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import textwrap

import pytest

from gasoline import _tls
from gasoline.tap import needs_tls
from support import DaemonProcess, pair


def _self_signed(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    key_path, cert_path = tmp_path / "key.pem", tmp_path / "cert.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


DEFERRED_PROCESS = """
import json, sys
from gasoline import _tls
deferred = _tls.defer()
import gasoline.tap  # the daemon's imports: reactor, endpoints, klein, autobahn, the tools
from twisted.internet import endpoints, reactor
# Taken before require(), as gasoline.tap takes serverFromString: they must see TLS afterwards.
from twisted.internet.endpoints import serverFromString, wrapClientTLS
before = sorted({m.split(".")[0] for m, mod in list(sys.modules.items())
                 if mod is not None and m.split(".")[0] in ("OpenSSL", "cryptography")})
_tls.require()
_tls.require()  # idempotent
from twisted.internet import defer, protocol, ssl, task
from twisted.web.client import BrowserLikePolicyForHTTPS

BrowserLikePolicyForHTTPS().creatorForNetloc(b"example.com", 443)

class Echo(protocol.Protocol):
    def dataReceived(self, data):
        self.transport.write(data)

class Collect(protocol.Protocol):
    def __init__(self):
        self.got = defer.Deferred()
    def dataReceived(self, data):
        self.got.callback(data)

@defer.inlineCallbacks
def main(reactor):
    server = serverFromString(
        reactor, "ssl:0:interface=127.0.0.1:privateKey=%(key)s:certKey=%(cert)s")
    port = yield server.listen(protocol.Factory.forProtocol(Echo))
    trust = ssl.Certificate.loadPEM(open(%(cert)r, "rb").read())
    client = wrapClientTLS(
        ssl.optionsForClientTLS("localhost", trustRoot=trust),
        endpoints.TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port))
    proto = yield endpoints.connectProtocol(client, Collect())
    proto.transport.write(b"over tls")
    echoed = yield proto.got.addTimeout(20, reactor)
    proto.transport.loseConnection()
    yield port.stopListening()
    print(json.dumps({"deferred": deferred, "before": before, "echoed": echoed.decode()}))

task.react(main)
"""


def test_a_deferred_process_gets_working_tls_when_it_requires_it(tmp_path):
    key, cert = _self_signed(tmp_path)
    code = DEFERRED_PROCESS % {"key": str(key), "cert": str(cert)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["deferred"] is True
    assert result["before"] == []  # the daemon's whole import graph, without TLS
    assert result["echoed"] == "over tls"


def test_require_refuses_when_web_client_decided_without_tls():
    code = """
from gasoline import _tls
assert _tls.defer()
import twisted.web.client
try:
    _tls.require()
except RuntimeError as e:
    print("refused:", e)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert "refused: twisted.web.client was imported while TLS was deferred" in done.stdout, \
        done.stderr[-2000:]


def test_defer_does_nothing_where_tls_is_already_loaded():
    import OpenSSL  # noqa: F401  (as in this test process)

    assert _tls.defer() is False and not _tls.deferred()
    _tls.require()  # a no-op


@pytest.mark.parametrize("description, tls", [
    ("tcp:7890:interface=127.0.0.1", False), ("TCP6:0", False), ("unix:/tmp/g.sock", False),
    ("systemd:domain=INET:index=0", False), ("ssl:443:privateKey=k.pem", True),
    ("tls:localhost:443", True), ("txtorcon:80", True),
])
def test_only_plain_endpoints_keep_tls_deferred(description, tls):
    assert needs_tls(description) is tls


def test_the_real_daemon_idles_without_tls_and_still_pairs(tmp_path):
    """twistd -n gasoline, started again on its state dir (the first start creates the identity
    key with cryptography): no pyOpenSSL/cryptography shared objects mapped at idle, nor autobahn's;
    the first pairing challenge loads cryptography and answers a valid proof."""
    with DaemonProcess(state_dir=tmp_path / "state"):
        pass  # creates identity.pem
    with DaemonProcess(state_dir=tmp_path / "state") as d:
        maps = open(f"/proc/{d.process.pid}/maps").read()
        assert "cryptography" not in maps and "_cffi_backend" not in maps
        assert "_nvx_" not in maps  # autobahn's NVX helpers: autobahn is not loaded either
        session, key = pair(d.port)
        assert session and len(key) == 32
        assert "cryptography" in open(f"/proc/{d.process.pid}/maps").read()

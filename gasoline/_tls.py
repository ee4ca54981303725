"""
TLS in the daemon, loaded when first needed rather than at start-up.

pyOpenSSL and the C{cryptography} it loads are ~13 MiB of the idle daemon's RSS, and Twisted imports
them as soon as its reactor is installed (C{twisted.internet.tcp} for C{startTLS},
C{posixbase} for C{listenSSL}, C{endpoints} for C{ssl:} strings). The daemon serves plain HTTP on
loopback; TLS is needed only to check C{https://} links (C{analyze link_validation}) and to listen
on an C{ssl:} endpoint. So:

  - L{defer}, called by C{gasoline.tap} in a twistd process (C{twistd -n gasoline},
    C{gasoline serve}) before Twisted's reactor and endpoints are imported, makes
    pyOpenSSL look absent to them (C{sys.modules["OpenSSL"] = None}: an C{import} raises
    C{ImportError}, which Twisted treats as "no TLS");
  - L{require}, called before anything uses TLS, lifts that and gives the modules that already
    decided what they would have had: C{posixbase}'s C{tls}/C{ssl} (C{listenSSL},
    C{connectSSL}) and C{endpoints}' TLS names (C{wrapClientTLS}, C{ssl:} strings).

What stays without TLS for the process' life: C{startTLS} on plain TCP connections (the classes of
C{twisted.internet.tcp} are built at import; nothing in the daemon upgrades a connection), and any
module that decided at import and is not patched here: C{twisted.web.client} must therefore be
imported only after L{require} (L{require} refuses to go on if it was imported while deferred).
A process where pyOpenSSL is already loaded (the test suite, an embedding program) is left alone.
Twisted is pinned (pyproject.toml); C{tests/test_tls_deferred.py} runs a TLS handshake through every
patched path in a deferred process, so an upgrade that moves these names fails there.
"""

from __future__ import annotations

import sys

#: Modules that decide about TLS at import and that L{require} cannot fix afterwards.
_UNFIXABLE = ("twisted.web.client",)


def deferred() -> bool:
    """True while pyOpenSSL is held back (L{defer} was called and L{require} was not)."""
    return "OpenSSL" in sys.modules and sys.modules["OpenSSL"] is None


def defer() -> bool:
    """Hold pyOpenSSL back until L{require}; False (and nothing done) when it is too late or not
    wanted: pyOpenSSL already imported, or Twisted's reactor or endpoints already decided."""
    if "OpenSSL" in sys.modules:
        return deferred()
    if any(m in sys.modules for m in ("twisted.internet.posixbase", "twisted.internet.endpoints",
                                      *_UNFIXABLE)):
        return False
    sys.modules["OpenSSL"] = None  # type: ignore[assignment]
    return True


def require() -> None:
    """Make TLS available (idempotent; cheap once done). Call before building anything that may
    speak TLS (an HTTP client for C{https://} URLs, an C{ssl:} listening endpoint)."""
    if not deferred():
        return
    stale = [m for m in _UNFIXABLE if m in sys.modules]
    if stale:
        raise RuntimeError(f"{', '.join(stale)} was imported while TLS was deferred; import it "
                           "after gasoline._tls.require()")
    del sys.modules["OpenSSL"]
    from OpenSSL.SSL import Error as SSLError

    from twisted.internet import ssl
    from twisted.protocols import _sni, tls

    posixbase = sys.modules.get("twisted.internet.posixbase")
    if posixbase is not None and getattr(posixbase, "tls", None) is None:
        posixbase.tls = tls  # type: ignore[attr-defined]
        posixbase.ssl = ssl  # type: ignore[attr-defined]
    endpoints = sys.modules.get("twisted.internet.endpoints")
    if endpoints is not None and getattr(endpoints, "TLSMemoryBIOFactory", None) is None:
        # What endpoints' "else:" branch binds when pyOpenSSL imports.
        names = dict(
            SSLError=SSLError, Certificate=ssl.Certificate,
            CertificateOptions=ssl.CertificateOptions, KeyPair=ssl.KeyPair,
            PrivateCertificate=ssl.PrivateCertificate,
            optionsForClientTLS=ssl.optionsForClientTLS,
            trustRootFromCertificates=ssl.trustRootFromCertificates,
            SNIConnectionCreator=_sni.SNIConnectionCreator,
            _TLSServerEndpoint=_sni.TLSServerEndpoint,
            autoReloadingDirectoryOfPEMs=_sni.autoReloadingDirectoryOfPEMs,
            _TLSMemoryBIOFactory=tls.TLSMemoryBIOFactory,
            TLSMemoryBIOFactory=tls.TLSMemoryBIOFactory,
        )
        for name, value in names.items():
            setattr(endpoints, name, value)

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
  - L{require}, called before anything uses TLS, lifts that and has the two modules that already
    decided run their own import-time decision again (C{importlib.reload}: the module's code
    re-runs in the same module namespace, so its functions, and the methods of classes already
    built from it, such as the running reactor's, see what it binds now): C{posixbase}
    (C{listenSSL}, C{connectSSL}) and C{endpoints} (C{wrapClientTLS}, C{ssl:} strings). Nothing
    here reads or writes a name of Twisted's; Twisted's own code binds them.

What stays without TLS for the process' life: C{startTLS} on plain TCP connections (the classes of
C{twisted.internet.tcp} are built at import; nothing in the daemon upgrades a connection), and any
module that decided at import and is not reloaded here: C{twisted.web.client} must therefore be
imported only after L{require} (L{require} refuses to go on if it was imported while deferred).
A process where pyOpenSSL is already loaded (the test suite, an embedding program) is left alone.
A reload builds new classes in those modules: objects made before L{require} keep the old ones
(an C{isinstance} check across the two would fail; nothing in the daemon makes one), and the
running reactor does not start to provide C{IReactorSSL} (its C{listenSSL} works all the same).
Twisted is pinned (pyproject.toml); C{tests/test_tls_deferred.py} runs a TLS handshake through every
such path in a deferred process, so an upgrade that changes where the decision is made fails
there.
"""

from __future__ import annotations

import importlib
import sys

#: Modules that decide about TLS at import and that L{require} cannot fix afterwards.
_UNFIXABLE = ("twisted.web.client",)
#: Modules that decide about TLS at import and that L{require} has decide again (reload).
_DECIDED = ("twisted.internet.posixbase", "twisted.internet.endpoints")


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
    import OpenSSL.SSL  # noqa: F401  (fails here, clearly, if pyOpenSSL is missing)

    for name in _DECIDED:
        module = sys.modules.get(name)
        if module is not None:
            importlib.reload(module)

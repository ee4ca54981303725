"""
What the daemon establishes about one HTTP request before its handler runs, in one typed value
carried by the request: the route guards note whether the caller proved the API key, the pairing
gate which pairing session sealed the body (so the answer is sealed under it).

The value is a frozen L{RequestFacts} kept as the request's L{IRequestFacts} component
(twisted.web's C{Request} is C{Componentized}): each step that learns a fact stores a new value
(L{note_key}, L{note_sealed}); readers take it with L{facts_of}. A request nobody noted anything
on has the defaults (no key configured or needed, not sealed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
from zope.interface import Interface, implementer

if TYPE_CHECKING:
    from twisted.python.components import Componentized

    from gasoline.core.trust.seal import Session


class IRequestFacts(Interface):
    """The facts about one request (the component key of L{RequestFacts})."""


@implementer(IRequestFacts)
@attrs.frozen
class RequestFacts:
    #: The caller proved the API key (C{X-Gasoline-Key} or C{Authorization: Bearer}), or none is
    #: configured (L{gasoline.http.guards.Guard}).
    key_ok: bool = True
    #: The pairing session that sealed the request's body and the body's IV, or None when it
    #: was not sealed (L{gasoline.core.trust.pairing.DaemonIdentity.admit}).
    sealed: tuple[Session, bytes] | None = None


#: The facts of a request nobody noted anything on.
NOTHING_NOTED = RequestFacts()


def facts_of(request: Componentized) -> RequestFacts:
    """The facts noted on C{request} so far."""
    facts = request.getComponent(IRequestFacts)
    return facts if isinstance(facts, RequestFacts) else NOTHING_NOTED


def note_key(request: Componentized, ok: bool) -> RequestFacts:
    """Note whether the caller of C{request} proved the API key."""
    facts = RequestFacts(key_ok=ok, sealed=facts_of(request).sealed)
    request.setComponent(IRequestFacts, facts)
    return facts


def note_sealed(request: Componentized, session: Session, iv: bytes) -> RequestFacts:
    """Note that C{request}'s body was sealed by the pairing C{session} with C{iv}."""
    # (Built directly, not with attrs.evolve: this runs for every sealed capture request.)
    facts = RequestFacts(key_ok=facts_of(request).key_ok, sealed=(session, iv))
    request.setComponent(IRequestFacts, facts)
    return facts

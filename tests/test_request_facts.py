"""The facts the guards and the pairing gate establish about a request travel in one typed value,
the request's L{IRequestFacts} component, not in attributes stamped on the request."""

from __future__ import annotations

from twisted.web.server import Request
from twisted.web.test.requesthelper import DummyChannel

from gasoline.core.trust.request_facts import (
    NOTHING_NOTED, IRequestFacts, RequestFacts, facts_of, note_key, note_sealed)


def _request() -> Request:
    return Request(DummyChannel())


def test_a_request_nobody_noted_anything_on_has_the_defaults():
    assert facts_of(_request()) == RequestFacts(key_ok=True, sealed=None) == NOTHING_NOTED


def test_each_fact_noted_keeps_the_others_in_one_component():
    request = _request()
    session = object()
    note_key(request, False)
    note_sealed(request, session, b"iv" * 6)  # type: ignore[arg-type]
    facts = facts_of(request)
    assert facts == RequestFacts(key_ok=False, sealed=(session, b"iv" * 6))
    assert request.getComponent(IRequestFacts) is facts
    assert not hasattr(request, "gasoline_key_ok") and not hasattr(request, "gasoline_sealed")


def test_facts_are_per_request():
    a, b = _request(), _request()
    note_key(a, False)
    assert facts_of(a).key_ok is False and facts_of(b).key_ok is True

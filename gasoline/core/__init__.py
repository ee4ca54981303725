"""
The domain: the lowest of the layers the import contracts keep (pyproject.toml,
docs/architecture.md). Its modules live in rooms, each layered over the next:

 - L{extension}: the browser extension's link, the command queue and the query router;
 - L{clients}: client ids and per-client state, noise rules, session ids, rate limits;
 - L{trust}: pairing and trust: the daemon's identity, the extension's pinned key, the sealed
   channel, the facts established about a request, the client key;
 - L{storage}: the telemetry store and its ring buffers, journals, encryption at rest, the state
   dir's files, documents and screenshots;
 - L{redaction}: every secret redaction the daemon applies, in one place.

At this level is the daemon's frame, which the rooms share: the collaborators by name
(L{daemon}), health checks (L{doctor}), the domain errors (L{errors}), the interfaces client state
is held through (L{interfaces}), graceful stop (L{lifecycle}), callback registration (L{hooks}),
the path sandbox (L{paths}), ingest validation (L{validate}), the budgets of bytes in flight
(L{inflight}) and of agents' calls per reactor turn (L{turns}), and the worker processes
(L{workers}, L{worker_child}).
"""

"""
Clients: client ids and each client's own state in the registry (L{registry}), noise rules
(L{noise}), session ids as credentials and their owners (L{session_ids}) and per-client rate
limits (L{ratelimit}).
"""

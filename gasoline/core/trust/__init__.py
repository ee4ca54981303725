"""
Pairing and trust: the daemon's key pair and handshake (L{identity}), the extension's pinned key
and launch grants (L{pins}), the pairing table (L{pairing}), a pairing session's sealed channel
(L{seal}), what the guards establish about one request (L{request_facts}) and the client key
that proves a client id (L{clientkey}).
"""

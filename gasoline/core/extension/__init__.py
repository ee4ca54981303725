"""
The browser extension, from the daemon's side: the link (liveness, settings, C{/sync}:
L{link}), the command queue (L{commands}) and the query router that answers each command to the
client that asked (L{router}).
"""

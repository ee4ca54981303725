"""
Run Gasoline under a supervisor: ``twistd -ny gasoline.tac``.

Configuration comes from the environment, so a supervisor unit needs no arguments:
GASOLINE_LISTEN (endpoint string, default tcp:7890:interface=127.0.0.1), GASOLINE_STATE_DIR,
GASOLINE_MAX_ENTRIES, GASOLINE_CLIENT_TTL, GASOLINE_LOG_DIR, GASOLINE_EXTENSION_IDS,
GASOLINE_PROXY_CONFIG (the session proxy's servers file, docs/proxy.md).
"""

import os

from twisted.application.service import Application

from gasoline.tap import Options, makeService

argv = []
for env, flag in [
    ("GASOLINE_LISTEN", "--listen"),
    ("GASOLINE_STATE_DIR", "--state-dir"),
    ("GASOLINE_MAX_ENTRIES", "--max-entries"),
    ("GASOLINE_CLIENT_TTL", "--client-ttl"),
    ("GASOLINE_LOG_DIR", "--log-dir"),
    ("GASOLINE_PROXY_CONFIG", "--proxy-config"),
]:
    if os.environ.get(env):
        argv += [flag, os.environ[env]]

options = Options()
options.parseOptions(argv)
application = Application("gasoline")
makeService(options).setServiceParent(application)

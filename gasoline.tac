"""
Run Gasoline under a supervisor: ``twistd -ny gasoline.tac``.

Configuration comes from the environment, so a supervisor unit needs no arguments:
GASOLINE_LISTEN (endpoint string, default tcp:7890:interface=127.0.0.1), GASOLINE_STATE_DIR,
GASOLINE_MAX_ENTRIES, GASOLINE_CLIENT_TTL, GASOLINE_LOG_DIR, GASOLINE_EXTENSION_IDS,
GASOLINE_PROXY_CONFIG (the session proxy's servers file, docs/proxy.md),
GASOLINE_STATE_KEY_FILE (encryption at rest, docs/persistence.md).
"""

import os

from twisted.application.service import Application

from gasoline.tap import OptionError, Options, makeService

FLAGS = [
    ("GASOLINE_LISTEN", "--listen"),
    ("GASOLINE_STATE_DIR", "--state-dir"),
    ("GASOLINE_MAX_ENTRIES", "--max-entries"),
    ("GASOLINE_CLIENT_TTL", "--client-ttl"),
    ("GASOLINE_LOG_DIR", "--log-dir"),
    ("GASOLINE_PROXY_CONFIG", "--proxy-config"),
    ("GASOLINE_STATE_KEY_FILE", "--state-key-file"),
]
argv = []
for env, flag in FLAGS:
    if os.environ.get(env):
        argv += [flag, os.environ[env]]


def _naming_the_variables(error):
    """The same one line, naming the environment variable a setting came from."""
    message = error.message
    for env, flag in FLAGS:
        if os.environ.get(env):
            message = message.replace(f"{flag} ", f"{env} (as {flag}) ", 1)
    return OptionError(message.replace("gasoline serve --help", "gasoline.tac's docstring"))


options = Options()
try:
    options.parseOptions(argv)
    service = makeService(options)
except OptionError as e:
    raise _naming_the_variables(e) from None
application = Application("gasoline")
service.setServiceParent(application)

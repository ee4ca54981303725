"""
The daemon the MCP conformance suite tests: ``twistd -n -y tests/conformance.tac``.

Gasoline's own service, with its default options, plus the fixture tools, resources and prompts
the suite calls (``tests/conformance_fixtures.py``, not shipped in the package). The listen
endpoint and state dir come from GASOLINE_LISTEN and GASOLINE_STATE_DIR.
"""

import os
import sys

from twisted.application.service import Application

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conformance_fixtures import register_fixtures

from gasoline.tap import Options, makeService

argv = []
for env, flag in [("GASOLINE_LISTEN", "--listen"), ("GASOLINE_STATE_DIR", "--state-dir")]:
    if os.environ.get(env):
        argv += [flag, os.environ[env]]

options = Options()
options.parseOptions(argv)
application = Application("gasoline-conformance")
makeService(options, extend_mcp=register_fixtures).setServiceParent(application)

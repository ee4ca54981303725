"""
Can the servers file's network policies be enforced here? Asked once, at start-up.

A C{command} server with C{network: "none"} or C{"loopback"} runs in a network namespace of its own
(L{gasoline.proxy._watchdog}). That needs Linux and either the privilege to make a network
namespace or unprivileged user namespaces. L{check} runs the watchdog's probe (a throw-away
child that makes one) for each policy the file uses and raises L{ProxyConfigError} naming the
server when it cannot be enforced: the daemon refuses to start rather than run a server with
more network than its file says.
"""

from __future__ import annotations

import subprocess
import sys

from gasoline.proxy.child import WATCHDOG
from gasoline.proxy.config import ProxyConfig, ProxyConfigError


def probe(mode: str) -> str | None:
    """None when policy C{mode} can be enforced here, else why not (a blocking run of a few
    milliseconds: start-up only)."""
    if not sys.platform.startswith("linux"):
        return f"it needs Linux network namespaces (this is {sys.platform})"
    try:
        done = subprocess.run([sys.executable, "-I", "-S", WATCHDOG, "--probe-net", mode],
                              capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return f"the probe could not run ({e})"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return why[-1] if why else f"the probe failed ({done.returncode})"
    return None


def check(config: ProxyConfig) -> None:
    """@raise ProxyConfigError: a server asks for a policy this machine cannot enforce."""
    results: dict[str, str | None] = {}
    for server in config.servers:
        if server.network == "any" or not server.enabled:
            continue
        if server.network not in results:
            results[server.network] = probe(server.network)
        why = results[server.network]
        if why is not None:
            raise ProxyConfigError(
                f"{config.source}: server {server.name!r}: network {server.network!r} cannot be "
                f"enforced here: {why}. Run the daemon where network namespaces work, or set "
                'network "any" and isolate the server yourself (docs/proxy.md, "Network policy")')

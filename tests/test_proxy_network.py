"""Per-server network policy (``network: "any" | "loopback" | "none"``): a proxied server denied
the network fails to connect; validation; refused at start where it cannot be enforced.

Real reactor, real child processes in network namespaces (Linux), a listener of the test's own on
the host's loopback as the destination."""

from __future__ import annotations

import json
import socket
import os
import sys
from pathlib import Path

import pytest
import pytest_twisted

from _proxy_harness import Daemon, text_of
from gasoline.proxy import netpolicy
from gasoline.proxy.config import ProxyConfigError, parse

pytestmark = pytest.mark.integration

NET = str(Path(__file__).parent / "proxy" / "net_server.py")


def net_server(network=None):
    spec = {"command": sys.executable, "args": [NET]}
    if network is not None:
        spec["network"] = network
    return spec


def enforceable(mode: str) -> None:
    why = netpolicy.probe(mode)
    if why is not None:
        if os.environ.get("CI") == "true":  # CI's machines can make namespaces: must run there
            pytest.fail(f"CI=true: network {mode!r} cannot be enforced here: {why}")
        pytest.skip(f"SKIPPED LOUDLY — network {mode!r} cannot be enforced here: {why}")


@pytest_twisted.ensureDeferred
async def test_a_server_denied_the_network_fails_to_connect(tmp_path):
    enforceable("none")
    enforceable("loopback")
    wd = tmp_path / "proj"
    wd.mkdir()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    d = Daemon(tmp_path, {"open": net_server(), "closed": net_server("none"),
                          "lo": net_server("loopback")}).start()
    try:
        sid = await d.session(wd)

        async def call(name, rid, **args):
            r = await d.mcp(sid, "tools/call", {"name": name, "arguments": args}, rid)
            return text_of(r)

        # The default: the host's loopback is reachable.
        assert await call("open__connect", 2, port=port) == "connected"
        # none: nothing at all, its own loopback included.
        denied = await call("closed__connect", 3, port=port)
        assert denied.startswith("failed:") and "unreachable" in denied.lower(), denied
        assert (await call("closed__own_loopback", 4)).startswith("failed:")
        # loopback: its own loopback works; the host's (where the listener is) is not reachable.
        assert await call("lo__own_loopback", 5) == "connected"
        assert (await call("lo__connect", 6, port=port)).startswith("failed:")
    finally:
        await d.stop()
        listener.close()


def test_the_policy_is_validated():
    ok = parse({"mcpServers": {"a": {"command": "x", "network": "none"}}})
    assert ok.servers[0].network == "none"
    assert parse({"mcpServers": {"a": {"command": "x"}}}).servers[0].network == "any"
    for spec, words in [({"command": "x", "network": "lan"}, 'must be "any", "loopback" or "none"'),
                        ({"url": "http://127.0.0.1:1/mcp", "network": "none"},
                         'only for a server run by "command"')]:
        with pytest.raises(ProxyConfigError) as e:
            parse({"mcpServers": {"a": spec}})
        assert words in str(e.value)


def test_a_policy_that_cannot_be_enforced_is_refused_at_start(tmp_path, monkeypatch):
    from gasoline.tap import OptionError, Options

    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"closed": net_server("none")}}))
    # As on a machine without network namespaces (another platform, or a sandbox that forbids
    # them): the probe fails, the daemon does not start.
    monkeypatch.setattr(netpolicy, "probe", lambda mode: "it needs Linux network namespaces "
                        "(this is testos)")
    with pytest.raises(OptionError) as e:
        Options().parseOptions(["--state-dir", str(tmp_path / "state"), "--proxy-config",
                                str(servers)])
    assert "server 'closed': network 'none' cannot be enforced here" in str(e.value)
    assert "\n" not in str(e.value)
    # Where it can be (this machine, when the probe succeeds), the same file is accepted.
    monkeypatch.undo()
    if netpolicy.probe("none") is None:
        Options().parseOptions(["--state-dir", str(tmp_path / "state"), "--proxy-config",
                                str(servers)])

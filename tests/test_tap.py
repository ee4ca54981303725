"""``makeService`` without processes: a memory reactor stands in for the real one."""

from __future__ import annotations

import json
import os

import pytest
from twisted.application.service import IService
from twisted.internet.error import CannotListenError
from twisted.internet.testing import MemoryReactorClock

from gasoline.tap import GasolineService, ListenFailed, Options, makeService


class TakenPortReactor(MemoryReactorClock):
    """A memory reactor whose every listen fails as a taken port does."""

    def listenTCP(self, port, factory, backlog=50, interface=""):
        raise CannotListenError(interface, port, OSError(98, "Address already in use"))


def _options(tmp_path, *extra):
    options = Options()
    options.parseOptions(["--listen", "tcp:0:interface=127.0.0.1",
                          "--state-dir", str(tmp_path), *extra])
    return options


def test_make_service_listens_on_the_endpoint_and_writes_daemon_json(tmp_path):
    reactor = MemoryReactorClock()
    service = makeService(_options(tmp_path), reactor)
    assert IService.providedBy(service) and isinstance(service, GasolineService)
    service.privilegedStartService()
    service.startService()
    [(port, factory, _backlog, interface)] = reactor.tcpServers
    assert (port, interface) == (0, "127.0.0.1")
    # The same object the HTTP surface serves.
    assert factory.resource is service.gasoline.resource
    info = json.loads((tmp_path / "daemon.json").read_text())
    assert info["pid"] == os.getpid()
    assert (tmp_path / "daemon.json").stat().st_mode & 0o777 == 0o600
    service.stopService()
    assert not (tmp_path / "daemon.json").exists()


def test_a_taken_port_is_one_clear_line_and_no_daemon_json(tmp_path):
    service = makeService(_options(tmp_path), TakenPortReactor())
    with pytest.raises(ListenFailed) as raised:
        service.privilegedStartService()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("gasoline: cannot listen on 127.0.0.1:0")
    assert "is in use" in message
    # An Exception (twistd reports it through its status pipe and removes the pid file) and a
    # SystemExit (the foreground prints the line, not a traceback).
    assert isinstance(raised.value, Exception) and isinstance(raised.value, SystemExit)
    assert not (tmp_path / "daemon.json").exists()


def test_stopping_before_the_port_listens_cancels_the_pending_listen(tmp_path):
    """A listen that has not finished when the daemon stops is cancelled, not leaked."""
    from twisted.internet.defer import Deferred

    from gasoline.tap import GasolineEndpointService

    pending: list[Deferred] = []

    class SlowEndpoint:
        def listen(self, factory):
            d = Deferred()
            pending.append(d)
            return d

    service = GasolineEndpointService(SlowEndpoint(), object(), "tcp:0", lambda h, p: "")
    service.startService()
    assert pending and not pending[0].called
    service.stopService()
    assert pending[0].called  # cancelled by StreamServerEndpointService.stopService
    pending[0].addErrback(lambda f: None)


def test_the_shutdown_hook_reaches_the_reactor(tmp_path):
    reactor = MemoryReactorClock()
    service = makeService(_options(tmp_path), reactor)
    assert service.gasoline.shutdown.request("test")
    reactor.advance(1)
    assert reactor.hasStopped


# -- --extension-id: the extension ids the daemon accepts ------------------------------------------


def test_extension_id_alone_parses_and_reaches_the_config(tmp_path, monkeypatch):
    """It used to raise UnboundLocalError unless --proxy-config was given too."""
    monkeypatch.delenv("GASOLINE_EXTENSION_IDS", raising=False)
    monkeypatch.delenv("GASOLINE_PROXY_CONFIG", raising=False)
    options = _options(tmp_path, "--extension-id", "goodid, otherid")
    assert options.config().extension_ids == ("goodid", "otherid")


def test_extension_ids_come_from_the_environment_without_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("GASOLINE_EXTENSION_IDS", "envid")
    monkeypatch.delenv("GASOLINE_PROXY_CONFIG", raising=False)
    assert _options(tmp_path).config().extension_ids == ("envid",)
    # the flag wins over the environment
    assert _options(tmp_path, "--extension-id", "flagid").config().extension_ids == ("flagid",)


def _health_with_origin(url: str, origin: str) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url + "/health", headers={"Origin": origin})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_real_daemon_starts_with_pinned_extension_ids_and_refuses_others(tmp_path, how):
    from support import DaemonProcess

    env = {k: v for k, v in os.environ.items() if k not in ("GASOLINE_EXTENSION_IDS",
                                                             "GASOLINE_PROXY_CONFIG")}
    args: tuple[str, ...] = ()
    if how == "flag":
        args = ("--extension-id", "goodid")
    else:
        env["GASOLINE_EXTENSION_IDS"] = "goodid"
    daemon = DaemonProcess(tmp_path / "state", args=args)
    daemon.env = env
    with daemon:
        assert _health_with_origin(daemon.url, "chrome-extension://goodid") == 200
        assert _health_with_origin(daemon.url, "chrome-extension://otherid") == 403


def test_a_service_built_for_tests_leaves_the_collector_alone(tmp_path):
    """Building the daemon changes nothing process-wide in the collector (no C{gc.freeze()})."""
    import gc

    before = gc.get_freeze_count()
    makeService(_options(tmp_path), MemoryReactorClock())
    assert gc.get_freeze_count() == before


def test_build_service_takes_a_config(tmp_path):
    """The service is built from a L{Config} (no Options needed: embedding, tests); the log
    limits are a separate argument."""
    from gasoline.config import Config
    from gasoline.logs import LogLimits
    from gasoline.tap import build_service

    reactor = MemoryReactorClock()
    config = Config(listen="tcp:0:interface=127.0.0.1", state_dir=tmp_path,
                    log_dir=tmp_path / "logs")
    service = build_service(config, reactor, limits=LogLimits(client_max_bytes=1234))
    assert isinstance(service, GasolineService)
    service.privilegedStartService()
    service.startService()
    [(port, factory, _backlog, interface)] = reactor.tcpServers
    assert factory.resource is service.gasoline.resource
    assert json.loads((tmp_path / "daemon.json").read_text())["listen"] == config.listen
    service.stopService()


def test_daemon_json_waits_for_a_slow_listen_and_names_its_port(tmp_path):
    """daemon.json is written when the endpoint's listen fires (observed through the service's
    public L{when_listening}), with the port it listened on."""
    from twisted.internet.defer import Deferred

    from gasoline.tap import DaemonInfoService, GasolineEndpointService

    pending: list[Deferred] = []

    class SlowEndpoint:
        def listen(self, factory):
            pending.append(Deferred())
            return pending[-1]

    class Port:
        stopped = False

        def getHost(self):
            from twisted.internet.address import IPv4Address

            return IPv4Address("TCP", "127.0.0.1", 5151)

        def stopListening(self):
            self.stopped = True

    listening = GasolineEndpointService(SlowEndpoint(), object(), "tcp:0", lambda h, p: "")
    info = DaemonInfoService(listening, tmp_path, "tcp:0")
    listening.startService()
    info.startService()
    assert not (tmp_path / "daemon.json").exists()
    port = Port()
    pending[0].callback(port)
    assert json.loads((tmp_path / "daemon.json").read_text())["port"] == 5151
    listening.when_listening().addCallback(lambda p: setattr(port, "seen", p is port))
    assert port.seen
    info.stopService()
    listening.stopService()
    assert port.stopped and not (tmp_path / "daemon.json").exists()


def test_a_listen_that_fails_later_is_logged_and_writes_no_daemon_json(tmp_path):
    from twisted.internet.defer import Deferred
    from twisted.logger import globalLogPublisher

    from gasoline.tap import DaemonInfoService, GasolineEndpointService

    pending: list[Deferred] = []

    class SlowEndpoint:
        def listen(self, factory):
            pending.append(Deferred())
            return pending[-1]

    failures: list = []

    def observe(event):
        if event.get("log_failure") is not None:
            failures.append(event["log_failure"])

    listening = GasolineEndpointService(SlowEndpoint(), object(), "tcp:0", lambda h, p: "")
    info = DaemonInfoService(listening, tmp_path, "tcp:0")
    listening.startService()
    info.startService()
    late: list = []
    listening.when_listening().addErrback(late.append)
    globalLogPublisher.addObserver(observe)
    try:
        pending[0].errback(CannotListenError("127.0.0.1", 0, OSError(98, "in use")))
    finally:
        globalLogPublisher.removeObserver(observe)
    assert not (tmp_path / "daemon.json").exists()
    assert late and late[0].check(CannotListenError)
    assert failures and all(f.check(CannotListenError) for f in failures)
    # Asked after the failure, the answer is the failure, not a Deferred that never fires.
    after: list = []
    listening.when_listening().addErrback(after.append)
    assert after and after[0].check(CannotListenError)
    listening.stopService()


@pytest.mark.parametrize("description, kind, port, interface", [
    ("tcp:7890:interface=127.0.0.1", "tcp", 7890, "127.0.0.1"),
    ("tcp:0", "tcp", 0, ""),  # every interface
    (r"tcp6:7891:interface=\:\:1", "tcp", 7891, "::1"),
    ("unix:/run/gasoline.sock", "unix", None, None),
])
def test_listen_address_reads_an_endpoint_through_twisteds_public_parser(
        description, kind, port, interface):
    from gasoline.tap import ListenAddress, listen_address

    assert listen_address(description) == ListenAddress(kind, port, interface)


@pytest.mark.parametrize("description", ["nonsense:1", "tcp:many", "tcp:1:bogus=2",
                                         r"tcp6:1:interface=::1"])
def test_listen_address_refuses_what_twisted_cannot_listen_on(description):
    from gasoline.tap import ENDPOINT_ERRORS, listen_address

    with pytest.raises(ENDPOINT_ERRORS):
        listen_address(description)


def test_a_taken_port_is_found_before_anything_is_built():
    """check_port_free reads the port and interface from the endpoint string (tcp: and tcp6:)."""
    import socket

    from gasoline.tap import check_port_free

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        with pytest.raises(ListenFailed) as raised:
            check_port_free(f"tcp:{port}:interface=127.0.0.1", lambda host, p: "someone")
        assert f"cannot listen on 127.0.0.1:{port}" in str(raised.value)
        check_port_free("tcp:0:interface=127.0.0.1", lambda host, p: "someone")  # any port: free
        check_port_free("unix:/nonexistent/x.sock", lambda host, p: "someone")  # not a TCP port

"""
The relay's HTTP surface: discovery routes (StubTreq), and the WebSockets over real loopback sockets
against the real daemon (a fake extension over the extension link, CDP clients on /cdp/<id>).
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import websocket  # websocket-client
from twisted.internet.task import Clock

from gasoline.app import Config, build
from support import DaemonProcess, open_link, pair
from gasoline.testing import stub_request
from treq.testing import StubTreq

URL = "http://127.0.0.1:7890"


def get(treq, path, headers=None):
    response, body = stub_request(treq, "GET", URL + path, headers=headers)
    return response.code, json.loads(body)


@pytest.fixture
def app(tmp_path):
    return build(Config(state_dir=tmp_path, persist=False), Clock())


def test_json_version_with_and_without_slash_gives_a_fresh_client_url_each_time(app):
    treq = StubTreq(app.resource)
    code, one = get(treq, "/json/version")
    assert code == 200
    code, two = get(treq, "/json/version/")
    assert code == 200
    assert one["Protocol-Version"] == "1.3" and one["Browser"].startswith("Chrome/")
    for body in (one, two):
        assert body["webSocketDebuggerUrl"].startswith("ws://127.0.0.1:7890/cdp/c")
    assert one["webSocketDebuggerUrl"] != two["webSocketDebuggerUrl"]


def test_json_list_shows_only_the_users_exposed_tabs(app):
    from gasoline.relay.testing import FakeExtensionLink

    relay = app.relay
    ext = FakeExtensionLink(relay).connect()
    tab = ext.add_tab("https://example.test/a")
    ext.add_tab("about:blank", owner="someone")
    treq = StubTreq(app.resource)
    for path in ("/json", "/json/list", "/json/list/"):
        code, body = get(treq, path)
        assert code == 200
        assert body == [{"description": "", "devtoolsFrontendUrl": "", "id": tab.target_id,
                         "title": tab.title, "type": "page", "url": "https://example.test/a"}]


def test_status_answers_as_the_seeds_discovery_expects(app):
    from gasoline.relay.testing import FakeExtensionLink, RecordingPeer

    treq = StubTreq(app.resource)
    code, body = get(treq, "/status")
    assert code == 200
    assert body == {"running": True, "isHub": True, "port": body["port"],
                    "extension_connected": False, "clients": 0}
    relay = app.relay
    FakeExtensionLink(relay).connect()
    relay.client_connected("x", RecordingPeer())
    _, body = get(treq, "/status")
    assert body["extension_connected"] is True and body["clients"] == 1


def test_a_web_pages_origin_is_refused_on_every_relay_route(app):
    treq = StubTreq(app.resource)
    for path in ("/json/version", "/status", "/cdp/abc", "/extension/cdp"):
        code, body = get(treq, path, headers={"Origin": "https://evil.example"})
        assert code == 403 and body == {"error": "forbidden: invalid origin"}, path


def test_a_plain_http_request_to_a_websocket_route_is_told_to_upgrade(app):
    treq = StubTreq(app.resource)
    for path in ("/cdp/abc", "/extension/cdp"):
        response, body = stub_request(treq, "GET", URL + path)
        assert response.code == 426, path
        assert "WebSocket endpoint" in json.loads(body)["error"], path


def test_a_plain_http_request_does_not_build_the_websocket_resource():
    from twisted.web.test.requesthelper import DummyRequest

    from gasoline.http.relay import _OnFirstUse

    built = []
    resource = _OnFirstUse(lambda: built.append(1))
    request = DummyRequest([b""])
    body = resource.render(request)
    assert request.responseCode == 426 and b"WebSocket endpoint" in body
    assert built == []  # autobahn would have been imported here


# ------------------------------------------------------------------ real sockets, real daemon


class WSExtension:
    """A fake extension over the real WebSocket link: answers attach/detach/send in a thread."""

    def __init__(self, port: int, tabs: list[dict]):
        self.ws = open_link(port, *pair(port))
        self.tabs = tabs
        self.requests: list[dict] = []
        self.close_status = None
        self.ws.send(json.dumps({"method": "hello", "params": {
            "product": "Chrome/142.0.7444.0", "userAgent": "Mozilla/5.0 Chrome/142.0.7444.0",
            "targets": tabs}}))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                opcode, data = self.ws.recv_data()
            except Exception:  # closed
                return
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                self.close_status = int.from_bytes(data[:2], "big") if len(data) >= 2 else None
                return
            message = json.loads(data)
            if "id" not in message:
                continue
            self.requests.append(message)
            params = message["params"]
            result: dict = {}
            if message["method"] == "send" and params["method"] == "Runtime.evaluate":
                result = {"result": {"type": "string",
                                     "value": f"{params['tabId']}:{params['params']['expression']}"}}
            try:
                self.ws.send(json.dumps({"id": message["id"], "result": result}))
            except Exception:
                return

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass


def cdp(port: int, path: str):
    ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=10,
                                     suppress_origin=True)
    ids = iter(range(1, 10**6))

    def call(method, params=None, session=None):
        msg_id = next(ids)
        message = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        ws.send(json.dumps(message))
        while True:
            reply = json.loads(ws.recv())
            if reply.get("id") == msg_id:
                return reply

    return ws, call


@pytest.fixture
def daemon(tmp_path):
    d = DaemonProcess(tmp_path / "state").start()
    yield d
    d.stop()


def test_cdp_clients_and_the_extension_over_real_websockets(daemon):
    tab = {"tabId": 7, "targetId": "A" * 32, "url": "https://example.test/", "title": "t"}
    ext = WSExtension(daemon.port, [tab])
    try:
        with urlopen_json(daemon.port, "/json/version") as version:
            url = version["webSocketDebuggerUrl"]
        path = url.split(str(daemon.port), 1)[1]
        ws_a, a = cdp(daemon.port, path)
        ws_b, b = cdp(daemon.port, "/cdp/second")
        assert a("Browser.getVersion")["result"]["product"] == "Chrome/142.0.7444.0"
        sa = a("Target.attachToTarget", {"targetId": tab["targetId"], "flatten": True})["result"]["sessionId"]
        sb = b("Target.attachToTarget", {"targetId": tab["targetId"], "flatten": True})["result"]["sessionId"]
        assert a("Runtime.evaluate", {"expression": "'a'"}, sa)["result"]["result"]["value"] == "7:'a'"
        assert b("Runtime.evaluate", {"expression": "'b'"}, sb)["result"]["result"]["value"] == "7:'b'"
        assert "error" in b("Runtime.evaluate", {"expression": "1"}, sa)
        # A duplicate client id is refused with 4004; the first keeps working.
        ws_dup = websocket.create_connection(f"ws://127.0.0.1:{daemon.port}/cdp/second",
                                             timeout=10, suppress_origin=True)
        opcode, data = ws_dup.recv_data(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_CLOSE and int.from_bytes(data[:2], "big") == 4004
        ws_dup.close()
        assert b("Runtime.evaluate", {"expression": "2"}, sb)["result"]["result"]["value"] == "7:2"
        # A second extension connection replaces the first (close 1000) and clients go on.
        ext2 = WSExtension(daemon.port, [tab])
        deadline = time.monotonic() + 10
        while ext.close_status is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ext.close_status == 1000
        sa = a("Target.attachToTarget", {"targetId": tab["targetId"], "flatten": True})["result"]["sessionId"]
        assert a("Runtime.evaluate", {"expression": "3"}, sa)["result"]["result"]["value"] == "7:3"
        # The extension vanishing: a command gets a clear CDP error, not a hang.
        ext2.close()
        time.sleep(0.3)
        reply = a("Runtime.evaluate", {"expression": "4"}, sa)
        assert "error" in reply, reply
        with urlopen_json(daemon.port, "/status") as status:
            assert status["extension_connected"] is False and status["clients"] == 2
        ws_a.close()
        ws_b.close()
    finally:
        ext.close()


def test_a_plain_http_request_is_told_which_upgrade_it_needs(daemon):
    import http.client

    for path in ("/cdp/abc", "/extension/cdp"):
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            body = json.loads(response.read())
        finally:
            conn.close()
        assert response.status == 426, path
        assert response.getheader("Upgrade") == "websocket", path
        assert "WebSocket endpoint" in body["error"], path


def test_the_extension_link_needs_a_known_pairing_session(daemon):
    """Without the session of a challenge the daemon answered, the link is refused: the daemon
    opens every link with a proof only the paired daemon can compute (tests above check it)."""
    for query in ("", "?session=nope&nonce=" + "a" * 32):
        with pytest.raises(websocket.WebSocketBadStatusException) as e:
            websocket.create_connection(f"ws://127.0.0.1:{daemon.port}/extension/cdp{query}",
                                        origin="chrome-extension://abcdefghijklmnop", timeout=10)
        assert e.value.status_code == 403


def test_the_extension_link_needs_an_extension_origin(daemon):
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        websocket.create_connection(f"ws://127.0.0.1:{daemon.port}/extension/cdp",
                                    timeout=10, suppress_origin=True)
    assert e.value.status_code == 403


class urlopen_json:
    def __init__(self, port: int, path: str):
        import urllib.request

        self.response = urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)

    def __enter__(self):
        return json.loads(self.response.read())

    def __exit__(self, *exc):
        self.response.close()

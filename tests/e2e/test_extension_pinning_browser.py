"""The daemon pins its extension, and capture is sealed, in real Chromium.

- A second copy of the extension (another id: another path) that completes pairing by itself
  cannot take the CDP link, post capture or receive commands while the user's extension is pinned;
  both fingerprints show in the popup and in /health.
- An impostor server that takes the port (daemon killed, impostor bound within 100 ms, the page
  logging throughout, a command result pending) receives no readable capture and no command
  result, and its command does not run: 10 runs of 10.
- A flood of pairing challenges does not interrupt capture.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from harness import EXTENSION_DIR, SECOND_LINK_JS, Chromium, daemon_get, wait_until
from support import DaemonProcess

from gasoline.core.trust.identity import PairingError
from gasoline.core.trust.pairing import ChallengeRefused, DaemonIdentity
from gasoline.testing import PairedExtensionKeys

pytestmark = [pytest.mark.integration, pytest.mark.browser]

EXT_HEADERS = {"Content-Type": "application/json", "X-Gasoline-Client": "gasoline-extension/test"}


def workers(browser) -> dict[str, str]:
    """{manifest name: service worker session} of every extension in the browser."""
    def find():
        found = {}
        for t in browser.cdp.targets():
            if t["type"] == "service_worker" and t["url"].startswith("chrome-extension://") and t["url"].endswith("/background.js"):
                session = browser.cdp.attach(t["targetId"])
                browser.cdp.call("Runtime.enable", session=session)
                found[browser.cdp.evaluate(session, "chrome.runtime.getManifest().name")] = session
        return found if len(found) >= 2 else None
    return wait_until(find, 20, interval=0.3, what="both extensions' service workers")


@pytest.fixture
def two_extensions(chromium_bin, tmp_path):
    """Chromium with the user's extension and a copy of it at another path (so another id)."""
    copy = tmp_path / "extension-copy"
    shutil.copytree(EXTENSION_DIR, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["name"] = manifest["name"] + " (copy)"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    b = Chromium(executable=chromium_bin, extension_dir=Path(f"{EXTENSION_DIR},{copy}"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


def post(url: str, path: str, body, headers=EXT_HEADERS) -> tuple[int, dict]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def mcp_tool(url: str, tool: str, arguments: dict, timeout: float = 40) -> dict:
    """One stateless MCP tools/call (what `gasoline doctor` does); the tool's text."""
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    request = urllib.request.Request(url + "/mcp", data=json.dumps(message).encode(), method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28"})  # no client id: the shared stateless client
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.loads(r.read())


def logs(url: str) -> list[str]:
    return [e.get("message", "") for e in daemon_get(url, "/snapshot")["logs"]]


def test_a_second_copy_of_the_extension_cannot_take_the_link_post_capture_or_receive_commands(two_extensions, site, ext_daemon):
    browser, url = two_extensions, ext_daemon.url
    sws = workers(browser)
    user_sw = next(s for name, s in sws.items() if not name.endswith("(copy)"))
    copy_sw = next(s for name, s in sws.items() if name.endswith("(copy)"))
    _, user_page, _ = browser.new_page(site.url + "/blank.html?user")
    user_tab = browser.tab_id_for(user_sw, site.url + "/blank.html?user")
    _, copy_page, _ = browser.new_page(site.url + "/blank.html?copy")
    copy_tab = browser.tab_id_for(copy_sw, site.url + "/blank.html?copy")

    # The user pairs their extension: the daemon pins its key (trust on first use).
    browser.storage_set(user_sw, {"serverUrl": url, "trackedTabId": user_tab, "aiWebPilotEnabled": True})
    wait_until(lambda: (browser.status(user_sw).get("pairing") or {}).get("state") == "paired", 20, what="the user's extension to pair")
    user_fp = browser.status(user_sw)["pairing"]["extension_fingerprint"]
    pairing = daemon_get(url, "/health")["capture"]["pairing"]
    assert pairing["extension_fingerprint"] == user_fp and user_fp
    wait_until(lambda: daemon_get(url, "/status")["extension_connected"], 20, what="the user's extension's CDP link")

    # The copy completes pairing by itself (it pins the daemon as a user would in its popup) ...
    browser.storage_set(copy_sw, {"serverUrl": url, "trackedTabId": copy_tab, "aiWebPilotEnabled": True})
    wait_until(lambda: (browser.status(copy_sw).get("pairing") or {}).get("state") == "refused", 20, interval=0.3,
               what="the daemon to refuse the copy", describe=lambda: browser.status(copy_sw))
    copy_status = browser.status(copy_sw)
    copy_fp = copy_status["pairing"]["extension_fingerprint"]
    assert copy_fp and copy_fp != user_fp
    assert f"gasoline pair accept {copy_fp}" in copy_status["last_error"] and copy_status["connected"] is False
    assert copy_fp in daemon_get(url, "/health")["capture"]["pairing"]["refused_extensions"]

    # ... its capture does not reach the daemon, the user's does.
    browser.cdp.evaluate(copy_page, "console.log('from the copy'); 1")
    browser.cdp.evaluate(user_page, "console.log('from the user'); 1")
    wait_until(lambda: "from the user" in logs(url), 20, what="the user's capture")
    time.sleep(2)
    assert "from the copy" not in logs(url)

    # What the copy's code could do by hand: legacy (unpaired) capture and /sync, a pairing of its
    # own, a link with a made-up session: all refused.
    def in_copy(js):
        return browser.cdp.evaluate(copy_sw, js, timeout=30)
    fetch = ("fetch(%s + '%s', {method: 'POST', headers: {'Content-Type': 'application/json', 'X-Gasoline-Client': 'gasoline-extension/0.7.9'},"
             " body: JSON.stringify(%s)}).then(async r => [r.status, await r.json()])")
    status, body = in_copy(fetch % (json.dumps(url), "/logs", json.dumps({"entries": [{"level": "error", "message": "copy by hand"}]})))
    assert status == 403 and body["code"] == "extension_not_paired", body
    status, body = in_copy(fetch % (json.dumps(url), "/sync", json.dumps({"ext_session_id": "ext_copy", "settings": {}})))
    assert status == 403 and body["code"] == "extension_not_paired", body
    second = in_copy(f"{SECOND_LINK_JS}({json.dumps(url)})")
    assert second["challenge"] == 403 and second["refusal"]["code"] == "extension_not_pinned", second
    made_up = in_copy("new Promise((res) => { const ws = new WebSocket(%s + '/extension/cdp?session=abc&nonce=%s&proof=AAAA');"
                      " ws.onmessage = (e) => res('message ' + e.data); ws.onclose = (e) => res('closed ' + e.code); })"
                      % (json.dumps(url.replace("http", "ws")), "n" * 32))
    assert made_up.startswith("closed"), made_up
    assert "copy by hand" not in logs(url)
    # The link is still the user's: its tab is the one the relay lists, and commands run there.
    assert daemon_get(url, "/status")["extension_connected"] is True
    answer = mcp_tool(url, "interact", {"what": "execute_js", "world": "main", "tab_id": user_tab,
                                        "script": "return location.search"})
    assert "?user" in json.dumps(answer) and "?copy" not in json.dumps(answer), answer
    assert daemon_get(url, "/health")["capture"]["extension_session_id"] == browser.status(user_sw)["ext_session_id"]

    # The popup shows both fingerprints: the daemon's (pinned by the extension) and the extension's.
    user_id = browser.cdp.evaluate(user_sw, "chrome.runtime.id")
    _, popup, _ = browser.new_page(f"chrome-extension://{user_id}/popup/popup.html")
    text = lambda sel: browser.cdp.evaluate(popup, f"document.querySelector({json.dumps(sel)}).textContent")  # noqa: E731
    wait_until(lambda: text("#extension-fp") == user_fp, 10, interval=0.3, what="the popup to show this extension's fingerprint")
    assert text("#paired-fp") == pairing["daemon_fingerprint"]


class _WallClock:
    @staticmethod
    def seconds() -> float:
        return time.time()


class Impostor:
    """Whatever binds the daemon's port next: a key of its own, every request recorded raw, and a
    command of its own in every answer (it would like the extension to run it)."""

    HIJACK = {"id": "q-9", "type": "execute", "params": {"script": "document.title = 'hijacked'", "world": "main"}}

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.requests: list[tuple[str, str, dict, bytes]] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)
        self.thread.start()

    @classmethod
    def bind(cls, port: int, within: float) -> tuple[Impostor, float]:
        """Bind ``port`` as soon as it is free; (impostor, seconds it took)."""
        identity = DaemonIdentity(ec.generate_private_key(ec.SECP256R1()), _WallClock())
        holder: list[Impostor] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                imp = holder[0]
                with imp.lock:
                    imp.requests.append((method, self.path, dict(self.headers), body))
                if self.path == "/pairing":
                    return self._answer(200, identity.describe())
                if self.path == "/pairing/challenge":
                    try:
                        return self._answer(200, identity.challenge(json.loads(body)))
                    except (ChallengeRefused, PairingError, ValueError) as e:
                        return self._answer(400, {"error": str(e)})
                if self.path.startswith("/health"):
                    return self._answer(200, {"status": "ok", "service-name": "gasoline", "logs": {"entries": 0}})
                return self._answer(200, {"ack": True, "commands": [Impostor.HIJACK], "next_poll_ms": 100,
                                          "received": 1, "rejected": 0, "entries": 1, "status": "ok"})

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

        started = time.monotonic()
        while True:
            try:
                server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
                break
            except OSError:
                if time.monotonic() - started > within:
                    raise
                time.sleep(0.001)
        took = time.monotonic() - started
        server.daemon_threads = True
        imp = cls(server)
        holder.append(imp)
        return imp, took

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def time_limit():
    """Ten kill / impostor / restart cycles in one browser take longer than conftest's 120 s."""
    def expired(signum, frame):
        raise TimeoutError("end-to-end test exceeded 420s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(420)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


RUNS = 10
#: The paths an impostor may see in the clear: liveness and the pairing handshake.
CLEAR_PATHS = {"/health", "/pairing", "/pairing/challenge"}


def test_an_impostor_on_the_port_receives_no_readable_capture_and_no_command_result_10_of_10(browser, site, ext_daemon):
    port, state_dir = ext_daemon.port, ext_daemon.state_dir
    sw, page, tab = browser.track_new_tab(site.url + "/blank.html", ext_daemon.url, aiWebPilotEnabled=True)
    wait_until(lambda: (browser.status(sw).get("pairing") or {}).get("state") == "paired", 20, what="pairing")
    # The page logs throughout, every 20 ms, each line with a fresh counter.
    browser.cdp.evaluate(page, "window.__n = 0; setInterval(() => console.log('tick-' + (window.__n++)), 20); 1")
    daemon = ext_daemon
    outcomes = []
    try:
        for run in range(RUNS):
            url = daemon.url
            wait_until(lambda: any(m.startswith("tick-") for m in logs(url))
                       and daemon_get(url, "/health")["capture"]["extension_connected"], 30,
                       what=f"run {run}: capture and /sync at the real daemon")
            # A command that is still running when the daemon dies: its result is due while the
            # impostor holds the port.
            mark = f"RESULT-{run}-{os.urandom(4).hex()}"
            answers: list = []
            threading.Thread(target=lambda: _quietly(answers, mcp_tool, url, "interact", {
                "what": "execute_js", "world": "main", "tab_id": tab,
                "script": f"window.__running = '{mark}'; await new Promise(r => setTimeout(r, 1500)); return '{mark}'"}),
                daemon=True).start()
            wait_until(lambda: browser.cdp.evaluate(page, "window.__running") == mark, 15, interval=0.05,
                       what=f"run {run}: the command to run in the page", describe=lambda: (answers, browser.status(sw)))
            daemon.kill()
            impostor, took = Impostor.bind(port, within=0.1)
            try:
                assert took < 0.1, f"run {run}: the impostor bound after {took:.3f} s"
                time.sleep(3.0)
                pending = browser.cdp.evaluate(sw, "chrome.storage.session.get('gasolineSyncResults').then(r => JSON.stringify(r.gasolineSyncResults || []))")
                with impostor.lock:
                    seen = list(impostor.requests)
            finally:
                impostor.close()
            title = browser.cdp.evaluate(page, "document.title")
            readable = [(m, p) for m, p, _, body in seen if b"tick-" in body or mark.encode() in body]
            unsealed = [(m, p) for m, p, h, body in seen
                        if p.split("?")[0] not in CLEAR_PATHS and body and h.get("X-Gasoline-Sealed") != "1"]
            outcomes.append({"run": run, "bound_in": round(took, 4), "requests": len(seen),
                             "paths": sorted({p for _, p, _, _ in seen}), "readable": readable, "unsealed": unsealed,
                             "hijacked": title == "hijacked", "result_was_pending": mark in pending})
            assert not readable and not unsealed and title != "hijacked", outcomes[-1]
            # The real daemon (same state dir: same identity, same pinned extension) comes back.
            daemon = DaemonProcess(state_dir=state_dir, args=["--listen", f"tcp:{port}:interface=127.0.0.1"])
            daemon.start()
    finally:
        if daemon is not ext_daemon:
            daemon.stop()
    print(json.dumps(outcomes, indent=1))
    assert len(outcomes) == RUNS
    # The check has teeth: the impostor was asked (it is on the port) in every run, and in most
    # runs the command result was waiting in the worker while the impostor listened.
    assert all(o["requests"] > 0 for o in outcomes), outcomes
    assert sum(o["result_was_pending"] for o in outcomes) >= RUNS // 2, outcomes


def _quietly(answers: list, fn, *args, **kwargs):
    try:
        answers.append(fn(*args, **kwargs))
    except Exception as e:
        answers.append(repr(e))


def test_a_challenge_flood_does_not_interrupt_capture(browser, site, ext_daemon):
    url = ext_daemon.url
    sw, page, _ = browser.track_new_tab(site.url + "/blank.html", url)
    wait_until(lambda: (browser.status(sw).get("pairing") or {}).get("state") == "paired", 20, what="pairing")
    key = base64.urlsafe_b64decode(daemon_get(url, "/pairing")["key"] + "==")
    browser.cdp.evaluate(page, "window.__n = 0; window.__tick = setInterval(() => console.log('flood-tick-' + (window.__n++)), 20); 1")
    wait_until(lambda: any(m.startswith("flood-tick-") for m in logs(url)), 20, what="capture before the flood")
    stop = threading.Event()
    codes: list[int] = []

    def flood(with_key: bool):
        while not stop.is_set():
            status, _ = post(url, "/pairing/challenge", PairedExtensionKeys(key).challenge(with_key=with_key))
            codes.append(status)

    threads = [threading.Thread(target=flood, args=(k,), daemon=True) for k in (True, False)]
    for t in threads:
        t.start()
    states = []
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st = browser.status(sw)
            states.append(((st.get("pairing") or {}).get("state"), st.get("connected")))
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    last = browser.cdp.evaluate(page, "clearInterval(window.__tick); window.__n - 1")
    expected = {f"flood-tick-{i}" for i in range(last + 1)}
    wait_until(lambda: expected <= set(logs(url)), 30, what="every line logged during the flood",
               describe=lambda: sorted(expected - set(logs(url)))[:20])
    print(f"flood: {len(codes)} challenges, {codes.count(429)} answered 429, {codes.count(403)} answered 403; extension states {sorted(set(states))}")
    assert len(codes) >= 64 and codes.count(429) > len(codes) // 2, (len(codes), sorted(set(codes)))
    assert 200 not in codes  # the extension is pinned: no other key, no keyless challenge, gets a session
    assert set(states) == {("paired", True)}, states
    refused = daemon_get(url, "/health")["capture"]["pairing"]["refused_challenges"]
    assert refused.get("rate_limited", 0) > 0, refused

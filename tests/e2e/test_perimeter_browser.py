"""
A web page in a real Chromium cannot stop the daemon or take a client slot.

The page is served on C{http://localhost:<port>} by a test HTTP server on port 0, the daemon is the
real C{twistd -n gasoline} with its default options on another port 0. The page tries every way a
page has to send a request that needs no CORS permission -- C{fetch} in C{no-cors} mode (GET and
POST), iframes, C{<img>}, a form POST into an iframe -- at every spelling of C{/shutdown} and of
the SSE routes that used to take a slot (C{/mcp/sse}, C{/mcp}, C{/events}), twelve iframes per
spelling of C{/mcp/sse} (more than the ten slots). Afterwards the daemon answers, no client holds a
slot, and an agent still gets one; the daemon's own request counters show the browser's requests
did arrive (so the test is not passing because nothing was sent).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import Chromium, wait_until

from gasoline.testing import client_headers

SHUTDOWN_SPELLINGS = ["/shutdown", "/%73hutdown", "/%73%68%75%74%64%6f%77%6e", "//shutdown",
                      "/./shutdown", "/x/../shutdown", "/SHUTDOWN", "/shutdown/", "/%2fshutdown",
                      "/%2e/shutdown", "/shutdown;x", "/shutdown%00"]
SLOT_SPELLINGS = ["/mcp/sse", "/%6dcp/sse", "/mcp/%73se", "//mcp/sse", "/mcp//sse", "/./mcp/sse",
                  "/MCP/sse", "/mcp/sse/", "/mcp", "/%6dcp", "//mcp", "/events?client=x",
                  "/%65vents?client=x"]
IFRAMES_PER_SPELLING = 12

PAGE = """<!doctype html><html><body><form id=f method=POST target=sink></form>
<iframe name=sink></iframe><script>
const daemons = %(daemons)s, shutdowns = %(shutdowns)s, slots = %(slots)s, n = %(n)d;
window.sent = 0;
for (const base of daemons) {
  for (const p of shutdowns) {
    fetch(base + p, {method: 'POST', mode: 'no-cors', body: '{}'}).catch(() => {}); sent++;
    fetch(base + p, {method: 'POST', mode: 'no-cors', body: '{}',
                     headers: {'Content-Type': 'text/plain'}}).catch(() => {}); sent++;
    const img = new Image(); img.src = base + p; document.body.appendChild(img); sent++;
    const fr = document.createElement('iframe'); fr.src = base + p; document.body.appendChild(fr); sent++;
  }
  for (const p of slots) {
    fetch(base + p, {mode: 'no-cors'}).catch(() => {}); sent++;
    const img = new Image(); img.src = base + p; document.body.appendChild(img); sent++;
    for (let i = 0; i < n; i++) {
      const fr = document.createElement('iframe'); fr.src = base + p + (p.includes('?') ? '&' : '?') + 'i=' + i;
      document.body.appendChild(fr); sent++;
    }
  }
}
// Form POSTs last, one after another (each navigates the sink iframe).
(async () => {
  const form = document.getElementById('f');
  for (const base of daemons) for (const p of shutdowns) {
    form.action = base + p; form.submit(); sent++;
    await new Promise(r => setTimeout(r, 60));
  }
  window.formsDone = true;
})();
</script></body></html>"""


class _Page(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def _requests_seen(url: str) -> int:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return int(sum(float(m) for m in re.findall(r'^gasoline_http_requests_total\{[^}]*\} (\S+)$',
                                                 text, re.M)))


def _health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=10) as resp:
        return json.loads(resp.read())


def test_a_localhost_page_cannot_stop_the_daemon_or_take_a_slot(chromium_bin, daemon):
    daemons = [daemon.url, f"http://localhost:{daemon.port}"]
    _Page.body = (PAGE % {"daemons": json.dumps(daemons), "shutdowns": json.dumps(SHUTDOWN_SPELLINGS),
                          "slots": json.dumps(SLOT_SPELLINGS), "n": IFRAMES_PER_SPELLING}).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    browser = Chromium(executable=chromium_bin, extension_dir=None)
    browser.start()
    try:
        before = _requests_seen(daemon.url)
        page_url = f"http://localhost:{server.server_address[1]}/attack.html"
        _, session, _ = browser.new_page(page_url)
        wait_until(lambda: browser.cdp.evaluate(session, "window.formsDone === true"), 60,
                   what="the page's requests")
        sent = browser.cdp.evaluate(session, "window.sent")
        expected_min = len(daemons) * (len(SHUTDOWN_SPELLINGS) * 5
                                       + len(SLOT_SPELLINGS) * (2 + IFRAMES_PER_SPELLING))
        assert sent >= expected_min
        # Give every request time to arrive (iframes and images load in parallel).
        wait_until(lambda: _requests_seen(daemon.url) - before >= 0.8 * expected_min, 30,
                   what="the browser's requests at the daemon",
                   describe=lambda: _requests_seen(daemon.url) - before)
        time.sleep(1.0)
        assert daemon.process is not None and daemon.process.poll() is None, "the daemon stopped"
        health = _health(daemon.url)
        assert health["status"] == "ok"
        assert health["clients"]["active"] == 0 and health["clients"]["list"] == [], health["clients"]
        # An agent still gets a slot.
        init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "agent", "version": "1"}}}).encode()
        request = urllib.request.Request(daemon.url + "/mcp", data=init, method="POST", headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            **client_headers(daemon, "agent-after-the-page")})
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200
    finally:
        browser.stop()
        server.shutdown()
        server.server_close()
    assert daemon.process is not None and daemon.process.poll() is None


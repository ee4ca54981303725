"""
A new user's first hour, checked in Debian's Chromium with the real extension, a real daemon and the official ``mcp`` SDK:

- ``interact back`` / ``forward`` after agent navigations (Chromium's ``tabs.goBack`` skips entries
  made without a user gesture; the extension steps the page's history instead);
- an ``<img>``, a script and a stylesheet answered 404 reach ``observe errors`` (and
  ``network_bodies``) with their status, and the waterfall carries statuses;
- ``interact screenshot`` answers an MCP image block the SDK decodes, next to the saved path;
- a tab tracked after it loaded: the agent's next answer says to reload it.

Fails (not skips) under CI=true without Chromium (the ``browser`` fixture).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from harness import daemon_get, wait_until
from mcp.types import ImageContent
from test_extension_mcp import agents, call, open_tab, parse, track

pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def test_back_and_forward_after_agent_navigations(browser, site, ext_daemon):
    first, second, third = (site.url + "/blank.html?first", site.url + "/blank.html?second",
                            site.url + "/agent.html")
    page, tab = open_tab(browser, None, first)
    track(browser, ext_daemon, [(tab, first)])

    async def body(client_id, session):
        out = []
        await call(session, "interact", {"what": "navigate", "url": second})
        await call(session, "interact", {"what": "navigate", "url": third})
        for step in ("back", "back", "forward"):
            out.append(await call(session, "interact", {"what": step}))
        # Nothing further forward than the newest entry: a clear, structured error.
        out.append(await session.call_tool("interact", {"what": "forward"}))
        out.append(await session.call_tool("interact", {"what": "forward"}))
        return out

    [(back1, back2, fwd, *more)] = agents(ext_daemon, ["e2e-history"], body)
    assert back1 == (f"back done: {second}", {}), back1
    assert back2 == (f"back done: {first}", {}), back2
    assert fwd == (f"forward done: {second}", {}), fwd
    assert browser.cdp.evaluate(page, "location.href") in (second, third)
    last = more[-1]
    assert browser.cdp.evaluate(page, "location.href") == third
    assert last.is_error is True
    error = json.loads(last.content[0].text.partition("\n")[2])
    assert error["error"] == "no_history" and error["retry"], error


def test_a_resource_404_reaches_the_agent_with_its_status(browser, site, ext_daemon):
    start = site.url + "/blank.html?before-broken"
    broken = site.url + "/broken.html"
    page, tab = open_tab(browser, None, start)
    track(browser, ext_daemon, [(tab, start)])
    browser.navigate(page, broken)

    # Three 404s, each reported however its request ends: Chromium often cuts an error answer's body
    # short (net::ERR_ABORTED after the 404 arrived; lib/failures.js), which once lost one of them.
    def failures():
        logs = daemon_get(ext_daemon.url, "/health")["logs"]["entries"]
        return logs >= 3

    wait_until(failures, 40, interval=0.3, what="the failed loads to reach the daemon",
               describe=lambda: (daemon_get(ext_daemon.url, "/health")["logs"],
                                 browser.status(browser.service_worker())))

    async def body(client_id, session):
        errors = await call(session, "observe", {"what": "errors"})
        bodies = await call(session, "observe", {"what": "network_bodies", "status_min": 400})
        waterfall = await call(session, "observe", {"what": "network_waterfall"})
        return errors, bodies, waterfall

    [(errors, bodies, waterfall)] = agents(ext_daemon, ["e2e-broken"], body)
    seen = {e["url"].rsplit("/", 1)[-1]: e for e in errors[1]["entries"] if e.get("type") == "network"}
    for name, kind in (("missing-picture.png", "image"), ("missing-script.js", "script"),
                       ("missing-style.css", "stylesheet")):
        assert name in seen, (name, errors[1]["entries"])
        assert seen[name]["status"] == 404 and seen[name]["resource_type"] == kind, seen[name]
        assert "404" in seen[name]["message"]
    assert {e["url"].rsplit("/", 1)[-1] for e in bodies[1]["entries"]} >= {
        "missing-picture.png", "missing-script.js", "missing-style.css"}
    statuses = {e["url"].rsplit("/", 1)[-1]: e.get("status") for e in waterfall[1]["entries"]}
    assert statuses.get("missing-picture.png") == 404, waterfall[1]["entries"]


def test_a_screenshot_is_an_image_the_agent_can_decode(browser, site, ext_daemon):
    url = site.url + "/agent.html"
    _, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])

    async def body(client_id, session):
        return await session.call_tool("interact", {"what": "screenshot", "format": "png",
                                                     "timeout_ms": 30000})

    [result] = agents(ext_daemon, ["e2e-eyes"], body)
    assert result.is_error is False, result.content[0].text
    summary, data = parse(result)
    [image] = [c for c in result.content if isinstance(c, ImageContent)]
    decoded = base64.b64decode(image.data, validate=True)
    if image.mime_type == "image/png":  # small enough: the screenshot itself
        assert decoded == Path(data["path"]).read_bytes()
    else:  # a large one: the extension's JPEG preview, at most 1568 px
        assert image.mime_type == "image/jpeg" and decoded[:3] == b"\xff\xd8\xff"
    assert len(image.data) <= 1_000_000


def test_tracking_a_loaded_tab_tells_the_agent_to_reload(browser, site, ext_daemon):
    url = site.url + "/broken.html"
    page, tab = open_tab(browser, None, url)
    wait_until(lambda: browser.cdp.evaluate(page, "document.readyState") == "complete", 10,
               what="the page to finish loading before it is tracked")
    sw = track(browser, ext_daemon, [(tab, url)])
    eid = browser.extension_id()
    _, popup, _ = browser.new_page(f"chrome-extension://{eid}/popup/popup.html")
    # What "Track this tab" sends (the popup's current tab is itself here).
    browser.cdp.evaluate(popup, f"chrome.runtime.sendMessage({{type: 'gasoline:track', tabId: {tab}, tracked: false}})")
    browser.cdp.evaluate(popup, f"chrome.runtime.sendMessage({{type: 'gasoline:track', tabId: {tab}, tracked: true}})")
    wait_until(lambda: tab in (browser.cdp.evaluate(
        sw, "chrome.storage.session.get('gasolineLoadedBeforeTracking').then(r => r.gasolineLoadedBeforeTracking || [])") or []),
        10, what="the tab to be noted as loaded before tracking")

    async def body(client_id, session):
        first = await call(session, "observe", {"what": "errors"})
        second = await call(session, "observe", {"what": "errors"})
        return first, second

    def told():
        [(first, second)] = agents(ext_daemon, ["e2e-late"], body)
        return first if "reload_needed" in first[1] else None

    first = wait_until(told, 20, interval=0.5, what="a sync carrying loaded_before_tracking")
    assert "interact {what:\"refresh\"}" in first[1]["reload_needed"]
    # After a reload the load is captured from its start: the note goes away.
    browser.cdp.evaluate(page, "location.reload(); 1")
    wait_until(lambda: tab not in (browser.cdp.evaluate(
        sw, "chrome.storage.session.get('gasolineLoadedBeforeTracking').then(r => r.gasolineLoadedBeforeTracking || [])") or []),
        10, what="the reload to clear the note")


PREVIEW_PROBE = """
(async () => {
  const { previewOf, MAX_INLINE_IMAGE_CHARS, PREVIEW_MAX_EDGE } = await import(chrome.runtime.getURL('lib/visual.js'));
  const dataUrlOf = async (width, height, noise) => {
    const canvas = new OffscreenCanvas(width, height);
    const ctx = canvas.getContext('2d');
    const img = ctx.createImageData(width, height);
    if (noise) for (let i = 0; i < img.data.length; i += 65536) crypto.getRandomValues(img.data.subarray(i, i + 65536));
    else img.data.fill(200);
    for (let i = 3; i < img.data.length; i += 4) img.data[i] = 255;
    ctx.putImageData(img, 0, 0);
    const bytes = new Uint8Array(await (await canvas.convertToBlob({ type: 'image/png' })).arrayBuffer());
    let text = '';
    for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    return 'data:image/png;base64,' + btoa(text);
  };
  const small = await previewOf(await dataUrlOf(300, 200, false));
  const big = await dataUrlOf(2400, 1600, true);
  const preview = await previewOf(big);
  const bitmap = await createImageBitmap(await (await fetch(preview)).blob());
  return { small, original: big.length, length: preview.length, head: preview.slice(0, 23),
           width: bitmap.width, height: bitmap.height, limit: MAX_INLINE_IMAGE_CHARS, edge: PREVIEW_MAX_EDGE };
})()
"""


def test_the_extension_scales_a_large_screenshot_into_an_inline_preview(browser):
    """lib/visual.js previewOf in Chromium itself: nothing for an image that fits; for a 2400x1600
    noise PNG (incompressible, megabytes), a JPEG within the inline bound and 1568 px."""
    browser.service_worker()  # waits for the extension to be up
    eid = browser.extension_id()
    _, page, _ = browser.new_page(f"chrome-extension://{eid}/popup/popup.html")
    wait_until(lambda: browser.cdp.evaluate(page, "location.protocol + document.readyState")
               == "chrome-extension:complete", 10, what="the extension page to load")
    out = browser.cdp.evaluate(page, PREVIEW_PROBE, timeout=60)
    assert out["small"] is None
    assert out["original"] > out["limit"]
    assert out["head"] == "data:image/jpeg;base64," and out["length"] - 23 <= out["limit"], out
    assert max(out["width"], out["height"]) <= out["edge"]
    assert abs(out["width"] / out["height"] - 1.5) < 0.01  # the aspect ratio kept


def test_the_test_browser_never_reaches_a_blocked_port(chromium_bin, site):
    """The harness keeps every browser off the user's daemon port (7890, where the extension's
    default server URL points): checked on a random port, from a page and from the extension's
    service worker, with a server listening there that must see nothing."""
    import http.server
    import threading

    from harness import Chromium

    hits: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    b = Chromium(executable=chromium_bin, blocked_ports=(port,))
    b.start()
    try:
        sw = b.service_worker()
        _, page, _ = b.new_page(site.url + "/blank.html")
        probe = f"fetch('http://127.0.0.1:{port}/health').then(r => 'reached ' + r.status, e => 'blocked')"
        assert b.cdp.evaluate(page, probe) == "blocked"
        assert b.cdp.evaluate(sw, probe) == "blocked"
        assert hits == []
        # The control: another loopback port is reached as usual.
        control = f"fetch('{site.url}/blank.html').then(r => 'reached ' + r.status, e => 'blocked')"
        assert b.cdp.evaluate(sw, control) == "reached 200"
    finally:
        b.stop()
        server.shutdown()
        server.server_close()

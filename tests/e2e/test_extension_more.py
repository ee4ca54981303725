"""
The newer extension commands in Debian's Chromium:

- ``dom_action`` ``upload`` and the ``draw_mode`` overlay, loaded into an ordinary page over CDP
  (commands.js) and driven with real CDP mouse and keyboard input;
- through the real daemon and the official ``mcp`` SDK: ``interact upload`` (a file from the
  daemon's state dir lands in the page's ``<input type=file>``), ``interact draw_mode_start`` +
  a drag and a typed note + ``analyze annotations`` / ``annotation_detail`` (kept by the worker in
  chrome.storage.session), ``analyze visual_baseline`` / ``visual_diff`` (compared in the service
  worker) and ``interact record_start`` / ``record_stop`` (JPEG frames + timeline).

Fails (not skips) under CI=true without Chromium (the ``browser`` fixture).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from harness import EXTENSION_DIR, wait_until
from test_extension_mcp import agents, call, open_tab, track

pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

COMMANDS_JS = "\n".join((EXTENSION_DIR / "content" / name).read_text() for name in ("selectors.js", "commands.js"))

FORM = """
document.body.innerHTML = `
  <h1 id="title" style="margin:0;height:60px;background:#eef">Upload and annotate</h1>
  <input type="file" id="one">
  <input type="file" id="many" multiple>
  <input type="text" id="name">
  <button id="buy" style="position:absolute;left:300px;top:200px;width:120px;height:40px">Buy now</button>
  <p id="seen">none</p>`;
window.changes = 0;
document.getElementById('many').addEventListener('change', async (e) => {
  window.changes++;
  const f = e.target.files[0];
  document.getElementById('seen').textContent = f.name + ':' + (await f.text());
});
true
"""


def run(browser, page, type_, params):
    return browser.cdp.evaluate(page, f"__gasolineCommands.run({json.dumps(type_)}, {json.dumps(params)})")


def drag(browser, page, start, end, note):
    """A real mouse drag from ``start`` to ``end``, then the note typed and Enter."""
    cdp = browser.cdp
    cdp.call("Input.dispatchMouseEvent", {"type": "mousePressed", "x": start[0], "y": start[1], "button": "left", "clickCount": 1}, session=page)
    for i in range(1, 5):
        x = start[0] + (end[0] - start[0]) * i / 4
        y = start[1] + (end[1] - start[1]) * i / 4
        cdp.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y, "button": "left"}, session=page)
    cdp.call("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": end[0], "y": end[1], "button": "left", "clickCount": 1}, session=page)
    wait_until(lambda: browser.cdp.evaluate(page, "!!document.querySelector('[data-gasoline-overlay=draw][data-gasoline-state=note]')"), 5, what="the note field")
    cdp.call("Input.insertText", {"text": note}, session=page)
    for kind in ("keyDown", "keyUp"):
        cdp.call("Input.dispatchKeyEvent", {"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}, session=page)


def escape(browser, page):
    for kind in ("keyDown", "keyUp"):
        browser.cdp.call("Input.dispatchKeyEvent", {"type": kind, "key": "Escape", "code": "Escape", "windowsVirtualKeyCode": 27}, session=page)


def test_upload_and_draw_mode_in_the_page(browser, site):
    _, page, _ = browser.new_page(site.url + "/blank.html")
    browser.cdp.evaluate(page, COMMANDS_JS + "\n;true")
    browser.cdp.evaluate(page, FORM)
    files = [{"name": "notes.txt", "type": "text/plain", "data": "aGVsbG8gZmlsZQ==", "size": 10}]
    done = run(browser, page, "dom_action", {"action": "upload", "selector": "#many", "files": files})
    assert done["success"] is True and done["files"] == [{"name": "notes.txt", "size": 10, "type": "text/plain"}]
    wait_until(lambda: browser.cdp.evaluate(page, "document.getElementById('seen').textContent") == "notes.txt:hello file", 5,
               what="the page's change handler to read the file")
    assert browser.cdp.evaluate(page, "window.changes") == 1
    two = files * 2
    assert run(browser, page, "dom_action", {"action": "upload", "selector": "#one", "files": two})["error"] == "invalid_param"
    assert run(browser, page, "dom_action", {"action": "upload", "selector": "#name", "files": files})["error"] == "invalid_param"

    assert run(browser, page, "draw_mode", {"action": "start"}) == {"success": True, "active": True}
    assert run(browser, page, "draw_mode", {"action": "start"})["already_active"] is True
    drag(browser, page, (290, 190), (430, 250), "the buy button is too far right")
    saved = wait_until(lambda: browser.cdp.evaluate(page, "globalThis.__gasolineAnnotationsHere || null"), 5, what="the annotation")
    [annotation] = saved
    assert annotation["note"] == "the buy button is too far right"
    assert annotation["rect"] == {"x": 290, "y": 190, "width": 140, "height": 60}
    assert annotation["element"]["tag"] == "button" and annotation["element"]["selectors"]["css"] == "#buy"
    assert annotation["element"]["styles"]["position"] == "absolute"
    assert annotation["element"]["outer_html"].startswith('<button id="buy"')
    assert annotation["id"].startswith("ann_")
    escape(browser, page)
    wait_until(lambda: browser.cdp.evaluate(page, "document.querySelector('[data-gasoline-overlay=draw]') === null"), 5,
               what="Esc to end draw mode")
    # The page gets its own clicks back.
    browser.click(page, "#buy")


def test_mcp_upload_draw_mode_and_annotations_through_the_real_extension(browser, site, ext_daemon):
    url = site.url + "/blank.html?more"
    page, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])
    browser.cdp.evaluate(page, FORM)
    upload_dir = Path(ext_daemon.state_dir) / "uploads"
    upload_dir.mkdir(parents=True, exist_ok=True)
    (upload_dir / "order.csv").write_text("id,qty\n1,2\n")

    async def body(client_id, session):
        out = {}
        out["upload"] = await call(session, "interact", {"what": "upload", "selector": "#many", "file_path": str(upload_dir / "order.csv"),
                                                         "timeout_ms": 30000})
        refused = await session.call_tool("interact", {"what": "upload", "selector": "#many", "file_path": "/etc/hostname"})
        out["refused"] = (refused.is_error, refused.content[0].text)
        out["draw"] = await call(session, "interact", {"what": "draw_mode_start", "timeout_ms": 30000})
        return out

    [out] = agents(ext_daemon, ["e2e-annotator"], body)
    assert out["upload"][1]["result"]["files"] == [{"name": "order.csv", "size": 11, "type": "text/csv"}]
    wait_until(lambda: browser.cdp.evaluate(page, "document.getElementById('seen').textContent") == "order.csv:id,qty\n1,2\n", 5,
               what="the uploaded file in the page")
    assert out["refused"][0] is True and "path_refused" in out["refused"][1]
    assert out["draw"][1]["result"]["active"] is True

    wait_until(lambda: browser.cdp.evaluate(page, "!!document.querySelector('[data-gasoline-overlay=draw]')"), 5, what="the overlay")
    drag(browser, page, (295, 195), (425, 245), "make this button green")
    # (the overlay runs in the extension's isolated world, in a closed shadow root: the page sees
    # only its host element, which counts the saved annotations)
    wait_until(lambda: browser.cdp.evaluate(page, "document.querySelector('[data-gasoline-overlay=draw]').dataset.gasolineAnnotations") == "1", 5,
               what="the saved annotation's marker in the page")

    async def read(client_id, session):
        listed = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            listed = await call(session, "analyze", {"what": "annotations", "timeout_ms": 30000})
            if listed[1]["count"]:
                break
        detail = await call(session, "analyze", {"what": "annotation_detail", "annotation_id": listed[1]["annotations"][0]["id"],
                                                 "timeout_ms": 30000})
        return listed, detail

    [(listed, detail)] = agents(ext_daemon, ["e2e-annotator"], read)
    _, data = listed
    [annotation] = data["annotations"]
    assert annotation["note"] == "make this button green" and annotation["tab_id"] == tab
    assert annotation["element"]["selectors"]["css"] == "#buy" and annotation["url"] == url
    assert data["draw_mode_active"] is True
    full = detail[1]["annotation"]
    assert full["element"]["outer_html"].startswith('<button id="buy"')
    assert full["element"]["styles"]["width"] == "120px"
    escape(browser, page)
    # The overlay's clicks and typing were not recorded as the user's page actions.
    actions = agents(ext_daemon, ["e2e-annotator"], lambda c, s: call(s, "observe", {"what": "actions", "limit": 1000}))[0][1]
    assert not [a for a in actions["entries"] if a.get("value") == "make this button green"]


def test_mcp_visual_diff_and_screen_recording_through_the_real_extension(browser, site, ext_daemon):
    url = site.url + "/blank.html?visual"
    page, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])
    browser.cdp.evaluate(page, FORM)
    state_dir = Path(ext_daemon.state_dir).resolve()

    async def before(client_id, session):
        base = await call(session, "analyze", {"what": "visual_baseline", "name": "form", "timeout_ms": 30000})
        same = await call(session, "analyze", {"what": "visual_diff", "name": "form", "timeout_ms": 30000})
        rec = await call(session, "interact", {"what": "record_start", "fps": 2, "max_seconds": 60})
        return base, same, rec

    [(base, same, rec)] = agents(ext_daemon, ["e2e-visual"], before)
    assert state_dir in Path(base[1]["baseline"]["path"]).resolve().parents
    assert same[1]["changed_pixels"] == 0 and same[1]["passed"] is True, same
    browser.cdp.evaluate(page, "document.getElementById('title').style.background = 'rgb(200, 0, 0)'; true")
    time.sleep(1.5)

    async def after(client_id, session):
        diff = await call(session, "analyze", {"what": "visual_diff", "name": "form", "pixel_threshold": 30, "timeout_ms": 30000})
        stop = await call(session, "interact", {"what": "record_stop"})
        return diff, stop

    [(diff, stop)] = agents(ext_daemon, ["e2e-visual"], after)
    data = diff[1]
    assert data["passed"] is False and data["changed_pixels"] > 1000, data
    top = data["regions"][0]
    assert top["y"] == 0 and top["height"] <= 80 and top["width"] > 300, data["regions"]
    image = Path(data["diff_path"]).read_bytes()
    assert image[:3] == b"\xff\xd8\xff" and state_dir in Path(data["diff_path"]).resolve().parents

    manifest = stop[1]
    assert manifest["recording_id"] == rec[1]["recording_id"]
    assert manifest["frame_count"] >= 2, manifest
    folder = Path(manifest["directory"])
    for frame in manifest["frames"]:
        assert (folder / frame["file"]).read_bytes()[:3] == b"\xff\xd8\xff"
    assert json.loads((folder / "manifest.json").read_text())["frame_count"] == manifest["frame_count"]

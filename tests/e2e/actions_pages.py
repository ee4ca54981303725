"""
Pages of the e2e test site for the real-input modes (``interact`` hover, drag, key_press, dialog,
upload, emulate, tabs a link opens, a performance trace, a source-mapped exception), served under ``/actions/`` by ``testsite.py``. Each page says
what happened in an element the test reads back with ``get_text`` (the page confirms success).
"""

from __future__ import annotations

import json

HEAD = '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>{style}</head><body>'

PAGES = {
    "hover.html": HEAD.format(title="hover menu", style="""<style>
  #menu { display: inline-block; padding: 8px; border: 1px solid #999; }
  #menu .items { display: none; }
  #menu:hover .items { display: block; }
</style>""") + """
<div id="menu">Account<div class="items"><a href="#settings" id="settings">Settings</a></div></div>
<p id="out">idle</p>
<div style="position: relative; height: 40px"><button id="covered">Covered</button>
<div id="veil" style="position: absolute; inset: 0; background: rgba(0,0,0,0.2)"></div></div>
<script>
  document.getElementById('menu').addEventListener('mouseenter', () => { document.getElementById('out').textContent = 'entered'; });
  document.getElementById('settings').addEventListener('click', (e) => { e.preventDefault(); document.getElementById('out').textContent = 'settings opened'; });
</script></body></html>""",
    "drag.html": HEAD.format(title="drag and drop", style="""<style>
  .box { width: 120px; height: 60px; border: 1px solid #333; margin: 10px; display: inline-block; }
  #knob { position: absolute; left: 20px; top: 200px; width: 40px; height: 40px; background: #c33; touch-action: none; }
  #slot { position: absolute; left: 300px; top: 200px; width: 80px; height: 80px; border: 2px dashed #333; }
</style>""") + """
<div id="card" class="box" draggable="true" role="button" aria-label="Card">Card</div>
<div id="bin" class="box" role="region" aria-label="Bin">Bin</div>
<p id="html5-out">none</p><p id="pointer-out">none</p>
<div id="knob"></div><div id="slot"></div>
<script>
  const $ = (id) => document.getElementById(id);
  $('card').addEventListener('dragstart', (e) => { e.dataTransfer.setData('text/plain', 'card-42'); });
  $('bin').addEventListener('dragover', (e) => e.preventDefault());
  $('bin').addEventListener('drop', (e) => { e.preventDefault(); $('html5-out').textContent = 'dropped ' + e.dataTransfer.getData('text/plain'); });
  let grab = null;
  $('knob').addEventListener('pointerdown', (e) => { grab = {dx: e.clientX - $('knob').offsetLeft, dy: e.clientY - $('knob').offsetTop}; $('knob').setPointerCapture(e.pointerId); });
  $('knob').addEventListener('pointermove', (e) => { if (!grab) return; $('knob').style.left = (e.clientX - grab.dx) + 'px'; $('knob').style.top = (e.clientY - grab.dy) + 'px'; });
  $('knob').addEventListener('pointerup', (e) => {
    grab = null;
    const s = $('slot').getBoundingClientRect();
    const inside = e.clientX >= s.left && e.clientX <= s.right && e.clientY >= s.top && e.clientY <= s.bottom;
    $('pointer-out').textContent = inside ? 'in slot' : 'missed';
  });
</script></body></html>""",
    "dialogs.html": HEAD.format(title="dialogs", style="") + """
<button id="confirm">Delete</button><button id="prompt">Rename</button><button id="alert">Warn</button>
<p id="out">idle</p>
<script>
  const out = document.getElementById('out');
  document.getElementById('confirm').addEventListener('click', () => { out.textContent = confirm('Delete the file?') ? 'confirmed' : 'kept'; });
  document.getElementById('prompt').addEventListener('click', () => { out.textContent = 'name: ' + prompt('New name?', 'old'); });
  document.getElementById('alert').addEventListener('click', () => { alert('careful'); out.textContent = 'alerted'; });
</script></body></html>""",
    "load-confirm.html": HEAD.format(title="confirm on load", style="") + """
<p id="out">loading</p>
<script>document.getElementById('out').textContent = confirm('Stay signed in?') ? 'stays' : 'leaves';</script>
</body></html>""",
    "keys.html": HEAD.format(title="keys", style="") + """
<input id="field" placeholder="field"><p id="palette">closed</p><p id="seen">none</p>
<script>
  document.addEventListener('keydown', (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 'k') { e.preventDefault(); document.getElementById('palette').textContent = 'open (ctrl=' + e.ctrlKey + ', trusted=' + e.isTrusted + ')'; }
    if (e.key === 'Tab' && e.shiftKey) document.getElementById('seen').textContent = 'shift+tab';
  });
</script></body></html>""",
    "upload.html": HEAD.format(title="upload", style="") + """
<input type="file" id="file"><p id="file-out">nothing</p>
<script>
  document.getElementById('file').addEventListener('change', (e) => {
    const f = e.target.files[0];
    f.text().then((t) => { document.getElementById('file-out').textContent = f.name + ': ' + t.trim(); });
  });
</script></body></html>""",
    "emulate.html": HEAD.format(title="emulate", style='<meta name="viewport" content="width=device-width">') + """
<p id="out">idle</p>
<script>
  window.report = () => JSON.stringify({width: innerWidth, online: navigator.onLine,
    dark: matchMedia('(prefers-color-scheme: dark)').matches});
</script></body></html>""",
    "perf.html": HEAD.format(title="perf", style='<link rel="stylesheet" href="/actions/blocking.css">') + """
<div id="banner-slot"></div>
<img id="hero" src="/actions/hero.svg" width="600" height="300" alt="hero">
<p id="below">Below the hero</p>
<script>
  setTimeout(() => { const end = performance.now() + 120; while (performance.now() < end); }, 50);
  setTimeout(() => { const b = document.createElement('div'); b.style.height = '150px'; b.textContent = 'late banner';
                     document.getElementById('banner-slot').appendChild(b); }, 800);  // > 500 ms after the reload
</script></body></html>""",
    "mapped.html": HEAD.format(title="mapped", style="") + """
<p>a bundle with a source map throws</p><script src="/actions/bundle.js"></script></body></html>""",
    "opener.html": HEAD.format(title="opener", style="") + """
<a id="open" href="/actions/child.html" target="_blank">Open the child</a>
</body></html>""",
    "child.html": HEAD.format(title="child", style="") + """
<button id="go">Go</button><p id="out">child idle</p>
<script>document.getElementById('go').addEventListener('click', () => { document.getElementById('out').textContent = 'child clicked'; });</script>
</body></html>""",
}


def resource(page):
    """The ``/actions/`` folder of the test site (``page(body)``: testsite.py's Page)."""
    from twisted.web import resource as web

    from twisted.web import static

    root = web.Resource()
    for name, body in PAGES.items():
        root.putChild(name.encode(), page(body))
    root.putChild(b"blocking.css", static.Data(b"body { font: 16px sans-serif; }", "text/css"))
    # Enough bytes per pixel to count as contentful (Chrome leaves low-entropy images out of LCP).
    rects = "".join(f'<rect x="{(i * 37) % 600}" y="{(i * 53) % 300}" width="{20 + i % 40}" height="{10 + i % 30}" '
                    f'fill="#{(i * 40503) % 0xFFFFFF:06x}"/>' for i in range(200))
    root.putChild(b"hero.svg", static.Data(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="600" height="300">{rects}</svg>'.encode(),
        "image/svg+xml"))
    # A "bundle" whose source map sends its two lines back to src/app.ts and a webpack:// source.
    root.putChild(b"bundle.js", static.Data(
        b"function boom() { throw new Error('mapped boom'); }\n"
        b"setTimeout(function later() { boom(); }, 10);\n"
        b"//# sourceMappingURL=bundle.js.map\n", "text/javascript"))
    root.putChild(b"bundle.js.map", static.Data(json.dumps({
        "version": 3, "file": "bundle.js", "sources": ["src/app.ts", "webpack://x/src/util.ts"],
        "names": ["boom", "later"], "mappings": "AASA,kBACIA;ACTFC"}).encode(), "application/json"))
    return root

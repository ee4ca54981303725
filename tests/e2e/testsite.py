"""
The end-to-end test site: a small twisted.web server on 127.0.0.1 port 0 with a WebSocket echo.

Run as a subprocess (``python tests/e2e/testsite.py``); it prints ``PORT <n>`` on its first line of
stdout once listening and stops on SIGTERM. Pages:

- ``/blank.html``     an empty page (tabs are opened here, then tracked, then navigated)
- ``/capture.html``   does everything the capture test looks for (see ``CAPTURE_PAGE``)
- ``/commands.html``  elements the content-side command handlers are tested against
- ``/bench.html``     a page with some DOM, console, fetch and WebSocket work (bench/extension_overhead.py)
- ``/app.html``       an app-like page for the same benchmark: a stylesheet, a ~220 kB script bundle that
                      renders a list, images and API calls answered after 20-40 ms, console output, a
                      WebSocket (everything generated here, deterministic)
- ``/api/slow``       answers 200 with a JSON echo after 30 ms
- ``/api/fail``       answers 500 with a JSON body
- ``/api/ok``         answers 200 with a JSON body that echoes the request body
- ``/api/login``      an auth endpoint (its bodies must be redacted)
- ``/graphql``        echoes a POSTed body (a GraphQL login must leave the browser redacted)
- ``/ws``             WebSocket echo
- ``/agent.html``     elements the MCP round-trip tests act on, with a planted a11y violation
- ``/broken.html``    an image, a script and a stylesheet that answer 404 (no fetch involved)
- ``/snapshot.html``  a login form, hidden elements, an open shadow root with a slot and a same-origin
                      iframe (``/snapshot-frame.html``): the agents' snapshot and its refs
- ``/actions/...``    pages for the real-input modes (hover, drag, keys, dialogs, upload, emulate,
                      tabs a link opens; tests/e2e/actions_pages.py)
- ``/tabs/<name>``    logs ``console.error('e2e tab error from <name>')`` on load (two-tab test)
"""

from __future__ import annotations

import json
import sys

from twisted.internet import endpoints, reactor
from twisted.web import resource, server, static
from twisted.web.websocket import WebSocketResource

BROKEN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>broken resources</title>
<link rel="stylesheet" href="/missing-style.css"></head>
<body><h1>broken</h1><img id="pic" src="/missing-picture.png" alt="missing">
<script src="/missing-script.js"></script></body></html>
"""

CAPTURE_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Gasoline capture page</title></head>
<body>
<h1>Capture</h1>
<button id="go" data-testid="go-button" aria-label="Go button">Go</button>
<input id="secret" type="password" name="secret">
<p id="status">waiting</p>
<script>
  window.__done = {ws: false, fetch: false, xhr: false};
  const marker = new URLSearchParams(location.search).get('m') || 'none';
  console.log('e2e log line', marker, {nested: {deep: [1, 2, 3]}});
  const cyclic = {name: 'cyclic'}; cyclic.self = cyclic;
  console.error('e2e console error', marker, cyclic, document.body);
  setTimeout(() => { throw new Error('e2e thrown ' + marker); }, 0);
  Promise.reject(new Error('e2e rejected ' + marker));
  fetch('/api/fail?m=' + marker, {method: 'POST', headers: {'Content-Type': 'application/json',
        'Authorization': 'Bearer e2e-secret-token'}, body: JSON.stringify({hello: 'body-' + marker})})
    .then(r => r.text()).then(() => { window.__done.fetch = true; });
  fetch('/api/login', {method: 'POST', body: JSON.stringify({user: 'u', password: 'hunter2-' + marker})});
  fetch(new Request('/api/ok?req=' + marker, {method: 'PUT', body: 'request-object-body-' + marker}));
  const xhr = new XMLHttpRequest();
  xhr.open('POST', '/api/ok?xhr=' + marker);
  xhr.setRequestHeader('X-Api-Key', 'e2e-xhr-key');
  xhr.onloadend = () => { window.__done.xhr = true; };
  xhr.send('xhr-body-' + marker);
  const ws = new WebSocket('ws://' + location.host + '/ws');
  ws.onopen = () => ws.send('ping-' + marker);
  ws.onmessage = (e) => { window.__done.ws = e.data; ws.close(1000, 'done'); };
  document.getElementById('go').addEventListener('click', () => {
    document.getElementById('status').textContent = 'clicked';
  });
</script>
</body></html>
"""

COMMANDS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Gasoline commands page</title></head>
<body>
<main>
  <h1>Commands</h1>
  <form id="f" onsubmit="event.preventDefault(); document.getElementById('out').textContent = 'submitted ' + this.q.value;">
    <label for="q">Search term</label>
    <input id="q" name="q" placeholder="Type here">
    <input id="pw" type="password" value="hunter2">
    <select id="color"><option value="r">Red</option><option value="g">Green</option></select>
    <input id="agree" type="checkbox">
    <button type="submit" data-testid="submit-btn">Submit</button>
  </form>
  <button aria-label="Close dialog" id="x">X</button>
  <a href="#next" id="link">Next page</a>
  <a href="/missing-page" id="broken">Old page</a>
  <div role="button" id="fake">Fake button</div>
  <p id="out"></p>
  <img src="/nothing.png" id="noalt">
  <ul class="items"><li>one</li><li>two</li><li>three</li></ul>
</main>
</body></html>
"""


# The benchmark pages record their own long tasks (bench/extension_overhead.py reads __longTasks).
LONG_TASKS_SCRIPT = """<script>
  window.__longTasks = [];
  try {
    new PerformanceObserver((l) => l.getEntries().forEach((e) => window.__longTasks.push(e.duration)))
      .observe({type: 'longtask', buffered: true});
  } catch (e) {}
</script>"""

BENCH_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Gasoline bench page</title>
""" + LONG_TASKS_SCRIPT + """</head>
<body>
<h1>Bench</h1>
<div id="list"></div>
<script>
  const list = document.getElementById('list');
  for (let i = 0; i < 300; i++) {
    const row = document.createElement('div');
    row.className = 'row';
    row.innerHTML = '<span>item ' + i + '</span> <button data-testid="b' + i + '">go</button>';
    list.appendChild(row);
  }
  for (let i = 0; i < 30; i++) console.log('bench line', i, {i, nested: {values: [i, i * 2]}});
  console.warn('bench warning');
  for (let i = 0; i < 5; i++) fetch('/api/ok?i=' + i, {method: 'POST', body: JSON.stringify({i})});
  const ws = new WebSocket('ws://' + location.host + '/ws');
  ws.onopen = () => { for (let i = 0; i < 5; i++) ws.send('frame ' + i); };
</script>
</body></html>
"""


AGENT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Gasoline agent page</title></head>
<body>
<main>
  <h1>Agent page</h1>
  <ul id="fruits"><li class="fruit">apple</li><li class="fruit">banana</li><li class="fruit">cherry</li></ul>
  <ol id="planets"><li>mercury</li><li>venus</li></ol>
  <form id="greet" onsubmit="event.preventDefault();
        document.getElementById('greeting').textContent = 'hello ' + document.getElementById('who').value;">
    <label for="who">Your name</label>
    <input id="who" name="who">
    <button type="submit" id="send">Send greeting</button>
  </form>
  <p id="greeting">nobody greeted yet</p>
  <!-- planted accessibility violation (axe rule image-alt): an image without alt text -->
  <img src="/favicon.ico" id="planted-no-alt" width="16" height="16">
</main>
<script>window.pageOnlyValue = 'set by the page script';</script>
</body></html>
"""


class TabPage(resource.Resource):
    """``/tabs/<name>``: a page that logs ``console.error('e2e tab error from <name>')`` on load."""

    isLeaf = True

    def render_GET(self, request):
        name = "".join(c for c in (request.postpath[0] if request.postpath else b"").decode("ascii", "replace") if c.isalnum())
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        request.setHeader(b"cache-control", b"no-store")
        return (
            f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tab {name}</title></head>"
            f"<body><p>tab {name}</p><script>console.error('e2e tab error from {name}');</script></body></html>"
        ).encode()


class Page(resource.Resource):
    isLeaf = True

    def __init__(self, body: str):
        super().__init__()
        self.body = body.encode()

    def render_GET(self, request):
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        request.setHeader(b"cache-control", b"no-store")
        return self.body


class Api(resource.Resource):
    isLeaf = True

    def __init__(self, status: int):
        super().__init__()
        self.status = status

    def render(self, request):
        body = request.content.read().decode("utf-8", "replace")
        request.setResponseCode(self.status)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"status": self.status, "echo": body, "note": "e2e api"}).encode()


class Echo:
    """WebSocket echo (text and bytes)."""

    def negotiationStarted(self, transport):
        self.transport = transport

    def negotiationFinished(self):
        pass

    def textMessageReceived(self, message):
        self.transport.sendTextMessage(message)

    def bytesMessageReceived(self, data):
        self.transport.sendBytesMessage(bytes(data))

    def pongReceived(self, payload):
        pass

    def connectionLost(self, reason):
        pass


class EchoFactory:
    def buildProtocol(self, request):
        return Echo()


APP_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Gasoline app-like bench page</title>
<link rel="stylesheet" href="/static/app.css">
""" + LONG_TASKS_SCRIPT + """
<script src="/static/vendor.js"></script>
<script src="/static/app.js" defer></script>
</head>
<body>
<header class="bar"><h1>Orders</h1><img src="/static/img-0.svg" alt="logo" width="32" height="32"></header>
<main id="app"></main>
<footer>%s</footer>
</body></html>
""" % "".join(f'<img src="/static/img-{i}.svg" alt="" width="16" height="16">' for i in range(1, 6))


def _app_css() -> bytes:
    rules = [f".c{i} {{ color: #{(i * 2654435761) % 0xFFFFFF:06x}; margin: {i % 7}px; padding: {i % 5}px; }}"
             for i in range(1500)]
    return ("body { font-family: sans-serif; } .bar { display: flex; gap: 8px; } .row { display: grid; "
            "grid-template-columns: 1fr 3fr 1fr; }\n" + "\n".join(rules)).encode()


def _vendor_js() -> bytes:
    # A module registry of many small functions, as bundlers emit, and a tiny view library.
    parts = ["window.__mods = {};"]
    for i in range(1500):
        parts.append(
            f"__mods.m{i} = function (x) {{ const a = [x, {i}, 'mod{i}']; let s = 0; "
            f"for (let k = 0; k < a.length; k++) s += String(a[k]).length; return s + {i % 13}; }};"
        )
    parts.append(
        "window.h = function (tag, attrs, ...kids) { const el = document.createElement(tag);"
        " for (const k in attrs || {}) el.setAttribute(k, attrs[k]);"
        " for (const c of kids) el.append(c instanceof Node ? c : String(c)); return el; };"
    )
    return "\n".join(parts).encode()


APP_JS = b"""
(function () {
  const app = document.getElementById('app');
  let total = 0;
  for (let i = 0; i < 1500; i++) total += __mods['m' + i](i);
  const list = h('section', {class: 'list'});
  for (let i = 0; i < 400; i++) {
    list.append(h('div', {class: 'row c' + i, 'data-testid': 'order-' + i},
      h('span', {}, '#' + i), h('span', {}, 'Order ' + i + ' for customer ' + (i * 7 % 97)),
      h('button', {type: 'button'}, 'Open')));
  }
  app.append(list);
  console.info('app booted', {total, rows: 400});
  for (let i = 0; i < 20; i++) console.log('render', i, {row: i, ok: true});
  console.warn('slow widget', {ms: 12});
  const load = (name) => fetch('/api/slow?r=' + name, {method: 'POST', body: JSON.stringify({name})})
    .then((r) => r.json());
  Promise.all(['orders', 'user', 'flags', 'stats'].map(load)).then(() => { window.__apiDone = true; });
  const ws = new WebSocket('ws://' + location.host + '/ws');
  ws.onopen = () => { for (let i = 0; i < 3; i++) ws.send('hello ' + i); };
})();
"""


def _svg(i: int) -> bytes:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16">'
            f'<rect width="16" height="16" fill="#{(i * 40503) % 0xFFFFFF:06x}"/></svg>').encode()


class Delayed(resource.Resource):
    """Static bytes answered after C{delay} seconds on C{clock} (a server that takes its time)."""

    isLeaf = True

    def __init__(self, clock, body: bytes, content_type: str, delay: float):
        super().__init__()
        self.clock = clock
        self.body = body
        self.content_type = content_type.encode()
        self.delay = delay

    def render(self, request):
        request.setHeader(b"content-type", self.content_type)
        request.setHeader(b"cache-control", b"no-store")
        call = self.clock.callLater(self.delay, self._finish, request, self.body_for(request))
        request.notifyFinish().addErrback(lambda _: call.active() and call.cancel())
        return server.NOT_DONE_YET

    def body_for(self, request) -> bytes:
        return self.body

    def _finish(self, request, body: bytes):
        if request.finished:  # (a disconnect cancelled this call: see notifyFinish above)
            return
        request.write(body)
        request.finish()


class SlowApi(Delayed):
    """A JSON API that takes 30 ms to answer."""

    def __init__(self, clock):
        super().__init__(clock, b"", "application/json", 0.03)

    def body_for(self, request) -> bytes:
        return json.dumps({"ok": True, "echo": request.content.read().decode("utf-8", "replace")}).encode()


SNAPSHOT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Gasoline snapshot page</title></head>
<body>
<nav aria-label="Main"><a href="#home">Home</a> <a href="#about">About</a></nav>
<main>
<h1>Sign in</h1>
<form id="login" aria-label="Login form" onsubmit="event.preventDefault()">
  <label for="email">Email</label> <input id="email" type="email" value="ada@example.com">
  <label>Password <input id="pw" type="password" value="hunter2"></label>
  <label><input id="remember" type="checkbox" checked> Remember me</label>
  <button id="signin" type="button" onclick="document.getElementById('status').textContent = 'signed in'">Sign in</button>
  <button disabled>Disabled action</button>
</form>
<p id="status">not signed in</p>
<div role="listbox" aria-label="Fruit"><div role="option" aria-selected="true">Apple</div><div role="option">Pear</div></div>
<button aria-expanded="true">Menu</button>
<select id="size" aria-label="Size"><option>Small</option><option selected>Large</option></select>
<span id="qty-label">Quantity</span> <input id="qty" type="number" value="3" aria-labelledby="qty-label">
<div role="heading" aria-level="5">Custom heading</div>
<div onclick="this.textContent = 'card opened'" id="card">Open card</div>
<ul id="items"><li>first item</li><li>second item</li></ul>
<div hidden><button>Hidden button</button></div>
<div style="display:none"><button>Not displayed</button></div>
<div aria-hidden="true"><button>Aria hidden</button></div>
<my-widget id="widget"><span slot="title">Slotted title</span></my-widget>
<iframe id="frame" title="Embedded form" src="/snapshot-frame.html"></iframe>
</main>
<script>
customElements.define('my-widget', class extends HTMLElement {
  constructor() {
    super();
    const root = this.attachShadow({mode: 'open'});
    root.innerHTML = '<h2><slot name="title"></slot></h2><button id="shadow-btn">Shadow button</button>'
      + '<input id="shadow-input" aria-label="Shadow field"><output id="shadow-out"></output>';
    root.getElementById('shadow-btn').addEventListener('click', () => {
      root.getElementById('shadow-out').textContent = 'shadow clicked ' + root.getElementById('shadow-input').value;
    });
  }
});
</script>
</body></html>
"""

SNAPSHOT_FRAME = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>frame</title></head>
<body><h3>Inside the frame</h3>
<input id="frame-input" placeholder="Frame field">
<button id="frame-btn" onclick="document.getElementById('frame-out').textContent = 'frame clicked ' + document.getElementById('frame-input').value">Frame button</button>
<p id="frame-out">idle</p>
</body></html>
"""


def build_site(clock=None) -> server.Site:
    root = resource.Resource()
    root.putChild(b"", Page("<!doctype html><title>root</title><p>gasoline e2e site</p>"))
    root.putChild(b"blank.html", Page("<!doctype html><title>blank</title><p>blank</p>"))
    root.putChild(b"capture.html", Page(CAPTURE_PAGE))
    root.putChild(b"commands.html", Page(COMMANDS_PAGE))
    root.putChild(b"bench.html", Page(BENCH_PAGE))
    if clock is not None:  # the app-like page needs timers (its server answers after a delay)
        root.putChild(b"app.html", Page(APP_PAGE))
        assets = resource.Resource()
        assets.putChild(b"app.css", Delayed(clock, _app_css(), "text/css", 0.02))
        assets.putChild(b"vendor.js", Delayed(clock, _vendor_js(), "text/javascript", 0.02))
        assets.putChild(b"app.js", Delayed(clock, APP_JS, "text/javascript", 0.02))
        for i in range(6):
            assets.putChild(f"img-{i}.svg".encode(), Delayed(clock, _svg(i), "image/svg+xml", 0.04))
        root.putChild(b"static", assets)
    api = resource.Resource()
    api.putChild(b"fail", Api(500))
    api.putChild(b"ok", Api(200))
    api.putChild(b"login", Api(200))
    if clock is not None:
        api.putChild(b"slow", SlowApi(clock))
    root.putChild(b"api", api)
    root.putChild(b"graphql", Api(200))  # echoes the body, like the other API routes
    root.putChild(b"ws", WebSocketResource(EchoFactory()))
    root.putChild(b"favicon.ico", static.Data(b"", "image/x-icon"))
    root.putChild(b"agent.html", Page(AGENT_PAGE))
    root.putChild(b"tabs", TabPage())
    root.putChild(b"broken.html", Page(BROKEN_PAGE))
    root.putChild(b"snapshot.html", Page(SNAPSHOT_PAGE))
    root.putChild(b"snapshot-frame.html", Page(SNAPSHOT_FRAME))
    from actions_pages import resource as actions_resource

    root.putChild(b"actions", actions_resource(Page))  # the real-input modes' pages
    site = server.Site(root)
    site.displayTracebacks = False
    return site


def main() -> None:
    ep = endpoints.TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1")

    def listening(port):
        sys.stdout.write(f"PORT {port.getHost().port}\n")
        sys.stdout.flush()

    def failed(f):
        sys.stderr.write(f"site failed to listen: {f.getErrorMessage()}\n")
        reactor.stop()

    ep.listen(build_site(reactor)).addCallbacks(listening, failed)
    reactor.run()


if __name__ == "__main__":
    main()

"""
The extension's command side, in Debian's Chromium.

1. The content-side handlers (extension/content/commands.js, axe-core) loaded into an ordinary page
   over CDP and called directly: CSS and semantic selectors, dom, dom_action, highlight, subtitle,
   page_info, state_capture, a11y.
2. The service worker's /sync client against a scripted stand-in daemon (a tiny HTTP server in this
   test process): it hands out commands, and the test checks the SyncRequests the extension sends
   (settings, acks, results, in_progress) and the screenshot upload. The real daemon cannot have
   commands queued from outside its process, so its round trip is left to the MCP-level tests.
"""

from __future__ import annotations

import json
from collections import Counter
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from gasoline.core.trust.identity import PairingError
from gasoline.core.trust.pairing import ChallengeRefused, DaemonIdentity
from harness import EXTENSION_DIR, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.browser]

COMMANDS_JS = "\n".join((EXTENSION_DIR / "content" / name).read_text() for name in ("selectors.js", "commands.js"))
AXE_JS = (EXTENSION_DIR / "vendor" / "axe.min.js").read_text()


def run(browser, page, type_, params):
    return browser.cdp.evaluate(page, f"__gasolineCommands.run({json.dumps(type_)}, {json.dumps(params)})")


@pytest.fixture
def commands_page(browser, site):
    _, page, _ = browser.new_page(site.url + "/blank.html")
    browser.navigate(page, site.url + "/commands.html")
    browser.cdp.evaluate(page, COMMANDS_JS + "\n;true")
    return page


def test_semantic_and_css_selectors_resolve_the_right_elements(browser, commands_page):
    page = commands_page
    resolve = lambda sel: browser.cdp.evaluate(page, f"__gasolineCommands.resolve({json.dumps(sel)}).map(e => e.id || e.tagName)")  # noqa: E731
    assert resolve("text=Next page") == ["link"]
    assert resolve("role=button[name=\"Close dialog\"]") == ["x"]
    assert resolve("role=button name='Fake button'") == ["fake"]
    assert resolve("placeholder=Type here") == ["q"]
    assert resolve("label=Search term") == ["q"]
    assert resolve("aria-label=Close dialog") == ["x"]
    assert resolve("ul.items > li") == ["LI", "LI", "LI"]
    assert resolve("text=nothing like this") == []
    bad = run(browser, page, "dom", {"selector": "div[[["})
    assert bad["error"] == "invalid_selector"


def test_dom_command_describes_matches(browser, commands_page):
    result = run(browser, commands_page, "dom", {"selector": "ul.items li", "limit": 2})
    assert result["count"] == 3 and result["truncated"] is True
    assert [m["text"] for m in result["matches"]] == ["one", "two"]
    assert result["matches"][0]["tag"] == "li" and result["title"] == "Gasoline commands page"
    pw = run(browser, commands_page, "dom", {"selector": "#pw"})
    assert pw["matches"][0]["value"] == "[redacted]"


def test_dom_actions_type_select_check_click_and_read_back(browser, commands_page):
    page = commands_page
    typed = run(browser, page, "dom_action", {"action": "type", "selector": "placeholder=Type here", "text": "gasoline"})
    assert typed["success"] is True
    assert run(browser, page, "dom_action", {"action": "get_value", "selector": "#q"})["value"] == "gasoline"
    assert run(browser, page, "dom_action", {"action": "select", "selector": "#color", "value": "Green"})["value"] == "g"
    assert run(browser, page, "dom_action", {"action": "check", "selector": "#agree"})["checked"] is True
    run(browser, page, "dom_action", {"action": "click", "selector": "text=Submit"})
    text = run(browser, page, "dom_action", {"action": "get_text", "selector": "#out"})
    assert text["text"] == "submitted gasoline"
    assert run(browser, page, "dom_action", {"action": "get_attribute", "selector": "#link", "name": "href"})["value"] == "#next"
    assert run(browser, page, "dom_action", {"action": "get_value", "selector": "#pw"})["value"] == "[redacted]"
    missing = run(browser, page, "dom_action", {"action": "click", "selector": "#nope"})
    assert missing["error"] == "element_not_found"
    listed = run(browser, page, "dom_action", {"action": "list_interactive"})
    names = {e["name"] for e in listed["elements"]}
    assert {"Close dialog", "Next page", "Submit"} <= names
    waited = run(browser, page, "dom_action", {"action": "wait_for", "selector": "#late", "timeout_ms": 300})
    assert waited["error"] == "timeout"


def test_highlight_subtitle_page_info_and_state_capture(browser, commands_page):
    page = commands_page
    hl = run(browser, page, "highlight", {"selector": "#x", "duration_ms": 5000})
    assert hl["success"] is True and hl["bounds"]["width"] > 0
    assert browser.cdp.evaluate(page, "document.querySelectorAll('[data-gasoline-overlay=highlight]').length") == 1
    run(browser, page, "subtitle", {"text": "Agent is looking at the form"})
    assert browser.cdp.evaluate(page, "document.querySelector('[data-gasoline-overlay=subtitle]').textContent") == "Agent is looking at the form"
    assert run(browser, page, "subtitle", {"text": ""})["cleared"] is True
    info = run(browser, page, "page_info", {})
    assert info["title"] == "Gasoline commands page" and info["forms"] == 1
    assert info["headings"] == [{"level": 1, "text": "Commands"}]
    browser.cdp.evaluate(page, "localStorage.setItem('k', 'v'); 1")
    state = run(browser, page, "state_capture", {})
    assert state["local_storage"] == {"k": "v"}
    assert "hunter2" not in json.dumps(state)
    assert run(browser, page, "no_such_command", {})["error"] == "unknown_query_type"


def test_a11y_finds_a_planted_violation_with_axe_core(browser, commands_page):
    page = commands_page
    browser.cdp.evaluate(page, AXE_JS + "\n;true", timeout=30)
    result = browser.cdp.evaluate(page, "__gasolineCommands.run('a11y', {})", timeout=30)
    ids = {v["id"] for v in result["violations"]}
    assert "image-alt" in ids
    image_alt = next(v for v in result["violations"] if v["id"] == "image-alt")
    assert image_alt["nodes"][0]["target"] == ["#noalt"]
    assert image_alt["impact"] in ("critical", "serious")
    assert result["engine"].startswith("axe-core 4.")


# ---------------------------------------------------------------------------------------- /sync


class _WallClock:
    @staticmethod
    def seconds() -> float:
        return time.time()


class ScriptedDaemon:
    """A stand-in daemon that speaks just enough of the protocol to hand out scripted commands.

    It has an identity of its own (gasoline.core.trust.identity) and answers the pairing challenge and
    signs its /sync answers as the daemon does; ``port`` lets it take a port another daemon had
    (an impostor, when the extension pinned that other daemon)."""

    def __init__(self, commands, port: int = 0, hold: float = 0.2, idle_next_ms: int = 300,
                 busy_next_ms: int = 200):
        """``hold``: how long a sync with nothing to hand out is held (a command added with
        :meth:`add` answers it at once, as the daemon's long poll does); ``idle_next_ms`` and
        ``busy_next_ms``: the ``next_poll_ms`` of answers without and with commands."""
        self.identity = DaemonIdentity(ec.generate_private_key(ec.SECP256R1()), _WallClock())
        self.pairing_requests: list[str] = []
        self.commands = list(commands)
        self.hold, self.idle_next_ms, self.busy_next_ms = hold, idle_next_ms, busy_next_ms
        self.syncs: list[dict] = []
        #: Per sync (same order as ``syncs``): how many other syncs were held when it arrived, and
        #: whether it was held before its answer.
        self.sync_meta: list[dict] = []
        self.held = 0
        self.screenshots: list[dict] = []
        self.headers: list[dict] = []
        self.posts: dict[str, list[dict]] = {}
        self.fail_logs = False
        self.refused = 0
        self.lock = threading.Lock()
        self.added = threading.Condition(self.lock)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            sealed = None  # (session, request iv) of a sealed request

            def _json(self, status, obj, sign=False):
                data = json.dumps(obj).encode()
                self.send_response(status)
                if sign and self.sealed is not None:  # the /sync answer, sealed as the daemon does
                    data = self.sealed[0].seal_answer(self.sealed[1], data)
                    self.send_header("X-Gasoline-Sealed", "1")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/pairing":
                    with outer.lock:
                        outer.pairing_requests.append(self.path)
                    self._json(200, outer.identity.describe())
                    return
                self._json(200, {"status": "ok", "service-name": "gasoline", "logs": {"entries": 0}})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                sid = self.headers.get("X-Gasoline-Session")
                if sid is not None:  # a paired extension's request: sealed under its session
                    session = outer.identity.session(sid)
                    if session is None:
                        self.send_response(401)
                        self.send_header("X-Gasoline-Session-Status", "unknown")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    raw, iv = session.open(b"POST", self.path.encode(), raw)
                    self.sealed = (session, iv)
                body = json.loads(raw or b"{}")
                if self.path == "/pairing/challenge":
                    with outer.lock:
                        outer.pairing_requests.append(self.path)
                    try:
                        self._json(200, outer.identity.challenge(body))
                    except ChallengeRefused as e:
                        self._json(e.status, {"error": str(e), "code": e.code})
                    except PairingError as e:
                        self._json(400, {"error": str(e)})
                    return
                with outer.lock:
                    outer.headers.append(dict(self.headers))
                    if not (self.path == "/logs" and outer.fail_logs):
                        outer.posts.setdefault(self.path, []).append(body)
                    if self.path == "/logs" and outer.fail_logs:
                        outer.refused += len(body.get("entries", []))
                    elif self.path == "/sync":
                        outer.syncs.append(body)
                        meta = {"held_at_arrival": outer.held, "was_held": False}
                        outer.sync_meta.append(meta)
                        acked = body.get("last_command_ack")
                        if acked:
                            ids = [c["id"] for c in outer.commands]
                            if acked in ids:
                                outer.commands = outer.commands[ids.index(acked) + 1:]
                        cmds = list(outer.commands)
                        if (not cmds and not body.get("command_results") and body.get("hold") is not False
                                and outer.hold > 0.2):
                            meta["was_held"] = True
                            outer.held += 1
                            outer.added.wait_for(lambda: outer.commands, timeout=outer.hold)
                            outer.held -= 1
                            cmds = list(outer.commands)
                            meta["handed_out"] = [c["id"] for c in cmds]
                    elif self.path == "/screenshots":
                        outer.screenshots.append(body)
                if self.path == "/logs" and outer.fail_logs:
                    self._json(503, {"error": "scripted outage"})
                    return
                if self.path == "/sync":
                    if not cmds and outer.hold <= 0.2:
                        time.sleep(outer.hold)
                    self._json(200, {"ack": True, "commands": cmds,
                                     "next_poll_ms": outer.busy_next_ms if cmds else outer.idle_next_ms,
                                     "server_time": "2026-01-01T00:00:00Z", "server_version": "0.7.99", "capture_overrides": {}},
                               sign=True)
                elif self.path == "/screenshots":
                    self._json(200, {"filename": "s.jpg", "path": "/tmp/s.jpg", "correlation_id": body.get("correlation_id", "")})
                else:
                    self._json(200, {"status": "ok", "count": 0, "received": 0, "rejected": 0, "entries": 0})

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, commands) -> None:
        """Queue more commands; a held sync hands them out at once."""
        with self.added:
            self.commands.extend(commands)
            self.added.notify_all()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def summary(self) -> dict:
        """What reached this daemon so far, by path (for a timeout's error message)."""
        with self.lock:
            logs = [f"{e.get('level')}: {e.get('message')}" for s in self.syncs for e in s.get("extension_logs", [])]
            return {"pairing": list(self.pairing_requests), "syncs": len(self.syncs),
                    "posts": {path: len(bodies) for path, bodies in self.posts.items()},
                    "extension_logs": logs[-10:]}

    def results(self):
        with self.lock:
            out = {}
            for s in self.syncs:
                for r in s.get("command_results", []):
                    out.setdefault(r["id"], r)
            return out

    def results_when(self, predicate):
        r = self.results()
        return r if predicate(r) else None


def test_sync_loop_runs_commands_and_reports_results_acks_and_screenshots(browser, site):
    sw = browser.service_worker()
    browser.allow_user_scripts()
    _, page, _ = browser.new_page(site.url + "/commands.html")
    tab = browser.tab_id_for(sw, site.url + "/commands.html")
    commands = [
        {"id": "q-1", "type": "dom", "params": {"selector": "label=Search term"}, "correlation_id": "c-1"},
        {"id": "q-2", "type": "execute", "params": {"script": "document.title + ' / ' + typeof window.__gasolineHooks", "world": "main"}},
        {"id": "q-3", "type": "dom_action", "params": {"action": "type", "selector": "#q", "text": "from agent"}},
        {"id": "q-4", "type": "teleport", "params": {}},
        {"id": "q-5", "type": "screenshot", "params": {"format": "jpeg"}, "correlation_id": "c-5"},
        {"id": "q-6", "type": "tabs", "params": {}},
        {"id": "q-7", "type": "execute", "params": {"script": "throw new Error('boom')"}},
        {"id": "q-8", "type": "a11y", "params": {}},
        {"id": "q-11", "type": "link_health", "params": {}},
        {"id": "q-10", "type": "execute", "params": {"script": "[document.title, typeof window.__gasolineHooks]", "world": "isolated"}},
        {"id": "q-9", "type": "browser_action", "params": {"action": "navigate", "url": site.url + "/blank.html?nav"}},
    ]
    with ScriptedDaemon(commands) as fake:
        browser.storage_set(sw, {"serverUrl": fake.url, "trackedTabId": tab, "trackedTabUrl": site.url + "/commands.html",
                                 "aiWebPilotEnabled": True})
        wanted = {f"q-{i}" for i in (1, 2, 3, 4, 6, 7, 8, 9, 10, 11)}
        results = wait_until(lambda: fake.results_when(lambda r: wanted <= set(r)), 60, interval=0.3, what="every command result")
        wait_until(lambda: fake.screenshots, 20, what="the screenshot upload")

        assert results["q-1"]["status"] == "complete" and results["q-1"]["correlation_id"] == "c-1"
        assert results["q-1"]["result"]["matches"][0]["id"] == "q"
        assert results["q-2"]["result"]["result"] == "Gasoline commands page / object"  # main world: sees the page's globals
        assert results["q-3"]["result"]["success"] is True
        assert results["q-4"]["status"] == "error" and results["q-4"]["error"] == "unknown_query_type"
        assert tab in [t["id"] for t in results["q-6"]["result"]["tabs"] if t["tracked"]]
        assert results["q-7"]["error"] == "execution_error" and "boom" in results["q-7"]["result"]["message"]
        assert "image-alt" in {v["id"] for v in results["q-8"]["result"]["violations"]}
        # isolated: the page's DOM, not the page's JavaScript globals (the hooks' handle)
        assert results["q-10"]["result"]["result"] == ["Gasoline commands page", "undefined"]
        links = {link["url"]: link["status"] for link in results["q-11"]["result"]["links"]}
        assert links == {site.url + "/commands.html": 200, site.url + "/missing-page": 404}
        assert results["q-11"]["result"]["broken"] == 1
        assert results["q-9"]["result"]["url"] == site.url + "/blank.html?nav"
        assert "q-5" not in results  # answered through POST /screenshots instead
        shot = fake.screenshots[0]
        assert shot["query_id"] == "q-5" and shot["correlation_id"] == "c-5"
        assert shot["data_url"].startswith("data:image/jpeg;base64,")

        def idle_poll():  # the loop's poll after the last result (not a push: hold false)
            with fake.lock:
                polls = [s for s in fake.syncs if s.get("hold") is not False and s.get("last_command_ack") == "q-9"]
            return next((s for s in reversed(polls) if s["in_progress"] == []), None)

        last = wait_until(idle_poll, 10, interval=0.2, what="a poll with nothing in progress")
        with fake.lock:
            syncs = list(fake.syncs)
            headers = list(fake.headers)
        assert all(h["X-Gasoline-Client"].startswith("gasoline-extension/") for h in headers)
        assert all(h["X-Gasoline-Extension-Version"] for h in headers)
        assert last["ext_session_id"].startswith("ext_")
        assert last["settings"]["tracked_tab_id"] == tab and last["settings"]["pilot_enabled"] is True
        assert last["last_command_ack"] == "q-9"  # the last one handed out
        assert last["in_progress"] == []
        # Each command ran once even though it was re-sent until acked.
        delivered = [r["id"] for s in syncs for r in s.get("command_results", [])]
        assert sorted(delivered) == sorted(set(delivered))


def test_push_path_a_held_poll_takes_each_command_at_once_and_results_do_not_wait_for_it(browser, site):
    """The push path (worker/sync.js): the stand-in holds every poll with nothing to hand out, as
    the daemon does, and asks for the next one at once (``next_poll_ms`` 0). Each command, queued
    while a poll is held, is handed out by that held poll; the extension re-polls at once, and a
    result goes out on a sync of its own (a results push: no settings) while that next poll is still
    held, instead of waiting for it. A settings change (the pilot) goes out at once the same way."""
    sw = browser.service_worker()
    _, page, _ = browser.new_page(site.url + "/commands.html")
    tab = browser.tab_id_for(sw, site.url + "/commands.html")
    steps = [
        {"id": "q-1", "type": "dom_action", "params": {"action": "type", "selector": "#q", "text": "pushed"}},
        {"id": "q-2", "type": "dom_action", "params": {"action": "get_value", "selector": "#q"}},
        {"id": "q-3", "type": "dom_action", "params": {"action": "click", "selector": "text=Submit"}},
        {"id": "q-4", "type": "dom_action", "params": {"action": "get_text", "selector": "#out"}},
        # Long enough that the loop's next poll is certainly held when the result is ready.
        {"id": "q-5", "type": "execute", "params": {
            "world": "main", "script": "await new Promise((r) => setTimeout(r, 800)); return document.title"}},
    ]
    with ScriptedDaemon([], hold=6.0, idle_next_ms=0, busy_next_ms=0) as fake:
        browser.storage_set(sw, {"serverUrl": fake.url, "trackedTabId": tab, "trackedTabUrl": site.url + "/commands.html",
                                 "aiWebPilotEnabled": True})
        for step in steps:
            wait_until(lambda: fake.held, 15, interval=0.02, what=f"a held poll before {step['id']}",
                       describe=fake.summary)
            fake.add([step])
            wait_until(lambda: step["id"] in fake.results(), 15, interval=0.02, what=f"{step['id']}'s result",
                       describe=fake.summary)
        results = fake.results()
        # The pilot turned off while a poll is held: a push tells the stand-in at once.
        wait_until(lambda: fake.held, 15, interval=0.02, what="a held poll", describe=fake.summary)
        browser.storage_set(sw, {"aiWebPilotEnabled": False}, pair=False)

        def pilot_off_pushed():
            with fake.lock:
                return any(s.get("hold") is False and s["settings"]["pilot_enabled"] is False and m["held_at_arrival"] >= 1
                           for s, m in zip(fake.syncs, fake.sync_meta))

        wait_until(pilot_off_pushed, 4, interval=0.02, what="a push with the pilot off while the poll is held",
                   describe=fake.summary)
        with fake.lock:
            syncs, meta = list(fake.syncs), list(fake.sync_meta)

    assert results["q-1"]["result"]["success"] is True
    assert results["q-2"]["result"]["value"] == "pushed"
    assert results["q-4"]["result"]["text"] == "submitted pushed"
    assert results["q-5"]["status"] == "complete" and results["q-5"]["result"]["result"] == "Gasoline commands page"
    # Every sync tells the daemon that this extension pushes its results.
    assert all(s.get("command_push") is True for s in syncs)
    # Each command went out on the poll that was held when it was queued.
    for step in steps:
        assert any(m["was_held"] and m.get("handed_out", [None])[0] == step["id"] for m in meta), (step["id"], meta)
    # The slow command's result came on a results push while the loop's next poll was held.
    carrying = [(s, m) for s, m in zip(syncs, meta) if any(r["id"] == "q-5" for r in s.get("command_results", []))]
    push, push_meta = carrying[0]
    assert push.get("hold") is False and "extension_logs" not in push, push
    assert push_meta["held_at_arrival"] >= 1, push_meta
    # Each result was delivered once.
    delivered = [r["id"] for s in syncs for r in s.get("command_results", [])]
    assert sorted(delivered) == sorted(set(delivered)) and set(delivered) == {s["id"] for s in steps}


def test_pilot_off_refuses_acting_commands_but_answers_reads(browser, site):
    sw = browser.service_worker()
    _, page, _ = browser.new_page(site.url + "/commands.html")
    tab = browser.tab_id_for(sw, site.url + "/commands.html")
    commands = [
        {"id": "q-1", "type": "execute", "params": {"script": "1 + 1"}},
        {"id": "q-2", "type": "dom_action", "params": {"action": "click", "selector": "#x"}},
        {"id": "q-3", "type": "dom_action", "params": {"action": "get_text", "selector": "#x"}},
        {"id": "q-4", "type": "page_info", "params": {}},
    ]
    with ScriptedDaemon(commands) as fake:
        browser.storage_set(sw, {"serverUrl": fake.url, "trackedTabId": tab, "aiWebPilotEnabled": False})
        results = wait_until(lambda: fake.results_when(lambda r: len(r) == 4), 30, interval=0.3, what="four results")
    assert results["q-1"]["error"] == "pilot_disabled"
    assert results["q-2"]["error"] == "pilot_disabled"
    assert results["q-3"]["result"]["text"] == "X"
    assert results["q-4"]["result"]["title"] == "Gasoline commands page" and results["q-4"]["result"]["tab_id"] == tab


def test_capture_is_batched_per_route_with_a_performance_snapshot_per_load(browser, site):
    with ScriptedDaemon([]) as fake:
        sw, page, tab = browser.track_new_tab(site.url + "/blank.html", fake.url)
        browser.navigate(page, site.url + "/capture.html?m=batch")
        browser.cdp.evaluate(page, "for (let i = 0; i < 130; i++) console.log('bulk', i); 1")

        def logged():
            with fake.lock:
                entries = [e for b in fake.posts.get("/logs", []) for e in b["entries"]]
            return entries if sum(1 for e in entries if e["message"].startswith("bulk ")) == 130 else None

        wait_until(logged, 20, interval=0.3, what="130 console entries")
        def snapshot_of_the_page():  # the blank page the tab left may send its own first
            with fake.lock:
                return any(s["url"] == site.url + "/capture.html?m=batch"
                           for b in fake.posts.get("/performance-snapshots", []) for s in b["snapshots"])

        wait_until(snapshot_of_the_page, 20, interval=0.3, what="the page's performance snapshot",
                   describe=lambda: (fake.summary(), browser.status(sw)))
        wait_until(lambda: fake.posts.get("/websocket-events") and fake.posts.get("/network-bodies"), 20, interval=0.3,
                   what="the page's WebSocket events and network bodies")
        wait_until(lambda: fake.posts.get("/enhanced-actions"), 30, interval=0.3,
                   what="the navigation's action")
        with fake.lock:
            posts = {k: list(v) for k, v in fake.posts.items()}
    assert all(len(b["entries"]) <= 50 for b in posts["/logs"]) and len(posts["/logs"]) >= 3
    assert all(len(b["events"]) <= 100 for b in posts["/websocket-events"])
    assert all(len(b["bodies"]) <= 50 for b in posts["/network-bodies"])
    assert posts["/enhanced-actions"][0]["actions"][0]["type"] == "navigate"
    every = [s for b in posts["/performance-snapshots"] for s in b["snapshots"]]
    assert all(len(b["snapshots"]) <= 10 for b in posts["/performance-snapshots"])
    # One per load (the tracked blank page the tab left may have sent its own, once, at the final pull).
    assert all(n == 1 for n in Counter(s["url"] for s in every).values())
    snaps = [s for s in every if s["url"] == site.url + "/capture.html?m=batch"]
    assert len(snaps) == 1
    snap = snaps[0]
    assert snap["url"] == site.url + "/capture.html?m=batch" and snap["tab_id"] == tab
    assert snap["timing"]["load"] > 0 and snap["timing"]["dom_content_loaded"] > 0
    assert snap["timing"]["first_contentful_paint"] > 0
    assert {"request_count", "transfer_size", "slowest_requests", "by_type"} <= set(snap["network"])
    assert {"count", "total_blocking_time", "longest"} <= set(snap["long_tasks"])
    assert "cumulative_layout_shift" in snap


def test_while_the_daemon_refuses_logs_the_buffer_keeps_the_newest_and_counts_drops(browser, site):
    with ScriptedDaemon([]) as fake:
        fake.fail_logs = True
        sw, page, tab = browser.track_new_tab(site.url + "/blank.html", fake.url)
        browser.navigate(page, site.url + "/blank.html?tracked")
        browser.cdp.evaluate(page, "console.log('first'); 1")
        wait_until(lambda: fake.refused, 10, interval=0.2, what="a refused /logs batch")
        # The log buffer holds 5000 entries; 5100 more arrive during the outage.
        browser.cdp.evaluate(page, "for (let i = 0; i < 5100; i++) console.log('outage ' + i); 1", timeout=30)
        wait_until(
            lambda: browser.cdp.evaluate(sw, "chrome.storage.session.get('gasolineStatus').then(r => r.gasolineStatus.queues.log.dropped)") >= 100,
            20, interval=0.3, what="the extension to drop the oldest entries",
        )
        fake.fail_logs = False

        def delivered():
            with fake.lock:
                msgs = [e["message"] for b in fake.posts.get("/logs", []) for e in b["entries"]]
            return msgs if "outage 5099" in msgs else None

        msgs = wait_until(delivered, 45, interval=0.5, what="the buffered entries after the outage")
        wait_until(lambda: any(s["settings"].get("dropped_items", 0) >= 100 for s in fake.syncs), 10, what="the drop count in /sync")
        with fake.lock:
            warnings = [log for s in fake.syncs for log in s.get("extension_logs", []) if "dropped" in log["message"]]
    outage = [m for m in msgs if m.startswith("outage ")]
    assert outage[-1] == "outage 5099"
    assert "outage 0" not in outage  # the oldest were dropped first
    assert len(outage) <= 5000
    assert outage == sorted(outage, key=lambda m: int(m.split()[1]))
    assert warnings and warnings[0]["level"] == "warn"


def test_isolated_execute_without_user_scripts_access_answers_a_clear_error(browser, site):
    sw = browser.service_worker()
    _, page, _ = browser.new_page(site.url + "/commands.html")
    tab = browser.tab_id_for(sw, site.url + "/commands.html")
    commands = [
        {"id": "q-1", "type": "execute", "params": {"script": "document.title", "world": "isolated"}},
        {"id": "q-2", "type": "execute", "params": {"script": "document.title", "world": "main"}},
    ]
    with ScriptedDaemon(commands) as fake:
        browser.storage_set(sw, {"serverUrl": fake.url, "trackedTabId": tab, "aiWebPilotEnabled": True})
        results = wait_until(lambda: fake.results_when(lambda r: len(r) == 2), 30, interval=0.3, what="two results")
    assert results["q-1"]["error"] == "isolated_world_unavailable"
    assert "Allow User Scripts" in results["q-1"]["result"]["message"]
    assert results["q-2"]["result"]["result"] == "Gasoline commands page"


def test_user_actions_select_keypress_scroll_and_spa_navigation_are_recorded(browser, site):
    with ScriptedDaemon([]) as fake:
        sw, page, tab = browser.track_new_tab(site.url + "/blank.html", fake.url)
        browser.navigate(page, site.url + "/commands.html")

        def content_script_running():  # it reports the page load as its first action
            with fake.lock:
                return any(a["type"] == "navigate" and a.get("url") == site.url + "/commands.html"
                           for b in fake.posts.get("/enhanced-actions", []) for a in b["actions"])

        # The isolated-world scripts arrive once the page has loaded; a person's first keystrokes
        # cannot come sooner than that, a test's can.
        wait_until(content_script_running, 30, interval=0.1, what="the content script in the tracked tab",
                   describe=lambda: (fake.summary(), browser.status(sw)))
        browser.cdp.evaluate(page, "document.body.style.height = '4000px'; document.getElementById('q').focus(); 1")
        browser.cdp.call("Input.insertText", {"text": "typed by a person"}, session=page)
        for kind in ("keyDown", "keyUp"):
            browser.cdp.call("Input.dispatchKeyEvent", {"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}, session=page)
        browser.cdp.evaluate(page, "const s = document.getElementById('color'); s.value = 'g'; s.dispatchEvent(new Event('change', {bubbles: true})); 1")
        browser.cdp.evaluate(page, "window.scrollTo(0, 600); history.pushState({}, '', '/commands.html?step=2'); 1")

        def actions():
            with fake.lock:
                acts = [a for b in fake.posts.get("/enhanced-actions", []) for a in b["actions"]]
            kinds = {a["type"] for a in acts}
            spa = any(a["type"] == "navigate" and a.get("to_url", "").endswith("?step=2") for a in acts)
            return acts if {"input", "keypress", "select", "scroll", "navigate"} <= kinds and spa else None

        acts = wait_until(actions, 20, interval=0.3, what="every kind of user action")
    typed = next(a for a in acts if a["type"] == "input")
    assert typed["value"] == "typed by a person" and typed["selectors"]["placeholder"] == "Type here"
    assert typed["selectors"]["role"] == {"role": "textbox", "name": "Search term"}
    key = next(a for a in acts if a["type"] == "keypress")
    assert key["key"] == "Enter" and key["selectors"]["css"] == "#q"
    chosen = next(a for a in acts if a["type"] == "select")
    assert chosen["value"] == "g" and chosen["text"] == "Green"
    assert next(a for a in acts if a["type"] == "scroll")["scroll_y"] == 600
    spa = next(a for a in acts if a["type"] == "navigate" and a.get("to_url", "").endswith("?step=2"))
    assert spa["from_url"] == site.url + "/commands.html"
    assert all(a["tab_id"] == tab for a in acts)


def test_an_agents_dom_action_is_not_captured_as_a_user_action(browser, site):
    """The daemon records agent actions (source:"ai"); the page-side capture must not add them again
    as user actions, while a real user's click on the same element is still captured."""
    sw = browser.service_worker()
    _, page, _ = browser.new_page(site.url + "/commands.html")
    tab = browser.tab_id_for(sw, site.url + "/commands.html")
    commands = [{"id": "q-1", "type": "dom_action", "params": {"action": "click", "selector": "#x"}},
                {"id": "q-2", "type": "dom_action", "params": {"action": "type", "selector": "#q", "text": "agent typed"}}]
    with ScriptedDaemon(commands) as fake:
        browser.storage_set(sw, {"serverUrl": fake.url, "trackedTabId": tab, "aiWebPilotEnabled": True})
        results = wait_until(lambda: fake.results_when(lambda r: {"q-1", "q-2"} <= set(r)), 30, interval=0.3,
                             what="both agent actions' results")
        assert results["q-1"]["result"]["success"] is True and results["q-2"]["result"]["success"] is True
        time.sleep(1.0)  # past the content script's 400 ms input debounce
        browser.click(page, "#x")

        def user_clicks():
            with fake.lock:
                acts = [a for b in fake.posts.get("/enhanced-actions", []) for a in b["actions"]]
            return acts if any(a["type"] == "click" for a in acts) else None

        acts = wait_until(user_clicks, 20, interval=0.3, what="the user's click")
    assert [a["type"] for a in acts if a["type"] in ("click", "input")] == ["click"]
    assert not any(a.get("value") == "agent typed" for a in acts)

"""
Held-out secret corpus × every exit: 69 secret shapes (tests/secret_corpus.py,
written from gitleaks' and detect-secrets' documented formats, not from Gasoline's patterns) are
put into every buffer the daemon keeps, into the extension's answers and into what the agent
types, and then everything an agent can read is collected: the result of every mode of every
tool (the modes come from the tool tables, so a new mode is covered without editing this file),
every notification (progress, log messages, streaming events on the agent's stream), the
C{gasoline://events} resource, error responses, and the generated artefacts written to disk.
No run of 8 characters of any secret may appear in any of it (nor once percent-decoded).

A property test checks the class behind the clustering leak: templating (digits to C{<num>},
ids, quoted strings, URLs) never shows more of a secret than the redacted text does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest
import pytest_twisted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet import task

from secret_corpus import WINDOW, corpus, leaked, windows
from gasoline.analysis import error_clusters, summarize_logs
from gasoline.app import Config, build
from gasoline.core.clients.noise import auto_detect, normalize_message
from gasoline.core.redaction.redactor import redact_value
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    EXTENSION_LOGS,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)
from gasoline.mcp import jsonrpc
from gasoline.tools.schemas import TOOL_MODES

CORPUS = corpus()


def test_the_corpus_is_large_and_every_shape_is_redacted():
    assert len(CORPUS) >= 40
    for s in CORPUS:
        assert s.secret in s.text
        assert not leaked(redact_value(s.text), s.secret), s.name


# -- the collector ---------------------------------------------------------------------------------


def _strings(value: Any, out: list[str], depth: int = 0) -> None:
    """Every string in C{value}, and inside strings that are JSON (a result's text block)."""
    if depth > 80:
        return
    if isinstance(value, str):
        out.append(value)
        head, _, rest = value.partition("\n")
        for candidate in (value, rest):
            if candidate[:1] in ("{", "["):
                try:
                    _strings(orjson.loads(candidate), out, depth + 1)
                except orjson.JSONDecodeError:
                    pass
    elif isinstance(value, dict):
        for k, v in value.items():
            _strings(k, out, depth + 1)
            _strings(v, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _strings(v, out, depth + 1)


class Exits:
    """What agents read, by exit name; L{leaks} finds corpus secrets in any of it."""

    def __init__(self) -> None:
        self.seen: dict[str, list[Any]] = {}

    def add(self, exit_name: str, value: Any) -> None:
        self.seen.setdefault(exit_name, []).append(value)

    def leaks(self) -> list[tuple[str, str, list[str]]]:
        found = []
        for name, values in self.seen.items():
            texts: list[str] = []
            for v in values:
                if isinstance(v, bytes):
                    v = v.decode("utf-8", "replace")
                texts.append(v if isinstance(v, str) else json.dumps(v, default=str))
                _strings(v, texts)
            hay = "\n".join(texts)
            from urllib.parse import unquote_plus
            hay = hay + "\n" + unquote_plus(hay)
            grams = {hay[i:i + WINDOW] for i in range(len(hay) - WINDOW + 1)}
            for s in CORPUS:
                hit = sorted(w for w in windows(s.secret) if w in grams)
                if hit:
                    found.append((name, s.name, hit[:3]))
        return found


# -- the daemon, its buffers full of secrets -------------------------------------------------------

PAGE = "https://app.test/account"
#: Lengths texts are commonly cut at on their way to an exit.
CUTS = (80, 100, 120, 160, 200, 256, 300, 500, 1000, 2000)


def _entries(now_ms: int) -> dict[str, list[dict[str, Any]]]:
    console, bodies, waterfall, ws, actions, ext = [], [], [], [], [], []
    for i, s in enumerate(CORPUS):
        t = s.text
        for n in range(11):  # repeated: clusters, summaries and noise auto-detection see them
            console.append({"level": "error", "type": "console", "message": f"{t} #{n}",
                            "args": [t, {"detail": t}], "url": PAGE, "tabId": 7,
                            "ts": now_ms + i * 20 + n, "source": "https://app.test/app.js"})
        console.append({"level": "error", "type": "exception", "message": t, "tabId": 7,
                        "stack": f"Error: {t}\n    at login (https://app.test/app.js:10:5)",
                        "url": PAGE, "filename": "https://app.test/app.js", "lineno": 10,
                        "ts": now_ms + i * 20 + 15})
        console.append({"level": "warn", "type": "console", "message": t, "url": PAGE,
                        "tabId": 7, "ts": now_ms + i * 20 + 16})
        # Across the usual cut lengths: whatever cuts a text before its exit cuts this secret.
        cut = CUTS[i % len(CUTS)]
        start = max(0, cut - len(s.secret) // 2 - t.index(s.secret))  # the secret spans the cut
        padded = ("x " * cut)[:start] + t
        console.append({"level": "error", "type": "console", "message": padded, "url": PAGE,
                        "args": [padded], "tabId": 7, "ts": now_ms + i * 20 + 16})
        ws.append({"event": "message", "direction": "outgoing", "data": padded, "tabId": 7,
                   "url": "wss://app.test/socket", "id": "ws1", "ts": now_ms + i * 20 + 19})
        console.append({"level": "error", "type": "network", "method": "POST", "status": 500,
                        "url": f"https://api.test/v1/login?note={quote(t, safe='')}", "tabId": 7,
                        "ts": now_ms + i * 20 + 17})
        url = f"https://api.test/v1/items/{i}?q={quote(t, safe='')}"  # as a page encodes it
        bodies.append({"url": url, "method": "POST", "status": 500, "tabId": 7,
                       "request_body": t, "response_body": json.dumps({"error": t}),
                       "request_headers": {"content-type": "text/plain", "x-note": t},
                       "response_headers": {"content-type": "application/json", "x-debug": t},
                       "content_type": "application/json", "duration": 2500,
                       "ts": now_ms + i * 20 + 18})
        waterfall.append({"name": url, "url": url, "initiatorType": "fetch", "duration": 4000,
                          "startTime": i, "transferSize": 100, "page_url": PAGE})
        ws.append({"event": "message", "direction": "incoming", "data": t, "tabId": 7,
                   "url": "wss://app.test/socket", "id": "ws1", "ts": now_ms + i * 20 + 19})
        ws.append({"event": "close", "code": 1008, "reason": t, "tabId": 7,
                   "url": "wss://app.test/socket", "id": "ws1", "ts": now_ms + i * 20 + 19})
        actions.append({"type": "input", "source": "user", "value": t, "input_type": "text",
                        "input_name": "note", "selectors": {"css": "#note"}, "url": PAGE,
                        "timestamp": now_ms + i * 20 + 19})
        actions.append({"type": "navigate", "source": "user", "to_url": url, "url": PAGE,
                        "timestamp": now_ms + i * 20 + 19})
        ext.append({"level": "error", "message": t, "source": "background", "ts": now_ms})
    return {CONSOLE: console, NETWORK_BODIES: bodies, WATERFALL: waterfall,
            WEBSOCKET_EVENTS: ws, ACTIONS: actions, EXTENSION_LOGS: ext}


ALL = "\n".join(s.text for s in CORPUS)
ANSWER = {
    "success": True, "url": f"{PAGE}?q={quote(CORPUS[0].text, safe='')}", "title": CORPUS[1].text, "text": ALL,
    "html": f"<main>{ALL}</main>", "value": CORPUS[2].text, "result": ALL,
    "content": ALL, "markdown": ALL, "count": 1,
    "elements": [{"selector": "#note", "text": s.text, "tag": "input"} for s in CORPUS],
    "matches": [{"selector": "#note", "text": s.text, "html": s.text} for s in CORPUS[:10]],
    "element": {"tag": "input", "selectors": {"css": "#note"}, "text": ALL, "value": ALL,
                "input_type": "text", "input_name": "note", "input_id": "note",
                "autocomplete": ""},
    "local_storage": {f"k{i}": s.text for i, s in enumerate(CORPUS)},
    "session_storage": {"note": ALL}, "form_values": {"#note": ALL},
    "forms": [{"action": f"/f?q={quote(CORPUS[3].text, safe='')}", "fields": [{"name": "note", "value": ALL}]}],
    "violations": [{"id": "label", "impact": "serious", "help": ALL,
                    "nodes": [{"target": ["#note"], "html": ALL, "failure_summary": ALL}]}],
    "styles": {"content": ALL}, "tabs": [{"id": 7, "url": f"{PAGE}?q={quote(CORPUS[4].text, safe='')}",
                                          "title": ALL}],
}


def _answer_all(app: Any) -> int:
    commands = app.extension.commands.deliverable()
    if commands:
        app.extension.sync({"command_results": [
            {"id": c.id, "status": "complete", "result": ANSWER} for c in commands],
            "last_command_ack": commands[-1].id})
    return len(commands)


#: Arguments per mode, where the default (none) would only give an argument error.
ARGS: dict[tuple[str, str], dict[str, Any]] = {
    ("configure", "noise_rule"): {"noise_action": "auto_detect", "threshold": 5},
    ("configure", "store"): {"store_action": "list"},
    ("observe", "recording_actions"): {"name": "r1"},
    ("analyze", "api_validation"): {"operation": "analyze"},
    ("generate", "reproduction"): {"save_to": "repro.spec.ts"},
    ("generate", "har"): {"save_to": "capture.har"},
    ("generate", "test"): {"save_to": "gen.spec.ts"},
    ("generate", "pr_summary"): {"save_to": "pr.md"},
    ("generate", "sarif"): {"save_to": "a11y.sarif"},
}
#: What interact's modes are given: a selector, and text holding the corpus (typed into a
#: field that is not secret: only the shapes can redact it).
INTERACT_ARGS = {"selector": "#note", "text": ALL, "value": ALL, "url": "https://app.test/next",
                 "script": "return document.title", "key": "Enter", "name": "state1",
                 "fields": [{"selector": "#note", "value": ALL}], "attribute": "data-x"}
#: Modes that end the data this test reads, or the daemon.
SKIP = {("configure", "clear"), ("configure", "restart"), ("interact", "draw_mode_start")}


def _call(app: Any, clock: Any, session: Any, exits: Exits, tool: str, mode: str,
          args: dict[str, Any], rid: int) -> None:
    name = f"{tool}.{mode}"
    out: list[Any] = []
    params = {"name": tool, "arguments": {"what": mode, **args},
              "_meta": {"progressToken": f"p{rid}"}}
    app.mcp.handle(session, jsonrpc.request(rid, "tools/call", params),
                   lambda m: exits.add(name + " notification", m)).addCallback(out.append)
    for _ in range(8):
        if out:
            break
        if not _answer_all(app):
            clock.advance(1)
    if not out:
        clock.advance(120)  # whatever still waits times out: its error is an exit too
    for _ in range(3):
        _answer_all(app)
        clock.advance(1)
    assert out, f"{name} never answered"
    exits.add(name, out[0])


@pytest.fixture
def daemon(tmp_path):
    clock = task.Clock()
    clock.advance(1_767_225_600)
    app = build(Config(state_dir=tmp_path / "state", persist=False), clock)
    app.extension.sync({"settings": {
        "tracked_tab_id": 7, "tracked_tab_url": PAGE, "tracked_tab_title": "Account",
        "pilot_enabled": True, "tracking_enabled": True}})
    yield app, clock
    app.router.close()
    app.extension.stop()
    app.store.notifier.stop()


def test_no_corpus_secret_reaches_an_agent_through_any_exit(daemon, tmp_path):
    app, clock = daemon
    exits = Exits()
    cwd = tmp_path / "repo"
    cwd.mkdir()
    session = app.mcp.open_session("agent", "streamable")
    session.state.cwd = str(cwd)
    app.mcp.handle(session, jsonrpc.request(0, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "agent", "version": "1"}}))
    app.mcp.handle(session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    session.standalone.attach(lambda event_id, payload: exits.add("agent stream", payload))
    app.mcp.handle(session, jsonrpc.request(1, "logging/setLevel", {"level": "debug"}),
                   lambda m: exits.add("logging notification", m))
    rid = 10
    # Streaming: subscribed before the data arrives, so every event is pushed and kept.
    _call(app, clock, session, exits, "configure", "streaming",
          {"enabled": True, "subscribe": ["error", "network_failure", "security_violation",
                                          "network_slow", "websocket_close",
                                          "performance_degradation"]}, rid)
    for buffer, entries in _entries(int(clock.seconds() * 1000)).items():
        app.store.add(buffer, entries)
    clock.advance(0)
    clock.advance(1)
    covered = []
    order = ["interact", "observe", "analyze", "generate", "configure"]
    for tool in order:
        modes = TOOL_MODES[tool][0]
        for mode in modes:
            if (tool, mode) in SKIP:
                continue
            rid += 1
            args = dict(ARGS.get((tool, mode), INTERACT_ARGS if tool == "interact" else {}))
            _call(app, clock, session, exits, tool, mode, args, rid)
            covered.append(f"{tool}.{mode}")
    # The events resource, and an error response that echoes what it was given.
    out: list[Any] = []
    app.mcp.handle(session, jsonrpc.request(rid + 1, "resources/read",
                                            {"uri": "gasoline://events"})).addCallback(out.append)
    exits.add("resources/read gasoline://events", out)
    # Generated artefacts on disk.
    for path in cwd.rglob("*"):
        if path.is_file():
            exits.add(f"file {path.name}", path.read_text("utf-8", "replace"))
    clock.advance(300)
    _answer_all(app)
    assert len(covered) >= 100, covered
    assert any(k.startswith("file ") for k in exits.seen), sorted(exits.seen)
    assert exits.seen.get("agent stream"), "no streaming event was pushed"
    leaks = exits.leaks()
    assert leaks == [], "\n".join(f"{e}: {name} {hit}" for e, name, hit in leaks)


# -- templating never shows more of a secret than redaction does ------------------------------------

NOISE = st.text(alphabet="abc XYZ 0123456789:=/-_.\"'#?&%", max_size=30)


def _shown(text: str, secret: str) -> set[str]:
    return {w for w in windows(secret) if w in text}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(CORPUS) - 1), before=NOISE, after=NOISE,
       repeat=st.integers(1, 3))
def test_templating_never_reveals_more_of_a_secret_than_the_redacted_text(index, before, after,
                                                                          repeat):
    s = CORPUS[index]
    message = before + s.text + after
    redacted = redact_value(message)
    allowed = _shown(redacted, s.secret)
    assert _shown(normalize_message(message), s.secret) <= allowed
    entries = [{"level": "error", "message": message, "url": PAGE}] * (repeat * 5)
    clusters = json.dumps(error_clusters(entries))
    summary = json.dumps(summarize_logs(entries))
    proposals = json.dumps([p.to_json() for p in auto_detect(entries, threshold=5)])
    for shown in (clusters, summary, proposals):
        assert _shown(shown, s.secret) <= allowed


# -- proxied results, in every field ---------------------------------------------------------------

PROXY_SERVER = str(Path(__file__).resolve().parent / "proxy" / "secret_server.py")


@pytest_twisted.ensureDeferred
async def test_no_corpus_secret_reaches_an_agent_through_a_proxied_server(tmp_path):
    """A child MCP server answers with each corpus secret in every field of a result (text,
    embedded resource text, resource_link uri/name/description, image and audio metadata,
    structuredContent, result and block _meta), in a JSON-RPC error's message and data, and in
    log and progress notifications: the agent gets none of it; the binary payloads arrive as
    they were sent."""
    from _proxy_harness import Daemon

    wd = tmp_path / "project"
    wd.mkdir()
    d = Daemon(tmp_path, {"sec": {"command": sys.executable, "args": [PROXY_SERVER]}}).start()
    exits = Exits()
    try:
        sid = await d.session(wd)
        bound = d.app.proxy.sessions[sid].bound[0]
        bound.standalone.attach(lambda event_id, payload: exits.add("agent stream", payload))
        await d.mcp(sid, "logging/setLevel", {"level": "debug"}, 2)
        rid = 10
        # Eight secrets a call: 16 calls in all, within Gasoline's default tool budget.
        for start in range(0, len(CORPUS), 8):
            indexes = list(range(start, min(start + 8, len(CORPUS))))
            rid += 1
            r = await d.mcp(sid, "tools/call", {"name": "sec__leak",
                                                "arguments": {"indexes": indexes},
                                                "_meta": {"progressToken": f"t{start}"}}, rid)
            content = r["result"]["content"]
            assert [b["type"] for b in content] == ["text", "resource", "resource", "resource_link",
                                                    "image", "audio"], r
            assert content[2]["resource"]["blob"] == content[4]["data"] == content[5]["data"]
            exits.add("proxied result", r)
            rid += 1
            r = await d.mcp(sid, "tools/call", {"name": "sec__fail",
                                                "arguments": {"indexes": indexes}}, rid)
            assert "error" in r, r
            exits.add("proxied error", r)
    finally:
        await d.stop()
    assert exits.seen.get("agent stream"), "the child's notifications never reached the agent"
    leaks = exits.leaks()
    assert leaks == [], "\n".join(f"{e}: {name} {hit}" for e, name, hit in leaks)

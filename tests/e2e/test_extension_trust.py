"""
The extension's trust boundaries, in Debian's Chromium with the real extension.

1. Commands stay inside what the user allowed: only tracked tabs, the pilot gates reads that expose
   more than the capture stream, agents do not widen tracking, file: URLs and oversized parameters
   are refused.
2. Pairing: nothing is captured or run before the user pins the daemon's identity in the popup; an
   impostor on the daemon's port gets no capture data and its commands are not run.

Fails (not skips) under CI=true without Chromium (the ``chromium_bin`` fixture).
"""

from __future__ import annotations

import json
import time

import pytest
from harness import daemon_get, wait_until
from support import DaemonProcess
from test_extension_commands import ScriptedDaemon

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def results_for(fake, ids, timeout=40):
    return wait_until(lambda: fake.results_when(lambda r: set(ids) <= set(r)), timeout, interval=0.3,
                      what=f"results of {sorted(ids)}")


def error_of(result):
    return result["status"], result.get("error"), (result.get("result") or {}).get("message", "")


def _open_tab(browser, sw, url):
    """A new tab at C{url}: C{(its CDP page, its Chrome tab id)}."""
    _, page, _ = browser.new_page(url)
    return page, browser.tab_id_for(sw, url)


# ------------------------------------------------------------------------------------ §1 commands


def test_commands_reach_only_tracked_tabs_and_agents_do_not_widen_tracking(browser, site):
    sw = browser.service_worker()
    other_page, other = _open_tab(browser, sw, site.url + "/capture.html?m=untracked")
    page, tab = _open_tab(browser, sw, site.url + "/commands.html")
    commands = [
        {"id": "q-1", "type": "dom", "params": {"selector": "h1"}},                         # the tracked tab
        {"id": "q-2", "type": "dom", "params": {"selector": "h1"}, "tab_id": other},         # an untracked one
        {"id": "q-3", "type": "execute", "params": {"script": "document.title", "tab_id": other}},
        {"id": "q-4", "type": "page_info", "params": {}, "tab_id": 999999},
        {"id": "q-5", "type": "browser_action", "params": {"action": "switch_tab", "tab_id": other}},
        {"id": "q-6", "type": "browser_action", "params": {"action": "new_tab", "url": site.url + "/blank.html?opened", "track": True}},
        {"id": "q-7", "type": "browser_action", "params": {"action": "navigate", "url": "file:///etc/hostname"}},
        {"id": "q-8", "type": "execute", "params": {"script": "1;" + " " * (300 * 1024)}},
        {"id": "q-9", "type": "dom", "params": {"selector": "a" * 5000}},
        {"id": "q-10", "type": "execute", "params": {"script": "'x'.repeat(5 * 1024 * 1024)"}},
    ]
    with ScriptedDaemon(commands) as fake:
        browser.storage_set(sw, {"serverUrl": fake.url, "trackedTabId": tab, "aiWebPilotEnabled": True})
        r = results_for(fake, [c["id"] for c in commands], timeout=60)
        assert r["q-1"]["status"] == "complete" and r["q-1"]["result"]["matches"][0]["text"] == "Commands"
        for qid in ("q-2", "q-3", "q-5"):
            status, code, message = error_of(r[qid])
            assert (status, code) == ("error", "tab_not_tracked"), r[qid]
            assert f"tab {other} is not tracked" in message and "the user has not tracked it" in message
        assert error_of(r["q-4"])[1] == "tab_not_tracked"
        # new_tab opened a tab but did not track it (the user has not allowed agents to)
        assert r["q-6"]["status"] == "complete" and r["q-6"]["result"]["tracked"] is False
        stored = browser.cdp.evaluate(sw, "chrome.storage.local.get(null)")
        assert stored["trackedTabId"] == tab and not stored.get("gasolineTrackedTabs")
        status, code, message = error_of(r["q-7"])
        assert code == "file_url_refused" and "file:" in message
        assert error_of(r["q-8"])[1] == "invalid_param" and "script" in error_of(r["q-8"])[2]
        assert error_of(r["q-9"])[1] == "invalid_param" and "selector" in error_of(r["q-9"])[2]
        assert error_of(r["q-10"])[1] == "result_too_large"
        # the untracked page was never touched
        assert browser.cdp.evaluate(other_page, "location.href") == site.url + "/capture.html?m=untracked"


def test_with_the_user_s_consent_new_tab_and_switch_tab_track(browser, site):
    sw = browser.service_worker()
    _, tab = _open_tab(browser, sw, site.url + "/blank.html?first")
    commands = [{"id": "q-1", "type": "browser_action", "params": {"action": "new_tab", "url": site.url + "/blank.html?second", "track": True}}]
    with ScriptedDaemon(commands) as fake:
        browser.storage_set(sw, {"serverUrl": fake.url, "trackedTabId": tab, "aiWebPilotEnabled": True, "gasolineAgentsMayTrack": True})
        r = results_for(fake, ["q-1"])
        assert r["q-1"]["result"]["tracked"] is True
        opened = r["q-1"]["result"]["tab_id"]
        assert browser.cdp.evaluate(sw, "chrome.storage.local.get('gasolineTrackedTabs').then(r => r.gasolineTrackedTabs)") == [opened]


def test_pilot_off_refuses_storage_tab_listing_and_background_screenshots(browser, site):
    sw = browser.service_worker()
    back_page, back = _open_tab(browser, sw, site.url + "/commands.html?back")
    front_page, front = _open_tab(browser, sw, site.url + "/commands.html?front")
    browser.cdp.evaluate(front_page, "localStorage.setItem('secret-ish', 'v'); 1")
    assert browser.cdp.evaluate(sw, f"chrome.tabs.get({back}).then(t => t.active)") is False
    commands = [
        {"id": "q-1", "type": "tabs", "params": {}},
        {"id": "q-2", "type": "state_capture", "params": {}},
        {"id": "q-3", "type": "screenshot", "params": {"format": "jpeg"}, "tab_id": back},
        {"id": "q-4", "type": "link_health", "params": {}},
        {"id": "q-5", "type": "dom", "params": {"selector": "h1"}},   # a read within the capture stream's reach
        {"id": "q-6", "type": "screenshot", "params": {"format": "jpeg"}},  # the tracked tab, in front
    ]
    with ScriptedDaemon(commands) as fake:
        browser.storage_set(sw, {"serverUrl": fake.url, "trackedTabId": front, "gasolineTrackedTabs": [back],
                                 "aiWebPilotEnabled": False})
        r = results_for(fake, ["q-1", "q-2", "q-3", "q-4", "q-5"])
        for qid in ("q-1", "q-2", "q-3", "q-4"):
            status, code, message = error_of(r[qid])
            assert (status, code) == ("error", "pilot_disabled"), r[qid]
            assert "AI Web Pilot is off" in message
        assert "secret-ish" not in json.dumps(r)
        assert r["q-5"]["status"] == "complete"
        wait_until(lambda: fake.screenshots, 20, what="the front tab's screenshot")
        assert [s["query_id"] for s in fake.screenshots] == ["q-6"]
        # the background tab stayed in the background
        assert browser.cdp.evaluate(sw, f"chrome.tabs.get({back}).then(t => t.active)") is False


def _options_page(browser):
    """The extension's options page, loaded: a page where the extension's own modules run."""
    browser.service_worker()
    eid = browser.extension_id()
    _, options, _ = browser.new_page(f"chrome-extension://{eid}/options/options.html")
    wait_until(lambda: browser.cdp.evaluate(options, "location.protocol === 'chrome-extension:' && document.readyState === 'complete'"),
               10, what="the options page")
    return options


def test_private_network_targets_are_recognised(browser):
    """link_health's refusal rule (lib/policy.js isPrivateHost), evaluated in an extension page."""
    options = _options_page(browser)
    urls = {
        "http://127.0.0.1:8080/": True, "http://localhost/": True, "http://10.1.2.3/": True,
        "http://192.168.0.1/admin": True, "http://172.20.0.1/": True, "http://169.254.169.254/latest": True,
        "http://[::1]/": True, "http://[fd00::1]/": True, "http://printer.local/": True, "http://intranet/": True,
        "https://example.com/": False, "https://8.8.8.8/": False, "http://172.32.0.1/": False,
    }
    got = browser.cdp.evaluate(options, f"import('/lib/policy.js').then(m => Object.fromEntries({json.dumps(list(urls))}.map(u => [u, m.isPrivateHost(u)])))")
    assert got == urls


# ------------------------------------------------------------------------------------ §2 pairing


#: How soon after the popup's Pair the daemon sees the worker (one second, plus the slack of a
#: loaded shared machine for the pairing handshake's two requests).
PAIR_WITHIN = 1.5


def test_nothing_is_sent_until_the_user_pairs_in_the_popup(browser, site, ext_daemon):
    sw = browser.service_worker()
    page, tab = _open_tab(browser, sw, site.url + "/blank.html")
    browser.storage_set(sw, {"serverUrl": ext_daemon.url, "trackedTabId": tab}, pair=False)
    browser.navigate(page, site.url + "/capture.html?m=before-pairing")
    fingerprint = daemon_get(ext_daemon.url, "/pairing")["fingerprint"]
    eid = browser.extension_id()
    _, popup, _ = browser.new_page(f"chrome-extension://{eid}/popup/popup.html")
    text = lambda sel: browser.cdp.evaluate(popup, f"document.querySelector('{sel}').textContent")  # noqa: E731
    wait_until(lambda: fingerprint in text("#pairing-text"), 15, interval=0.3, what="the popup to offer the fingerprint")
    assert browser.cdp.evaluate(popup, "document.getElementById('pair').hidden") is False
    health = daemon_get(ext_daemon.url, "/health")
    assert health["capture"]["extension_connected"] is False and health["logs"]["entries"] == 0
    clicked = time.monotonic()
    browser.cdp.evaluate(popup, "document.getElementById('pair').click(); 1")
    # The popup's Pair wakes the worker's sync loop: it pairs and syncs within a second, not
    # after its current wait.
    wait_until(lambda: daemon_get(ext_daemon.url, "/health")["capture"]["extension_connected"],
               10, interval=0.05, what="the worker to pair and sync")
    paired_after = time.monotonic() - clicked
    print(f"paired {paired_after:.2f} s after the click")
    assert paired_after < PAIR_WITHIN, f"paired {paired_after:.2f} s after the click"
    wait_until(lambda: "verified" in text("#pairing-text"), 15, interval=0.3, what="the popup to show the daemon verified")
    assert text("#paired-fp") == fingerprint
    wait_until(lambda: any("before-pairing" in e.get("message", "") for e in daemon_get(ext_daemon.url, "/snapshot")["logs"]),
               20, what="what waited in the buffer to arrive once paired")


def test_an_impostor_on_the_daemons_port_gets_no_capture_data_and_its_commands_are_not_run(browser, site, ext_daemon):
    sw, page, tab = browser.track_new_tab(site.url + "/blank.html", ext_daemon.url, aiWebPilotEnabled=True)
    browser.navigate(page, site.url + "/capture.html?m=real-daemon")  # a load after tracking: captured from its start
    wait_until(lambda: any("e2e console error real-daemon" in e.get("message", "") for e in daemon_get(ext_daemon.url, "/snapshot")["logs"]),
               20, what="capture at the real daemon", describe=lambda: browser.status(sw))
    port = ext_daemon.port
    ext_daemon.kill()
    hijack = {"id": "q-1", "type": "execute", "params": {"script": "document.title = 'hijacked'"}}
    with ScriptedDaemon([hijack], port=port) as impostor:
        browser.cdp.evaluate(page, "console.error('while the impostor listens'); 1")
        wait_until(lambda: (browser.status(sw).get("pairing") or {}).get("state") == "mismatch", 20, interval=0.3,
                   what="the extension to refuse the impostor")
        # Give the worker time for several sync attempts and capture flushes.
        browser.cdp.evaluate(page, "new Promise(r => setTimeout(r, 4000)).then(() => { console.error('still the impostor'); return 1; })")
        browser.cdp.evaluate(page, "new Promise(r => setTimeout(r, 2000)).then(() => 1)")
        with impostor.lock:
            assert impostor.posts == {}, impostor.posts      # no capture batch, no /sync, no result
            assert "/pairing/challenge" in impostor.pairing_requests
        assert impostor.results() == {}
        assert browser.cdp.evaluate(page, "document.title") != "hijacked"
        status = browser.status(sw)
        assert status["connected"] is False and "could not prove it is the paired Gasoline daemon" in status["last_error"]
        eid = browser.extension_id()
        _, popup, _ = browser.new_page(f"chrome-extension://{eid}/popup/popup.html")
        wait_until(lambda: "could not prove it is the paired Gasoline daemon" in browser.cdp.evaluate(
            popup, "document.getElementById('pairing-text').textContent"), 10, interval=0.3, what="the popup to say why")
    # The real daemon (same state dir, so the same identity) back on the port: what waited arrives.
    restarted = DaemonProcess(state_dir=ext_daemon.state_dir, args=["--listen", f"tcp:{port}:interface=127.0.0.1"])
    restarted.start()
    try:
        wait_until(lambda: {"while the impostor listens", "still the impostor"} <= {
            e.get("message") for e in daemon_get(restarted.url, "/snapshot")["logs"]}, 40, what="the held capture at the real daemon")
    finally:
        restarted.stop()


# ------------------------------------------------------------------------------------ §3 redaction


def test_a_graphql_login_body_and_a_token_in_the_url_fragment_leave_the_browser_redacted(browser, site):
    """What the extension POSTs (recorded raw by the stand-in daemon, before any daemon-side redaction)."""
    with ScriptedDaemon([]) as fake:
        sw, page, tab = browser.track_new_tab(site.url + "/blank.html", fake.url)
        wait_until(lambda: (browser.status(sw).get("pairing") or {}).get("state") == "paired", 15, what="pairing")
        browser.navigate(page, site.url + "/blank.html#access_token=frag-secret-1&token_type=bearer&expires_in=3600")
        browser.cdp.evaluate(page, """fetch('/graphql', {method: 'POST',
            headers: {'content-type': 'application/json', 'authorization': 'Bearer hdr-secret-2', 'x-session-hint': 'hdr-secret-4'},
            body: JSON.stringify({query: 'mutation Login($email: String!, $password: String!) { login(email: $email, password: $password) { token } }',
                                  variables: {email: 'e2e@example.test', password: 'gql-secret-3'}})})
          .then((r) => r.text()).then(() => { console.log('landed at ' + location.href); return 1; })""")

        def sent():
            with fake.lock:
                bodies = [b for post in fake.posts.get("/network-bodies", []) for b in post.get("bodies", [])]
                logs = [e for post in fake.posts.get("/logs", []) for e in post.get("entries", [])]
            gql = [b for b in bodies if b.get("url", "").endswith("/graphql")]
            landed = [e for e in logs if "landed at" in e.get("message", "")]
            return (gql[0], landed[0]) if gql and landed else None

        gql, landed = wait_until(sent, 25, what="the GraphQL body and the console line at the stand-in daemon")
        with fake.lock:
            everything = json.dumps(fake.posts)
        for secret in ("frag-secret-1", "hdr-secret-2", "gql-secret-3", "hdr-secret-4"):
            assert secret not in everything, secret
        request = json.loads(gql["request_body"])
        assert request["variables"] == {"email": "e2e@example.test", "password": "[REDACTED:password]"}
        assert request["query"].startswith("mutation Login($email: String!, $password: String!)")  # the query stays readable
        echoed = json.loads(json.loads(gql["response_body"])["echo"])
        assert echoed["variables"]["password"] == "[REDACTED:password]"
        if "request_headers" in gql:
            assert gql["request_headers"].get("content-type") == "application/json"
        assert "#access_token=[REDACTED:token]&token_type=bearer&expires_in=3600" in landed["message"]


def test_the_redactor_rules(browser):
    """lib/redact.js on inputs the pages above do not produce, evaluated in an extension page."""
    options = _options_page(browser)
    got = browser.cdp.evaluate(options, """import('/lib/redact.js').then((r) => ({
      otp: r.redactItem('action', {type: 'input', value: '123456', input_type: 'text', autocomplete: 'one-time-code'}).value,
      card: r.redactItem('action', {type: 'input', value: '4111111111111111', input_type: 'text', autocomplete: 'cc-number'}).value,
      pin: r.redactItem('action', {type: 'input', value: '1234', input_type: 'tel', input_name: 'pin'}).value,
      search: r.redactItem('action', {type: 'input', value: 'shoes', input_type: 'search', input_name: 'q'}).value,
      key: r.redactItem('action', {type: 'keypress', key: 'a', input_type: 'password'}).key,
      query: r.redactUrl('https://app.test/cb?code=c-secret&state=xyz'),
      ws: r.redactItem('ws', {type: 'websocket', data: '{"op":"auth","payload":{"apiKey":"ws-secret"}}'}).data,
      console: r.redactItem('log', {message: 'x', args: [{user: {session_id: 's'}}, 'Authorization: Bearer abcdefghijkl']}).args,
      text_card: r.redactText('paid with 4111 1111 1111 1111 at 1764160000000'),
      headers: r.redactHeaders({'Content-Type': 'text/html', 'X-Custom-Token': 't', 'Location': '/next?token=t2'}),
    }))""")
    assert got["otp"] == got["card"] == got["pin"] == got["key"] == "[REDACTED:input]"
    assert got["search"] == "shoes"
    assert got["query"] == "https://app.test/cb?code=[REDACTED:token]&state=xyz"
    assert json.loads(got["ws"]) == {"op": "auth", "payload": {"apiKey": "[REDACTED:api_key]"}}
    assert got["console"] == [{"user": {"session_id": "[REDACTED:session]"}}, "Authorization: [REDACTED:authorization]"]
    assert got["text_card"] == "paid with [REDACTED:card] at 1764160000000"
    assert got["headers"] == {"Content-Type": "text/html", "X-Custom-Token": "[REDACTED:header]", "Location": "/next?token=[REDACTED:token]"}


# ------------------------------------------------------------------------------------ §4 forged input


def test_a_synthetic_event_cannot_create_an_annotation(browser, site):
    from test_extension_more import drag

    commands = [{"id": "q-1", "type": "draw_mode", "params": {"action": "start"}}]
    with ScriptedDaemon(commands) as fake:
        sw, page, tab = browser.track_new_tab(site.url + "/blank.html", fake.url, aiWebPilotEnabled=True)
        results_for(fake, ["q-1"])
        assert fake.results()["q-1"]["result"]["active"] is True
        host = "document.querySelector('[data-gasoline-overlay=draw]')"
        # The page sees a host element and nothing inside it (closed shadow root) ...
        assert browser.cdp.evaluate(page, f"{host} !== null && {host}.shadowRoot === null && {host}.children.length === 0") is True
        # ... and its forged drag and keys, aimed at the host and at the point under it, draw nothing.
        browser.cdp.evaluate(page, f"""(() => {{
            const targets = [{host}, document.elementFromPoint(300, 200), document];
            for (const t of targets) {{
              const at = (type, x, y) => t.dispatchEvent(new MouseEvent(type, {{bubbles: true, composed: true, clientX: x, clientY: y, button: 0}}));
              at('mousedown', 290, 190); at('mousemove', 360, 220); at('mouseup', 430, 250);
              t.dispatchEvent(new KeyboardEvent('keydown', {{key: 'Enter', bubbles: true, composed: true}}));
            }}
            return true;
        }})()""")
        browser.cdp.evaluate(page, "new Promise(r => setTimeout(r, 500)).then(() => 1)")
        stored = "chrome.storage.session.get('gasolineAnnotations').then(r => r.gasolineAnnotations || [])"
        assert browser.cdp.evaluate(sw, stored) == []
        assert browser.cdp.evaluate(page, f"{host}.dataset.gasolineState || ''") == ""  # no note field opened
        # The user's real drag and typing do (positive control).
        drag(browser, page, (290, 190), (430, 250), "a real note")
        saved = wait_until(lambda: browser.cdp.evaluate(sw, stored), 10, what="the user's annotation")
        assert [a["note"] for a in saved] == ["a real note"]


FORGED_MODULE = """window.__gasolineHooks.attach({
  receive() {}, stop() {},
  start() { return {items: [{kind: 'log', payload: {level: 'error', type: 'console', message: 'forged by the page'}}], dropped: 0}; },
  take() { return {items: [{kind: 'log', payload: {level: 'error', type: 'console', message: 'forged by the page'}}], dropped: 0}; },
}) !== null"""


def test_a_page_that_attaches_its_own_capture_module_is_not_believed(browser, site):
    url = site.url + "/blank.html?forge"
    with ScriptedDaemon([]) as fake:
        sw = browser.service_worker()
        page, tab = _open_tab(browser, sw, url)
        assert browser.cdp.evaluate(page, FORGED_MODULE) is True  # the page got in first
        browser.storage_set(sw, {"serverUrl": fake.url, "trackedTabId": tab})

        def warned():
            with fake.lock:
                return [e for s in fake.syncs for e in s.get("extension_logs", []) if "did not inject" in e.get("message", "")]

        wait_until(warned, 20, interval=0.3, what="the extension's warning about the page's module")
        browser.cdp.evaluate(page, "new Promise(r => setTimeout(r, 2500)).then(() => 1)")  # several pull intervals
        with fake.lock:
            logs = [e for p in fake.posts.get("/logs", []) for e in p.get("entries", [])]
        assert not [e for e in logs if "forged" in e.get("message", "")]

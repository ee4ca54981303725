"""analyze modes (gasoline.tools.analyze): S modes over the real store, X modes through the
real query router on a Clock with commands answered by hand."""

from __future__ import annotations

import pytest
from treq.testing import StubTreq
from twisted.internet.defer import fail, succeed
from twisted.web.resource import Resource

from _modes_harness import Harness, fired, parse
from gasoline.analysis import make_checkpoint
from gasoline.core.errors import ExtensionDisconnected, ExtensionTimeout, GasolineError
from gasoline.core.clients.noise import NoiseRules
from gasoline.core.storage.store import (
    ACTIONS,
    CONSOLE,
    NETWORK_BODIES,
    WATERFALL,
    WEBSOCKET_EVENTS,
)
from gasoline.tools._links import LinkValidator
from gasoline.tools.analyze import MODES, form_issues

T0 = 1_767_225_600_000  # ms


def run(h, mode, args=None, client="A"):
    return h.run(MODES, mode, args, client_id=client)


# -- X modes -------------------------------------------------------------------------------------


def test_dom_sends_the_selector_and_answers_the_extensions_matches(h):
    d = run(h, "dom", {"selector": "text=Save", "limit": 5})
    [cmd] = h.commands()
    assert cmd.type == "dom" and cmd.owner == "A"
    assert cmd.params == {"selector": "text=Save", "limit": 5}
    h.answer(cmd, {"url": "https://app.test/page", "count": 2, "matches": [{"tag": "button"}] * 2})
    summary, body = parse(fired(d))
    assert summary.startswith("2 element(s) match 'text=Save'")
    assert body["dom"]["matches"][0]["tag"] == "button"
    # A connected extension goes without saying; an answer from the page is no buffer read.
    assert "extension_connected" not in body and "data_age_seconds" not in body


def test_two_clients_concurrent_dom_calls_each_get_their_own_answer(h):
    da = run(h, "dom", {"selector": "#a"}, client="A")
    db = run(h, "dom", {"selector": "#b"}, client="B")
    ca, cb = h.commands()
    assert (ca.owner, cb.owner) == ("A", "B")
    # Answer in the reverse order: routing is by command id, not by arrival.
    h.answer(cb, {"count": 1, "matches": [{"id": "b"}]})
    h.answer(ca, {"count": 1, "matches": [{"id": "a"}]})
    assert parse(fired(da))[1]["dom"]["matches"] == [{"id": "a"}]
    assert parse(fired(db))[1]["dom"]["matches"] == [{"id": "b"}]


def test_background_dom_returns_a_correlation_id_only_its_owner_can_read(h):
    result = run(h, "dom", {"selector": "#x", "background": True})
    summary, body = parse(result)
    assert body["status"] == "pending"
    cid = body["correlation_id"]
    [cmd] = h.commands()
    assert cmd.correlation_id == cid
    h.answer(cmd, {"count": 0, "matches": []})
    assert h.app.router.command_result("A", cid)["status"] == "complete"
    with pytest.raises(GasolineError) as e:
        h.app.router.command_result("B", cid)
    assert e.value.code == "no_data"


def test_wait_false_is_the_same_as_background(h):
    _, body = parse(run(h, "dom", {"selector": "#x", "wait": False}))
    assert body["status"] == "pending" and body["correlation_id"]


def test_x_mode_fails_fast_when_the_extension_is_disconnected(tmp_path):
    h = Harness.create(tmp_path, connected=False)
    try:
        with pytest.raises(ExtensionDisconnected):
            fired(run(h, "dom", {"selector": "#x"}))
        assert h.commands() == []
    finally:
        h.close()


def test_x_mode_times_out_with_extension_timeout(h):
    d = run(h, "accessibility", {"timeout_ms": 2000})
    h.clock.advance(1.0)
    h.app.extension.touch()
    h.clock.advance(1.5)
    with pytest.raises(ExtensionTimeout):
        fired(d)
    assert h.app.router.pending_count("A") == 0


def test_extension_error_result_becomes_an_error(h):
    d = run(h, "computed_styles", {"selector": "#missing"})
    [cmd] = h.commands()
    h.answer(cmd, status="error", error="element_not_found")
    with pytest.raises(GasolineError) as e:
        fired(d)
    assert "element_not_found" in e.value.message


def test_accessibility_counts_violations_by_impact(h):
    d = run(h, "accessibility", {"tags": ["wcag2a"], "selector": "main"})
    [cmd] = h.commands()
    assert cmd.type == "a11y" and cmd.params == {"selector": "main", "tags": ["wcag2a"]}
    h.answer(cmd, {"violations": [{"id": "image-alt", "impact": "critical", "nodes": []},
                                  {"id": "label", "impact": "serious", "nodes": []},
                                  {"id": "x", "impact": "critical", "nodes": []}]})
    summary, body = parse(fired(d))
    assert summary.startswith("3 accessibility violation(s)")
    assert body["by_impact"] == {"critical": 2, "serious": 1}


def test_accessibility_rejects_tags_that_are_not_strings(h):
    with pytest.raises(GasolineError) as e:
        run(h, "accessibility", {"tags": [1, 2]})
    assert e.value.code == "invalid_param"
    assert h.commands() == []


def test_link_health_and_computed_styles_and_forms_send_their_command_types(h):
    d1 = run(h, "link_health", {"limit": 10})
    d2 = run(h, "computed_styles", {"selector": "h1", "properties": ["color"]})
    d3 = run(h, "forms")
    c1, c2, c3 = h.commands()
    assert (c1.type, c1.params) == ("link_health", {"limit": 10})
    assert (c2.type, c2.params) == ("computed_styles", {"selector": "h1", "properties": ["color"]})
    assert (c3.type, c3.params) == ("form_discovery", {})
    h.answer(c1, {"checked": 3, "broken": 1, "links": []})
    h.answer(c2, {"selector": "h1", "styles": {"color": "rgb(0, 0, 0)"}})
    h.answer(c3, {"forms": [{"selector": "form", "fields": [{"tag": "input"}]}]})
    assert parse(fired(d1))[0].startswith("3 link(s) checked by the browser, 1 broken")
    assert parse(fired(d2))[1]["computed_styles"]["styles"]["color"] == "rgb(0, 0, 0)"
    assert parse(fired(d3))[0].startswith("1 form(s) with 1 field(s)")


def test_computed_styles_needs_a_selector(h):
    with pytest.raises(GasolineError) as e:
        run(h, "computed_styles")
    assert e.value.code == "missing_param"


FORMS = {
    "url": "http://shop.example/login",
    "forms": [{
        "selector": "#login", "action": "", "method": "get",
        "fields": [
            {"tag": "input", "type": "text", "name": "user", "label": "", "selector": "#u"},
            {"tag": "input", "type": "password", "name": "pw", "label": "Password", "selector": "#p"},
        ],
    }],
}


def test_form_validation_reports_labels_passwords_in_get_and_over_http(h):
    d = run(h, "form_validation")
    [cmd] = h.commands()
    h.answer(cmd, FORMS)
    summary, body = parse(fired(d))
    kinds = {i["issue"] for i in body["issues"]}
    assert {"missing_label", "password_in_get", "password_over_http",
            "no_submit_control"} <= kinds
    assert summary.startswith(f"{len(body['issues'])} issue(s) in 1 form(s)")


def test_form_issues_of_a_good_form_are_empty():
    good = {"url": "https://a.example/", "forms": [{
        "selector": "form", "action": "https://a.example/login", "method": "post",
        "fields": [{"tag": "input", "type": "email", "name": "e", "label": "Email"},
                   {"tag": "button", "type": "submit", "name": "", "label": "Go"}]}]}
    assert form_issues(good) == []


def test_page_summary_joins_page_info_with_buffered_telemetry(h):
    h.app.store.add(CONSOLE, [
        {"level": "error", "message": "boom", "url": "https://app.test/page", "ts": T0},
        {"level": "log", "message": "hi", "url": "https://app.test/page", "ts": T0},
    ])
    h.app.store.add(NETWORK_BODIES, [{"method": "GET", "url": "https://app.test/api", "status": 500}])
    d = run(h, "page_summary")
    [cmd] = h.commands()
    assert cmd.type == "page_info"
    h.answer(cmd, {"url": "https://app.test/page", "title": "App", "ready_state": "complete"})
    summary, body = parse(fired(d))
    assert summary == "App: 1 recent error(s), 1 failed request(s)"
    assert body["page"]["ready_state"] == "complete"
    assert body["telemetry"]["error_samples"] == ["boom"]


# -- S modes ---------------------------------------------------------------------------------------


def test_performance_rates_the_stored_snapshots(h):
    h.app.store.add_performance([{"url": "https://app.test/page", "timestamp": T0,
                                  "timing": {"largest_contentful_paint": 5000}}])
    summary, body = parse(run(h, "performance"))
    assert body["overall"] == "poor"
    assert "poor" in summary


def test_performance_without_snapshots_says_so(h):
    summary, body = parse(run(h, "performance"))
    assert summary.startswith("no performance snapshots")
    assert body["page_count"] == 0


def test_error_clusters_apply_the_callers_noise_rules_only(h):
    h.app.store.add(CONSOLE, [{"level": "error", "message": f"ResizeObserver loop {i}", "ts": T0}
                              for i in range(3)]
                    + [{"level": "error", "message": "TypeError: x is undefined", "ts": T0}])
    state_a = h.ctx("A").state
    rules = NoiseRules.from_json(state_a.noise_rules)
    rules.add("ResizeObserver", field="message", kind="substring")
    state_a.noise_rules = rules.to_json()
    _, body_a = parse(run(h, "error_clusters", client="A"))
    _, body_b = parse(run(h, "error_clusters", client="B"))
    assert body_a["noise_hidden"] == 3 and body_a["total_errors"] == 1
    assert body_b["noise_hidden"] == 0 and body_b["total_errors"] == 4
    assert body_b["cluster_count"] == 2


def test_security_audit_finds_credentials_in_captured_traffic(h):
    h.app.store.add(NETWORK_BODIES, [
        {"method": "GET", "url": "http://api.example.com/x?api_key=AKIAABCDEFGHIJKLMNOP",
         "status": 200},
    ])
    summary, body = parse(run(h, "security_audit"))
    assert body["finding_count"] >= 1
    assert summary.startswith(f"{body['finding_count']} security finding(s)")
    assert "AKIAABCDEFGHIJKLMNOP" not in str(body)


def test_third_party_audit_uses_the_tracked_page_origin(h):
    h.app.store.add(WATERFALL, [
        {"name": "https://www.google-analytics.com/a.js", "url": "https://www.google-analytics.com/a.js",
         "initiator_type": "script"},
        {"name": "https://app.test/app.js", "url": "https://app.test/app.js", "initiator_type": "script"},
    ])
    summary, body = parse(run(h, "third_party_audit"))
    assert body["third_party_count"] == 1
    assert summary.startswith("1 third-party origin(s)")


def test_api_validation_reports_type_mismatches(h):
    h.app.store.add(NETWORK_BODIES, [
        {"method": "GET", "url": f"https://app.test/api/users/{i}", "status": 200,
         "content_type": "application/json", "response_body": '{"id": %d, "name": "x"}' % i}
        for i in range(1, 4)
    ] + [{"method": "GET", "url": "https://app.test/api/users/9", "status": 200,
          "content_type": "application/json", "response_body": '{"id": "nine", "name": "x"}'}])
    summary, body = parse(run(h, "api_validation"))
    assert body["violation_count"] >= 1
    assert summary.startswith(f"{body['violation_count']} API contract violation(s)")


def test_history_lists_visited_pages_and_navigations(h):
    h.app.store.add(ACTIONS, [
        {"type": "navigate", "timestamp": T0, "from_url": "https://app.test/",
         "to_url": "https://app.test/a", "source": "ai"},
        {"type": "click", "timestamp": T0 + 1000, "url": "https://app.test/a"},
    ])
    h.app.store.add(CONSOLE, [{"level": "error", "message": "x", "url": "https://app.test/a",
                               "ts": T0 + 2000}])
    summary, body = parse(run(h, "history"))
    assert summary == "1 page(s) visited, 1 navigation(s)"
    [page] = body["pages"]
    assert (page["url"], page["navigations"], page["actions"], page["errors"]) == \
        ("https://app.test/a", 1, 1, 1)
    assert body["navigations"][0]["source"] == "ai"


# -- changes since a checkpoint ----------------------------------------------------------------------


def _checkpoint(h, client, name):
    heads = {n: ring.head for n, ring in h.app.store.buffers.items()}
    h.ctx(client).state.checkpoints[name] = make_checkpoint(name, heads, h.clock.seconds())


def test_changes_since_a_checkpoint_report_new_errors_failed_requests_ws_and_actions(h):
    h.app.store.add(CONSOLE, [{"level": "error", "message": "old", "ts": T0}])
    _checkpoint(h, "A", "before")
    h.app.store.add(CONSOLE, [{"level": "error", "message": "new failure", "ts": T0 + 5}])
    h.app.store.add(NETWORK_BODIES, [{"method": "POST", "url": "https://app.test/api", "status": 502}])
    h.app.store.add(WEBSOCKET_EVENTS, [{"event": "open", "id": "c1", "url": "wss://app.test/ws"}])
    h.app.store.add(ACTIONS, [{"type": "click", "timestamp": T0 + 6}])
    summary, body = parse(run(h, "changes", {"checkpoint": "before"}))
    assert body["errors"]["count"] == 1
    assert body["errors"]["clusters"][0]["template"].startswith("new failure")
    assert body["failed_requests"]["count"] == 1
    assert body["websocket_events"]["count"] == 1
    assert body["actions"]["count"] == 1
    assert summary.startswith("1 new error(s)")


def test_changes_checkpoints_are_namespaced_and_b_prefix_reaches_anothers(h):
    _checkpoint(h, "B", "before")
    h.app.store.add(CONSOLE, [{"level": "error", "message": "after B", "ts": T0}])
    with pytest.raises(GasolineError) as e:
        run(h, "changes", {"checkpoint": "before"}, client="A")
    assert e.value.code == "no_data"
    _, body = parse(run(h, "changes", {"checkpoint": "B:before"}, client="A"))
    assert body["errors"]["count"] == 1


def test_changes_needs_a_checkpoint_name(h):
    with pytest.raises(GasolineError) as e:
        run(h, "changes")
    assert e.value.code == "missing_param"


# -- link_validation ---------------------------------------------------------------------------------


class _Site(Resource):
    isLeaf = True

    def __init__(self):
        super().__init__()
        self.seen = []

    def render(self, request):
        self.seen.append((request.method, request.uri))
        path = request.uri.decode()
        if path.startswith("/gone"):
            request.setResponseCode(404)
        elif path.startswith("/nohead") and request.method == b"HEAD":
            request.setResponseCode(405)
        elif path.startswith("/moved"):
            request.setResponseCode(301)
            request.setHeader(b"location", b"http://10.0.0.1/internal")
        return b"body"


def _validator(h, site, dns):
    pins_seen = []

    def resolve(host):
        if host not in dns:
            return fail(OSError(f"no such host {host}"))
        return succeed(dns[host])

    def client_for(pins):
        pins_seen.append(pins)
        return StubTreq(site)

    validator = LinkValidator(h.clock, resolve, client_for, concurrency=2, timeout=5.0)
    h.app.tools.runtime.link_validator = validator
    return pins_seen


def test_link_validation_checks_links_and_refuses_private_targets(h):
    site = _Site()
    pins = _validator(h, site, {"ok.example": ["93.184.216.34"], "evil.example": ["127.0.0.1"],
                                "mixed.example": ["93.184.216.34", "10.1.2.3"]})
    urls = ["http://ok.example/fine", "http://ok.example/gone", "http://ok.example/nohead",
            "http://ok.example/moved", "http://evil.example/", "http://mixed.example/",
            "http://169.254.169.254/latest/meta-data", "http://localhost:8080/", "ftp://x/",
            "http://nowhere.example/"]
    summary, body = parse(fired(run(h, "link_validation", {"urls": urls})))
    by_url = {r["url"]: r for r in body["results"]}
    assert by_url["http://ok.example/fine"]["class"] == "ok"
    assert by_url["http://ok.example/gone"]["class"] == "broken"
    assert by_url["http://ok.example/nohead"]["method"] == "GET"
    assert by_url["http://ok.example/moved"]["class"] == "redirect"
    assert by_url["http://ok.example/moved"]["location"] == "http://10.0.0.1/internal"
    for refused in ("http://evil.example/", "http://mixed.example/",
                    "http://169.254.169.254/latest/meta-data", "http://localhost:8080/"):
        assert by_url[refused]["refused"], refused
    assert by_url["http://nowhere.example/"]["class"] == "error"
    assert body["refused"] == 4
    assert "ftp://x/" not in by_url and body["skipped"] == 1
    # The site never saw a request for a refused target; each fetch was pinned to a checked address.
    assert all(uri.startswith((b"/fine", b"/gone", b"/nohead", b"/moved")) for _, uri in site.seen)
    assert all(p == {"ok.example": "93.184.216.34"} for p in pins)
    assert "4 refused by the SSRF guard" in summary


def test_link_validation_allow_private_lets_loopback_through(h):
    site = _Site()
    _validator(h, site, {"localhost": ["127.0.0.1"]})
    _, body = parse(fired(run(h, "link_validation",
                              {"urls": ["http://localhost:3000/fine"], "allow_private": True})))
    assert body["results"][0]["class"] == "ok" and body["refused"] == 0


def test_link_validation_never_allows_multicast_even_with_allow_private(h):
    _validator(h, _Site(), {})
    _, body = parse(fired(run(h, "link_validation",
                              {"urls": ["http://224.0.0.1/"], "allow_private": True})))
    assert body["refused"] == 1


def test_link_validation_bounds_concurrency_and_times_out_on_the_clock(h):
    from twisted.internet.defer import Deferred

    started = []

    class Hanging:
        def request(self, method, url, **kw):
            d = Deferred()
            started.append(url)
            return d

    validator = LinkValidator(h.clock, lambda host: succeed(["93.184.216.34"]),
                              lambda pins: Hanging(), concurrency=2, timeout=3.0)
    h.app.tools.runtime.link_validator = validator
    d = run(h, "link_validation", {"urls": [f"http://ok.example/{i}" for i in range(5)]})
    assert len(started) == 2  # only two at once
    for _ in range(3):
        h.clock.advance(3.0)
    _, body = parse(fired(d))
    assert len(started) == 5
    assert body["by_class"] == {"error": 5}


def test_link_validation_without_urls_reads_the_pages_links_through_the_extension(h):
    site = _Site()
    _validator(h, site, {"app.test": ["93.184.216.34"]})
    d = run(h, "link_validation")
    [cmd] = h.commands()
    assert cmd.type == "dom" and cmd.params["selector"] == "a[href]"
    h.answer(cmd, {"url": "https://app.test/page", "matches": [
        {"attributes": {"href": "/fine"}}, {"attributes": {"href": "mailto:a@b"}},
        {"attributes": {"href": "http://127.0.0.1/admin"}}]})
    _, body = parse(fired(d))
    by_url = {r["url"]: r for r in body["results"]}
    assert by_url["https://app.test/fine"]["class"] == "ok"
    assert by_url["http://127.0.0.1/admin"]["refused"]


def test_every_issue_4_analyze_mode_has_a_handler():
    listed = {"changes", "dom", "accessibility", "performance", "error_clusters", "security_audit",
              "third_party_audit", "api_validation", "page_summary", "history", "link_validation"}
    assert listed <= set(MODES)


def test_s_analyses_honour_the_callers_tab_selection_and_scope(h):
    h.app.store.add(CONSOLE, [
        {"level": "error", "message": "on app", "url": "https://app.test/page", "tabId": 1, "ts": T0},
        {"level": "error", "message": "on docs", "url": "https://docs.test/", "tabId": 2, "ts": T0},
    ])
    h.ctx("A").state.tab_filters = ["docs.test"]
    _, a = parse(run(h, "error_clusters", client="A"))
    _, b = parse(run(h, "error_clusters", client="B"))
    _, b_current = parse(run(h, "error_clusters", {"scope": "current_page"}, client="B"))
    _, a_all = parse(run(h, "error_clusters", {"scope": "all"}, client="A"))
    assert [c["sample"]["message"] for c in a["clusters"]] == ["on docs"]
    assert b["total_errors"] == 2 and a_all["total_errors"] == 2
    assert [c["sample"]["message"] for c in b_current["clusters"]] == ["on app"]

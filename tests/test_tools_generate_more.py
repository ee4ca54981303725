"""generate test_from_context, test_heal, test_classify and visual_test: the mode handlers on the
real daemon components (task.Clock, the real query router, commands answered by hand), and the
pure generators behind them."""

from __future__ import annotations

import os

import pytest

from _modes_harness import Harness, fired, parse
from gasoline.core.errors import GasolineError
from gasoline.core.storage.store import ACTIONS, CONSOLE, NETWORK_BODIES
from gasoline.generate.classify import CATEGORIES, classify
from gasoline.generate.heal import heal_code, parse_selector, rank_candidates
from gasoline.tools import generate

T0 = 1_767_225_600_000  # ms, the harness clock's "now"

SAVE = {"testId": "save-btn", "css": "form > button.primary", "role": {"role": "button",
                                                                      "name": "Save"},
        "text": "Save", "tag": "button"}
EMAIL = {"css": "#email", "id": "email", "placeholder": "you@example.com", "name": "email",
         "role": {"role": "textbox", "name": "Email"}, "tag": "input"}


def run(h, mode, args=None, client_id="A", cwd=None):
    return h.run(generate.MODES, mode, args, client_id=client_id, tool="generate", cwd=cwd)


def seed_session(h):
    h.app.store.add(ACTIONS, [
        {"type": "navigate", "timestamp": T0 - 60_000, "to_url": "https://app.test/old",
         "tab_id": 1},
        {"type": "navigate", "timestamp": T0 - 9_000, "to_url": "https://app.test/form",
         "tab_id": 1},
        {"type": "input", "timestamp": T0 - 6_000, "url": "https://app.test/form", "value": "a@b.c",
         "selectors": EMAIL, "tab_id": 1},
        {"type": "click", "timestamp": T0 - 3_000, "url": "https://app.test/form",
         "selectors": SAVE, "tab_id": 1},
        {"type": "click", "timestamp": T0 + 20_000, "url": "https://app.test/form",
         "selectors": {"css": "#after"}, "tab_id": 1},
    ])
    h.app.store.add(NETWORK_BODIES, [
        {"method": "POST", "url": "https://app.test/api/save?draft=1", "status": 500,
         "ts": T0 - 2_500, "tab_id": 1},
        {"method": "GET", "url": "https://app.test/api/ok", "status": 200, "ts": T0 - 2_400,
         "tab_id": 1},
        {"method": "GET", "url": "https://app.test/api/ancient", "status": 404,
         "ts": T0 - 600_000, "tab_id": 1},
    ])
    h.app.store.add(CONSOLE, [
        {"level": "error", "type": "exception", "message": "TypeError: cart is undefined",
         "ts": T0 - 2_000, "url": "https://app.test/form", "tabId": 1, "_errorId": "err-1"},
        {"level": "error", "message": "Failed to load resource: favicon.ico 404", "ts": T0 - 1_500,
         "url": "https://app.test/favicon.ico", "tabId": 1},
        {"level": "error", "message": "ReferenceError: other tab", "ts": T0 - 1_000,
         "url": "https://elsewhere.test/", "tabId": 2},
    ])


# -- test_from_context -----------------------------------------------------------------------------


def test_from_context_pins_the_chosen_error_with_the_actions_and_failures_before_it(h):
    seed_session(h)
    summary, body = parse(run(h, "test_from_context", {"message": "cart is undefined"}))
    script = body["artifact"]
    assert body["format"] == "test_from_context" and "TypeError: cart is undefined" in summary
    assert body["error"]["message"] == "TypeError: cart is undefined"
    # Only the actions in the 30 s before the error: not the old navigation nor the later click.
    assert body["actions_replayed"] == 3
    assert 'page.goto("https://app.test/form")' in script and "app.test/old" not in script
    assert 'page.getByRole("textbox", { name: "Email" }).fill("a@b.c")' in script
    assert 'page.getByTestId("save-btn").click()' in script and "#after" not in script
    # The console error is asserted absent, the 5xx around it must succeed; the old 404 is not
    # "around" the error.
    assert 'const captured = "TypeError: cart is undefined";' in script
    assert [f["path"] for f in body["failed_requests"]] == ["/api/save?draft=1"]
    assert '{ method: "POST", path: "/api/save?draft=1" },  // was 500' in script
    assert script.index("getByTestId") < script.index("const captured")


def test_from_context_defaults_to_the_newest_error_the_caller_sees(h):
    seed_session(h)
    # Client B sees only tab URLs on app.test, so the newest error it sees is the TypeError (the
    # favicon 404 is built-in noise); client A sees the other tab's ReferenceError.
    h.run(__import__("gasoline.tools.configure", fromlist=["MODES"]).MODES, "select_tab",
          {"patterns": ["https://app.test/*"]}, client_id="B", tool="configure")
    _, body_b = parse(run(h, "test_from_context", client_id="B"))
    _, body_a = parse(run(h, "test_from_context", client_id="A"))
    assert body_b["error"]["message"] == "TypeError: cart is undefined"
    assert body_a["error"]["message"] == "ReferenceError: other tab"
    # Reading it moved no cursor.
    assert h.app.registry.get("A").cursors.get(CONSOLE, 0) == 0


def test_from_context_finds_an_error_by_its_id_and_refuses_unknown_ones(h):
    seed_session(h)
    _, body = parse(run(h, "test_from_context", {"error_id": "err-1"}))
    assert body["error"]["message"] == "TypeError: cart is undefined"
    with pytest.raises(GasolineError) as e:
        run(h, "test_from_context", {"error_id": "nope"})
    assert e.value.code == "no_data"


def test_from_context_escapes_hostile_messages_and_saves_inside_the_cwd(h, tmp_path):
    h.app.store.add(CONSOLE, [{"level": "error", "message": "x'); require('fs').rmSync('/');//\n"
                               "</script>", "ts": T0, "tabId": 1}])
    cwd = tmp_path / "repo"
    cwd.mkdir()
    _, body = parse(run(h, "test_from_context", {"save_to": "tests/err.spec.ts"}, cwd=str(cwd)))
    script = (cwd / "tests" / "err.spec.ts").read_text()
    assert script == body["artifact"]
    assert "x'); require('fs')" in script  # inside a JSON string literal ...
    assert "const captured = \"x'); require('fs').rmSync('/');//\";" in script
    assert "</script>" not in script  # ... and never able to close a script element
    with pytest.raises(GasolineError) as e:
        run(h, "test_from_context", {"save_to": "/etc/gasoline.spec.ts"}, cwd=str(cwd))
    assert e.value.code == "path_refused"


def test_from_context_without_errors_says_so(h):
    with pytest.raises(GasolineError) as e:
        run(h, "test_from_context")
    assert e.value.code == "no_data"


# -- visual_test ---------------------------------------------------------------------------------------


def test_visual_test_visits_the_tracked_page_replays_and_compares_a_screenshot(h):
    h.app.store.add(ACTIONS, [
        {"type": "navigate", "timestamp": T0, "to_url": "https://app.test/page", "tab_id": 1},
        {"type": "click", "timestamp": T0 + 1, "selectors": SAVE, "tab_id": 1}])
    summary, body = parse(run(h, "visual_test", {"name": "checkout page", "full_page": True,
                                                 "threshold": 0.2}))
    script = body["artifact"]
    assert body["screenshot"] == "checkout-page.png" and body["url"] == "https://app.test/page"
    # The tracked page is opened once (the recording's own navigation to it is not repeated).
    assert script.count('page.goto("https://app.test/page")') == 1
    assert 'page.getByTestId("save-btn").click()' in script
    assert ('await expect(page).toHaveScreenshot("checkout-page.png", { animations: '
            "'disabled', fullPage: true, threshold: 0.2 });") in script
    assert "checkout-page.png" in summary


def test_visual_test_of_one_element_and_bad_thresholds(h):
    _, body = parse(run(h, "visual_test", {"url": "https://app.test/x", "selector": "#chart",
                                           "full_page": True}))
    assert 'await expect(page.locator("#chart")).toHaveScreenshot("app.test-x.png", ' \
           "{ animations: 'disabled' });" in body["artifact"]
    assert body["full_page"] is False  # fullPage applies to pages, not elements
    for bad in (2, -0.1, "0.5", True):
        with pytest.raises(GasolineError) as e:
            run(h, "visual_test", {"threshold": bad})
        assert e.value.code == "invalid_param"


# -- test_heal ------------------------------------------------------------------------------------------


def test_heal_ranks_recorded_alternatives_for_a_broken_css_path_offline(tmp_path):
    h = Harness.create(tmp_path, connected=False)
    h.app.store.add(ACTIONS, [{"type": "click", "timestamp": T0, "selectors": SAVE}] * 3)
    summary, body = parse(fired(run(h, "test_heal", {"selector": "form > button.primary"})))
    strategies = [c["strategy"] for c in body["candidates"]]
    assert strategies == ["testId", "role", "text"]
    best = body["candidates"][0]
    assert best["selector"] == '[data-testid="save-btn"]' and best["confidence"] > 0.9
    assert best["seen"] == 3 and "recorded css" in best["reason"]
    assert body["live"]["checked"] is False and "not connected" in body["live"]["reason"]
    assert h.commands() == [] and "extension not connected" in summary
    h.close()


def test_heal_fuzzy_matches_renamed_ids_and_heals_the_code(h):
    h.app.store.add(ACTIONS, [{"type": "input", "timestamp": T0, "selectors": EMAIL},
                              {"type": "click", "timestamp": T0, "selectors": SAVE}])
    code = ("await page.locator('#email-input').fill('a');\n"
            "await page.fill(\"#email-input\", 'b');\n"
            "await page.locator('#email-input-2').fill('c');\n")
    d = run(h, "test_heal", {"selector": "#email-input", "test_code": code, "live": False})
    summary, body = parse(fired(d))
    best = body["candidates"][0]
    assert best["strategy"] == "role" and best["locator"] == 'page.getByRole("textbox", ' \
                                                             '{ name: "Email" })'
    assert all(c["selector"] != '[data-testid="save-btn"]' for c in body["candidates"])
    healed = body["artifact"]
    assert healed.splitlines() == [
        'await page.getByRole("textbox", { name: "Email" }).fill(\'a\');',
        'await page.fill("role=textbox[name=\\"Email\\"]", \'b\');',
        "await page.locator('#email-input-2').fill('c');",
    ]
    assert [r["line"] for r in body["replacements"]] == [1, 2] and body["healed"] is True


def test_heal_checks_candidates_on_the_live_page(h):
    h.app.store.add(ACTIONS, [{"type": "click", "timestamp": T0, "selectors": SAVE}])
    d = run(h, "test_heal", {"selector": "#save"})
    (listing,) = h.commands()
    assert listing.type == "dom_action" and listing.params["action"] == "list_interactive"
    h.answer(listing, {"elements": [
        {"element_id": "e1", "role": "button", "name": "Save draft",
         "selector": '[data-testid="save-draft"]'},
        {"element_id": "e2", "role": "link", "name": "Home", "selector": "a.home"}]})
    counts = {"#save": 0, '[data-testid="save-btn"]': 0, 'role=button[name="Save"]': 1,
              "text=Save": 3}
    asked = []
    while h.commands():
        for cmd in h.commands():
            assert cmd.type == "dom"
            asked.append(cmd.params["selector"])
            h.answer(cmd, {"count": counts.get(cmd.params["selector"], 2)})
    _, body = parse(fired(d))
    assert asked[0] == "#save" and len(asked) == 4  # the broken selector, then the best three
    assert body["live"]["broken_selector_count"] == 0
    by_sel = {c["selector"]: c for c in body["candidates"]}
    # The recorded test id no longer exists; role+name matches exactly one element now.
    assert by_sel['[data-testid="save-btn"]']["live"] == "no_match"
    assert by_sel["text=Save"]["live"] == "ambiguous" and by_sel["text=Save"]["live_count"] == 3
    best = body["candidates"][0]
    assert (best["selector"], best["live"]) == ('role=button[name="Save"]', "unique")
    assert best["confidence"] > by_sel['[data-testid="save-btn"]']["confidence"]
    # Live elements resembling the broken selector are proposed too; unrelated ones are not.
    assert by_sel['[data-testid="save-draft"]']["sources"] == ["live"]
    assert "a.home" not in by_sel
    assert h.app.router.pending_count("A") == 0


def test_heal_degrades_to_recorded_candidates_when_the_live_check_fails(h):
    h.app.store.add(ACTIONS, [{"type": "click", "timestamp": T0, "selectors": SAVE}])
    d = run(h, "test_heal", {"selector": "[data-testid=save]"})
    (listing,) = h.commands()
    h.answer(listing, status="error", error="csp_blocked")
    _, body = parse(fired(d))
    assert body["live"]["checked"] is False and "list_interactive failed" in body["live"]["reason"]
    assert body["candidates"][0]["selector"] == '[data-testid="save-btn"]'
    assert h.commands() == []


def test_heal_reads_a_test_file_inside_the_cwd_only(h, tmp_path):
    h.app.store.add(ACTIONS, [{"type": "click", "timestamp": T0, "selectors": SAVE}])
    cwd = tmp_path / "repo"
    (cwd / "e2e").mkdir(parents=True)
    (cwd / "e2e" / "a.spec.ts").write_text("await page.click('#save');\n")
    _, body = parse(fired(run(h, "test_heal", {"selector": "#save", "test_file": "e2e/a.spec.ts",
                                              "live": False}, cwd=str(cwd))))
    assert body["artifact"] == "await page.click('[data-testid=\"save-btn\"]');\n"
    assert (cwd / "e2e" / "a.spec.ts").read_text() == "await page.click('#save');\n"  # untouched
    outside = tmp_path / "secret.ts"
    outside.write_text("x")
    (cwd / "link.ts").symlink_to(outside)
    os.mkfifo(cwd / "fifo")
    (cwd / "big.ts").write_bytes(b"x" * (generate.MAX_TEST_FILE_BYTES + 1))
    for path, code in ((str(outside), "path_refused"), ("../secret.ts", "path_refused"),
                       ("link.ts", "path_refused"), ("fifo", "invalid_param"),
                       ("big.ts", "invalid_param"), ("missing.ts", "invalid_param")):
        with pytest.raises(GasolineError) as e:
            run(h, "test_heal", {"selector": "#save", "test_file": path}, cwd=str(cwd))
        assert e.value.code == code, path
    with pytest.raises(GasolineError) as e:
        run(h, "test_heal", {"selector": "#save", "test_file": "e2e/a.spec.ts"})
    assert e.value.code == "path_refused"  # no working directory known


def test_heal_needs_a_selector(h):
    for args in ({}, {"selector": "  "}, {"selector": 3}):
        with pytest.raises(GasolineError):
            run(h, "test_heal", args)


def test_parse_selector_understands_css_semantic_and_playwright_forms():
    assert parse_selector('[data-testid="go"]') == {"kind": "testId", "value": "go"}
    assert parse_selector("page.getByTestId('go')") == {"kind": "testId", "value": "go"}
    assert parse_selector('role=button[name="Go"]') == {"kind": "role", "role": "button",
                                                        "value": "Go"}
    assert parse_selector("getByRole('link', { name: 'Home' })") == {
        "kind": "role", "role": "link", "value": "Home"}
    assert parse_selector("text=Sign in") == {"kind": "text", "value": "Sign in"}
    assert parse_selector("#main") == {"kind": "id", "value": "main"}
    assert parse_selector("div > a.x") == {"kind": "css", "value": "div > a.x"}


def test_rank_candidates_prefers_stable_strategies_and_ignores_unrelated_elements():
    ranked = rank_candidates("text=Save", [{"selectors": SAVE}, {"selectors": EMAIL},
                                           {"selectors": "junk"}, "junk"])
    assert [c["strategy"] for c in ranked] == ["testId", "role", "css"]
    assert all("email" not in c["selector"] for c in ranked)
    assert rank_candidates("#nothing-like-it", [{"selectors": SAVE}]) == []


def test_heal_code_replaces_only_exact_literals():
    cand = rank_candidates("#save", [{"selectors": {"css": "#save", "testId": "s"}}])[0]
    out = heal_code("page.locator(`#save`); x('#saved'); y(\"#save\")", "#save", cand)
    assert out["code"] == 'page.getByTestId("s"); x(\'#saved\'); y("[data-testid=\\"s\\"]")'


# -- test_classify ----------------------------------------------------------------------------------


PLAYWRIGHT_SELECTOR = """Error: locator.click: Timeout 30000ms exceeded.
Call log:
  - waiting for locator('#checkout')
"""
PLAYWRIGHT_ASSERT = """Error: expect(locator).toHaveText(expected)
Expected string: "Order placed"
Received string: "Something went wrong"
"""


@pytest.mark.parametrize("failure, category", [
    (PLAYWRIGHT_SELECTOR, "selector_not_found"),
    (PLAYWRIGHT_ASSERT, "assertion"),
    ("page.goto: net::ERR_CONNECTION_REFUSED at http://localhost:3000/", "network_error"),
    ("Error: API responded with status 502 Bad Gateway", "server_error"),
    ("Request failed with status code 401", "auth"),
    ("TypeError: Cannot read properties of undefined (reading 'total')", "js_error"),
    ("Error: locator.click: Element is not attached to the DOM", "flaky_timing"),
    ("Test timeout of 30000ms exceeded.", "timeout"),
    ("something odd happened", "unknown"),
    ("at foo (app.js:512:3)", "unknown"),  # a line number is not a 5xx
])
def test_classify_rules(failure, category):
    result = classify(failure)
    assert result["category"] == category
    assert result["suggested_fix"]
    assert (result["evidence"] == []) == (category == "unknown")


def test_classify_uses_captured_evidence_as_tie_breaker_and_support():
    # A bare timeout with a captured 503 is a server problem, not a slow test.
    result = classify("Test timeout of 30000ms exceeded.",
                      requests=[{"method": "GET", "url": "/api/cart", "status": 503},
                                {"method": "GET", "url": "/api/user", "status": 500}])
    assert result["category"] == "server_error"
    assert "captured request GET /api/cart -> 503" in result["evidence"]
    assert result["other_categories"][0]["category"] == "timeout"
    assert set(CATEGORIES) >= set(result["scores"])


def test_classify_mode_reads_the_callers_captured_data(h):
    h.app.store.add(NETWORK_BODIES, [{"method": "POST", "url": "https://app.test/login",
                                      "status": 401, "tab_id": 1}])
    summary, body = parse(run(h, "test_classify", {"failure": "Test timeout of 5000ms exceeded."}))
    assert body["category"] == "auth" and "classified as auth" in summary
    assert body["captured"]["failed_requests"] == 1
    _, body = parse(run(h, "test_classify", {"failure": "Test timeout of 5000ms exceeded.",
                                             "use_captured": False}))
    assert body["category"] == "timeout" and body["captured"]["failed_requests"] == 0
    with pytest.raises(GasolineError) as e:
        run(h, "test_classify", {})
    assert e.value.code == "missing_param"


# -- hostile input for these modes (their own argument names; any extension answer) ------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MY_KEYS = ["selector", "test_code", "test_file", "live", "failure", "use_captured", "error_id",
           "message", "window_seconds", "name", "full_page", "threshold", "url", "base_url",
           "test_name", "last_n", "tab_id", "timeout_ms", "save_to", "scope"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True), st.text(max_size=30),
                    st.sampled_from(["#save", "text=Save", "role=button[name=x]", "e2e/a.ts",
                                     "Timeout 5000ms exceeded", "cart", "err-1", "current_page"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)
replies = st.one_of(values, st.fixed_dictionaries({}, optional={
    "elements": st.lists(st.one_of(values, st.fixed_dictionaries({}, optional={
        "role": values, "name": values, "selector": values})), max_size=4),
    "count": values}))


@pytest.fixture(scope="module")
def fuzz_harness(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    h = Harness.create(root)
    (root / "cwd" / "e2e").mkdir(parents=True)
    (root / "cwd" / "e2e" / "a.ts").write_text("await page.click('#save');\n")
    seed_session(h)
    yield h, str(root / "cwd")
    h.close()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mode=st.sampled_from(["test_from_context", "visual_test", "test_heal", "test_classify"]),
       args=st.dictionaries(st.sampled_from(MY_KEYS), values, max_size=6),
       answers=st.lists(replies, min_size=5, max_size=5))
def test_any_arguments_and_answers_give_a_result_or_a_gasoline_error(fuzz_harness, mode, args,
                                                                     answers):
    h, cwd = fuzz_harness
    if isinstance(args.get("save_to"), str):
        args["save_to"] = "out/" + args["save_to"].replace("\x00", "").replace("..", "_")
    try:
        d = run(h, mode, args, client_id="fuzz", cwd=cwd)
    except GasolineError:
        return
    out = []
    if hasattr(d, "addBoth"):
        d.addBoth(out.append)
        for reply in answers:
            for cmd in h.commands():
                h.answer(cmd, reply)
        for cmd in h.commands():
            h.answer(cmd, status="error", error="enough")
    else:
        out.append(d)
    assert out, f"{mode} never answered"
    if hasattr(out[0], "check"):
        assert out[0].check(GasolineError), out[0].getTraceback()
    else:
        assert out[0]["isError"] is False
        parse(out[0])
    assert h.app.router.pending_count("fuzz") == 0

"""
Classify a test failure (C{generate {what:"test_classify"}}): deterministic rules, no model.

Input: the failure text an agent pasted (error message, stack, Playwright output) and what the
daemon captured around it (console errors, failed requests, page timings). Every rule that fires
adds points to one category and records one evidence line; the category with the most points
wins, ties broken by L{CATEGORIES} order (most specific first). Nothing fires: C{unknown}.

Rules (points)::

    ================  ==========================================================================  ===
    category          failure text matches / captured evidence                                    pts
    ================  ==========================================================================  ===
    selector_not_found C{waiting for locator|selector}, C{resolved to 0 elements}, C{no element}  3
                      C{element not found}, C{unable to find}, C{strict mode violation} (2)
    auth              HTTP 401/403 in the text (after status/HTTP/code), C{unauthorized}, C{forbidden}, C{login},        3
                      C{session expired}; a captured 401/403 request (2 each, max 4)
    server_error      HTTP 5xx in the text (after status/HTTP/code), C{internal server error}, C{bad gateway};            3
                      a captured 5xx request (2 each, max 4)
    network_error     C{net::ERR_*}, C{ECONNREFUSED}/C{ECONNRESET}/C{ENOTFOUND}, C{failed to     3
                      fetch}, C{NetworkError}; a captured request with status 0 or an error (2)
    js_error          C{TypeError}/C{ReferenceError}/C{SyntaxError}/C{RangeError}, C{Uncaught}, 3
                      C{pageerror}; a captured console error/exception (1 each, max 3)
    assertion         C{expect(}, C{toHave*}/C{toBe*}/C{toEqual}/C{toContain},                3
                      C{Expected:}/C{Received:}, C{AssertionError}
    flaky_timing      C{not attached to the DOM}/C{detached}, C{not stable}, C{intercepts       3
                      pointer events}, C{Execution context was destroyed}, C{Target closed},
                      C{retry #}; a captured slow page load (> 5 s, 1) or long tasks (1)
    timeout           C{Timeout \\d+ms exceeded}, C{TimeoutError}, C{timed out}                  2
    unknown           nothing above fired
    ================  ==========================================================================  ===

Confidence = top / (top + runner-up + 1), at most 0.95 (0 for C{unknown}).

A timeout is usually a symptom: its 2 points lose to any cause found with it (a missing selector,
a 5xx, a network failure).
"""

from __future__ import annotations

import re
from typing import Any

from gasoline.analysis._util import dicts, is_error, status_of, text
from gasoline.core.redaction.redactor import clip

#: Most specific first: the tie-break order.
CATEGORIES = ("selector_not_found", "auth", "server_error", "network_error", "js_error",
              "assertion", "flaky_timing", "timeout", "unknown")

FIXES = {
    "selector_not_found": "The element is not on the page (or the selector changed). Run generate "
                          "{what:'test_heal', selector:'<the selector>'} for ranked replacements; "
                          "prefer getByTestId / getByRole over CSS paths.",
    "auth": "The test is not logged in or its session expired. Log in in a beforeEach (or reuse a "
            "storageState), and check the credentials/tokens the test environment uses.",
    "server_error": "The backend answered 5xx. Look at the failing request's response body "
                    "(observe {what:'network_bodies', status_min:500}) and the server logs; the "
                    "test is probably fine.",
    "network_error": "A request never got an answer (server down, wrong URL/port, CORS, DNS). "
                     "Check the base URL and that the dev server is running before the test.",
    "js_error": "The page threw. Fix the exception (observe {what:'errors'} shows the stack), or "
                "generate {what:'test_from_context'} for a test that pins it.",
    "assertion": "The page rendered something other than what the test expects: check whether "
                 "the expectation or the app is wrong; compare with the captured state.",
    "flaky_timing": "The test raced the page (element re-rendered, navigation mid-action, "
                    "animation). Use web-first assertions (await expect(locator).toBeVisible()) "
                    "and wait for the state you need instead of fixed sleeps.",
    "timeout": "Something took longer than the test's timeout. Wait for a specific condition "
               "(a response, a visible element) rather than raising the timeout blindly.",
    "unknown": "No rule matched. Paste the full Playwright output (with the call log) and "
               "read observe {what:'error_bundles'} around the failure.",
}

_I = re.IGNORECASE
#: (category, points, pattern, evidence label)
TEXT_RULES: tuple[tuple[str, int, re.Pattern[str], str], ...] = (
    ("selector_not_found", 3, re.compile(r"waiting for (?:locator|selector)|resolved to 0 "
                                         r"elements|no (?:element|node)s? (?:matches|found)|"
                                         r"element(?:s)? not found|unable to (?:find|locate)|"
                                         r"failed to find element", _I),
     "the element could not be found"),
    ("selector_not_found", 2, re.compile(r"strict mode violation", _I),
     "the selector matches several elements"),
    ("auth", 3, re.compile(r"(?:status|http|code|responded with|response)\D{0,12}40[13]\b|"
                           r"\b40[13] (?:unauthori|forbidden)|unauthori[sz]ed|forbidden|not logged in|"
                           r"session (?:has )?expired|token (?:has )?expired|login required|"
                           r"redirected to .*login", _I), "authentication/authorisation failure"),
    ("server_error", 3, re.compile(r"(?:status|http|code|responded with|response)\D{0,12}5\d\d\b|"
                                   r"internal server error|bad gateway|"
                                   r"service unavailable|gateway timeout", _I),
     "a server error"),
    ("network_error", 3, re.compile(r"net::ERR_[A-Z_]+|ECONNREFUSED|ECONNRESET|ENOTFOUND|"
                                    r"EAI_AGAIN|failed to fetch|networkerror|network error|"
                                    r"socket hang up", _I), "a network failure"),
    ("js_error", 3, re.compile(r"\b(?:TypeError|ReferenceError|SyntaxError|RangeError)\b|"
                               r"\bUncaught\b|pageerror|is not a function|"
                               r"cannot read propert(?:y|ies) of"), "a JavaScript exception"),
    ("assertion", 3, re.compile(r"expect\(|\.to(?:Have|Be|Equal|Contain|Match)\w*|"
                                r"^\s*Expected(?: string| value)?:|^\s*Received(?: string| value)?:|"
                                r"AssertionError|assert(?:ion)? failed", _I | re.MULTILINE),
     "an assertion failed"),
    ("flaky_timing", 3, re.compile(r"not attached to the DOM|detached from|element is not stable|"
                                   r"intercepts pointer events|execution context was destroyed|"
                                   r"target (?:page, context or browser )?(?:has been )?closed|"
                                   r"retry #\d|frame was detached", _I),
     "the page changed under the test"),
    ("timeout", 2, re.compile(r"timeout \d+\s*ms exceeded|TimeoutError|timed? ?out|"
                              r"exceeded while waiting", _I), "a timeout"),
)

SLOW_LOAD_MS = 5000
MAX_EVIDENCE = 20


def _line_of(failure: str, match: re.Match[str]) -> str:
    start = failure.rfind("\n", 0, match.start()) + 1
    end = failure.find("\n", match.end())
    line = failure[start:end if end != -1 else len(failure)].strip()
    return clip(line, 300)


def _timing_value(snapshot: dict[str, Any], key: str) -> float | None:
    timing = snapshot.get("timing")
    value = timing.get(key) if isinstance(timing, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


def classify(failure: str, errors: Any = (), requests: Any = (), performance: Any = ()
             ) -> dict[str, Any]:
    """The category of C{failure}, with evidence lines, scores and the suggested fix."""
    failure = text(failure, 50_000)
    scores: dict[str, int] = {}
    evidence: dict[str, list[str]] = {}

    def add(category: str, points: int, line: str) -> None:
        scores[category] = scores.get(category, 0) + points
        lines = evidence.setdefault(category, [])
        if len(lines) < MAX_EVIDENCE:
            lines.append(line)

    for category, points, pattern, label in TEXT_RULES:
        match = pattern.search(failure)
        if match is not None:
            add(category, points, f"failure text ({label}): {_line_of(failure, match)}")

    captured_points: dict[str, int] = {}

    def add_captured(category: str, points: int, cap: int, line: str) -> None:
        if captured_points.get(category, 0) + points > cap:
            return
        captured_points[category] = captured_points.get(category, 0) + points
        add(category, points, line)

    for req in dicts(requests):
        status = status_of(req)
        where = f"{text(req.get('method') or 'GET', 10)} {text(req.get('url'), 200)}"
        if status in (401, 403):
            add_captured("auth", 2, 4, f"captured request {where} -> {status}")
        elif status is not None and 500 <= status <= 599:
            add_captured("server_error", 2, 4, f"captured request {where} -> {status}")
        elif status == 0 or (status is None and req.get("error")):
            detail = text(req.get("error"), 120) or "no response"
            add_captured("network_error", 2, 4, f"captured request {where} failed: {detail}")
    for entry in dicts(errors):
        if not is_error(entry):
            continue
        if entry.get("type") == "network":
            continue  # failed fetches are counted as requests
        message = text(entry.get("message"), 200)
        add_captured("js_error", 1, 3, f"captured console error: {message}")
    slow = long_tasks = 0
    for snapshot in dicts(performance):
        load = _timing_value(snapshot, "load")
        if load is not None and load > SLOW_LOAD_MS and not slow:
            slow = 1
            add("flaky_timing", 1, f"captured slow page load: {load:.0f} ms at "
                                   f"{text(snapshot.get('url'), 200)}")
        tasks = snapshot.get("long_tasks")
        count = tasks.get("count") if isinstance(tasks, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and count > 0 and not long_tasks:
            long_tasks = 1
            add("flaky_timing", 1, f"captured {count} long task(s) at "
                                   f"{text(snapshot.get('url'), 200)}")

    order = {c: i for i, c in enumerate(CATEGORIES)}
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))
    if ranked:
        category, top = ranked[0]
    else:
        category, top = "unknown", 0
    second = ranked[1][1] if len(ranked) > 1 else 0
    confidence = round(min(0.95, top / (top + second + 1)), 2) if top else 0.0
    return {
        "category": category,
        "confidence": confidence,
        "evidence": evidence.get(category, []),
        "suggested_fix": FIXES[category],
        "scores": dict(ranked),
        "other_categories": [
            {"category": c, "score": s, "evidence": evidence.get(c, []),
             "suggested_fix": FIXES[c]} for c, s in ranked[1:]
        ],
    }

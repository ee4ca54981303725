"""PR summary (gasoline.generate.pr)."""

from __future__ import annotations

from gasoline.generate import pr_summary


def test_clean_session_says_so():
    out = pr_summary(actions=[{"type": "click"}, {"type": "click"}, {"type": "input"}])
    md = out["markdown"]
    assert "No console errors or failed requests observed" in md
    assert "3 recorded action(s): 2 click, 1 input." in md
    assert out["stats"] == {"errors": 0, "error_kinds": 0, "failed_requests": 0, "actions": 3,
                            "performance": "unknown"}


def test_errors_failed_requests_and_performance_are_tabulated_and_safe():
    errors = [{"level": "error", "message": f"Boom | `code` {i}", "source": "app.js:1"} for i in range(3)]
    errors.append({"level": "error", "message": "token=SECRET99 leaked"})
    bodies = [{"method": "POST", "url": "https://api.test/save", "status": 500},
              {"method": "GET", "url": "https://api.test/ok", "status": 200}]
    snaps = [{"url": "https://app.test/", "timing": {"largest_contentful_paint": 5000},
              "cumulative_layout_shift": 0.01}]
    out = pr_summary(errors=errors, network_bodies=bodies, snapshots=snaps,
                     changes={"checkpoint": "before", "summary": "4 new error(s)"}, title="Checkout fix")
    md = out["markdown"]
    assert md.startswith("## Checkout fix\n")
    assert "4 console error(s), 1 failed request(s) observed" in md
    assert "| 3 | Boom \\| <str> <num> | app.js:1 |" in md
    assert "SECRET99" not in md
    assert "| 500 | POST https://api.test/save |" in md
    assert "| https://app.test/ | poor | 5000.0ms (poor) | 0.01 (good) | – |" in md
    assert "Since checkpoint `before`: 4 new error(s)" in md
    assert out["stats"]["failed_requests"] == 1 and out["stats"]["performance"] == "poor"

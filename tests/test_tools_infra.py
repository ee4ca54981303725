"""Tool infrastructure: dispatch through the mode tables, ToolContext, the central result
processing (redaction, 100 kB cap, audit) and the per-client rate limit."""

from __future__ import annotations

import json

import pytest
from _mcp_calls import session_for, start
from twisted.internet.defer import Deferred

from gasoline.app import Config, build
from gasoline.core.clients.ratelimit import SlidingWindowLimiter
from gasoline.tools import load_tables
from gasoline.tools.context import ToolContext
from gasoline.mcp.tools import RESULT_CAP, Tool, ToolRegistry
from gasoline.tools import GasolineTools
from gasoline.tools.context import text_result


def raw_call(app, session, name, args):
    return start(app, session, name, args)[0]["result"]


def body(result):
    return json.loads(result["content"][0]["text"].partition("\n")[2])


# -- rate limit --------------------------------------------------------------------------------


def test_the_101st_call_in_a_minute_is_refused_for_that_client_only(app, clock):
    a, b = session_for(app, "flooder"), session_for(app, "neighbour")
    for i in range(100):
        assert raw_call(app, a, "configure", {"what": "health"})["isError"] is False, i
        clock.advance(0.1)
    refused = raw_call(app, a, "observe", {"what": "errors"})
    assert refused["isError"] is True
    err = body(refused)
    assert err["error"] == "rate_limited" and err["limit"] == 100
    # The window is 60 s from the first call (made at t0; now t0 + 10 s): ~50 s to wait.
    assert 49.9 <= err["retry_after_seconds"] <= 50.01 and "Wait" in err["retry"]
    # The neighbour is not affected at all.
    assert raw_call(app, b, "observe", {"what": "errors"})["isError"] is False
    # Once the first call leaves the window, the flooder may call again (one slot per expiry).
    clock.advance(err["retry_after_seconds"])
    assert raw_call(app, a, "observe", {"what": "errors"})["isError"] is False
    assert body(raw_call(app, a, "observe", {"what": "errors"}))["error"] == "rate_limited"
    clock.advance(0.1)  # the second call (made at t0 + 0.1) leaves the window
    assert raw_call(app, a, "observe", {"what": "errors"})["isError"] is False


def test_rate_limit_is_configurable_and_zero_disables_it(tmp_path, clock):
    app = build(Config(state_dir=tmp_path, persist=False, tool_rate_limit=0), clock)
    s = session_for(app, "x")
    for _ in range(150):
        assert raw_call(app, s, "observe", {"what": "errors"})["isError"] is False


def test_sliding_window_limiter_unit(clock):
    limiter = SlidingWindowLimiter(clock, limit=2, window=10)
    assert limiter.check("a") == 0 and limiter.check("a") == 0
    assert limiter.check("a") == pytest.approx(10)
    assert limiter.check("b") == 0
    clock.advance(10)
    assert limiter.check("a") == 0
    assert limiter.usage("a") == {"used": 1, "limit": 2, "window_seconds": 10.0, "refused": 1}


# -- central processing -----------------------------------------------------------------------


def test_every_tool_result_is_redacted_centrally(app):
    app.mcp.tools.add(Tool("leaky", "returns secrets", {"type": "object"}, lambda ctx, a: text_result(
        "token=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        {"headers": [{"name": "Authorization", "value": "Basic dXNlcjpwYXNz"}],
         "body": '{"password": "hunter2"}'})))
    text = raw_call(app, session_for(app, "x"), "leaky", {})["content"][0]["text"]
    assert "hunter2" not in text and "dXNlcjpwYXNz" not in text and "ghp_abc" not in text
    assert text.count("[REDACTED:") >= 3


def test_results_over_100kb_are_capped_with_an_explicit_note(app):
    big = [{"i": i, "message": "x" * 200} for i in range(1000)]
    app.mcp.tools.add(Tool("huge", "big", {"type": "object"},
                           lambda ctx, a: text_result("lots", {"entries": big})))
    text = raw_call(app, session_for(app, "x"), "huge", {})["content"][0]["text"]
    assert len(text.encode()) <= RESULT_CAP and "[truncated: showing" in text
    assert text.startswith("lots\n")


def test_a_mode_missing_from_its_table_is_not_implemented(app):
    tools = ToolRegistry(app.clock)
    GasolineTools(app, tables={"observe": {}}).register(tools)
    app.mcp.tools = tools
    result = raw_call(app, session_for(app, "x"), "observe", {"what": "errors"})
    assert result["isError"] and body(result)["error"] == "not_implemented"


def test_dispatch_hands_handlers_a_tool_context_and_accepts_aliases(app):
    seen = []

    def handler(ctx, args):
        seen.append(ctx)
        return ctx.ok("fine", {"args": args})

    tools = ToolRegistry(app.clock)
    GasolineTools(app, tables={"generate": {"har": handler},
                               "interact": {"click": handler}}).register(tools)
    app.mcp.tools = tools
    s = session_for(app, "ctx-client")
    assert raw_call(app, s, "generate", {"format": "har"})["isError"] is False
    assert raw_call(app, s, "interact", {"action": "click"})["isError"] is False
    ctx = seen[0]
    assert isinstance(ctx, ToolContext) and ctx.client_id == "ctx-client"
    assert ctx.state is s.state and ctx.session is s and ctx.tool == "generate"
    assert ctx.mode == "har" and ctx.app is app and ctx.router is app.router
    assert ctx.now() == app.clock.seconds() and ctx.cwd is None
    assert seen[1].mode == "click"


def test_tool_context_router_helpers_use_the_callers_id(app):
    app.extension.sync({"settings": {}})
    ctx = ToolContext(app=app.daemon, tools=app.tools, request=None, state=None, client_id="owner-1")
    d = ctx.router_call("dom", {"selector": "h1"})
    assert isinstance(d, Deferred)
    cid = ctx.router_submit("dom", {"selector": "h2"})
    owners = {c.owner for c in app.extension.commands.deliverable()}
    assert owners == {"owner-1"}
    assert app.router.command_result("owner-1", cid)["status"] == "pending"
    assert ToolContext.wants_background({"wait": False}) is True
    assert ToolContext.wants_background({"background": False}) is False
    d.cancel()
    d.addErrback(lambda f: None)
    app.extension.stop()
    app.router.close()


def test_load_tables_gives_every_tool_a_table():
    tables = load_tables()
    assert set(tables) == {"observe", "analyze", "generate", "configure", "interact"}
    assert "errors" in tables["observe"] and "health" in tables["configure"]


def test_a_handler_crash_is_an_internal_error_and_is_audited(app):
    def boom(ctx, args):
        raise RuntimeError("kaput")

    tools = ToolRegistry(app.clock)
    GasolineTools(app, tables={"observe": {"errors": boom}}).register(tools)
    app.mcp.tools = tools
    s = session_for(app, "crashy")
    assert body(raw_call(app, s, "observe", {"what": "errors"}))["error"] == "internal_error"
    assert tools.audit_log("crashy")[-1]["outcome"] == "error"
    assert tools.audit_log("crashy")[-1]["error"] == "internal_error"


def test_tool_rate_limit_option_reaches_the_config(tmp_path):
    from gasoline.tap import Options

    options = Options()
    options.parseOptions(["--state-dir", str(tmp_path), "--tool-rate-limit", "0"])
    assert options.config().tool_rate_limit == 0
    default = Options()
    default.parseOptions(["--state-dir", str(tmp_path)])
    assert default.config().tool_rate_limit == 100


def test_published_schemas_include_the_arguments_each_mode_module_reads(app):
    """Arguments a mode reads (its module's PROPERTIES) are in the tool's inputSchema."""
    from gasoline.tools import extra_properties

    definitions = {d["name"]: d for d in app.mcp.tools.definitions()}
    for tool in ("analyze", "generate", "interact"):
        extra = extra_properties(tool)
        assert extra, f"{tool} declares no extra arguments"
        assert set(extra) <= set(definitions[tool]["inputSchema"]["properties"])
    assert "allow_private" in definitions["analyze"]["inputSchema"]["properties"]

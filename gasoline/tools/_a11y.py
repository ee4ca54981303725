"""
Accessibility audits shared by the tools: the C{a11y} command's parameters from tool arguments,
the extension's result normalised to the axe shape, and that result as a SARIF document (for
C{generate} C{sarif}).
"""

from __future__ import annotations

from typing import Any

import orjson
from twisted.internet.defer import succeed

from gasoline.core.errors import InvalidParam
from gasoline.generate import (
    sarif,
)
from gasoline.tools._artifacts import _finish
from gasoline.tools._shared import (
    as_dict,
    call,
    lst,
    page_url,
    str_list,
)


def a11y_params(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The C{a11y} command's params from tool arguments (C{selector}, C{tags}, C{rules})."""
    params: dict[str, Any] = {}
    selector = ctx.str_arg(args, "selector")
    if selector:
        params["selector"] = selector
    for name in ("tags", "rules"):
        values = str_list(ctx, args, name)
        if values:
            params[name] = values
    node_limit = ctx.int_arg(args, "node_limit", None, 1, 200)
    if node_limit is not None:
        params["node_limit"] = node_limit
    return params


def normalize_a11y(result: Any) -> dict[str, Any]:
    """The extension's a11y result (snake_case C{help_url}/C{failure_summary}) in the axe shape
    the SARIF generator reads (C{helpUrl}/C{failureSummary}); axe-shaped input passes as is."""
    r = as_dict(result)
    violations = []
    for v in lst(r.get("violations")):
        if not isinstance(v, dict):
            continue
        v = dict(v)
        if "helpUrl" not in v and "help_url" in v:
            v["helpUrl"] = v["help_url"]
        nodes = []
        for node in lst(v.get("nodes")):
            if isinstance(node, dict):
                node = dict(node)
                if "failureSummary" not in node and "failure_summary" in node:
                    node["failureSummary"] = node["failure_summary"]
                nodes.append(node)
        v["nodes"] = nodes
        violations.append(v)
    return {**r, "violations": violations}


def sarif_document(ctx: Any, a11y_result: Any) -> tuple[dict[str, Any], int]:
    normalized = normalize_a11y(a11y_result)
    url = normalized.get("url") if isinstance(normalized.get("url"), str) else page_url(ctx)
    doc = sarif(normalized, page_url=url)
    results = sum(len(run.get("results") or []) for run in doc.get("runs") or [])
    return doc, results


def sarif_mode(ctx: Any, args: dict[str, Any]) -> Any:
    provided = args.get("a11y_result", args.get("result"))
    if provided is not None and not isinstance(provided, dict):
        raise InvalidParam("a11y_result must be an accessibility result object "
                           "({violations: [...]})", param="a11y_result")

    def build(a11y: Any) -> dict[str, Any]:
        doc, count = sarif_document(ctx, a11y)
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()
        return _finish(ctx, args, "sarif", f"SARIF 2.1.0 with {count} result(s)", text,
                       {"results": count})

    if provided is not None:
        return succeed(provided).addCallback(build)

    return call(ctx, args, "a11y", a11y_params(ctx, args)).addCallback(build)

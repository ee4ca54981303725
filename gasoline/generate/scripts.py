"""
Scripts from recorded actions: a replay script (C{reproduction}) and a Playwright test.

Each action's element is addressed by the most robust selector it recorded, in this order:
C{testId} → role and accessible name → C{aria-label} → visible text → CSS. Every string that
reaches the generated code is a JSON string literal (valid JavaScript and TypeScript, with
quotes, backslashes, newlines and C{</script>} escaped), so recorded values cannot inject code.
Password values arrive redacted; the scripts read them from an environment variable instead.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urljoin, urlsplit

from gasoline.analysis._util import dicts, text
from gasoline.core.redaction.redactor import clip
from gasoline.core.redaction.keys import is_marker

MAX_ACTIONS = 500
PASSWORD_ENV = "GASOLINE_TEST_PASSWORD"


def js(value: Any) -> str:
    """A JavaScript string literal for C{value} (safe inside code and HTML)."""
    return json.dumps(text(value, 10_000), ensure_ascii=True).replace("</", "<\\/")


def best_locator(selectors: Any) -> tuple[str, str] | None:
    """C{(kind, Playwright locator expression)} for the most robust recorded selector."""
    if not isinstance(selectors, dict):
        return None
    test_id = selectors.get("testId") or selectors.get("test_id") or selectors.get("data-testid")
    if isinstance(test_id, str) and test_id:
        return "testId", f"page.getByTestId({js(test_id)})"
    role = selectors.get("role")
    if isinstance(role, dict) and isinstance(role.get("role"), str) and role.get("role"):
        name = role.get("name")
        if isinstance(name, str) and name:
            return "role", f"page.getByRole({js(role['role'])}, {{ name: {js(name)} }})"
    label = selectors.get("ariaLabel") or selectors.get("aria_label") or selectors.get("label")
    if isinstance(label, str) and label:
        return "ariaLabel", f"page.getByLabel({js(label)})"
    visible = selectors.get("text")
    if isinstance(visible, str) and visible.strip():
        return "text", f"page.getByText({js(visible.strip())}, {{ exact: true }})"
    if isinstance(role, dict) and isinstance(role.get("role"), str) and role.get("role"):
        return "role", f"page.getByRole({js(role['role'])})"
    css = selectors.get("css") or selectors.get("xpath")
    if isinstance(css, str) and css:
        return "css", f"page.locator({js(css)})"
    return None


def _is_redacted(value: Any) -> bool:
    return isinstance(value, str) and (value.lower() == "[redacted]" or is_marker(value))


def _value_expr(action: dict[str, Any]) -> str:
    value = action.get("value")
    if action.get("input_type") == "password" or _is_redacted(value):
        return f"process.env.{PASSWORD_ENV} ?? ''"
    return js(value if value is not None else "")


def _target(url: Any, base_url: str | None) -> str:
    target = text(url, 4000)
    if base_url and target:
        try:
            base = urlsplit(base_url)
            parts = urlsplit(target)
        except ValueError:
            return target
        if parts.scheme and (parts.scheme, parts.netloc) == (base.scheme, base.netloc):
            return urljoin(base_url, parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return target


def action_lines(action: dict[str, Any], base_url: str | None = None) -> list[str]:
    """The Playwright statements (without indentation) that replay one recorded action."""
    kind = text(action.get("type"), 30).lower()
    locator = best_locator(action.get("selectors"))
    loc = locator[1] if locator else None
    if kind == "navigate":
        url = action.get("to_url") or action.get("url")
        return [f"await page.goto({js(_target(url, base_url))});"] if url else []
    if kind in ("click", "dblclick"):
        if loc is None:
            return ["// click on an element with no recorded selector"]
        return [f"await {loc}.{'dblclick' if kind == 'dblclick' else 'click'}();"]
    if kind in ("input", "type", "fill", "change"):
        if loc is None:
            return ["// input into an element with no recorded selector"]
        return [f"await {loc}.fill({_value_expr(action)});"]
    if kind == "select":
        if loc is None:
            return ["// selection in an element with no recorded selector"]
        return [f"await {loc}.selectOption({js(action.get('value', ''))});"]
    if kind in ("check", "uncheck"):
        if loc is None:
            return [f"// {kind} of an element with no recorded selector"]
        return [f"await {loc}.{kind}();"]
    if kind in ("keypress", "keydown", "key"):
        key = action.get("key")
        if not isinstance(key, str) or not key:
            return []
        if loc is not None:
            return [f"await {loc}.press({js(key)});"]
        return [f"await page.keyboard.press({js(key)});"]
    if kind == "scroll":
        y = action.get("scroll_y")
        if isinstance(y, (int, float)) and not isinstance(y, bool):
            return [f"await page.evaluate(() => window.scrollTo(0, {int(y)}));"]
        return []
    if kind == "focus" and loc is not None:
        return [f"await {loc}.focus();"]
    if kind == "hover" and loc is not None:
        return [f"await {loc}.hover();"]
    if kind == "drag" and loc is not None and isinstance(action.get("target"), str):
        return [f"await {loc}.dragTo(page.locator({js(text(action['target'], 4000))}));"]
    return [f"// unsupported action type {js(kind)}"]


def _steps(actions: Any, base_url: str | None) -> list[str]:
    lines: list[str] = []
    for action in dicts(actions)[-MAX_ACTIONS:]:
        lines.extend(action_lines(action, base_url))
    return lines


def _first_url(actions: list[dict[str, Any]], base_url: str | None) -> str | None:
    for action in actions:
        if action.get("type") == "navigate" and (action.get("to_url") or action.get("url")):
            return None  # the script navigates itself
        if isinstance(action.get("url"), str) and action["url"]:
            return _target(action["url"], base_url)
    return base_url


def reproduction(actions: Any, base_url: str | None = None) -> dict[str, Any]:
    """A standalone Node script (C{node repro.js}) that replays the actions with Playwright."""
    items = dicts(actions)
    start = _first_url(items, base_url)
    body = [f"  await page.goto({js(start)});"] if start else []
    body += [f"  {line}" for line in _steps(items, base_url)]
    script = "\n".join([
        "// Reproduction generated by Gasoline from recorded browser actions.",
        "// Run: npm i -D playwright && npx playwright install chromium && node repro.js",
        "const { chromium } = require('playwright');",
        "",
        "(async () => {",
        "  const browser = await chromium.launch({ headless: false });",
        "  const page = await browser.newPage();",
        "  page.on('console', (msg) => {",
        "    if (msg.type() === 'error') console.log('console error:', msg.text());",
        "  });",
        "  page.on('pageerror', (err) => console.log('page error:', err.message));",
        *body,
        "  await browser.close();",
        "})();",
        "",
    ])
    return {"language": "javascript", "filename": "repro.js", "steps": len(body), "script": script}


def playwright_test(actions: Any, errors: Any = (), base_url: str | None = None,
                    name: str = "reproduces the recorded session") -> dict[str, Any]:
    """A Playwright test (TypeScript) replaying the actions and asserting no uncaught errors."""
    items = dicts(actions)
    start = _first_url(items, base_url)
    steps = ([f"await page.goto({js(start)});"] if start else []) + _steps(items, base_url)
    seen_errors = []
    for error in dicts(errors):
        message = error.get("message")
        if isinstance(message, str) and message.strip() and message not in seen_errors:
            seen_errors.append(message)
        if len(seen_errors) >= 10:
            break
    lines = [
        "// Generated by Gasoline from recorded browser actions.",
        "import { test, expect } from '@playwright/test';",
        "",
        f"test({js(name)}, async ({{ page }}) => {{",
        "  const errors: string[] = [];",
        "  page.on('pageerror', (err) => errors.push(err.message));",
        "  page.on('console', (msg) => { if (msg.type() === 'error') errors.push(msg.text()); });",
        "",
        *[f"  {line}" for line in steps],
        "",
    ]
    if seen_errors:
        lines.append("  // Errors seen while recording; the test fails while any of them still happens.")
        lines.append(f"  const recorded = [{', '.join(js(clip(m, 300)) for m in seen_errors)}];")
        lines.append("  for (const message of recorded) {")
        lines.append("    expect(errors.filter((e) => e.includes(message))).toEqual([]);")
        lines.append("  }")
    lines.append("  expect(errors).toEqual([]);")
    lines.append("});")
    lines.append("")
    return {"language": "typescript", "filename": "gasoline-recorded.spec.ts",
            "steps": len(steps), "script": "\n".join(lines),
            "selectors": [loc[0] if (loc := best_locator(a.get("selectors"))) else None
                          for a in items[-MAX_ACTIONS:]]}

"""
The agent-typed password, end to end: a real daemon, Chromium with the unpacked
extension, the official ``mcp`` SDK as the agent. A password field whose id and name say nothing
(``#f2``) is typed into by the agent (``interact type``) and by the person at the keyboard (CDP
``Input.insertText``); ``observe actions`` shows both records carrying the field's nature
(``input_type: password``) and neither value, and ``generate reproduction`` fills the field from
the environment placeholder, never with the typed text. A plain text field typed by the agent
keeps its value (the rule is the field's nature, not "the agent typed it").

Fails (not skips) under CI=true without Chromium (the ``browser`` fixture).
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from test_extension_mcp import agents, call, open_tab, track

pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

FIELDS = ("document.querySelector('main').insertAdjacentHTML('beforeend', "
          "'<input id=\"f2\" name=\"f2\" type=\"password\"><input id=\"plain\" name=\"plain\">'); 1")


def test_an_agent_typing_into_a_password_field_is_recorded_like_the_user(browser, site, ext_daemon):
    url = site.url + "/agent.html"
    page, tab = open_tab(browser, None, url)
    track(browser, ext_daemon, [(tab, url)])
    browser.cdp.evaluate(page, FIELDS)
    secret = "hunter2-" + uuid.uuid4().hex[:10]
    person = "pa55-" + uuid.uuid4().hex[:10]
    plain = "plain-" + uuid.uuid4().hex[:10]

    async def body(client_id, session):
        out = {}
        out["type"] = await call(session, "interact", {"what": "type", "selector": "#f2", "text": secret})
        out["plain"] = await call(session, "interact", {"what": "type", "selector": "#plain", "text": plain})
        # The person types into the same field (the extension's capture records it).
        browser.cdp.evaluate(page, "document.getElementById('f2').value = ''; document.getElementById('f2').focus(); 1")
        browser.cdp.call("Input.insertText", {"text": person}, session=page)
        for _ in range(100):
            summary, data = await call(session, "observe", {"what": "actions", "last_n": 1000})
            users = [a for a in data["entries"] if a.get("source") != "ai" and a.get("type") == "input"]
            if users:
                break
            await asyncio.sleep(0.2)
        out["actions"] = (summary, data)
        out["raw"] = (await session.call_tool("observe", {"what": "actions", "last_n": 1000})).content[0].text
        out["repro"] = await call(session, "generate", {"what": "reproduction"})
        return out

    [out] = agents(ext_daemon, ["e2e-redaction"], body)
    assert browser.cdp.evaluate(page, "document.getElementById('plain').value") == plain
    entries = out["actions"][1]["entries"]
    ai = [a for a in entries if a.get("source") == "ai" and a.get("type") == "input"]
    user = [a for a in entries if a.get("source") != "ai" and a.get("type") == "input"]
    pw_ai = [a for a in ai if a.get("input_id") == "f2"]
    assert pw_ai, json.dumps(ai)[:2000]
    assert user, "the person's typing was never recorded: " + json.dumps(entries)[:2000]
    for record in pw_ai + user:
        assert record["input_type"] == "password", record
        assert record["value"] == "[REDACTED:input]", record
    assert [a["value"] for a in ai if a.get("input_id") == "plain"] == [plain]
    for text in (out["raw"], json.dumps(out["actions"][1]), out["repro"][1]["artifact"]):
        assert secret not in text and person not in text
    script = out["repro"][1]["artifact"]
    assert "GASOLINE_TEST_PASSWORD" in script and plain in script

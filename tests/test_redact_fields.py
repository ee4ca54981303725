"""
One rule for "this input holds a secret": the extension's C{isSensitiveField}
(extension/lib/redact.js, for the user's actions) and the daemon's L{is_sensitive_field} (for the
agent's own actions and again at ingest) give the same answer on one table of fields, run by Node
on the extension's own module.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support import require_tool
from gasoline.core.redaction.fields import action_is_secret, is_sensitive_field, redact_typed_values

LIB = Path(__file__).resolve().parent.parent / "extension" / "lib" / "redact.js"

FIELDS = [
    {"type": t, "name": n, "id": i, "autocomplete": a}
    for t in ("password", "PASSWORD", "text", "email", "tel", "number", "search", "")
    for n, i, a in (
        ("", "", ""), ("username", "user", "username"), ("pw", "pw", "current-password"),
        ("", "", "new-password"), ("code", "", "one-time-code"), ("cc", "", "cc-number"),
        ("exp", "", "cc-exp"), ("", "", "cc-csc"), ("amount", "", "transaction-amount"),
        ("user_password", "", ""), ("", "passcode", ""), ("apiToken", "", ""),
        ("otp", "", ""), ("pin", "", ""), ("pinned", "", ""), ("spin", "", ""),
        ("cvv", "", ""), ("card_number", "", ""), ("cardNo", "", ""), ("ssn", "", ""),
        ("security-code", "", ""), ("q", "search", "off"), ("first_name", "fname", "given-name"),
        ("secret_answer", "", ""), ("one_time", "", ""), ("", "", "section-blue shipping street-address"),
        ("", "", "billing cc-name"), ("passphrase", "", ""), ("address", "", "address-line1"),
    )
]


def test_the_extension_and_the_daemon_use_one_field_rule():
    node = require_tool("node", why="runs the extension's lib/redact.js")
    script = (
        f"import {{ isSensitiveField }} from {json.dumps(LIB.as_uri())};\n"
        "const fields = JSON.parse(process.argv[1]);\n"
        "process.stdout.write(JSON.stringify(fields.map((f) => isSensitiveField(f))));\n"
    )
    out = subprocess.run([node, "--input-type=module", "-e", script, json.dumps(FIELDS)],
                         capture_output=True, text=True, timeout=60, check=True)
    theirs = json.loads(out.stdout)
    ours = [is_sensitive_field(f["type"], f["name"], f["id"], f["autocomplete"]) for f in FIELDS]
    assert any(ours) and not all(ours)
    disagree = [(f, t, o) for f, t, o in zip(FIELDS, theirs, ours) if t != o]
    assert not disagree, disagree


def test_an_action_record_is_judged_by_its_field_nature():
    for f in FIELDS:
        record = {"type": "input", "value": "hunter2", "input_type": f["type"],
                  "input_name": f["name"], "input_id": f["id"], "autocomplete": f["autocomplete"]}
        secret = is_sensitive_field(f["type"], f["name"], f["id"], f["autocomplete"])
        judged = action_is_secret(record)
        assert judged or not secret  # the field rule's secrets are always redacted
        redact_typed_values([record])
        assert record["value"] == ("[REDACTED:input]" if judged else "hunter2"), f


def test_a_key_typed_into_a_secret_field_is_not_kept():
    records = [{"type": "keypress", "key": "h", "input_type": "password"},
               {"type": "keypress", "key": "Enter", "input_type": "password"},
               {"type": "keypress", "key": "h", "input_type": "text", "input_name": "q"}]
    redact_typed_values(records)
    assert [r["key"] for r in records] == ["[REDACTED:input]", "Enter", "h"]


def test_outgoing_messages_are_redacted_but_protocol_fields_and_schemas_are_kept():
    from gasoline.mcp.outgoing import redact_outgoing

    key = "ghp_" + "a1B2" * 9
    note = redact_outgoing({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
        "progressToken": "tok-token", "progress": 1, "message": f"using {key}"}})
    assert note["params"]["progressToken"] == "tok-token"
    assert note["params"]["message"] == "using [REDACTED:github_token]"
    sampling = redact_outgoing({"jsonrpc": "2.0", "id": "g-1", "method": "sampling/createMessage",
                                "params": {"messages": [{"role": "user", "content": {
                                    "type": "text", "text": key}}], "maxTokens": 5}})
    assert key not in str(sampling) and sampling["params"]["maxTokens"] == 5
    schema = {"type": "object", "properties": {"password": {"type": "string"}}}
    elicit = {"jsonrpc": "2.0", "id": "g-2", "method": "elicitation/create",
              "params": {"message": "sign in", "requestedSchema": schema}}
    assert redact_outgoing(elicit) is elicit  # its property names are the questions
    error = redact_outgoing({"jsonrpc": "2.0", "id": 3, "error": {
        "code": -32000, "message": f"bad {key}", "data": {"token": "abc"}}})
    assert error["error"] == {"code": -32000, "message": "bad [REDACTED:github_token]",
                              "data": {"token": "[REDACTED:token]"}}

"""
One list of secret names, read by both sides: the daemon (gasoline/core/redaction/keys.py) reads
extension/lib/secret-names.json, the extension (lib/redact.js) the module generated from it. Both
sides are run, the extension's module through Node, on the same names in every spelling (as
listed, upper case, dashes, dots, camelCase, with a prefix, without underscores) and on names that
are not secret: they must agree on every one, as a JSON key (and on what each redactor does with
a value under it) and as a URL parameter. Before the shared list the extension had 53 key names and
the daemon 77: 21 (totp, passcode, code_verifier, saml_response, x_amz_signature, ...) left the
browser in clear and were journaled.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

from support import require_tool

from gasoline.core.redaction.redactor import Redactor
from gasoline.core.redaction.keys import (
    SENSITIVE_KEYS,
    SENSITIVE_PARAMS,
    SENSITIVE_SUFFIXES,
    is_sensitive_key,
    is_sensitive_param,
    secret_names_path,
)

REPO = Path(__file__).resolve().parent.parent
LIB = REPO / "extension" / "lib"


def _names() -> dict:
    return json.loads((LIB / "secret-names.json").read_text())


def test_the_daemon_reads_the_extension_s_list():
    data = _names()
    assert secret_names_path().resolve() in {(LIB / "secret-names.json").resolve(),
                                             (REPO / "gasoline" / "_extension" / "lib"
                                              / "secret-names.json").resolve()}
    assert SENSITIVE_KEYS == frozenset(data["keys"])
    assert SENSITIVE_PARAMS == frozenset(data["params"])
    assert SENSITIVE_SUFFIXES == tuple(data["suffixes"])
    # the union of the two lists as they were: nothing either side redacted was dropped
    for name in ("totp", "passcode", "code_verifier", "saml_response", "x_amz_signature",
                 "cc_number", "ccnumber", "csc", "password", "authorization", "cookie"):
        assert name in SENSITIVE_KEYS, name
    assert len(SENSITIVE_KEYS) >= 83


def test_the_extension_s_module_is_generated_from_the_list():
    spec = importlib.util.spec_from_file_location(
        "secret_names_script", REPO / "extension" / "scripts" / "secret-names.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert (LIB / "secret-names.js").read_text() == script.module_text(_names()), (
        "extension/lib/secret-names.js differs from secret-names.json: run "
        "extension/scripts/secret-names.py")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def spellings() -> list[str]:
    data = _names()
    out: list[str] = []
    for name in data["keys"] + data["params"] + [f"db_{s}" for s in data["suffixes"]]:
        out += [name, name.upper(), name.replace("_", "-"), name.replace("_", "."), _camel(name),
                "my_" + name, name.replace("_", ""), name + "_hint"]
    # names that are not secret (and near misses)
    out += ["username", "email", "description", "keyboard", "passenger", "tokens_used",
            "session_count", "signature_algorithm", "pinned", "spin", "codename", "hashtag",
            "ticketing", "authority", "sidebar", "title", "url", "message", "level", "id"]
    return sorted(set(out))


_SCRIPT = """
import { isSensitiveKey, redactUrl, redactValue } from %s;
const names = JSON.parse(process.argv[1]);
const out = names.map((n) => [
  isSensitiveKey(n),
  redactUrl('http://x.test/p?' + encodeURIComponent(n) + '=plainvalue42').includes('[REDACTED:'),
  JSON.stringify(redactValue({ [n]: 'plainvalue42' })).includes('[REDACTED:'),
]);
process.stdout.write(JSON.stringify(out));
"""


def test_the_extension_and_the_daemon_agree_on_every_name():
    node = require_tool("node", why="runs the extension's lib/redact.js")
    names = spellings()
    script = _SCRIPT % json.dumps((LIB / "redact.js").as_uri())
    done = subprocess.run([node, "--input-type=module", "-e", script, json.dumps(names)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    theirs = json.loads(done.stdout)
    redactor = Redactor()
    disagree = []
    for name, (js_key, js_param, js_value) in zip(names, theirs, strict=True):
        py_key = is_sensitive_key(name)
        py_param = is_sensitive_param(name)
        py_value = "[REDACTED:" in json.dumps(redactor.redact_value({name: "plainvalue42"}))
        if (js_key, js_param, js_value) != (py_key, py_param, py_value):
            disagree.append((name, {"extension": (js_key, js_param, js_value),
                                    "daemon": (py_key, py_param, py_value)}))
    assert not disagree, disagree
    secret = [n for n, (k, _, _) in zip(names, theirs) if k]
    assert len(secret) > 400 and len(secret) < len(names)  # both kinds are in the table

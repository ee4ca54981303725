"""
Redact once (L{gasoline.core.redaction.once}): stored entries are redacted the first time they are read
and kept so; a result built from them is a L{RedactedText} the exit only caps. The proof that
this changes nothing an agent reads: on the held-out secret corpus, in every entry shape the
redactor treats specially, the composed text equals what the exit's full redaction makes of the
same result built from the stored (unredacted) entries.
"""

from __future__ import annotations

import orjson
import pytest

from _mcp_calls import call, session_for
from secret_corpus import corpus

from gasoline.core.redaction.once import (
    RedactedEntries,
    RedactedText,
    ReadCache,
    compose_text,
    encode,
    REDACTOR,
)
from gasoline.core.storage.store import CONSOLE, NETWORK_BODIES
from gasoline.mcp.tools import ToolRegistry

CORPUS = corpus()


def shapes(text: str, secret: str) -> list[dict]:
    """One corpus item in every entry shape the redactor walks differently."""
    return [
        {"level": "error", "message": text, "ts": 1},
        {"level": "log", "args": [text, {"nested": text}], "source": "app.js"},
        {"url": f"http://x/api?q=1&token={secret}", "message": "GET failed"},
        {"url": "http://x/a", "response_body": orjson.dumps({"data": text}).decode(),
         "request_body": f"user=bob&password={secret}"},
        {"headers": [{"name": "Authorization", "value": secret}], "message": "request"},
        {"cookies": [{"name": "sid", "value": secret}], "message": "cookies"},
        {"type": "input", "selector": "#password", "value": secret},
        {"password": secret, "message": "login"},
        {"deep": {"a": {"b": [{"c": text}]}}},
    ]


def _full_path(summary: str, body: dict) -> str:
    """What the exit makes of the result when it is built from plain text."""
    result = {"content": [{"type": "text", "text": summary + "\n" + encode(body)}],
              "isError": False}
    return ToolRegistry().finish(result)["content"][0]["text"]


@pytest.mark.parametrize("key", ["entries", "token", "cookies", "value", "events"])
def test_composed_text_equals_the_exit_redaction_on_the_corpus(key):
    cache = ReadCache(4096)
    seq = 0
    for s in CORPUS:
        raws = [orjson.dumps(e) for e in shapes(s.text, s.secret)]
        entries = RedactedEntries()
        for raw in raws:
            entries.append(orjson.loads(cache.redacted(seq, raw)))
            seq += 1
        body = {"count": len(raws), "cursor": seq, "note": s.text, key: entries}
        if key == "value":
            body["name"] = "api_key"  # a name/value pair at the body's own level
        plain = {**body, key: [orjson.loads(r) for r in raws]}
        summary = f"{len(raws)} new log entries (see {s.text})".replace("\n", " ")
        composed = compose_text(REDACTOR, summary, body)
        assert isinstance(composed, RedactedText)
        # The exit's full redaction leaves the composed text as it is ...
        assert composed == ToolRegistry().finish(
            {"content": [{"type": "text", "text": str(composed)}]})["content"][0]["text"]
        if key != "cookies":
            # ... and it is exactly what the exit makes of the unredacted entries (under
            # "cookies", which is never spliced, the entries' own markers may keep another
            # label: "[REDACTED:password]" where the cookie rule says "[REDACTED:cookie]").
            assert composed == _full_path(summary, plain), s.name
        # (Leaks are the corpus test's business, tests/test_redact_corpus.py: here the point
        # is that the splice changes nothing.)
        # A summary of several lines is left to the exit's full path.
        assert type(compose_text(REDACTOR, "a\nb", body)) is str


def test_an_entry_is_redacted_once_for_every_reader(app):
    app.store.add(CONSOLE, [{"level": "error", "message": f"boom {i} token=abc{i}def0123456789"}
                            for i in range(50)])
    sessions = [session_for(app, f"agent-{k}") for k in range(5)]
    for s in sessions:
        err, _, data = call(app, s, "observe", {"what": "logs"})
        assert not err and data["count"] == 50
        assert all("abc" not in e["message"] for e in data["entries"])
    cache = app.store.read_caches[CONSOLE]
    assert cache.redactions == 50  # once per entry, not once per agent
    assert cache.hits >= 4 * 50


def test_the_tool_result_is_marked_and_the_exit_does_not_redact_it_again(app, monkeypatch):
    app.store.add(CONSOLE, [{"level": "log", "message": "password=hunter2hunter2"}])
    s = session_for(app, "me")
    walks = []
    original = ToolRegistry._redact_decoded
    monkeypatch.setattr(ToolRegistry, "_redact_decoded",
                        lambda self, text, *a: walks.append(text) or original(self, text, *a))
    err, _, data = call(app, s, "observe", {"what": "logs"})
    assert not err and "hunter2" not in data["entries"][0]["message"]
    assert walks == []  # the composed text was not walked again


def test_a_marked_text_with_other_fields_takes_the_full_path():
    registry = ToolRegistry()
    text = RedactedText("1 entry\n{}")
    for result in ({"content": [{"type": "text", "text": text, "note": "AKIAIOSFODNN7EXAMPLE"}]},
                   {"content": [{"type": "text", "text": text}],
                    "structuredContent": {"k": "AKIAIOSFODNN7EXAMPLE"}}):
        out = registry.finish(result)
        assert "AKIAIOSFODNN7EXAMPLE" not in orjson.dumps(out).decode()
    # A plain str that merely looks composed is redacted.
    plain = {"content": [{"type": "text", "text": "x\n{\"m\":\"AKIAIOSFODNN7EXAMPLE\"}"}]}
    assert "AKIAIOSFODNN7EXAMPLE" not in registry.finish(plain)["content"][0]["text"]


def test_a_reused_slot_is_never_served_stale():
    cache = ReadCache(2)
    a, b, c = b'{"m":"a"}', b'{"m":"b"}', b'{"m":"password=hunter2hunter2"}'
    assert cache.redacted(0, a) is a
    assert cache.redacted(1, b) is b
    redacted = cache.redacted(2, c)  # slot 0 again, new entry
    assert b"hunter2" not in redacted and redacted != a
    # Same seq, other bytes (a buffer cleared and restored): redacted again.
    other = b'{"m":"z"}'
    assert cache.redacted(2, other) is other


def test_noise_verdicts_are_kept_per_rule_set(app):
    app.store.add(CONSOLE, [{"level": "log", "message": "webpack compiled in 3 ms"},
                            {"level": "log", "message": "user clicked"}])
    s = session_for(app, "me")
    _, _, data = call(app, s, "observe", {"what": "logs"})
    assert data["noise_hidden"] == 1 and data["count"] == 1
    # Disabling the built-in changes the rule set: the verdict is recomputed.
    err, _, _ = call(app, s, "configure", {"what": "noise_rule", "noise_action": "remove",
                                          "rule_id": "builtin:hmr"})
    assert not err
    _, _, data = call(app, s, "observe", {"what": "logs", "after_cursor": 0})
    assert data["noise_hidden"] == 0 and data["count"] == 2
    # Another client, built-ins intact, still sees it hidden.
    _, _, other = call(app, session_for(app, "other"), "observe", {"what": "logs"})
    assert other["noise_hidden"] == 1


def test_a_transformed_read_is_not_marked_and_is_still_redacted(app):
    app.store.add(NETWORK_BODIES, [{"url": "http://x/a", "method": "GET", "status": 200,
                                    "response_body": '{"token":"s3cr3t-s3cr3t-s3cr3t","n":1}'}])
    s = session_for(app, "me")
    err, _, data = call(app, s, "observe", {"what": "network_bodies", "body_key": "token"})
    assert not err
    assert "s3cr3t" not in orjson.dumps(data).decode()

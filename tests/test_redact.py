"""Secret redaction (gasoline.core.redaction.redactor): patterns, JSON keys, idempotence, the result cap."""

from __future__ import annotations

import base64
import json
import string
import time

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gasoline.core.redaction.redactor import (
    Redactor,
    cap_text,
    redact_text,
    redact_value,
    secret_kinds,
)
from gasoline.core.redaction.keys import is_sensitive_key
from gasoline.core.redaction.shapes import is_card_number, luhn_valid

# Filler text that cannot spell any trigger word (no e, o, s, w, digits, capitals, _ or @).
SAFE_ALPHABET = "".join(c for c in string.ascii_lowercase if c not in "eosw") + " \n.,;:!?()-'\"/"
safe_text = st.text(alphabet=SAFE_ALPHABET, max_size=200)
# Secret parts use capitals and digits so they never occur in the filler by chance.
UPPER_DIGITS = string.ascii_uppercase + string.digits
ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"


def _luhn_complete(body: str) -> str:
    for d in "0123456789":
        if luhn_valid(body + d):
            return body + d
    raise AssertionError("unreachable")


def secret_value(min_size: int = 12) -> st.SearchStrategy[str]:
    return st.text(alphabet=UPPER_DIGITS, min_size=min_size, max_size=40).filter(
        lambda v: any(c.isdigit() for c in v) and any(c.isalpha() for c in v))


#: Secrets that are a fixed prefix and a run of one alphabet: kind -> (prefix, alphabet, sizes).
_PREFIXED = {
    "aws": ("AKIA", UPPER_DIGITS, 16, 16),
    "sk": ("sk-", ALNUM, 20, 48),
    "sk_live": ("sk_live_", ALNUM, 10, 30),
    "gcp": ("AIza", B64URL, 35, 35),
    "gitlab": ("glpat-", B64URL, 20, 30),
    "npm": ("npm_", ALNUM, 36, 36),
    "gocspx": ("GOCSPX-", B64URL, 28, 28),
    "gcp_oauth": ("ya29.", B64URL, 20, 60),
    "gh_pat": ("github_pat_", ALNUM + "_", 22, 60),
}


@st.composite
def planted(draw):
    """(text containing a secret, the secret part that must disappear)."""
    kind = draw(st.sampled_from([
        "aws", "jwt", "ghp", "gh_pat", "slack", "sk", "sk_live", "gcp", "pem", "card", "ssn",
        "bearer_header", "bearer", "basic", "api_key", "session", "password_json",
        "password_json_escaped", "cookie_header", "url_creds", "apikey_colon", "token_quoted",
        "gitlab", "npm", "sendgrid", "gocspx", "gcp_oauth", "azure_key",
    ]))
    v = draw(secret_value())
    if kind in _PREFIXED:
        prefix, alphabet, low, high = _PREFIXED[kind]
        s = prefix + draw(st.text(alphabet=alphabet, min_size=low, max_size=high))
        return s, s
    if kind == "jwt":
        parts = [draw(st.text(alphabet=B64URL, min_size=6, max_size=40)) for _ in range(3)]
        s = f"eyJ{parts[0]}.eyJ{parts[1]}.{parts[2]}"
        return s, s
    if kind == "ghp":
        prefix = draw(st.sampled_from(["ghp_", "gho_", "ghs_"]))
        s = prefix + draw(st.text(alphabet=ALNUM, min_size=36, max_size=40))
        return s, s
    if kind == "slack":
        s = draw(st.sampled_from(["xoxb-", "xoxp-", "xoxa-"])) + v
        return s, s
    if kind == "pem":
        body = base64.b64encode(draw(st.binary(min_size=20, max_size=80))).decode()
        label = draw(st.sampled_from(["", "RSA ", "EC ", "OPENSSH "]))
        s = f"-----BEGIN {label}PRIVATE KEY-----\n{body}\n-----END {label}PRIVATE KEY-----"
        return s, body
    if kind == "card":
        body = "4" + "".join(draw(st.lists(st.sampled_from("0123456789"), min_size=14, max_size=14)))
        number = _luhn_complete(body)
        sep = draw(st.sampled_from(["", " ", "-"]))
        s = sep.join(number[i:i + 4] for i in range(0, 16, 4))
        return s, s
    if kind == "ssn":
        area = draw(st.integers(1, 665).filter(lambda a: a != 666))
        s = f"{area:03d}-{draw(st.integers(1, 99)):02d}-{draw(st.integers(1, 9999)):04d}"
        return s, s
    if kind == "sendgrid":
        s = ("SG." + draw(st.text(alphabet=B64URL, min_size=22, max_size=22)) + "."
             + draw(st.text(alphabet=B64URL, min_size=43, max_size=43)))
        return s, s
    if kind == "azure_key":
        key = base64.b64encode(draw(st.binary(min_size=32, max_size=64))).decode()
        return f"DefaultEndpointsProtocol=https;AccountName=x;AccountKey={key};", key
    if kind == "bearer_header":
        return f"Authorization: Bearer {v}", v
    if kind == "bearer":
        return f"Bearer {v}.{v}", v
    if kind == "basic":
        user = draw(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=10))
        token = base64.b64encode(f"{user}:{v}".encode()).decode()
        return f"Basic {token}", token
    if kind == "api_key":
        return f"https://api.example.com/x?api_key={v}&page=2", v
    if kind == "session":
        return f"session={v}; Path=/", v
    if kind == "password_json":
        return json.dumps({"user": "bob", "password": v}), v
    if kind == "password_json_escaped":
        return json.dumps({"response_body": json.dumps({"Password": v})}), v
    if kind == "cookie_header":
        return f"Cookie: theme=dark; sid={v}", v
    if kind == "url_creds":
        return f"https://bob:{v}@db.example.com/", v
    if kind == "apikey_colon":
        return f"apikey: {v}", v
    return f"token = '{v}'", v


@given(safe_text, planted(), safe_text)
@settings(max_examples=400, deadline=None)
def test_planted_secrets_of_every_kind_are_removed(before, secret, after):
    text, must_vanish = secret
    out = redact_text(f"{before} {text} {after}")
    assert must_vanish not in out
    assert "[REDACTED:" in out


@given(safe_text)
@settings(max_examples=300, deadline=None)
def test_text_without_secrets_is_unchanged(text):
    assert redact_text(text) == text


@given(st.lists(st.fixed_dictionaries({
    "level": st.sampled_from(["error", "warn", "info"]),
    "message": safe_text,
    "url": st.sampled_from(["http://localhost:3000/app", "https://example.com/a/b?page=2"]),
    "ts": st.integers(1_600_000_000_000, 1_900_000_000_000),
    "count": st.integers(0, 10**9),
}), max_size=10))
def test_ordinary_log_json_is_unchanged(entries):
    text = json.dumps(entries)
    assert redact_text(text) == text
    assert redact_value(entries) == entries


@given(st.text(max_size=300))
@settings(max_examples=400, deadline=None)
def test_redaction_is_idempotent_on_any_text(text):
    once = redact_text(text)
    assert redact_text(once) == once


@given(safe_text, planted(), safe_text)
def test_redaction_is_idempotent_on_planted_secrets(before, secret, after):
    once = redact_text(f"{before} {secret[0]} {after}")
    assert redact_text(once) == once


def test_password_body_as_dict_and_as_json_string_is_redacted():
    body = {"password": "hunter2", "user": "bob"}
    entry = {"url": "https://x.test/login", "request_body": json.dumps(body), "parsed": body}
    out = redact_value(entry)
    assert "hunter2" not in json.dumps(out)
    assert json.loads(out["request_body"]) == {"password": "[REDACTED:password]", "user": "bob"}
    assert out["parsed"] == {"password": "[REDACTED:password]", "user": "bob"}
    assert entry["parsed"]["password"] == "hunter2", "the input is not modified"
    assert redact_text(json.dumps(entry)).count("hunter2") == 0


def test_authorization_bearer_header_is_redacted_in_text_dict_and_pair_list():
    token = "abc.DEF-123_456.xyz"
    assert token not in redact_text(f"Authorization: Bearer {token}\r\nAccept: */*")
    assert redact_value({"Authorization": f"Bearer {token}"}) == {
        "Authorization": "[REDACTED:authorization]"}
    pairs = [{"name": "authorization", "value": f"Bearer {token}"}, {"name": "accept", "value": "*/*"}]
    assert redact_value(pairs) == [
        {"name": "authorization", "value": "[REDACTED:authorization]"},
        {"name": "accept", "value": "*/*"},
    ]


def test_sensitive_keys_are_found_case_insensitively_at_any_depth():
    value = {"a": [{"b": {"Client_Secret": "s1", "refresh-token": "s2", "csrfToken": "s3"}}],
             "storage": {"localStorage": {"API_KEY": "s4", "theme": "dark"}},
             "headers": {"Set-Cookie": "sid=s5; HttpOnly", "Cookie": "s6=1"}}
    out = json.dumps(redact_value(value))
    for secret in ("s1", "s2", "s3", "s4", "s5", "s6"):
        assert f'"{secret}' not in out and f"={secret}" not in out
    assert '"theme": "dark"' in out


def test_non_secret_values_under_sensitive_keys_are_kept():
    assert redact_value({"password": None, "token": "", "session": False}) == {
        "password": None, "token": "", "session": False}


def test_sensitive_value_that_is_an_object_is_replaced_whole():
    assert redact_value({"credentials": {"user": "u", "pass": "p"}}) == {
        "credentials": "[REDACTED:secret]"}


def test_key_names_that_only_look_alike_are_not_sensitive():
    for key in ("max_tokens", "tokens", "author", "session_count", "keyboard", "primary_key"):
        assert not is_sensitive_key(key), key
    for key in ("password", "X-Api-Key", "Set-Cookie", "db_password", "accessToken"):
        assert is_sensitive_key(key), key


def test_json_string_value_is_only_rewritten_when_something_was_redacted():
    spaced = '{ "a" : 1 }'
    assert redact_value(spaced) == spaced


def test_deeply_nested_hostile_input_does_not_crash():
    value: object = "x"
    for _ in range(200):
        value = [value]
    out = redact_value(value)
    assert "[REDACTED:too_deep]" in json.dumps(out)


def test_only_luhn_valid_card_numbers_are_redacted():
    assert redact_text("card 4111 1111 1111 1111") == "card [REDACTED:card_number]"
    assert redact_text("card 4111 1111 1111 1112") == "card 4111 1111 1111 1112"
    assert is_card_number("378282246310005")  # Amex test number
    assert not is_card_number("1700000000000")  # a millisecond timestamp is not a card


def test_url_credentials_keep_the_user_and_host():
    assert redact_text("postgres://app:pw1234@db:5432/x") == \
        "postgres://app:[REDACTED:url_credentials]@db:5432/x"


def test_prose_after_bearer_and_basic_is_not_redacted():
    text = "The bearer of this note asked for basic information about cookies."
    assert redact_text(text) == text


def test_secret_kinds_lists_what_would_be_removed():
    assert sorted(secret_kinds("AKIAABCDEFGHIJKLMNOP and 123-45-6789")) == ["aws_access_key", "ssn"]
    assert secret_kinds("[REDACTED:jwt] only") == []


def _fastest(function, argument, rounds: int = 5) -> float:
    """The best of C{rounds} timings of C{function(argument)}: the least disturbed by other load."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        function(argument)
        best = min(best, time.perf_counter() - start)
    return best


def test_redaction_time_grows_linearly_with_the_input_even_for_hostile_repetition():
    """Redaction is linear in its input: eight times the text costs about eight times as long, never
    the sixty-four times a quadratic pattern would (the bound leaves room for a loaded machine).
    Absolute speed is bench/ material, not a unit test's."""
    def entries(n):
        return orjson.dumps([{"ts": 1_700_000_000_000 + i, "url": f"http://localhost:3000/api/items/{i}",
                              "message": f"TypeError: x is undefined at line {i}", "level": "error"}
                             for i in range(n)]).decode()

    shapes = {
        "log entries": entries,
        "password=": lambda n: "password=" * (n * 10),
        "long run": lambda n: "a" * (n * 100) + "!",
        "digits and spaces": lambda n: "1 " * (n * 25),
        '"token":"': lambda n: '"token":"' * (n * 5),
        "Bearer": lambda n: "Bearer " * (n * 10),
        "card digits": lambda n: "4" * (n * 50),
        "command flags": lambda n: "mysql -u a:b -p x " * (n * 3),
        "input tags": lambda n: '<input type="password" value=' * (n * 3),
        "long flags": lambda n: "--password " * (n * 5),
    }
    for name, make in shapes.items():
        small, large = make(250), make(2000)
        ratio = _fastest(redact_text, large) / max(_fastest(redact_text, small), 1e-5)
        assert ratio < 32, f"{name}: 8x the input took {ratio:.1f}x as long (quadratic would be 64x)"


def test_a_redactor_instance_behaves_like_the_module_functions():
    r = Redactor()
    assert r.redact_text("api_key=ZZZ999") == redact_text("api_key=ZZZ999") == "api_key=[REDACTED:api_key]"


# -- cap_text ---------------------------------------------------------------------------------


def test_cap_leaves_short_text_alone():
    assert cap_text("hello", limit=10) == "hello"


def test_cap_cuts_at_a_line_boundary_and_says_so():
    text = "\n".join(f"line {i:05d}" for i in range(20_000))
    out = cap_text(text, limit=100_000)
    assert len(out.encode()) <= 100_000
    body, note = out.rsplit("\n[truncated:", 1)
    assert text.startswith(body) and text[len(body)] == "\n"
    assert f"of {len(text.encode())} bytes" in note


@given(st.text(min_size=0, max_size=3000), st.integers(min_value=200, max_value=4000))
def test_cap_never_exceeds_the_limit_and_keeps_a_prefix(text, limit):
    out = cap_text(text, limit=limit)
    if len(text.encode()) <= limit:
        assert out == text
    else:
        assert len(out.encode()) <= limit
        head, note = out.rsplit("\n[truncated:", 1)
        assert text.startswith(head)
        assert "bytes" in note


def test_lone_surrogates_and_odd_unicode_do_not_break_redaction():
    text = "x \ud800 api_key=ABC123 \udfff é token: 99ZZ"
    assert redact_text(text) == "x \ud800 api_key=[REDACTED:api_key] \udfff é token: [REDACTED:token]"
    assert redact_value({"b": '[{"token": "\ud800"}]'}) == {"b": '[{"token": "[REDACTED:token]"}]'}
    assert cap_text("\ud800" * 100, limit=50).endswith("see the rest]")


def test_tokens_ending_in_a_dash_are_still_redacted_whole():
    text = f"a SG.{'a' * 21}-.{'b' * 42}- b GOCSPX-{'c' * 27}- c AIza{'d' * 34}- d"
    assert redact_text(text) == ("a [REDACTED:sendgrid_key] b [REDACTED:google_client_secret] "
                                 "c [REDACTED:gcp_api_key] d")


@pytest.mark.parametrize("pair", [
    {"name": "Authorization", "value": "Basic dXNlcjpwYXNz"},
    {"value": "abc123def", "name": "X-Auth-Token"},
    {"name": "Cookie", "value": "sid=1; theme=dark"},
])
def test_header_pairs_in_json_text_are_redacted_in_either_key_order(pair):
    """Header lists arrive as {name, value} pairs; the name marks the value as secret."""
    text = orjson.dumps({"headers": [pair, {"name": "Accept", "value": "text/html"}]}).decode()
    out = redact_text(text)
    assert pair["value"] not in out and "[REDACTED:" in out
    assert '"value":"text/html"' in out  # a harmless header is left alone


# -- credentials in console text: a password field's HTML, command lines, URLs with a user ----------

CREDENTIAL_TEXT = [
    ('<input type="password" name="pw" value="{}">', "password"),
    ("<input value='{}' class=x TYPE=PASSWORD>", "password"),
    ("<input type=password value={} />", "password"),
    ("mysql -h db --password {} -u root", "password"),
    ("mysql --password={}", "password"),
    ('app --db-password "{}" --verbose', "password"),
    ("deploy --api-key {} --prod", "api_key"),
    ("mysql -uroot -p{} shop", "password"),
    ("mysqldump -h db -u root -p{} app > app.sql", "password"),
    ("sshpass -p {} ssh deploy@host", "password"),
    ("docker login -u me -p {} registry.test", "password"),
    ("redis-cli -h cache -a {} ping", "password"),
    ("sqlcmd -S srv -U sa -P {}", "password"),
    ("curl -sS -u admin:{} https://api.test/", "password"),
    ('curl --user "admin:{}" https://api.test/', "password"),
    ("http -a bob:{} api.test/me", "password"),
    ("redis://:{}@cache:6379/0", "url_credentials"),
    ("amqp://guest:{}@mq.internal:5672/", "url_credentials"),
]


@pytest.mark.parametrize("line,kind", CREDENTIAL_TEXT)
def test_credentials_in_console_text_are_redacted(line, kind):
    secret = "Zq8xV3kT7mW2pL9r"
    out = redact_text(line.format(secret))
    assert secret not in out and f"[REDACTED:{kind}]" in out, out
    assert redact_text(out) == out  # idempotent


BENIGN_COMMAND_TEXT = [
    "ssh -p 22 deploy@host", "docker run -p 8080:80 web", "mysql -p mydb", "mysql -u root -p",
    "mkdir -p /tmp/build", "cp -a src dst", "tar -xpf a.tar", "use --token to authenticate",
    "--password-file /etc/pw", "run --password $DB_PASSWORD", "set --token <token>",
    'git commit -m "fix password reset"', '<input type="text" value="hello world">',
    '<input type="password" value="">', "curl -u $USER:$TOKEN https://api.test/",
    "curl -u admin https://api.test/", "npm:lodash@4.17.21", "http://example.com/a/user@host",
    "mongo --port 27017 -p", "ls -a -p /var", "pip download -p 3 pkg",
]


@pytest.mark.parametrize("line", BENIGN_COMMAND_TEXT)
def test_command_lines_and_html_without_a_credential_are_unchanged(line):
    assert redact_text(line) == line


def test_a_secret_inside_a_span_the_command_rule_declined_is_still_found():
    """`twine -p <token>`: twine is not a command whose -p is a password, but the token's own
    shape is found (a declined rule does not hide what follows it)."""
    token = "ghp_" + "a1B2" * 9
    assert redact_text(f"twine upload -p {token}") == "twine upload -p [REDACTED:github_token]"
    assert redact_text(f'<input type="text" value="{token}">') == \
        '<input type="text" value="[REDACTED:github_token]">'


def test_the_extension_redacts_the_same_credential_text_before_it_leaves_the_browser():
    """The extension's text rules (extension/lib/redact.js, run by Node) find the same credentials
    in console text, so they are not journaled in clear either, and leave the same lines alone."""
    import subprocess
    from pathlib import Path

    from support import require_tool

    node = require_tool("node", why="runs the extension's lib/redact.js")
    lib = Path(__file__).resolve().parent.parent / "extension" / "lib" / "redact.js"
    secret = "Zq8xV3kT7mW2pL9r"
    lines = [line.format(secret) for line, _ in CREDENTIAL_TEXT] + BENIGN_COMMAND_TEXT
    script = (f"import {{ redactText }} from {json.dumps(lib.as_uri())};\n"
              "const lines = JSON.parse(process.argv[1]);\n"
              "process.stdout.write(JSON.stringify(lines.map((l) => redactText(l))));\n")
    done = subprocess.run([node, "--input-type=module", "-e", script, json.dumps(lines)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    theirs = json.loads(done.stdout)
    n = len(CREDENTIAL_TEXT)
    leaks = [out for out in theirs[:n] if secret in out or "[REDACTED:" not in out]
    assert leaks == []
    changed = [(line, out) for line, out in zip(BENIGN_COMMAND_TEXT, theirs[n:]) if out != line]
    assert changed == []


@pytest.mark.parametrize("text, token", [
    # Hypothesis found it: the assignment rule read the token as the start of a key name ending in
    # "SESSION-ID" and redacted only the value after it.
    (" glpat-0000000000SESSION-ID ::", "glpat-0000000000"),
    ("glpat-abcdefghij0123456789_api_key=v", "glpat-abcdefghij0123456789"),
    ("xoxb-1234567890-abcdefSECRET_TOKEN: v", "xoxb-1234567890"),
])
def test_a_token_inside_a_key_name_is_redacted_whole(text, token):
    out = redact_text(text)
    assert token not in out and "[REDACTED:" in out

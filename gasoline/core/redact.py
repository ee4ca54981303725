"""
Secret redaction for every text an agent receives, and the result-size cap.

Two layers, both pure:

 - L{Redactor.redact_value} walks a JSON-like structure (dicts, lists, strings, numbers) and
   replaces the value under any sensitive key name (C{password}, C{token}, C{authorization},
   C{cookie}, ...; case-insensitive, at any depth), including header lists of C{{name, value}}
   pairs and strings that themselves parse as JSON (a network body C{'{"password":"x"}'}). Every
   other string goes through L{Redactor.redact_text}.
 - L{Redactor.redact_text} finds secret-shaped text (cloud keys, bearer and basic credentials,
   JWTs, GitHub/Slack/C{sk-} tokens, PEM private keys, Luhn-valid card numbers, US SSNs,
   C{api_key=} / C{session=} style assignments, C{"password": "..."} inside JSON text; also
   GitLab, npm, SendGrid and Google OAuth client-secret tokens) in one
   combined regular-expression pass and replaces each with C{[REDACTED:<kind>]}.

Both are idempotent: a redaction marker is never redacted again. L{cap_text} cuts an over-long
result at a line (or word) boundary and says so; redact first, then cap, so the cut can never leave
half a secret unredacted.

The patterns are fixed, written here, and compiled once with Python's C{re}; user-supplied
patterns never reach this module (noise rules use RE2, see L{gasoline.core.noise}).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from typing import Any, Callable
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import orjson
import re2

MARKER_PREFIX = "[REDACTED:"

# -- sensitive key names ----------------------------------------------------------------------

#: Key names (normalised: lower case, C{-} and C{.} turned into C{_}) whose values are secret.
SENSITIVE_KEYS = frozenset(
    {
        "password", "passwd", "pwd", "pass", "passphrase", "secret", "token", "access_token",
        "refresh_token", "id_token", "auth_token", "authorization", "proxy_authorization",
        "cookie", "set_cookie", "api_key", "apikey", "x_api_key", "client_secret",
        "private_key", "privatekey", "session", "sessionid", "session_id", "sessid",
        "jsessionid", "phpsessid", "connect_sid", "csrf_token", "xsrf_token", "x_csrf_token",
        "x_xsrf_token", "credentials", "credential", "aws_secret_access_key", "secret_key",
        "access_key_secret", "account_key", "sig", "signature", "otp", "pin", "cvv", "cvc",
        "ssn", "card_number", "cardnumber",
        # Header names beyond Authorization/Cookie that carry credentials.
        "authentication", "x_auth_token", "x_access_token", "x_session_token", "x_csrftoken",
        "x_amz_security_token", "x_goog_api_key", "x_api_token", "api_token", "x_vault_token",
        "x_hub_signature", "x_hub_signature_256", "x_amz_signature", "x_amz_credential",
        "x_goog_signature", "x_goog_credential", "proxy_authenticate", "passcode", "pincode",
        "one_time_code", "totp", "mfa_code", "verification_code", "security_code", "assertion",
        "client_assertion", "id_token_hint", "code_verifier", "saml_response", "samlresponse",
    }
)
#: Query-string and form parameter names whose values are secret in a URL or form body only
#: (as JSON keys they are too common to redact: an error C{code}, a map C{key}).
SENSITIVE_PARAMS = frozenset({"code", "key", "auth", "hash", "ticket", "jwt", "sid",
                              "access_key", "password_reset", "reset_token", "magic_link"})
#: An input's type, name, id, autocomplete, label or selector saying its value is secret.
_SECRET_FIELD = re.compile(
    r"(?i)pass(?:word|wd|code|phrase)?|pwd|secret|token|otp|one[-_ ]?time|totp|mfa|2fa"
    r"|(?<![a-z])pin(?![a-z])|pin[-_]?code|cvv|cvc|csc|card[-_]?number|cc[-_]?num|ssn|api[-_]?key"
)
#: Fields of an action or input record that describe the field (not its value).
_FIELD_DESCRIBERS = ("input_type", "inputType", "input_name", "input_id", "type", "name", "id",
                     "autocomplete", "label",
                     "placeholder", "selector", "field", "fieldName", "field_name", "aria_label",
                     "ariaLabel", "element", "target")
#: Keys under which a value is the text typed into a field.
_TYPED_VALUES = ("value", "text", "typed", "input_value", "inputValue", "new_value", "newValue")
#: Endings that make a key sensitive too (C{csrfToken}, C{db_password}, C{stripe_secret}).
SENSITIVE_SUFFIXES = (
    "password", "passwd", "secret", "token", "apikey", "api_key", "private_key", "sessionid",
    "session_id", "cookie", "credentials",
)

_KEY_LABELS = (
    ("authorization", "authorization"),
    ("cookie", "cookie"),
    ("pass", "password"),
    ("pwd", "password"),
    ("secret", "secret"),
    ("token", "token"),
    ("key", "api_key"),
    ("sess", "session"),
    ("sid", "session"),
)


def _normalise_key(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(".", "_")


def is_sensitive_key(name: object) -> bool:
    """True when a value stored under C{name} must not reach an agent."""
    if not isinstance(name, str) or not name or len(name) > 200:
        return False
    key = _normalise_key(name)
    return key in SENSITIVE_KEYS or key.endswith(SENSITIVE_SUFFIXES)


def is_sensitive_param(name: object) -> bool:
    """True when a URL query or form parameter C{name} carries a secret."""
    return is_sensitive_key(name) or (
        isinstance(name, str) and _normalise_key(name) in SENSITIVE_PARAMS)


def describes_secret_field(value: object) -> bool:
    """Does C{value} (an input's type, name, selector...) say the field holds a secret?"""
    return isinstance(value, str) and len(value) <= 1000 and _SECRET_FIELD.search(value) is not None


# The one rule for "this input holds a secret", the same as the extension's (lib/redact.js
# isSensitiveField; tests/test_redact_fields.py runs both on one table): its type is password, its
# autocomplete names a password, a one-time code or card data (cc-*), or its name / id says so.
_SECRET_AUTOCOMPLETE = re.compile(
    r"(?:^|\s)(?:current-password|new-password|one-time-code|cc-[a-z-]+|transaction-amount)"
    r"(?:\s|$)", re.I)
_SECRET_FIELD_NAME = re.compile(
    r"pass(?:word|wd|code|phrase)?|pwd|secret|token|otp|one.?time|pin\b|cvv|cvc|csc"
    r"|card.?(?:number|num|no)|cc.?(?:num|number|exp|csc)|ssn|security.?code", re.I)
#: What an action record says about its field: C{input_type}, C{input_name}, C{input_id},
#: C{autocomplete} (user actions from the extension and the agent's own, alike).
FIELD_NATURE = ("input_type", "input_name", "input_id", "autocomplete")


def is_sensitive_field(type: Any = "", name: Any = "", id: Any = "",
                       autocomplete: Any = "") -> bool:
    """The extension's C{isSensitiveField}, in Python: does this input hold a secret?"""
    if str(type or "").lower() == "password":
        return True
    if _SECRET_AUTOCOMPLETE.search(str(autocomplete or "")[:1000]):
        return True
    return bool(_SECRET_FIELD_NAME.search(str(name or "")[:1000])
                or _SECRET_FIELD_NAME.search(str(id or "")[:1000]))


def action_is_secret(item: dict[str, Any]) -> bool:
    """Whether an action record's typed value must not be kept: its field's nature says so
    (L{is_sensitive_field} over C{input_type}, C{input_name}, C{input_id}, C{autocomplete}), or,
    for records without it, any describing field (type, name, selector, label...) does."""
    if any(describes_secret_field(item.get(k)) for k in _FIELD_DESCRIBERS):
        return True
    return ("input_type" in item or "autocomplete" in item or "input_name" in item
            or "input_id" in item) and \
        is_sensitive_field(item.get("input_type"), item.get("input_name"), item.get("input_id"),
                           item.get("autocomplete"))


def redact_typed_values(items: list[Any]) -> None:
    """Replace, in place, the typed value of every action whose field holds a secret
    (L{action_is_secret}: a password, OTP, PIN, card or token input) with C{[REDACTED:input]},
    and a key typed into it: such values are never stored, so no reader, journal or generator
    can leak them. The same rule decides for the user's actions (at ingest) and the agent's own
    (L{gasoline.tools._actions.record}). Cheap: only dicts with a typed value are looked at."""
    for item in items:
        if not isinstance(item, dict) or not (any(k in item for k in _TYPED_VALUES)
                                              or "key" in item):
            continue
        if not action_is_secret(item):
            continue
        for k in _TYPED_VALUES:
            v = item.get(k)
            if isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != "" \
                    and not (isinstance(v, str) and is_marker(v)):
                item[k] = marker("input")
        key = item.get("key")
        if item.get("type") == "keypress" and isinstance(key, str) and len(key) == 1:
            item["key"] = marker("input")


def _key_label(name: str) -> str:
    key = _normalise_key(name)
    for needle, label in _KEY_LABELS:
        if needle in key:
            return label
    return "secret"


def marker(kind: str) -> str:
    return f"{MARKER_PREFIX}{kind}]"


def is_marker(value: str) -> bool:
    return value.startswith(MARKER_PREFIX) and value.endswith("]") and "\n" not in value


# -- validators used by some patterns ---------------------------------------------------------


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card_brand_ok(digits: str) -> bool:
    """Issuer prefix and length agree (so a 13-digit millisecond timestamp is not a card)."""
    n = len(digits)
    if digits[0] == "4":
        return n in (13, 16, 19)
    two, four = int(digits[:2]), int(digits[:4])
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return n == 16
    if two in (34, 37):
        return n == 15
    if digits.startswith("6011") or two == 65 or 644 <= int(digits[:3]) <= 649:
        return 16 <= n <= 19
    if 3528 <= four <= 3589:
        return 16 <= n <= 19
    if two in (36, 38, 39) or 300 <= int(digits[:3]) <= 305:
        return 14 <= n <= 19
    if two == 62:
        return 16 <= n <= 19
    return False


def is_card_number(text: str) -> bool:
    digits = "".join(ch for ch in text if ch.isdecimal())
    return 13 <= len(digits) <= 19 and _card_brand_ok(digits) and luhn_valid(digits)


def _looks_like_basic_credentials(token: str) -> bool:
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return ":" in text and text.isprintable()


def _looks_like_token(token: str) -> bool:
    """A bearer token mixes digits, symbols or capitals into letters; prose after 'bearer' does not."""
    if len(token) < 12:
        return False
    if any(not ch.isalpha() for ch in token):
        return True
    return sum(ch.isupper() for ch in token[1:]) >= 2 and any(ch.islower() for ch in token)


# -- the patterns -----------------------------------------------------------------------------

# Key names recognised in text assignments (``api_key=...``, ``"token": "..."``).
_TEXT_KEY = (
    r"(?:[A-Za-z0-9_.-]*?(?:password|passwd|secret|token|api[_-]?key|apikey|private[_-]?key"
    r"|session[_-]?id|sessid|credentials|auth[_-]?key|access[_-]?key|signing[_-]?key"
    r"|encryption[_-]?key|master[_-]?key|client[_-]?key)"
    # A secret word may be followed by what kind of value it is (AWS_SECRET_KEY, SECRET_KEY_BASE,
    # JWT_SECRET_B64, DB_PASSWORD_2): detect-secrets' keyword rule allows any suffix; these are
    # the usual ones.
    r"(?:[_.-]?(?:key|keys|value|base|b64|base64|hex|hash|str|string|txt|text|data|id|\d{1,2}))"
    r"{0,2}|passwd|pwd|session|jsessionid|phpsessid|connect\.sid"
    r"|access[_-]?key[_-]?secret|aws[_-]?secret[_-]?access[_-]?key|sig)"
)
_WHOLE_LINE_KEY = r"(?:proxy-authorization|authorization|set-cookie|cookie)"
_NOT_MARKER = r"(?!\[REDACTED:)"

# (kind, pattern, handler). Order matters where two could start at the same position. Matching
# runs on the UTF-8 bytes of the text (see ``_scan``); a handler gets the pattern's own match and
# returns the replacement bytes for the matched span.
Handler = Callable[["re.Match[bytes]"], bytes]


def _m(kind: str) -> bytes:
    return marker(kind).encode("ascii")


def _ascii(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def _whole(kind: str) -> Handler:
    return lambda m: _m(kind)


def _checked(kind: str, check: Callable[[str], bool]) -> Handler:
    return lambda m: _m(kind) if check(_ascii(m.group(0))) else m.group(0)


def _replace_group(m: "re.Match[bytes]", group: int, kind: str) -> bytes:
    start = m.start()
    text = m.group(0)
    return text[: m.start(group) - start] + _m(kind) + text[m.end(group) - start:]


def _keep_prefix(kind: str, check: Callable[[str], bool] | None = None) -> Handler:
    """Replace group 2 (the secret after a key, a scheme word or a user name)."""

    def handle(m: "re.Match[bytes]") -> bytes:
        value = _ascii(m.group(2))
        if is_marker(value) or (check is not None and not check(value)):
            return m.group(0)
        return _replace_group(m, 2, kind)

    return handle


def _keyed(m: "re.Match[bytes]") -> bytes:
    """Group 2 is a key name, group 3 its value."""
    value = _ascii(m.group(3)).strip()
    if not value or is_marker(value):
        return m.group(0)
    return _replace_group(m, 3, _key_label(_ascii(m.group(2))))


_TRAILING = re.compile(rb"[,;.:!?)\]}]+$")


def _keyed_trimmed(m: "re.Match[bytes]") -> bytes:
    """L{_keyed}, leaving closing punctuation after the value (C{(token=abc).}) in place."""
    value = m.group(3)
    trail = _TRAILING.search(value)
    end = m.end(3) - (len(value) - trail.start()) if trail is not None and trail.start() > 0 \
        else m.end(3)
    return _replace_span(m, m.start(3), end, _key_label(_ascii(m.group(2))))


def _replace_span(m: "re.Match[bytes]", begin: int, end: int, kind: str) -> bytes:
    start = m.start()
    text = m.group(0)
    value = _ascii(text[begin - start:end - start]).strip()
    if not value or is_marker(value):
        return text
    return text[: begin - start] + _m(kind) + text[end - start:]


def _keyed_value_first(m: "re.Match[bytes]") -> bytes:
    """Group 2 is a value, group 3 the key name it belongs to."""
    value = _ascii(m.group(2)).strip()
    if not value or is_marker(value):
        return m.group(0)
    return _replace_group(m, 2, _key_label(_ascii(m.group(3))))


#: C{(kind, pattern)} of the vendor token rule (see C{_RULES}); kinds are unique.
_VENDOR_TOKENS: tuple[tuple[str, str], ...] = (
    ("webhook_secret", r"\bwhsec_[A-Za-z0-9+/=_-]{20,255}"),
    ("huggingface_token", r"\b(?:hf|api_org)_[A-Za-z0-9]{30,64}\b"),
    ("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}\b"),
    ("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"),
    ("brevo_key", r"\bxkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}\b"),
    ("sentry_token", r"\bsntry[us]_[A-Za-z0-9+/=_]{40,400}"),
    ("rubygems_token", r"\brubygems_[a-f0-9]{48}\b"),
    ("planetscale_token", r"\bpscale_(?:tkn|pw|oauth)_[A-Za-z0-9_=.-]{32,64}"),
    ("pulumi_token", r"\bpul-[a-f0-9]{40}\b"),
    ("prefect_token", r"\bpnu_[A-Za-z0-9]{36}\b"),
    ("linear_key", r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b"),
    ("databricks_token", r"\bdapi[a-f0-9]{32}(?:-\d)?\b"),
    ("vault_token", r"\bhv[sb]\.[A-Za-z0-9_-]{90,300}"),
    ("square_token", r"\b(?:EAAA|sq0atp-|sq0csp-)[A-Za-z0-9_-]{22,60}"),
    ("facebook_token", r"\bEAA[MC][A-Za-z0-9]{100,400}"),
    ("artifactory_key", r"\bAKCp[A-Za-z0-9]{69}\b|\bcmVmd[A-Za-z0-9]{59}\b"),
    ("notion_token", r"\bntn_[0-9]{11}[A-Za-z0-9]{35}\b|\bsecret_[A-Za-z0-9]{43}\b"),
    ("perplexity_key", r"\bpplx-[A-Za-z0-9]{48}\b"),
    ("readme_key", r"\brdme_[a-z0-9]{70}\b"),
    ("grafana_token", r"\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}\b|\bglc_[A-Za-z0-9+/]{32,400}"
     r"={0,3}|\beyJrIjoi[A-Za-z0-9]{70,400}={0,3}"),
    ("age_secret_key", r"\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}\b"),
    ("doppler_token", r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}\b"),
    ("dynatrace_token", r"\bdt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}\b"),
    ("easypost_key", r"\bEZ[AT]K[A-Za-z0-9]{54}\b"),
    ("flutterwave_key", r"\bFLWSECK(?:_TEST)?-[A-Za-z0-9]{12,32}(?:-X)?"),
    ("duffel_token", r"\bduffel_(?:test|live)_[A-Za-z0-9_=-]{43}"),
    ("frameio_token", r"\bfio-u-[A-Za-z0-9_=-]{64}"),
    ("postman_key", r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b"),
    ("onepassword_token", r"\bops_eyJ[A-Za-z0-9+/]{250,2000}={0,3}"
     r"|\bA3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})(?:-[A-Z0-9]{5}){3}\b"),
    ("heroku_key", r"\bHRKU-AA[0-9A-Za-z_-]{58}"),
    ("atlassian_token", r"\bATATT3[A-Za-z0-9_=-]{100,300}"),
    ("clickhouse_key", r"\b4b1d[A-Za-z0-9]{38}\b"),
    ("twilio_key", r"\bSK[0-9a-fA-F]{32}\b"),
    ("mailgun_key", r"\bkey-[a-f0-9]{32}\b"),
    ("mailchimp_key", r"\b[0-9a-f]{32}-us\d{1,2}\b"),
    ("telegram_token", r"\b\d{8,10}:AA[0-9A-Za-z_-]{33}(?![0-9A-Za-z_-])"),
    ("discord_token", r"\b[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}\b"),
    ("azure_client_secret", r"\b[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}"),
    ("pypi_token", r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,1000}"),
    ("slack_app_token", r"\bxapp-\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]+"),
    ("alibaba_key", r"\bLTAI[A-Za-z0-9]{20}\b"),
    ("aws_bedrock_key", r"\bABSK[A-Za-z0-9+/]{109,269}={0,2}"),
    ("supabase_key", r"\bsbp_[a-f0-9]{40}\b|\bsb_secret_[A-Za-z0-9_-]{20,64}"),
    ("cloudflare_key", r"\bv1\.0-[a-f0-9]{24}-[a-f0-9]{146}\b"),
    ("openshift_token", r"\bsha256~[A-Za-z0-9_-]{43}"),
    ("terraform_token", r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}"),
    ("infracost_key", r"\bico-[A-Za-z0-9]{32}\b"),
    ("scalingo_token", r"\btk-us-[A-Za-z0-9_-]{48}"),
    ("settlemint_token", r"\bsm_[aps]at_[A-Za-z0-9]{16}\b"),
    ("maxmind_key", r"\b[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk\b"),
    ("flyio_token", r"\bfo1_[A-Za-z0-9_-]{43}|\bfm[12][ar]?_[A-Za-z0-9+/]{100,2000}={0,3}"),
    ("google_refresh_token", r"\b1//0[0-9A-Za-z_-]{40,400}"),
    ("firebase_key", r"\bAAAA[A-Za-z0-9_-]{7}:[A-Za-z0-9_-]{140}"),
    ("mapbox_token", r"\bsk\.eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}"),
    ("newrelic_key", r"\bNR(?:AK|II)-[A-Za-z0-9-]{27,32}"),
    ("webhook_url", r"https://[a-z0-9]+\.webhook\.office\.com/webhookb2/[^\s\"'<>]{20,}"
     r"|https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]{20,}"),
)


def _vendor(m: "re.Match[bytes]") -> bytes:
    return _m(m.lastgroup or "token")


_KEY_ALTS = "(?i:" + _TEXT_KEY + "|" + _WHOLE_LINE_KEY + ")"

_RULES: list[tuple[str, str, Handler]] = [
    (
        "private_key",
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        # The body never holds two dashes in a row, so it stops at the next "-----": linear.
        r"(?:(?:[A-Za-z0-9+/=\s\\:,.]|-[A-Za-z0-9+/=\s\\:,.]){0,8000}?-----END [A-Z0-9 ]{0,40}PRIVATE KEY"
        r"(?: BLOCK)?-----|[A-Za-z0-9+/=\s\\]*)",
        _whole("private_key"),
    ),
    # Header lists as JSON text, {"name":"Authorization","value":"..."} in either key order: the
    # name is not a sensitive key itself, so the pairing is what marks the value as secret.
    (
        "json_header_pair",
        r"(\"name\"\s*:\s*\")(" + _KEY_ALTS + r")\"\s*,\s*\"value\"\s*:\s*\""
        r"((?:[^\"\\\n]|\\.){1,4096})\"",
        _keyed,
    ),
    (
        "json_header_pair_reversed",
        r"(\"value\"\s*:\s*\")((?:[^\"\\\n]|\\.){1,4096})\"\s*,\s*\"name\"\s*:\s*\""
        r"(" + _KEY_ALTS + r")\"",
        _keyed_value_first,
    ),
    # The same pairs inside a JSON string or a string literal of generated code (\"name\").
    (
        "json_header_pair_escaped",
        r"(\\\"name\\\"\s*:\s*\\\")(" + _KEY_ALTS + r")\\\"\s*,\s*\\\"value\\\"\s*:\s*\\\""
        r"(.{1,4096}?)\\\"",
        _keyed,
    ),
    (
        "json_header_pair_escaped_reversed",
        r"(\\\"value\\\"\s*:\s*\\\")(.{1,4096}?)\\\"\s*,\s*\\\"name\\\"\s*:\s*\\\""
        r"(" + _KEY_ALTS + r")\\\"",
        _keyed_value_first,
    ),
    # "password": "x" in JSON text, plain or with escaped quotes (a body inside a JSON string).
    (
        "json_key",
        r"(\")(" + _KEY_ALTS + r")\"\s*:\s*\"((?:[^\"\\\n]|\\.){1,4096})\"",
        _keyed,
    ),
    (
        "json_key_escaped",
        r"(\\\")(" + _KEY_ALTS + r")\\\"\s*:\s*\\\"(.{1,4096}?)\\\"",
        _keyed,
    ),
    (
        "json_key_number",
        r"(\\?\")((?i:" + _TEXT_KEY + r"))\\?\"\s*:\s*(-?\d[\d.eE+-]{0,40})",
        _keyed,
    ),
    # Authorization / Cookie headers: the whole value to the end of the line or quote.
    (
        "header",
        r"\b()((?i:" + _WHOLE_LINE_KEY + r"))\s*[:=]\s*" + _NOT_MARKER
        + r"([^\s\"'\\][^\r\n\"'\\]{0,8191})",
        _keyed,
    ),
    (
        "assignment_quoted",
        r"\b()((?i:" + _TEXT_KEY + r"))\s*[:=]\s*[\"']" + _NOT_MARKER
        + r"([^\"'\r\n]{1,4096})[\"']",
        _keyed,
    ),
    (
        "assignment",
        # The value runs to the next space or quote (a Django key holds "#", "(", ")", "$"...);
        # closing punctuation at its end is kept outside the marker (_keyed_trimmed).
        r"\b()((?i:" + _TEXT_KEY + r"))\s*[:=]\s*" + _NOT_MARKER
        + r"([^\s\"'&<>\\`]{1,4096})",
        _keyed_trimmed,
    ),
    (
        "url_credentials",
        r"(\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s/:@\"'<>]{1,256}:)([^\s/@\"'<>]{1,256})(?=@)",
        _keep_prefix("url_credentials"),
    ),
    (
        "bearer",
        r"(\b(?i:bearer)\s+)([A-Za-z0-9._~+/=-]{8,4096})",
        _keep_prefix("bearer", _looks_like_token),
    ),
    (
        "basic",
        r"(\b(?i:basic)\s+)([A-Za-z0-9+/]{8,4096}={0,2})",
        _keep_prefix("basic_auth", _looks_like_basic_credentials),
    ),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*", _whole("jwt")),
    (
        "aws_access_key",
        r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA|A3T[A-Z0-9])[A-Z0-9]{16}\b",
        _whole("aws_access_key"),
    ),
    ("github_token", r"\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{36,255}\b", _whole("github_token")),
    ("github_pat", r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b", _whole("github_token")),
    ("slack_token", r"\bxox[abposre]-[A-Za-z0-9-]{10,255}", _whole("slack_token")),
    (
        "gitlab_token",
        r"\bgl(?:pat|dt|ft|imt|agent|ffct|oas|soat|rt|ptt|cbt)-[A-Za-z0-9_.-]{20,300}"
        r"|\bGR1348941[A-Za-z0-9_-]{20,}",
        _whole("gitlab_token"),
    ),
    ("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b", _whole("npm_token")),
    (
        "sendgrid_key",
        r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])",
        _whole("sendgrid_key"),
    ),
    (
        "google_client_secret",
        r"\bGOCSPX-[A-Za-z0-9_-]{28}(?![A-Za-z0-9_-])",
        _whole("google_client_secret"),
    ),
    (
        "slack_webhook",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_+-]{20,}",
        _whole("slack_webhook"),
    ),
    ("stripe_key", r"\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,255}\b", _whole("sk_key")),
    # Vendor token shapes, as gitleaks' rule set (config/gitleaks.toml) and detect-secrets'
    # plugins describe them (facts about the formats; the patterns are written here). One rule
    # (one group in the prefilter: a smaller program than one group each); the named
    # alternative that matched is the marker's kind.
    ("vendor_token", "|".join(f"(?P<{kind}>{pattern})" for kind, pattern in _VENDOR_TOKENS),
     _vendor),

    ("sk_key", r"\bsk-(?:[A-Za-z0-9]+-){0,3}[A-Za-z0-9_-]{20,255}", _whole("sk_key")),
    ("gcp_api_key", r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])", _whole("gcp_api_key")),
    ("gcp_oauth", r"\bya29\.[0-9A-Za-z_-]{20,}", _whole("gcp_oauth_token")),
    (
        "azure_key",
        r"(\b(?i:AccountKey|SharedAccessKey)=)([A-Za-z0-9+/]{20,}={0,2})",
        _keep_prefix("azure_key"),
    ),
    ("azure_sas", r"([?&]sig=)([A-Za-z0-9%+/=]{20,})", _keep_prefix("azure_sas")),
    # \b(?<!-) rather than (?<![\w-]): RE2 keeps the \b, so a long digit run is one candidate.
    ("card", r"\b(?<!-)\d(?:[ -]?\d){12,18}(?![\w-])", _checked("card_number", is_card_number)),
    (
        "ssn",
        r"\b(?<!-)(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-])",
        _whole("ssn"),
    ),
]


# The scan has two stages. RE2 (a DFA: linear time, one pass for all rules) finds the next position
# where any rule *could* start, using each pattern with its look-around assertions dropped (so it
# matches a superset) and its quantifiers made lazy (see _lazy). Python's C{re} then tries the
# exact rules, in order, at that position only. Text without candidates costs one RE2 pass.
_LOOKAHEAD_NEG = re.compile(r"\(\?<?!(?:[^()\\]|\\.|\([^()]*\))*\)")
_LOOKAHEAD_POS = re.compile(r"\(\?=((?:[^()\\]|\\.)*)\)")


_QUANT_BRACES = re.compile(r"\{(\d+)(?:(,)(\d*))?\}")


def _lazy(pattern: str) -> str:
    """Make every quantifier lazy (and cap repetition counts RE2 refuses, > 1000).

    Only the start of a candidate matters to the scan; lazy quantifiers let RE2 stop at the
    shortest candidate instead of running to the end of, say, a 100 kB run of digits, which would
    make re-scanning after a rejected candidate quadratic.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            for literal in ("^", "]"):
                if i < n and pattern[i] == literal:
                    out.append(literal)
                    i += 1
            continue
        braces = _QUANT_BRACES.match(pattern, i) if c == "{" else None
        if c in "*+" or (c == "?" and out and out[-1] != "(") or braces:
            if braces:
                low, comma, high = braces.groups()
                if comma and high and int(high) > 1000:
                    out.append("{%s,}" % low)
                else:
                    out.append(braces.group(0))
                i = braces.end()
            else:
                out.append(c)
                i += 1
            if i < n and pattern[i] == "?":
                i += 1
            out.append("?")
            continue
        out.append(c)
        i += 1
    return "".join(out)


_CAPTURING_GROUP = re.compile(r"(?<!\\)\((?!\?)|(?<!\\)\(\?P<[a-z0-9_]+>")


def _superset(pattern: str) -> str:
    pattern = _LOOKAHEAD_NEG.sub("", pattern)
    pattern = _LOOKAHEAD_POS.sub(r"\1", pattern)
    pattern = _CAPTURING_GROUP.sub("(?:", pattern)
    return _lazy(pattern)


def _compile_prefilter(groups: bool = True) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 64 << 20
    # One capturing group per rule (and none inside: see _superset) tells which rule's superset
    # matched first at the candidate's start; rules before it cannot match there.
    group = "({})" if groups else "(?:{})"
    return re2.compile("|".join(group.format(_superset(p)) for _, p, _ in _RULES), options)


_PREFILTER = _compile_prefilter()
#: The same candidates without the groups, for a yes/no answer (L{Redactor.unchanged}): RE2 then
#: reports one span instead of one per rule, about half the cost of a search on a short text.
_PREFILTER_ANY = _compile_prefilter(groups=False)
_EXACT = [(re.compile(p.encode("ascii")), handler) for _, p, handler in _RULES]


#: An escape sequence of code or JSON text (C{\\n}, C{\\t}, ...): its letter is not a word
#: character as far as the text it escapes is concerned.
_ESCAPE = re.compile(rb"\\[nrtfvb0]")


def _escapes_as_spaces(data: bytes) -> bytes:
    """C{data} with each escape letter turned into a space (same length, same offsets), so a
    secret right after an escaped newline in generated code (C{"\\nghp_..."}) starts a word."""
    return _ESCAPE.sub(b"\\ ", data)


def _scan(data: bytes) -> bytes | None:
    """The redacted bytes, or None when nothing changed."""
    pieces: list[bytes] = []
    last = pos = 0
    changed = False
    search = _PREFILTER.search
    original = data
    if b"\\" in data:
        data = _escapes_as_spaces(data)
    while True:
        candidate = search(data, pos)
        if candidate is None:
            break
        start = candidate.start()
        first = (candidate.lastindex or 1) - 1
        for exact, handler in _EXACT[first:]:
            m = exact.match(data, start)
            if m is not None:
                replacement = handler(m)
                if replacement != m.group(0):
                    pieces.append(original[last:start])
                    pieces.append(replacement)
                    last = m.end()
                    changed = True
                pos = max(m.end(), start + 1)
                break
        else:
            pos = start + 1
    if not changed:
        return None
    pieces.append(original[last:])
    return b"".join(pieces)


class Redactor:
    """Redacts secrets from text and JSON-like values. Stateless; one instance may be shared."""

    #: Strings longer than this are not parsed as JSON when walking values (still pattern-redacted).
    max_json_string = 1_000_000
    #: Nesting deeper than this is replaced rather than walked (hostile input).
    max_depth = 64

    def redact_text(self, text: str) -> str:
        if not text:
            return text
        data = text.encode("utf-8", errors="surrogatepass")
        out = _scan(data)
        if out is None:
            return text
        return out.decode("utf-8", errors="surrogatepass")

    def redact_value(self, value: Any) -> Any:
        """A new structure with sensitive values replaced; the input is not modified."""
        return self._walk(value, 0)

    # -- the fast path: proving there is nothing to redact --------------------------------------

    def unchanged(self, value: Any, texts: tuple[str, ...] = ()) -> bool:
        """Whether L{redact_value} would give C{value} back unchanged (an equal structure), and
        L{redact_text} every one of C{texts}: C{True} is a proof, C{False} only "maybe not" (the
        caller then takes the full path).

        Cheaper than redacting: one walk that builds nothing, and one scan for the prefilter's
        candidates (where L{redact_text} starts) over every string at once. The walk gives up
        (C{False}) wherever the full path would look closer: a sensitive key, a name/value pair
        or a typed field that may hold a secret, a C{cookies} list, a string that may be JSON
        (it starts with a brace or a bracket), a query string or a form body (it holds C{=}),
        a tuple or anything else not JSON (NaN included), nesting deeper than L{max_depth}.
        Every other string is only scanned by the full path, and left as it is when no rule
        can even start in it. The strings are
        scanned joined by newlines: no rule uses C{^} or C{$}, and a newline is a non-word
        character like the ends of a text, so a candidate in any one string is a candidate in
        the joined text (the converse need not hold: a false alarm only costs the full path).
        """
        strings = list(texts)
        if not self._plain(value, 0, strings):
            return False
        if not strings:
            return True
        data = "\n".join(strings).encode("utf-8", errors="surrogatepass")
        if b"\\" in data:
            data = _escapes_as_spaces(data)
        return _PREFILTER_ANY.search(data) is None

    def _plain(self, value: Any, depth: int, strings: list[str]) -> bool:
        """Collect C{value}'s strings into C{strings}; C{False} where L{_walk} would do more
        than scan them (see L{unchanged})."""
        if isinstance(value, str):
            if "=" in value or value.lstrip()[:1] in ("{", "["):
                return False
            strings.append(value)
            return True
        if depth > self.max_depth:
            return False
        if isinstance(value, dict):
            if "value" in value and is_sensitive_param(value.get("name")):
                return False
            if any(k in value for k in _TYPED_VALUES) and any(
                    describes_secret_field(value.get(k)) for k in _FIELD_DESCRIBERS):
                return False
            for key, item in value.items():
                if isinstance(key, str) and (is_sensitive_key(key) or key == "cookies"):
                    return False
                if not self._plain(item, depth + 1, strings):
                    return False
            return True
        if isinstance(value, list):
            for item in value:
                if not self._plain(item, depth + 1, strings):
                    return False
            return True
        if value is None or isinstance(value, (bool, int)):
            return True
        if isinstance(value, float):
            return math.isfinite(value)  # JSON has no NaN: leave such values to the full path
        return False  # a tuple (the full path makes it a list), or not JSON at all

    def _walk(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self._redact_string(value, depth)
        if depth > self.max_depth:
            return marker("too_deep")
        if isinstance(value, dict):
            return self._walk_dict(value, depth)
        if isinstance(value, (list, tuple)):
            return [self._walk(v, depth + 1) for v in value]
        return value

    def _walk_dict(self, value: dict[Any, Any], depth: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        # Header, cookie and parameter lists as name/value pairs: {"name": "Authorization",
        # "value": "..."} (HAR, CDP); query/form parameters use the wider parameter list.
        pair_name = value.get("name") if "value" in value else None
        pair_sensitive = is_sensitive_param(pair_name)
        # A typed value of a field that says it is secret (a password, OTP or PIN input):
        # {"type": "input", "selector": "#password", "value": "..."}.
        typed_secret = any(k in value for k in _TYPED_VALUES) and any(
            describes_secret_field(value.get(k)) for k in _FIELD_DESCRIBERS)
        for key, item in value.items():
            if isinstance(key, str) and is_sensitive_key(key):
                out[key] = self._secret(key, item)
            elif pair_sensitive and key == "value":
                out[key] = self._secret(str(pair_name), item)
            elif typed_secret and key in _TYPED_VALUES and isinstance(item, (str, int, float)):
                out[key] = self._secret("password", item)
            elif key == "cookies" and isinstance(item, list):
                out[key] = [self._cookie(c, depth + 2) for c in item]
            else:
                out[key] = self._walk(item, depth + 1)
        return out

    def _cookie(self, cookie: Any, depth: int) -> Any:
        """Every cookie value is a credential as far as an agent is concerned."""
        if isinstance(cookie, dict) and "value" in cookie:
            walked = self._walk(cookie, depth)
            walked["value"] = self._secret("cookie", cookie["value"])
            return walked
        return self._walk(cookie, depth)

    def _secret(self, key: str, item: Any) -> Any:
        if item is None or isinstance(item, bool) or item == "" or item == [] or item == {}:
            return item
        if isinstance(item, str) and is_marker(item):
            return item
        return marker(_key_label(key))

    def _redact_string(self, value: str, depth: int) -> str:
        """Redact one string on its decoded values: JSON inside it is parsed and walked, a URL's
        query string or a form body is split into parameters (each decoded, then redacted by
        name and scanned), and whatever text remains is scanned by L{redact_text}."""
        if depth > self.max_depth:
            return self.redact_text(value)
        stripped = value.lstrip()
        if stripped[:1] in ("{", "[") and len(value) <= self.max_json_string:
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, (dict, list)):
                redacted = self._walk(parsed, depth + 1)
                if redacted != parsed:
                    return orjson.dumps(redacted).decode("utf-8")
                return value
        if "=" in value and len(value) <= self.max_json_string:
            # Every whitespace-free run holding "=" may be a URL with a query string or a form
            # body (also inside prose: "GET /api?token=... failed").
            def query(m: "re.Match[str]") -> str:
                redacted = self._redact_query(m.group(0), depth)
                return m.group(0) if redacted is None else redacted

            value = _QUERY_TOKEN.sub(query, value)
        return self.redact_text(value)

    def _redact_query(self, value: str, depth: int) -> str | None:
        """C{value} with its query string / form parameters redacted, or C{None} when it is not
        a URL with a query or a form body (or nothing in it changed)."""
        m = _QUERY_CARRIER.fullmatch(value)
        if m is None:
            return None
        prefix, query, fragment = m.group(1) or "", m.group(2), m.group(3) or ""
        if not prefix:
            # Only a URL has a fragment: in a bare form body or an assignment a "#" is part of
            # the value (a form body would have it percent-encoded; SECRET_KEY=django-...#...).
            query, fragment = query + fragment, ""
        if "=" not in query:
            return None
        changed = False
        parts: list[str] = []
        for piece in query.split("&"):
            name, eq, raw = piece.partition("=")
            if not eq:
                parts.append(piece)
                continue
            decoded_name = unquote_plus(name)
            decoded = unquote_plus(raw)
            if is_sensitive_param(decoded_name) and decoded and not is_marker(decoded):
                parts.append(f"{name}={marker(_key_label(decoded_name))}")
                changed = True
                continue
            if "+" in raw:
                # "+" is a space in a form body but a base64 character in a key that was never
                # form-encoded (AccountKey=ab+cd/...): a secret found with "+" kept is taken so.
                literal = unquote(raw)
                redacted = self._redact_string(literal, depth + 1)
                if redacted != literal:
                    parts.append(f"{name}={quote(redacted, safe='[]:')}")
                    changed = True
                    continue
            redacted = self._redact_string(decoded, depth + 1) if decoded else decoded
            if redacted != decoded:
                parts.append(f"{name}={quote_plus(redacted, safe='[]:')}")
                changed = True
            else:
                parts.append(piece)
        if not changed:
            return None
        return prefix + "&".join(parts) + fragment


#: A URL with a query string (C{scheme://...?q#f} or C{/path?q}) or a bare form body
#: (C{a=1&b=2}, no whitespace).
_QUERY_CARRIER = re.compile(
    r"((?:[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s?#]*|/[^\s?#]*|[^\s?#=&]*)\?)?"
    r"([^\s#?]*=[^\s#]*)(#\S*)?", re.S)

_QUERY_TOKEN = re.compile(r"[^\s\"'<>`=]*=[^\s\"'<>`]*")

_DEFAULT = Redactor()
redact_text = _DEFAULT.redact_text
redact_value = _DEFAULT.redact_value


_CUT_TAIL = re.compile(r"[^\s\"'<>`]*…$")


def drop_cut_tail(text: str) -> str:
    """C{text}, which was cut and ends in C{…}, without its last word (unless it is a marker):
    a secret cut in half has lost the shape the redactor knows, so what is left of it goes too."""
    m = _CUT_TAIL.search(text)
    if m is None or m.start() == m.end() - 1 or is_marker(text[m.start():m.end() - 1]):
        return text
    return text[:m.start()] + "…"


def clip(value: Any, limit: int) -> str:
    """C{str(value)} cut to C{limit} characters, redacted before the cut when it is cut: a cut
    made before the exit's own redaction could otherwise split a secret and let its first part
    through (the exit then sees a shape it does not know). Text within the limit is returned as
    it is (the exit redacts it)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return redact_value(text[:limit + _CLIP_CONTEXT])[:limit]


#: How much past a cut L{clip} redacts: a secret that starts before the cut ends within it.
_CLIP_CONTEXT = 8192


def redact_entries(entries: Any) -> list[Any]:
    """Each entry redacted (L{Redactor.redact_value}; an entry proven clean is kept as it is).

    For whatever derives text from entries before the result's own redaction (templates,
    clusters, summaries, cut samples): redacting the values first means no cut or template can
    break a secret's shape and let part of it through."""
    unchanged, redact = _DEFAULT.unchanged, _DEFAULT.redact_value
    return [e if unchanged(e) else redact(e) for e in entries]

# -- result cap -------------------------------------------------------------------------------

DEFAULT_LIMIT = 100_000


def cap_text(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """
    Return C{text} unchanged when its UTF-8 size is at most C{limit} bytes; otherwise cut it at the
    last line break (or space) before the limit and append an explicit note, the whole staying
    within C{limit} bytes.
    """
    encoded = text.encode("utf-8", errors="surrogatepass")
    total = len(encoded)
    if total <= limit:
        return text
    note_template = (
        "\n[truncated: showing {shown} of {total} bytes; "
        "narrow the request (limit, filters, cursors) to see the rest]"
    )
    budget = max(0, limit - len(note_template.format(shown=total, total=total)))
    # Decode the prefix dropping a partial multi-byte character at the end.
    head = encoded[:budget].decode("utf-8", errors="ignore")  # drops a cut character
    window = max(0, len(head) - 4096)
    cut = head.rfind("\n", window)
    if cut <= 0:
        cut = head.rfind(" ", window)
    if cut > 0:
        head = head[:cut]
    shown = len(head.encode("utf-8", errors="surrogatepass"))
    return head + note_template.format(shown=shown, total=total)


_MARKER_RE = re.compile(r"\[REDACTED:([a-z0-9_]+)\]")


def secret_kinds(text: str) -> list[str]:
    """The kinds of secret C{redact_text} would remove from C{text} (one per occurrence)."""
    if not text:
        return []
    before = _MARKER_RE.findall(text)
    after = _MARKER_RE.findall(redact_text(text))
    for kind in before:
        if kind in after:
            after.remove(kind)
    return after

"""
The secret shapes the text scan knows: L{RULES}, one C{(kind, pattern, handler)} per shape.

Cloud keys (AWS, GCP, Azure), bearer and basic credentials, JWTs, GitHub / GitLab / Slack / npm /
SendGrid / Stripe / C{sk-} tokens, Google OAuth secrets, PEM private keys, Luhn-valid card numbers,
US SSNs, URL passwords, C{Authorization:} / C{Cookie:} header lines, C{api_key=} / C{session=}
style assignments, C{"password": "..."} and C{{"name": ..., "value": ...}} header pairs inside JSON
text, and some sixty vendor token shapes (L{_VENDOR_TOKENS}). A handler gets its pattern's match
(on the text's UTF-8 bytes) and returns the replacement: a marker for the whole match or for the
secret part of it, or the match itself when a check (L{is_card_number}, a basic credential that
decodes to C{user:password}, a bearer token that is not prose) says it is no secret.

This module is data and the checks the data needs; L{gasoline.core.redaction.scan} compiles the
table and runs it over text. The patterns are fixed and written here, for Python's C{re} (the
exact match; the scan derives its RE2 prefilter from them); user-supplied patterns never reach
this module (noise rules use RE2, see L{gasoline.core.clients.noise}).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Callable

from gasoline.core.redaction.keys import is_marker, key_label, marker

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

#: What a rule does with its pattern's match: matching runs on the UTF-8 bytes of the text (see
#: L{gasoline.core.redaction.scan}); a handler gets the pattern's own match and returns the
#: replacement bytes for the matched span, or C{None} when the rule does not apply there after
#: all (its context is missing): then the next rules are tried at the same place, so a secret
#: inside the span is still found.
Handler = Callable[["re.Match[bytes]"], "bytes | None"]


def _m(kind: str) -> bytes:
    return marker(kind).encode("ascii")


def _ascii(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def _whole(kind: str) -> Handler:
    handler: Handler = lambda m: _m(kind)  # noqa: E731
    _WHOLE_HANDLERS.add(handler)
    return handler


#: The handlers of the rules that redact a token whole (its shape alone says it is a secret).
_WHOLE_HANDLERS: set[Handler] = set()


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


def _keyed(m: "re.Match[bytes]") -> bytes | None:
    """Group 2 is a key name, group 3 its value."""
    if _holds_token(m.group(2)):
        return None
    value = _ascii(m.group(3)).strip()
    if not value or is_marker(value):
        return m.group(0)
    return _replace_group(m, 3, key_label(_ascii(m.group(2))))


_TRAILING = re.compile(rb"[,;.:!?)\]}]+$")


def _keyed_trimmed(m: "re.Match[bytes]") -> bytes | None:
    """L{_keyed}, leaving closing punctuation after the value (C{(token=abc).}) in place."""
    if _holds_token(m.group(2)):
        return None
    value = m.group(3)
    trail = _TRAILING.search(value)
    end = m.end(3) - (len(value) - trail.start()) if trail is not None and trail.start() > 0 \
        else m.end(3)
    return _replace_span(m, m.start(3), end, key_label(_ascii(m.group(2))))


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
    return _replace_group(m, 2, key_label(_ascii(m.group(3))))


#: The commands whose flag (the rule's group 1) takes a password, by the flag's letters.
_MYSQL = {b"-p": re.compile(rb"\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck"
                            rb"|mariadb|mariadb-dump|mariadb-admin)\b")}
_PASSWORD_NEXT = {
    b"-p": re.compile(rb"\b(?:sshpass|(?:docker|podman|buildah|nerdctl)\s+login"
                      rb"|helm\s+registry\s+login|mongo|mongosh|mongodump|mongorestore"
                      rb"|mongoexport|mongoimport)\b"),
    b"-P": re.compile(rb"\bsqlcmd\b"),
    b"-a": re.compile(rb"\bredis-cli\b"),
}
_CURL = re.compile(rb"\bcurl\b")
_HTTPIE = re.compile(rb"(?:^|\s)https?(?![\w:/.-])")  # the command, not a URL's scheme
_USER_PASSWORD = {b"-u": _CURL, b"-U": _CURL, b"--user": _CURL, b"--proxy-user": _CURL,
                  b"-a": _HTTPIE, b"--auth": _HTTPIE}
_FLAG = re.compile(rb"-{1,2}[A-Za-z-]+")
#: A word each command pattern needs (a cheap test before the pattern).
_NEEDLES: dict["re.Pattern[bytes]", tuple[bytes, ...]] = {
    _MYSQL[b"-p"]: (b"mysql", b"mariadb"),
    _PASSWORD_NEXT[b"-p"]: (b"sshpass", b"login", b"mongo"),
    _PASSWORD_NEXT[b"-P"]: (b"sqlcmd",),
    _PASSWORD_NEXT[b"-a"]: (b"redis-cli",),
    _CURL: (b"curl",),
    _HTTPIE: (b"http",),
}
#: How far back on its line a flag's command may be.
_COMMAND_REACH = 300


def _after_command(commands: dict[bytes, "re.Pattern[bytes]"], kind: str) -> Handler:
    """Replace group 2 when the flag in group 1 follows, on the same line, a command it takes a
    password for (a separator C{|}, C{;}, C{&} ends a command)."""

    def handle(m: "re.Match[bytes]") -> bytes | None:
        flag = _FLAG.search(m.group(1))
        command = commands.get(flag.group(0)) if flag is not None else None
        if command is None:
            return None
        data, start = m.string, m.start()
        reach = max(0, start - _COMMAND_REACH)
        line_start = max(data.rfind(b"\n", reach, start), data.rfind(b"\r", reach, start),
                         reach - 1) + 1
        before = data[line_start:start]
        for separator in (b"|", b";", b"&"):
            before = before.rpartition(separator)[2]
        if not any(word in before for word in _NEEDLES[command]) \
                or command.search(before) is None:  # (a substring test first: cheap)
            return None
        if is_marker(_ascii(m.group(2))):
            return m.group(0)
        return _replace_group(m, 2, kind)

    return handle


def _flag_value(m: "re.Match[bytes]") -> bytes:
    """Group 1 is C{--<name> }, group 2 its value: the marker is named after the flag."""
    if is_marker(_ascii(m.group(2))):
        return m.group(0)
    name = _ascii(m.group(1)).strip(" \t\r\n\"'").lstrip("-")
    return _replace_group(m, 2, key_label(name))


# (quotes may be escaped: the tag inside a string literal of generated code, \"password\")
_INPUT_TYPE_PASSWORD = re.compile(rb"""\stype\s*=\s*\\?["']?password(?![\w-])""", re.I)
_INPUT_VALUE = re.compile(rb'(\svalue\s*=\s*)(?:\\?"((?:[^"\\]|\\[^"])*)\\?"'
                          rb"|\\?'((?:[^'\\]|\\[^'])*)\\?'"
                          rb'|([^\s"\'>\\]+))', re.I)


def _password_input(m: "re.Match[bytes]") -> bytes | None:
    """An C{<input ...>} tag's text: its C{value} attribute replaced when its type is password."""
    tag = m.group(0)
    if _INPUT_TYPE_PASSWORD.search(tag) is None:
        return None  # another input: its attributes are scanned like any text

    def value(v: "re.Match[bytes]") -> bytes:
        for group in (2, 3, 4):
            if v.group(group) is not None:
                if not v.group(group) or is_marker(_ascii(v.group(group))):
                    return v.group(0)
                start, end = v.span(group)
                whole = v.group(0)
                return whole[:start - v.start()] + _m("password") + whole[end - v.start():]
        return v.group(0)

    return _INPUT_VALUE.sub(value, tag)


#: C{(kind, pattern)} of the vendor token rule (see C{RULES}); kinds are unique.
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

#: C{(kind, pattern, handler)}, one per secret shape. Order matters where two could start at the
#: same position: the first whose pattern matches there wins.
RULES: list[tuple[str, str, Handler]] = [
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
        r"(\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s/:@\"'<>]{0,256}:)([^\s/@\"'<>]{1,256})(?=@)",
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
    # (Last: a candidate only these rules find tries only the rules after it.)
    # Command lines in console text: a password given to a command. Only where the flag means a
    # password: `mysql -p mydb` (a space) prompts for one and names a database, `ssh -p 22` is a
    # port; a value that is a variable ($PASSWORD) or a placeholder (<password>) is kept.
    (
        "cli_password_flag",
        # --password X, --db-password X, --token X, --api-key X (the = form is an assignment)
        r"(--(?i:[a-z0-9]+-)*(?i:password|passwd|pass|pwd|passphrase|secret|token|api-?key"
        r"|auth-?token|access-?token|client-?secret)\s+[\"']?)" + _NOT_MARKER
        + r"([^\s\"'$<>{}\[\]`-][^\s\"'`]{3,4095})",
        _flag_value,
    ),
    # The flags below are only passwords after their command, earlier on the same line (the
    # handler looks back): the pattern starts at the flag, so the scan's prefilter stays small.
    (
        "cli_mysql_p",
        # mysql -pSECRET (no space: the password), also mysqldump, mysqladmin, mariadb, ...
        r"(\s-p)" + _NOT_MARKER + r"([^\s\"'$<>`-][^\s\"'`]{0,4095})",
        _after_command(_MYSQL, "password"),
    ),
    (
        "cli_dash_p",
        # tools whose -p (sqlcmd: -P, redis-cli: -a) takes the password as its next word
        r"(\s-[pPa]\s+[\"']?)" + _NOT_MARKER + r"([^\s\"'$<>`-][^\s\"'`]{0,4095})",
        _after_command(_PASSWORD_NEXT, "password"),
    ),
    (
        "cli_user_password",
        # curl -u user:pass, --user, --proxy-user, -U; httpie's -a/--auth user:pass
        r"(\s(?:-u|-U|--user|--proxy-user|-a|--auth)(?:\s+|=)[\"']?[^\s:\"'$]{0,256}:)"
        + _NOT_MARKER + r"([^\s\"'$`][^\s\"'`]{0,4095})",
        _after_command(_USER_PASSWORD, "password"),
    ),
    # A password field's HTML in console text (a page logging outerHTML, a framework warning):
    # the value of an <input> whose type is password.
    (
        "password_input_html",
        r"<(?i:input)\s[^<>]{0,4096}",
        _password_input,
    ),
]


#: Longest key name looked at for a token inside it (a key pattern's prefix is unbounded).
_KEY_TOKEN_SCAN = 1024
_TOKEN_IN_KEY: "re.Pattern[str] | None" = None


def _holds_token(key: bytes) -> bool:
    """Does a key name (C{glpat-...SESSION-ID} in C{glpat-...SESSION-ID := x}) hold a token that a
    whole-token rule redacts? Then the assignment rule steps aside (its handler answers None) and
    the token's rule, tried next at the same place, takes the text: otherwise the token would be
    kept as the key's name and only the value after it redacted."""
    global _TOKEN_IN_KEY
    if _TOKEN_IN_KEY is None:
        _TOKEN_IN_KEY = re.compile("|".join(
            f"(?:{pattern})" for _kind, pattern, handler in RULES if handler in _WHOLE_HANDLERS))
    return _TOKEN_IN_KEY.search(_ascii(key[:_KEY_TOKEN_SCAN])) is not None

"""
A corpus of secret shapes for the leak tests, written from the formats well-kept
scanners document (gitleaks' config/gitleaks.toml rules and detect-secrets' plugins: prefixes,
alphabets and lengths, as facts) and independently of Gasoline's own patterns.

Every shape makes, from a seeded random generator, C{Secret(name, text, secret)}: C{text} is a
realistic line (a log message, a header, a body) holding the secret, C{secret} the part of it
that must never reach an agent (a vendor's fixed prefix is not part of it: it says what the
secret is, not what it is). The bodies are random, so nothing here is a real credential.
"""

from __future__ import annotations

import base64
import json
import random
import string
from typing import Callable, NamedTuple
from urllib.parse import quote


class Secret(NamedTuple):
    name: str
    text: str
    secret: str


UPPER = string.ascii_uppercase
LOWER = string.ascii_lowercase
DIGITS = string.digits
ALNUM = UPPER + LOWER + DIGITS
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "_-"


def pick(rng: random.Random, alphabet: str, n: int) -> str:
    """C{n} characters of C{alphabet}, with at least one digit and one letter when it has both
    (so no body is a dictionary word or a plain number)."""
    while True:
        out = "".join(rng.choice(alphabet) for _ in range(n))
        if n < 8 or not (set(alphabet) & set(DIGITS) and set(alphabet) - set(DIGITS)):
            return out
        if any(c.isdigit() for c in out) and any(c.isalpha() for c in out):
            return out


def luhn_card(rng: random.Random) -> str:
    digits = [4] + [rng.randrange(10) for _ in range(14)]
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return "".join(map(str, digits + [(10 - total % 10) % 10]))


Maker = Callable[[random.Random], Secret]
SHAPES: dict[str, Maker] = {}


def shape(name: str) -> Callable[[Maker], Maker]:
    def register(make: Maker) -> Maker:
        SHAPES[name] = make
        return make
    return register


def simple(name: str, prefix: str, alphabet: str, n: int, line: str = "{} was rejected",
           suffix: str = "") -> None:
    """A vendor token: a fixed prefix and C{n} random characters."""
    def make(rng: random.Random) -> Secret:
        body = pick(rng, alphabet, n)
        return Secret(name, line.format(prefix + body + suffix), body)
    SHAPES[name] = make


simple("aws_access_key_id", "AKIA", UPPER + DIGITS, 16, "using access key {} for s3")
simple("github_pat_classic", "ghp_", ALNUM, 36, "git push failed with token {}")
simple("github_oauth", "gho_", ALNUM, 36, "oauth token {} expired")
simple("github_fine_grained", "github_pat_", ALNUM + "_", 82, "fine grained {} used")
simple("gitlab_pat", "glpat-", URLSAFE, 20, "gitlab said 401 for {}")
simple("gitlab_runner", "glrt-", URLSAFE, 20, "runner registered with {}")
simple("anthropic_key", "sk-ant-api03-", URLSAFE, 93, "anthropic client init: {}", "AA")
simple("openai_key", "sk-proj-", URLSAFE, 74, "OPENAI call with {} failed")
simple("stripe_secret", "sk_live_", ALNUM, 24, "stripe: Invalid API Key provided: {}")
simple("stripe_restricted", "rk_live_", ALNUM, 24, "restricted key {} lacks scope")
simple("stripe_webhook_secret", "whsec_", ALNUM, 32, "webhook signature check with {} failed")
simple("google_api_key", "AIza", URLSAFE, 35, "maps loaded with key={} ok")
simple("google_oauth_token", "ya29.", URLSAFE, 60, "gapi token {} refreshed")
simple("google_client_secret", "GOCSPX-", URLSAFE, 28, "oauth client secret {}")
simple("npm_token", "npm_", ALNUM, 36, "npm publish: //registry/:_authToken {}")
simple("huggingface_token", "hf_", UPPER + LOWER, 34, "hub download with {}")
simple("digitalocean_pat", "dop_v1_", HEX, 64, "doctl auth {}")
simple("shopify_token", "shpat_", HEX, 32, "shopify admin api {}")
simple("databricks_token", "dapi", HEX, 32, "databricks host auth {}")
simple("vault_token", "hvs.", URLSAFE, 95, "vault login {}")
simple("pypi_token", "pypi-AgEIcHlwaS5vcmc", URLSAFE, 70, "twine upload -p {}")
simple("twilio_api_key", "SK", HEX, 32, "twilio key sid {} used")
simple("mailgun_key", "key-", HEX, 32, "mailgun send with {}")
simple("mailchimp_key", "", HEX, 32, "mailchimp api {} down", "-us12")
simple("linear_key", "lin_api_", ALNUM, 40, "linear sync {}")
simple("doppler_token", "dp.pt.", ALNUM, 43, "doppler secrets download {}")
simple("sentry_user_token", "sntryu_", HEX, 64, "sentry-cli auth {}")
simple("planetscale_password", "pscale_pw_", URLSAFE, 43, "mysql connect pscale {}")
simple("heroku_key", "HRKU-AA", URLSAFE, 58, "heroku api {}")
simple("sendinblue_key", "xkeysib-", HEX, 64, "brevo send {}", "-" + "aB3dE5fG7hJ9kL1m")
simple("age_secret_key", "AGE-SECRET-KEY-1", "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58, "age key {}")
simple("rubygems_token", "rubygems_", HEX, 48, "gem push {}")
simple("prefect_token", "pnu_", ALNUM, 36, "prefect cloud login {}")
simple("supabase_token", "sbp_", HEX, 40, "supabase link {}")
simple("square_token", "EAAA", URLSAFE, 60, "square payments {}")
simple("grafana_cloud", "glc_", ALNUM, 40, "grafana push {}")


@shape("slack_bot_token")
def _slack(rng: random.Random) -> Secret:
    body = f"{pick(rng, DIGITS, 13)}-{pick(rng, DIGITS, 13)}-{pick(rng, ALNUM, 24)}"
    return Secret("slack_bot_token", f"slack api error for xoxb-{body}: invalid_auth", body)


@shape("slack_webhook")
def _slack_hook(rng: random.Random) -> Secret:
    body = f"T{pick(rng, UPPER + DIGITS, 8)}/B{pick(rng, UPPER + DIGITS, 8)}/{pick(rng, ALNUM, 24)}"
    return Secret("slack_webhook", f"POST https://hooks.slack.com/services/{body} -> 404", body)


@shape("jwt")
def _jwt(rng: random.Random) -> Secret:
    head = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    claims = json.dumps({"sub": pick(rng, ALNUM, 12), "iat": rng.randrange(10**9, 2 * 10**9)})
    payload = base64.urlsafe_b64encode(claims.encode()).decode().rstrip("=")
    sig = pick(rng, URLSAFE, 43)
    token = f"{head}.{payload}.{sig}"
    return Secret("jwt", f"session restored from {token}", payload[8:] + "." + sig)


@shape("bearer_header")
def _bearer(rng: random.Random) -> Secret:
    body = pick(rng, ALNUM, 40)
    return Secret("bearer_header", f"Authorization: Bearer {body}", body)


@shape("basic_header")
def _basic(rng: random.Random) -> Secret:
    cred = base64.b64encode(f"admin:{pick(rng, ALNUM, 14)}".encode()).decode()
    return Secret("basic_header", f"proxy sent Authorization: Basic {cred} upstream", cred)


@shape("private_key_pem")
def _pem(rng: random.Random) -> Secret:
    body = "\n".join(pick(rng, B64, 64) for _ in range(4))
    return Secret("private_key_pem", "-----BEGIN RSA PRIVATE KEY-----\n" + body
                  + "\n-----END RSA PRIVATE KEY-----", body.split("\n")[1])


@shape("database_url")
def _db(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 18)
    return Secret("database_url", f"could not connect to postgres://admin:{pw}@db.internal:5432/app", pw)


@shape("json_password")
def _json_pw(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 16)
    return Secret("json_password", json.dumps({"user": "bob", "password": pw}), pw)


@shape("urlencoded_json_password")
def _urlenc(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 16)
    data = quote(json.dumps({"password": pw}, separators=(",", ":")), safe="")
    return Secret("urlencoded_json_password", f"POST /login?data={data} failed with 500", pw)


@shape("query_access_token")
def _query(rng: random.Random) -> Secret:
    tok = pick(rng, ALNUM, 32)
    return Secret("query_access_token", f"GET https://api.test/v1/me?access_token={tok}&page=2 401", tok)


@shape("aws_secret_env")
def _aws_secret(rng: random.Random) -> Secret:
    key = pick(rng, B64, 40)
    return Secret("aws_secret_env", f"AWS_SECRET_KEY={key} loaded from .env", key)


@shape("aws_secret_access_key")
def _aws_secret2(rng: random.Random) -> Secret:
    key = pick(rng, B64, 40)
    return Secret("aws_secret_access_key", f"aws_secret_access_key = {key}", key)


@shape("django_secret_key")
def _django(rng: random.Random) -> Secret:
    key = "django-insecure-" + pick(rng, LOWER + DIGITS + "#$()!^*@+=", 50)
    return Secret("django_secret_key", f"SECRET_KEY={key} in settings", key[16:])


@shape("api_key_assignment")
def _api_key(rng: random.Random) -> Secret:
    key = pick(rng, ALNUM, 32)
    return Secret("api_key_assignment", f"config: api_key={key}; retries=3", key)


@shape("password_prose")
def _pw_prose(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 14)
    return Secret("password_prose", f"login attempt password: {pw} rejected", pw)


@shape("cookie_header")
def _cookie(rng: random.Random) -> Secret:
    sid = pick(rng, ALNUM, 32)
    return Secret("cookie_header", f"Cookie: sessionid={sid}; theme=dark", sid)


@shape("azure_storage_key")
def _azure(rng: random.Random) -> Secret:
    key = pick(rng, B64, 86) + "=="
    return Secret("azure_storage_key", "DefaultEndpointsProtocol=https;AccountName=acct;"
                  f"AccountKey={key};EndpointSuffix=core.windows.net", key[:86])


@shape("azure_client_secret")
def _azure_ad(rng: random.Random) -> Secret:
    body = pick(rng, ALNUM, 34)
    return Secret("azure_client_secret", f"msal client secret abc8Q~{body} refused", body)


@shape("telegram_bot_token")
def _telegram(rng: random.Random) -> Secret:
    body = pick(rng, URLSAFE, 33)
    return Secret("telegram_bot_token", f"telegram bot {rng.randrange(10**8, 10**9)}:AA{body} offline", body)


@shape("discord_bot_token")
def _discord(rng: random.Random) -> Secret:
    body = f"{pick(rng, ALNUM, 23)}.{pick(rng, URLSAFE, 6)}.{pick(rng, URLSAFE, 27)}"
    return Secret("discord_bot_token", f"discord login with M{body}", body)


@shape("postman_key")
def _postman(rng: random.Random) -> Secret:
    body = f"{pick(rng, HEX, 24)}-{pick(rng, HEX, 34)}"
    return Secret("postman_key", f"newman run --api-key PMAK-{body}", body)


@shape("grafana_service_account")
def _grafana(rng: random.Random) -> Secret:
    body = f"{pick(rng, ALNUM, 32)}_{pick(rng, HEX, 8)}"
    return Secret("grafana_service_account", f"grafana token glsa_{body} accepted", body)


@shape("card_number")
def _card(rng: random.Random) -> Secret:
    card = luhn_card(rng)
    spaced = " ".join(card[i:i + 4] for i in range(0, 16, 4))
    return Secret("card_number", f"charge failed for card {spaced}", spaced)


@shape("us_ssn")
def _ssn(rng: random.Random) -> Secret:
    ssn = f"{rng.randrange(100, 600)}-{rng.randrange(10, 99)}-{rng.randrange(1000, 9999)}"
    return Secret("us_ssn", f"applicant ssn {ssn} mismatch", ssn)


@shape("x_api_key_header_pair")
def _pair(rng: random.Random) -> Secret:
    key = pick(rng, ALNUM, 30)
    return Secret("x_api_key_header_pair",
                  json.dumps([{"name": "X-Api-Key", "value": key}]), key)


# Credentials in console text: a password field's HTML, command lines, URLs with a user.


@shape("password_input_html")
def _input_html(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 16)
    return Secret("password_input_html",
                  f'rendered <input id="pw" type="password" name="password" value="{pw}"> twice', pw)


@shape("password_input_html_value_first")
def _input_html_first(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 16)
    return Secret("password_input_html_value_first",
                  f"<INPUT value='{pw}' class=x TYPE=PASSWORD autocomplete=off>", pw)


@shape("cli_long_password")
def _cli_long(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 16)
    return Secret("cli_long_password", f"spawn: mysql -h db --password {pw} -u root app", pw)


@shape("cli_long_password_equals")
def _cli_long_eq(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 16)
    return Secret("cli_long_password_equals", f"exec pg_restore --password={pw} dump.sql", pw)


@shape("cli_mysql_attached")
def _cli_mysql(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 16)
    return Secret("cli_mysql_attached", f"running mysqldump -uroot -p{pw} shop > shop.sql", pw)


@shape("cli_sshpass")
def _cli_sshpass(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 16)
    return Secret("cli_sshpass", f"sshpass -p '{pw}' ssh deploy@host uptime", pw)


@shape("curl_user")
def _curl_user(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 16)
    return Secret("curl_user", f"$ curl -sS -u admin:{pw} https://api.test/v1/me", pw)


@shape("url_empty_user")
def _url_empty_user(rng: random.Random) -> Secret:
    pw = pick(rng, ALNUM, 18)
    return Secret("url_empty_user", f"redis connect redis://:{pw}@cache.internal:6379/0 refused",
                  pw)


def corpus(seed: int = 30) -> list[Secret]:
    """One secret of every shape (the same for the same seed)."""
    rng = random.Random(seed)
    return [make(rng) for make in SHAPES.values()]


#: Shortest run of a secret that counts as a leak when it shows up in what an agent reads.
WINDOW = 8


def windows(secret: str, n: int = WINDOW) -> set[str]:
    """Every run of C{n} characters of C{secret} (the secret itself when shorter)."""
    if len(secret) <= n:
        return {secret}
    return {secret[i:i + n] for i in range(len(secret) - n + 1)}


def leaked(text: str, secret: str) -> set[str]:
    """The runs of C{secret} that appear in C{text} (also once percent-decoded)."""
    from urllib.parse import unquote_plus

    hay = text + "\n" + unquote_plus(text)
    return {w for w in windows(secret) if w in hay}

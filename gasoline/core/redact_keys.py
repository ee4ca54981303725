"""
Which names hold secrets, and the marker that takes a secret's place.

 - L{marker} and L{is_marker}: a secret becomes C{[REDACTED:<kind>]}; a marker is never redacted
   again (every layer of redaction checks L{is_marker}, which makes it idempotent).
 - L{is_sensitive_key}: a value stored under one of these names (C{password}, C{token},
   C{authorization}, C{cookie}, ...; case-insensitive, C{-} and C{.} read as C{_}, or a name
   ending in one of L{SENSITIVE_SUFFIXES}) is secret wherever it appears: a JSON key, a header
   name, a form or query parameter.
 - L{is_sensitive_param}: a URL query or form parameter; the same names plus a few too common to
   be redacted as JSON keys (C{code}, C{key}, ...).
 - L{key_label}: the kind a marker names for a secret found under a key (C{api_key},
   C{session}, ...).

Plain tables and string tests: no patterns over text here (those are in
L{gasoline.core.redact_shapes}), no walking of values (L{gasoline.core.redact}).
"""

from __future__ import annotations

MARKER_PREFIX = "[REDACTED:"


def marker(kind: str) -> str:
    """The text that replaces a secret of C{kind}: C{[REDACTED:<kind>]}."""
    return f"{MARKER_PREFIX}{kind}]"


def is_marker(value: str) -> bool:
    """Whether C{value} is a redaction marker (so it is never redacted again)."""
    return value.startswith(MARKER_PREFIX) and value.endswith("]") and "\n" not in value


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


def key_label(name: str) -> str:
    """The kind named in the marker of a secret found under the key C{name}."""
    key = _normalise_key(name)
    for needle, label in _KEY_LABELS:
        if needle in key:
            return label
    return "secret"

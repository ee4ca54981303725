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

The names are not written here: they are the one list the extension reads too,
C{extension/lib/secret-names.json} (L{secret_names_path}).

Plain tables and string tests: no patterns over text here (those are in
L{gasoline.core.redaction.shapes}), no walking of values (L{gasoline.core.redaction.redactor}).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

MARKER_PREFIX = "[REDACTED:"


def marker(kind: str) -> str:
    """The text that replaces a secret of C{kind}: C{[REDACTED:<kind>]}."""
    return f"{MARKER_PREFIX}{kind}]"


def is_marker(value: str) -> bool:
    """Whether C{value} is a redaction marker (so it is never redacted again)."""
    return value.startswith(MARKER_PREFIX) and value.endswith("]") and "\n" not in value


# -- sensitive key names ----------------------------------------------------------------------

#: The one list of names whose values are secret, shared with the extension (which reads the same
#: names through C{lib/secret-names.js}, generated from this file): C{extension/lib/} in a source
#: checkout, C{gasoline/_extension/lib/} in the installed wheel.
SECRET_NAMES_FILE = "secret-names.json"


def secret_names_path() -> Path:
    """Where the shared list is: the wheel's copy of the extension, else the checkout's.
    @raise FileNotFoundError: neither (a broken install: reinstall gasoline)."""
    package = Path(__file__).resolve().parents[2]
    for lib in (package / "_extension" / "lib", package.parent / "extension" / "lib"):
        if (lib / SECRET_NAMES_FILE).is_file():
            return lib / SECRET_NAMES_FILE
    raise FileNotFoundError(f"the list of secret names ({SECRET_NAMES_FILE}) is not installed "
                            f"beside {package} (gasoline/_extension/lib/ or extension/lib/): "
                            "reinstall gasoline")


def _load_names() -> dict[str, tuple[str, ...]]:
    data = json.loads(secret_names_path().read_text("utf-8"))
    return {part: tuple(data[part]) for part in ("keys", "suffixes", "params")}


_NAMES = _load_names()
#: Key names (normalised: see L{_normalise_key}) whose values are secret.
SENSITIVE_KEYS = frozenset(_NAMES["keys"])
#: Query-string and form parameter names whose values are secret in a URL or form body only
#: (as JSON keys they are too common to redact: an error C{code}, a map C{key}).
SENSITIVE_PARAMS = frozenset(_NAMES["params"])
#: Endings that make a key sensitive too (C{csrfToken}, C{db_password}, C{stripe_secret}).
SENSITIVE_SUFFIXES = _NAMES["suffixes"]
_FLAT_SUFFIXES = tuple(suffix.replace("_", "") for suffix in SENSITIVE_SUFFIXES)

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


_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[-.\s]")


def _normalise_key(name: str) -> str:
    """As the extension's C{normKey}: camelCase split at its capitals, lower case, C{-}, C{.} and
    spaces read as C{_} (C{xAmzSignature} -> C{x_amz_signature})."""
    return _SEPARATORS.sub("_", _CAMEL.sub(r"\1_\2", name.strip()).lower())


@functools.lru_cache(maxsize=4096)
def _sensitive(name: str) -> bool:
    key = _normalise_key(name)
    flat = key.replace("_", "")
    return (key in SENSITIVE_KEYS or flat in SENSITIVE_KEYS or key.endswith(SENSITIVE_SUFFIXES)
            or flat.endswith(_FLAT_SUFFIXES))


def is_sensitive_key(name: object) -> bool:
    """True when a value stored under C{name} must not reach an agent (the extension's
    C{isSensitiveKey}: the same names, read the same way)."""
    if not isinstance(name, str) or not name or len(name) > 200:
        return False
    return _sensitive(name)


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

#!/usr/bin/env python3
"""Write extension/lib/secret-names.js from extension/lib/secret-names.json, the one list of names
whose values are secret, read by the daemon (gasoline/core/redaction/keys.py) and, through the
generated module, by the extension (lib/redact.js). Edit the JSON, then run this script;
tests/test_secret_names.py fails while the two differ."""

from __future__ import annotations

import json
import sys
from pathlib import Path

LIB = Path(__file__).resolve().parent.parent / "lib"
SOURCE = LIB / "secret-names.json"
MODULE = LIB / "secret-names.js"


def module_text(data: dict) -> str:
    body = json.dumps({k: v for k, v in data.items() if not k.startswith("_")}, indent=2)
    return ("// Generated from secret-names.json by extension/scripts/secret-names.py: edit the JSON,\n"
            "// then run the script (the daemon reads the JSON; tests/test_secret_names.py checks\n"
            "// that this module holds the same names).\n"
            f"export default {body};\n")


def main() -> int:
    data = json.loads(SOURCE.read_text("utf-8"))
    MODULE.write_text(module_text(data), "utf-8")
    print(f"wrote {MODULE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

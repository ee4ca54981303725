"""
Parsing the durations and sizes of command-line options: C{90}, C{90s}, C{15m}, C{1h}, C{7d},
C{1h30m}; C{512}, C{64k}, C{10MB}, C{1GiB}.
"""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?", re.I)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 10**6, "mb": 10**6,
               "mib": 1024**2, "g": 10**9, "gb": 10**9, "gib": 1024**3}


def parse_duration(text: str | float | int) -> float:
    """Seconds in C{text}: a plain number of seconds, or number-unit parts (C{ms s m h d}),
    e.g. C{90s}, C{15m}, C{1h30m}. Raises C{ValueError} for anything else, zero or negative."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        value = str(text).strip().lower()
        try:
            seconds = float(value)
        except ValueError:
            pos, seconds = 0, 0.0
            if not value:
                raise ValueError("empty duration") from None
            for m in _PART.finditer(value):
                if m.start() != pos:
                    break
                seconds += float(m.group(1)) * _UNITS[m.group(2)]
                pos = m.end()
            if pos != len(value):
                raise ValueError(f"{text!r} is not a duration (use e.g. 90, 90s, 15m, 1h, 7d)") \
                    from None
    if not seconds > 0 or math.isinf(seconds) or math.isnan(seconds):
        raise ValueError("must be a positive duration (e.g. 90s, 15m, 1h)")
    return seconds


def parse_size(text: str | int) -> int:
    """Bytes in C{text}: C{512}, C{64k}, C{10MB} (decimal), C{10MiB} (binary)."""
    if isinstance(text, int) and not isinstance(text, bool):
        n = text
    else:
        m = _SIZE.fullmatch(str(text).strip())
        if m is None:
            raise ValueError(f"{text!r} is not a size (use e.g. 1048576, 512k, 10MB, 10MiB)")
        n = int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()])
    if n < 1:
        raise ValueError("must be a positive size")
    return n

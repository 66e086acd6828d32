"""Absolute times at the start of load log lines (analyzers layer).

sysbench, go-ycsb and go-tpc print times relative to their own start. A log gets absolute
times when the user pipes the tool through a timestamper; these prefixes are recognised (and
stripped before the tool's parser sees the line):

- ``1795490424.555564410 [ 1s ] thds: ...``: Unix time in seconds (``date +%s.%N``, ``ts '%.s'``);
- ``2026-11-24T10:15:30.123+08:00 ...``, ``2026-11-24 10:15:30,5 ...``, ``[2026-11-24 10:15:30] ...``:
  ISO 8601, with or without a UTC offset (without: the capture host's local time);
- ``Nov 24 10:15:30 ...`` / ``Nov 24 10:15:30.123456 ...``: moreutils ``ts`` (local time; the
  year is the capture's).

Local times need the capture host's UTC offset, which the bundle's manifest records.
"""

from __future__ import annotations

import calendar
import re
import time

_EPOCH = re.compile(r"^(\d{10}(?:\.\d{1,9})?)\s+")
_ISO = re.compile(
    r"^\[?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?\]?\s+"
)
_TS = re.compile(r"^(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+(\d{1,2})\s+(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s+")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


def _frac(text: str | None) -> float:
    return float("0." + text) if text else 0.0


def _offset(text: str | None, local: float) -> float:
    """Seconds east of UTC: from the text (Z, +08:00, -0530), else the capture host's."""
    if not text:
        return local
    if text == "Z":
        return 0.0
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


def strip_timestamp(text: str, utc_offset: float = 0.0, year: int | None = None) -> tuple[float | None, str]:
    """(Unix time of the line's timestamp prefix or None, the line without it)."""
    m = _EPOCH.match(text)
    if m:
        return float(m.group(1)), text[m.end():]
    m = _ISO.match(text)
    if m:
        y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
        try:
            t = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
        except (ValueError, OverflowError):
            return None, text
        return t + _frac(m.group(7)) - _offset(m.group(8), utc_offset), text[m.end():]
    m = _TS.match(text)
    if m:
        y = year if year is not None else time.gmtime().tm_year
        try:
            t = calendar.timegm((y, _MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)),
                                 int(m.group(5)), 0, 0, 0))
        except (ValueError, OverflowError):
            return None, text
        return t + _frac(m.group(6)) - utc_offset, text[m.end():]
    return None, text

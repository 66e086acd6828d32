"""Shared CLI helpers (CLI layer): durations, output paths, progress."""

from __future__ import annotations

import re
from pathlib import Path

from profiler.errors import OutputExists, UsageError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")


def parse_duration(text: str) -> float:
    """'30s', '2m', '1.5', '500ms', '1h' -> seconds."""
    m = _DURATION.match(text or "")
    if not m:
        raise UsageError(f"cannot read duration {text!r}: use e.g. 30s, 2m, 500ms")
    value = float(m.group(1))
    unit = m.group(2) or "s"
    secs = value * {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}[unit]
    if secs <= 0:
        raise UsageError("duration must be positive")
    return secs


def check_output(path: Path, force: bool) -> Path:
    """Refuse to overwrite an existing file unless --force."""
    if path.exists() and not force:
        raise OutputExists(f"{path} exists: pass --force to overwrite it")
    return path


def parse_time_offset(text: str | None) -> float | None:
    """'12.5s' or '12.5' -> seconds since capture start (None passes through)."""
    if text is None:
        return None
    m = _DURATION.match(text)
    if not m:
        raise UsageError(f"cannot read time {text!r}: use e.g. 12.5s")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2) or "s"]

"""Shared CLI helpers (CLI layer): durations and time windows, output paths."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from profiler import files
from profiler.errors import UsageError
from profiler.untrusted import sanitize

if TYPE_CHECKING:
    from profiler.inputs.window import TimeWindow

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
MAX_DURATION = 366 * 86400.0  # s: a year and a day; anything longer is a typo, and no timer holds 10^400
MAX_TIME = 1.8e10  # s: the largest CLOCK_MONOTONIC time perf stamps (2^64 ns)


def parse_duration(text: str) -> float:
    """'30s', '2m', '1.5', '500ms', '1h' -> seconds (more than 0, at most a year)."""
    m = _DURATION.match(text or "")
    if not m:
        raise UsageError(f"cannot read duration {text!r}: use e.g. 30s, 2m, 500ms")
    value = float(m.group(1))
    unit = m.group(2) or "s"
    secs = value * {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}[unit]
    if secs <= 0:
        raise UsageError("duration must be positive")
    if not secs <= MAX_DURATION:
        raise UsageError(f"duration {text.strip()!r} is longer than a year: use e.g. 30s, 2m, 500ms")
    return secs


def parse_size(text: str) -> int:
    """500M, 4G, 1.5T, 4096 (bytes); one UsageError line otherwise."""
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "KMGT" else t
    try:
        value = int(float(num) * mult)
    except (ValueError, OverflowError):  # a word, NaN, inf or 1e400
        raise UsageError(f"cannot read size {text!r}: use e.g. 500M, 4G") from None
    if value > 1 << 60:
        raise UsageError(f"size {text!r} is more than any disk holds: use e.g. 500M, 4G")
    if value <= 0:
        raise UsageError("sizes must be positive")
    return value


def check_output(path: Path, force: bool) -> Path:
    """Refuse early (before the work) an output that would be refused at the end: an existing
    regular file or symbolic link without --force (exit 8), a directory or a missing directory
    (exit 9). Standard output, devices and pipes are always written into (docs/cli.md#outputs)."""
    files.check_writable(path, force)
    return path


def parse_time_offset(text: str | None) -> float | None:
    """'12.5s' or '12.5' -> seconds since capture start (None passes through)."""
    if text is None:
        return None
    m = _DURATION.match(text)
    if not m:
        raise UsageError(f"cannot read time {text!r}: use e.g. 12.5s")
    secs = float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2) or "s"]
    if not secs <= MAX_TIME:
        raise UsageError(f"time {text!r} is later than any capture: use e.g. 12.5s")
    return secs


def parse_window(t_from: str | None, t_to: str | None) -> TimeWindow:
    """--from/--to: '12.5s' is relative to the capture start (a bundle's clock, else the first
    sample), '@12345.678' an absolute perf timestamp; both of one kind. The use case rebases a
    relative window once it knows the origin."""
    from profiler.inputs.window import TimeWindow  # here: the inputs package imports every reader

    def one(text: str | None) -> tuple[float | None, bool]:
        if text is None:
            return None, False
        if text.startswith("@"):
            try:
                value = float(text[1:])
            except ValueError:
                raise UsageError(f"cannot read absolute time {text!r}: use e.g. @12345.678") from None
            if not (math.isfinite(value) and 0 <= value <= MAX_TIME):
                raise UsageError(f"absolute time {text!r} is no CLOCK_MONOTONIC time: use seconds between 0 and "
                                 f"{MAX_TIME:.1e}, e.g. @12345.678")
            return value, False
        return parse_time_offset(text), True

    f, frel = one(t_from)
    t, trel = one(t_to)
    if t_from is not None and t_to is not None and frel != trel:
        raise UsageError("--from and --to must both be relative (12s) or both absolute (@12345.6)")
    if f is not None and t is not None and t <= f:
        raise UsageError("--to must be later than --from")
    return TimeWindow(f, t, relative=frel or trel)


def check_new_output(output: Path | None, force: bool) -> None:
    """check_output for an optional output (None: standard output)."""
    if output is not None:
        check_output(output, force)


def write_output(text: str | list[str], output: Path | None, force: bool) -> None:
    """Write to standard output ('-' or none), into a device or pipe, or to a file through a fresh
    temporary name renamed into place (profiler.files: never through a symbolic link)."""
    files.write_output(output, text, force=force)


def for_terminal(lines: list[str], output: Path | None) -> list[str]:
    """Data lines (folded stacks) bound for a terminal lose their control characters: a frame
    named with an escape sequence must not drive the terminal. Files and pipes get them as they
    are (folded stacks are a data format; inferno keeps them too)."""
    if files.output_kind(output) not in ("stdout", "fd") or not sys.stdout.isatty():
        return lines
    return [sanitize(line.rstrip("\n"), newlines=False) + "\n" for line in lines]


def write_bytes(data: bytes, output: Path | None, force: bool) -> None:
    """A binary output (a gzipped pprof profile), by the same rules as ``write_output``
    (profiler.files: stdout, devices and pipes written; a file through a fresh temporary name
    renamed into place, never through a symbolic link)."""
    files.write_output(output, data, force=force)


def wrote(output: Path | None, what: str) -> None:
    """'profiler: wrote FILE (what)' on stderr, when the output went to a regular file."""
    if output is not None and files.output_kind(output) == "file":
        sys.stderr.write(f"profiler: wrote {sanitize(str(output))} ({what})\n")


"""Shared CLI helpers (CLI layer): durations and time windows, output paths."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from profiler.errors import OutputExists, UsageError
from profiler.inputs.window import TimeWindow

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


def parse_window(t_from: str | None, t_to: str | None) -> TimeWindow:
    """--from/--to: '12.5s' is relative to the capture start (a bundle's clock, else the first
    sample), '@12345.678' an absolute perf timestamp; both of one kind. The use case rebases a
    relative window once it knows the origin."""

    def one(text: str | None) -> tuple[float | None, bool]:
        if text is None:
            return None, False
        if text.startswith("@"):
            try:
                return float(text[1:]), False
            except ValueError:
                raise UsageError(f"cannot read absolute time {text!r}: use e.g. @12345.678") from None
        return parse_time_offset(text), True

    f, frel = one(t_from)
    t, trel = one(t_to)
    if t_from is not None and t_to is not None and frel != trel:
        raise UsageError("--from and --to must both be relative (12s) or both absolute (@12345.6)")
    if f is not None and t is not None and t <= f:
        raise UsageError("--to must be later than --from")
    return TimeWindow(f, t, relative=frel or trel)


def check_new_output(output: Path | None, force: bool) -> None:
    """Refuse an existing regular file early (before the work), unless --force; stdout ('-' or
    none) and devices or pipes (/dev/null, a fifo) are always written into."""
    if output is not None and str(output) != "-" and (output.is_file() or not output.exists()):
        check_output(output, force)


def write_output(text: str | list[str], output: Path | None, force: bool) -> None:
    """Write to stdout, into a device or pipe, or atomically (a temporary file renamed) to a file."""
    chunks = [text] if isinstance(text, str) else text
    if output is None or str(output) == "-":
        sys.stdout.writelines(chunks)
        sys.stdout.flush()
        return
    if output.exists() and not output.is_file():
        with open(output, "w", encoding="utf-8") as fh:  # never replace a device or a fifo
            fh.writelines(chunks)
        return
    check_output(output, force)
    tmp = output.with_name(f".{output.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(chunks)
        os.replace(tmp, output)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None


def write_bytes(data: bytes, output: Path | None, force: bool) -> None:
    """A binary output (a gzipped pprof profile): to stdout's bytes, into a device or pipe, or atomically to a file."""
    if output is None or str(output) == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    if output.exists() and not output.is_file():
        with open(output, "wb") as fh:  # never replace a device or a fifo
            fh.write(data)
        return
    check_output(output, force)
    tmp = output.with_name(f".{output.name}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, output)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None


def wrote(output: Path | None, what: str) -> None:
    """'profiler: wrote FILE (what)' on stderr, when the output went to a file."""
    if output is not None and str(output) != "-" and output.is_file():
        sys.stderr.write(f"profiler: wrote {output} ({what})\n")

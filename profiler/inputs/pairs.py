"""HeatMap's input: two numeric columns, ``time latency``, per line (inputs layer).

What Brendan Gregg's trace2heatmap.pl reads, and what tools such as biosnoop print once cut to
two columns. Sniffed when the first data lines of the head are two numbers each (a first line
holding letters is a header). Units are the caller's to say (``--units-time``,
``--units-latency``: s, ms, us, ns); the records are two float arrays in seconds. A header line
is skipped as HeatMap does; later lines that are not two numbers are skipped and counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profiler.errors import UsageError
from profiler.inputs.source import Format, Source
from profiler.inputs.streams import iter_chunks, open_path

__all__ = ["FORMAT", "TIME_UNITS", "Pairs", "looks_like_pairs", "parse_pairs", "read_pairs", "read_source"]

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}

_LETTER = re.compile(rb"[A-DF-Za-df-z]")  # letters other than e/E (exponents)


@dataclass
class Pairs:
    """``time latency`` pairs, converted to seconds."""

    t: np.ndarray
    lat: np.ndarray
    latency_unit: str
    skipped_lines: int = 0


def parse_pairs(chunks: Iterable[bytes], *, units_time: str = "s", units_latency: str = "us") -> Pairs:
    """Two whitespace-separated numeric columns per line (trace2heatmap.pl's input).

    A first line holding letters is a header and skipped, as HeatMap does; later lines that
    are not two numbers are skipped and counted. ``units_time`` is the first column's unit
    (s, ms, us, ns); ``units_latency`` the second's.
    """
    if units_time not in TIME_UNITS:
        raise UsageError(f"--units-time {units_time!r}: use s, ms, us or ns")
    if units_latency not in TIME_UNITS:
        raise UsageError(f"--units-latency {units_latency!r}: use s, ms, us or ns")
    parts: list[np.ndarray] = []
    skipped = 0
    first = True
    for chunk in chunks:
        if first:
            first = False
            nl = chunk.find(b"\n")
            if _LETTER.search(chunk[: nl if nl >= 0 else len(chunk)]):
                chunk = chunk[nl + 1 :] if nl >= 0 else b""
        vals = _fast(chunk)
        if vals is None:  # some line is not two numbers: line by line, skipping and counting those
            good = []
            for line in chunk.splitlines():
                f = line.split()
                if len(f) == 2 and _number(f[0]) and _number(f[1]):
                    good.append(f[0] + b" " + f[1])
                elif line.strip():
                    skipped += 1
            vals = np.array(b" ".join(good).split(), dtype=np.float64) if good else np.zeros(0)
        parts.append(vals)
    allv = np.concatenate(parts) if parts else np.zeros(0)
    pairs = allv.reshape(-1, 2)
    finite = np.isfinite(pairs).all(axis=1)
    if not finite.all():  # nan, inf, 1e999: no time or latency
        skipped += int(np.count_nonzero(~finite))
        pairs = pairs[finite]
    return Pairs(t=pairs[:, 0] * TIME_UNITS[units_time], lat=pairs[:, 1] * TIME_UNITS[units_latency],
                 latency_unit=units_latency, skipped_lines=skipped)


def _fast(chunk: bytes) -> np.ndarray | None:
    """All the numbers of a chunk of whole lines, when every line is exactly two numbers."""
    if _LETTER.search(chunk) or b"," in chunk:
        return None
    tokens = chunk.split()
    if len(tokens) != 2 * (chunk.count(b"\n") + (0 if chunk.endswith(b"\n") or not chunk else 1)):
        return None
    try:
        return np.array(tokens, dtype=np.float64)
    except ValueError:
        return None


def _number(tok: bytes) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def read_pairs(path: str | Path, **kw: Any) -> Pairs:
    with open_path(path) as fh:
        return parse_pairs(iter_chunks(fh), **kw)


def read_source(src: Source, **kw: Any) -> Pairs:
    """The pairs of a detected input (``units_time``, ``units_latency`` as for :func:`parse_pairs`);
    the lines skipped are counted in ``src.log``."""
    with src.open() as fh:
        p = parse_pairs(iter_chunks(fh), **kw)
    src.log.skip(p.skipped_lines, "lines that are not 'time latency'")
    return p


def looks_like_pairs(head: bytes) -> bool:
    """Two numeric columns on the first data lines (a first header line may have letters)."""
    lines = [ln for ln in head.splitlines()[:20] if ln.strip()]
    if lines and _LETTER.search(lines[0]):
        lines = lines[1:]
    if not lines:
        return False
    for ln in lines[:-1] or lines:
        f = ln.split()
        if len(f) != 2:
            return False
        try:
            float(f[0])
            float(f[1])
        except ValueError:
            return False
    return True


FORMAT = Format("pairs", "'time latency' pairs", looks_like_pairs)

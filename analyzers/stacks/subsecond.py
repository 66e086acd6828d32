"""Sub-second offset heatmap of CPU samples, as Netflix FlameScope draws it (analyzer layer).

One column per second since ``t0``, ``rows`` rows per column for the offset within that second
(row 0 = the start of the second), colour = samples. Patterns that a per-second average hides
(a burst every 200 ms, one stalled second) show up as stripes and holes; a range picked on it
becomes ``profiler flamegraph --from/--to``.

Sample times come from perf script text, read by :func:`profiler.inputs.perfscript.iter_samples`.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profiler.bundle import Bundle
from profiler.inputs.perfscript import iter_samples
from profiler.inputs.streams import open_path
from profiler.tolerant import ReadLog


@dataclass
class SampleTimes:
    t: np.ndarray  # seconds (CLOCK_MONOTONIC in a bundle)
    tid: np.ndarray  # int64, -1 when unknown
    comm: list[str]  # per sample (small: sampled at ~100 Hz)


def parse_sample_times(lines: Iterable[str], log: ReadLog | None = None) -> SampleTimes:
    """perf script text -> the time, tid and comm of every sample that has a time (samples whose
    header does not parse are counted in ``log``)."""
    ts: list[float] = []
    tids: list[int] = []
    comms: list[str] = []
    for s in iter_samples(lines, log):
        if s.time is None:
            continue
        ts.append(s.time)
        tids.append(s.tid if s.tid is not None else -1)
        comms.append(s.comm)
    return SampleTimes(t=np.asarray(ts, dtype=np.float64), tid=np.asarray(tids, dtype=np.int64), comm=comms)


def read_sample_times(path: str | Path) -> SampleTimes:
    """Sample times of a perf script file (plain or gzip)."""
    with open_path(path) as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8", errors="replace")
        return parse_sample_times(text)


MAX_COLUMNS = 7200  # two hours of one-second columns; a longer span gets wider columns (said in ``note``)


@dataclass
class SubsecondHeatmap:
    """counts[col, row]: samples in seconds [t0 + col*step, t0 + (col+1)*step) at offset
    [row/rows, (row+1)/rows) of their second. ``step`` is 1 unless the span had more than
    MAX_COLUMNS seconds (then ``note`` says so)."""

    t0: float
    rows: int
    counts: np.ndarray  # int64 (ncols, rows)
    step: float = 1.0  # seconds per column
    note: str | None = None

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    @property
    def ncols(self) -> int:
        return int(self.counts.shape[0])

    def to_json(self) -> dict[str, Any]:
        return {
            "t0": self.t0,
            "columns": {"count": self.ncols, "step": self.step},
            "note": self.note,
            "rows": {"count": self.rows, "step": 1.0 / self.rows},
            "counts": self.counts.tolist(),
            "total": self.total,
        }


def subsecond_heatmap(t: np.ndarray, *, rows: int = 50, t0: float | None = None, t1: float | None = None) -> SubsecondHeatmap:
    """Bin sample times into whole seconds since ``t0`` (columns) and fractions of them (rows)."""
    if rows < 1 or rows > 1000:
        raise ValueError("rows must be between 1 and 1000")
    t = np.asarray(t, dtype=np.float64)
    if t0 is None:
        t0 = float(t.min()) if len(t) else 0.0
    if t1 is None:
        t1 = float(t.max()) if len(t) else t0
    t = t[np.isfinite(t)]
    span = max(t1 - t0, 0.0) if math.isfinite(t1 - t0) else 0.0
    seconds = int(math.floor(span)) + 1
    step, note = 1, None
    if seconds > MAX_COLUMNS:  # columns from the data's span, capped: a second per column no more
        step = math.ceil(seconds / MAX_COLUMNS)
        note = (f"the samples span {span:,.0f} s: each column is {step:,} s wide "
                f"(at most {MAX_COLUMNS:,} columns)")
    ncols = max(1, math.ceil(seconds / step))
    off = t - t0
    keep = (off >= 0) & (off < ncols * step)
    off = off[keep]
    sec = np.floor(off)
    col = (sec // step).astype(np.int64)
    row = np.minimum(((off - sec) * rows).astype(np.int64), rows - 1)
    counts = np.bincount(col * rows + row, minlength=ncols * rows).reshape(ncols, rows)
    return SubsecondHeatmap(t0=float(t0), rows=rows, counts=counts.astype(np.int64), step=float(step), note=note)


def capture_origin(bundle: Bundle, t: np.ndarray) -> float | None:
    """Time zero for --from/--to: the capture start (``manifest.clock.monotonic_start``) when
    it precedes the samples, else None (then the first sample is used)."""
    start = bundle.manifest.clock.monotonic_start
    if start and (not len(t) or float(t.min()) >= start):
        return float(start)
    return None

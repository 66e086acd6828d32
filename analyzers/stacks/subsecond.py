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
from profiler.inputs.bundles import cpu_stacks
from profiler.inputs.perfscript import iter_samples
from profiler.inputs.streams import open_path


@dataclass
class SampleTimes:
    t: np.ndarray  # seconds (CLOCK_MONOTONIC in a bundle)
    tid: np.ndarray  # int64, -1 when unknown
    comm: list[str]  # per sample (small: sampled at ~100 Hz)


def parse_sample_times(lines: Iterable[str]) -> SampleTimes:
    """perf script text -> the time, tid and comm of every sample that has a time."""
    ts: list[float] = []
    tids: list[int] = []
    comms: list[str] = []
    for s in iter_samples(lines):
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


@dataclass
class SubsecondHeatmap:
    """counts[col, row]: samples in second ``col`` at offset [row/rows, (row+1)/rows) of it."""

    t0: float
    rows: int
    counts: np.ndarray  # int64 (ncols, rows)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    @property
    def ncols(self) -> int:
        return int(self.counts.shape[0])

    def to_json(self) -> dict[str, Any]:
        return {
            "t0": self.t0,
            "columns": {"count": self.ncols, "step": 1.0},
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
    ncols = max(1, int(math.floor(t1 - t0)) + 1)
    off = t - t0
    keep = (off >= 0) & (off < ncols)
    off = off[keep]
    col = np.floor(off).astype(np.int64)
    row = np.minimum(((off - col) * rows).astype(np.int64), rows - 1)
    counts = np.bincount(col * rows + row, minlength=ncols * rows).reshape(ncols, rows)
    return SubsecondHeatmap(t0=float(t0), rows=rows, counts=counts.astype(np.int64))


def capture_origin(bundle: Bundle, t: np.ndarray) -> float | None:
    """Time zero for --from/--to: the capture start (``manifest.clock.monotonic_start``) when
    it precedes the samples, else None (then the first sample is used)."""
    start = bundle.manifest.clock.monotonic_start
    if start and (not len(t) or float(t.min()) >= start):
        return float(start)
    return None


def from_bundle(bundle: Bundle, *, rows: int = 50) -> SubsecondHeatmap | None:
    """The sub-second heatmap of a bundle's CPU samples (None when it has none)."""
    member = cpu_stacks(bundle)
    if member is None:
        return None
    with bundle.open_binary(member) as fh:
        st = parse_sample_times(io.TextIOWrapper(fh, encoding="utf-8", errors="replace"))
    if not len(st.t):
        return None
    return subsecond_heatmap(st.t, rows=rows, t0=capture_origin(bundle, st.t))

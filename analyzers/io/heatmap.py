"""Latency heatmap model: time columns x latency rows of counts (analyzer layer).

Every completed IO lands in exactly one cell: latencies below the lowest row or above the
highest are counted in the edge rows (and reported as ``below_min`` / ``above_max``), times
past ``max_cols`` in the last column, so the matrix always adds up to the IOs given. Per-column
p50/p99 come from the exact latencies, not from the buckets.

The two-column ``time latency`` text that Brendan Gregg's trace2heatmap.pl reads is an input
format: ``profiler/inputs/pairs.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from profiler.analyzers.io.stats import IoAnalysis, group_percentiles

from profiler.errors import UsageError

MAX_ROWS = 2000  # latency rows (--rows allows as many; --step-lat is capped to it)
NICE_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)


@dataclass
class Heatmap:
    """Counts[col, row]; column c covers [t0 + c*step, t0 + (c+1)*step) of completion time."""

    t0: float
    step: float
    row_edges: np.ndarray  # latency edges in seconds, len(rows) + 1
    log: bool
    counts: np.ndarray  # int64, (ncols, nrows)
    p50: np.ndarray  # per column, seconds (NaN when empty)
    p99: np.ndarray
    label: str = "all"
    below_min: int = 0
    above_max: int = 0
    after_max_col: int = 0
    latency_unit: str = "s"  # unit the input latencies were given in (labels only)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    @property
    def ncols(self) -> int:
        return int(self.counts.shape[0])

    @property
    def nrows(self) -> int:
        return int(self.counts.shape[1])

    def to_json(self) -> dict[str, Any]:
        def f(a: np.ndarray) -> list[float | None]:
            return [None if math.isnan(x) else float(x) for x in a]

        return {
            "label": self.label,
            "total": self.total,
            "columns": {"t0": self.t0, "step": self.step, "count": self.ncols},
            "rows": {"scale": "log" if self.log else "linear", "edges": [float(x) for x in self.row_edges], "unit": "s"},
            "counts": self.counts.tolist(),
            "p50": f(self.p50),
            "p99": f(self.p99),
            "below_min": self.below_min,
            "above_max": self.above_max,
            "after_max_col": self.after_max_col,
        }


@dataclass
class LatencyHeatmap:
    """What a latency heatmap picture shows: panels sharing columns and rows, and their captions."""

    panels: list[Heatmap]
    subtitle: str = ""
    totals: dict[str, Any] = field(default_factory=dict)
    slots: bool = False  # columns are a collector's fixed time slots (bcc, 1 s), not a chosen step


def fmt_latency(s: float) -> str:
    """Seconds -> '250us', '1.5ms', '2s' (ASCII 'us' renders everywhere)."""
    if s == 0:
        return "0"
    a = abs(s)
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if a >= f * 0.9999 or unit == "ns":
            v = s / f
            txt = f"{v:.3g}"
            return f"{txt}{unit}"
    return f"{s:g}s"


def from_io(analysis: IoAnalysis, *, by: str = "op", log: bool = True) -> LatencyHeatmap:
    """The heatmap of paired block IOs (what the report draws for a perf capture): a panel per ``by`` group."""
    ios = analysis.block.ios
    groups = analysis.split(by) if by != "none" else {"all IOs": np.ones(len(ios), bool)}
    drawn = panels(ios["t_complete"], ios["latency"], groups, log=log, t0=analysis.block.t_first)
    lat = analysis.overall["latency"]
    sub = (f"{len(ios)} IOs, p50 {fmt_latency(lat['p50'] or 0)}, p99 {fmt_latency(lat['p99'] or 0)}, "
           f"max {fmt_latency(lat['max'] or 0)}") if len(ios) else "no IOs"
    c = analysis.block.counts
    totals: dict[str, Any] = {"paired": c.paired, "unpaired issues": c.unpaired_issues, "unpaired completions": c.unpaired_completions}
    if c.lost_events:
        totals["lost events"] = c.lost_events
    return LatencyHeatmap(panels=drawn, subtitle=sub, totals=totals)


def nice_step(duration: float, max_cols: int = 240) -> float:
    """The smallest round column width giving at most ``max_cols`` columns."""
    for s in NICE_STEPS:
        if duration / s <= max_cols:
            return float(s)
    return float(math.ceil(duration / max_cols))


def row_edges(lat: np.ndarray, *, rows: int = 50, log: bool = False, min_lat: float | None = None,
              max_lat: float | None = None, step_lat: float | None = None) -> np.ndarray:
    """Latency row edges (seconds). Linear: ``rows`` equal rows from min to max (or ``step_lat``
    wide); log: ``rows`` rows evenly spaced in log10 between whole decades around the data."""
    pos = lat[lat > 0] if len(lat) else lat
    if log:
        lo = min_lat if min_lat and min_lat > 0 else (10.0 ** math.floor(math.log10(float(pos.min()))) if len(pos) else 1e-6)
        hi = max_lat if max_lat and max_lat > lo else (10.0 ** math.ceil(math.log10(float(pos.max()))) if len(pos) else lo * 1000)
        if hi <= lo:
            hi = lo * 10
        return np.geomspace(lo, hi, rows + 1)
    lo = float(min_lat) if min_lat is not None else 0.0
    hi = float(max_lat) if max_lat else (float(lat.max()) if len(lat) else 1e-3)
    if hi <= lo:
        hi = lo + (step_lat or 1e-3)
    if step_lat:
        # rows from the data's span, capped: latencies above the last row count in it (above_max)
        n = max(1, min(MAX_ROWS, int(math.ceil(min((hi - lo) / step_lat, 1e12) - 1e-9))))
        return lo + step_lat * np.arange(n + 1)
    hi = _nice_ceil(hi - lo) + lo if max_lat is None else hi
    return np.linspace(lo, hi, rows + 1)


def _nice_ceil(x: float) -> float:
    if x <= 0:
        return 1e-3
    e = 10.0 ** math.floor(math.log10(x))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * e >= x * (1 - 1e-12):
            return m * e
    return 10 * e


def latency_heatmap(t: np.ndarray, lat: np.ndarray, *, step: float | None = None, rows: int = 50, log: bool = False,
                    min_lat: float | None = None, max_lat: float | None = None, step_lat: float | None = None,
                    t0: float | None = None, t1: float | None = None, max_cols: int | None = None,
                    edges: np.ndarray | None = None, label: str = "all") -> Heatmap:
    """Bin (time, latency) pairs (seconds) into a heatmap; vectorised (one bincount)."""
    t = np.asarray(t, dtype=np.float64)
    lat = np.asarray(lat, dtype=np.float64)
    if t0 is None:
        t0 = float(t.min()) if len(t) else 0.0
    if t1 is None:
        t1 = float(t.max()) if len(t) else t0
    if step is None:
        step = nice_step(max(t1 - t0, 1e-9))
    if step <= 0:
        raise UsageError("the column step must be positive")
    ncols = int(math.floor((t1 - t0) / step)) + 1 if t1 >= t0 else 1
    after = 0
    if max_cols is not None and ncols > max_cols:
        ncols = max(1, max_cols)
    if ncols > 100_000:
        raise UsageError(f"{ncols} columns: choose a larger step (--step-sec) or check --units-time")
    if edges is None:
        edges = row_edges(lat, rows=rows, log=log, min_lat=min_lat, max_lat=max_lat, step_lat=step_lat)
    nrows = len(edges) - 1
    col = np.floor((t - t0) / step).astype(np.int64)
    after = int(np.count_nonzero(col >= ncols))
    col = np.clip(col, 0, ncols - 1)
    row = np.searchsorted(edges, lat, side="right") - 1
    below = int(np.count_nonzero(row < 0))
    above = int(np.count_nonzero(lat > edges[-1]))
    row = np.clip(row, 0, nrows - 1)
    counts = np.bincount(col * nrows + row, minlength=ncols * nrows).reshape(ncols, nrows)
    pct = group_percentiles(lat, col, ncols, qs=(50.0, 99.0))
    return Heatmap(t0=float(t0), step=float(step), row_edges=np.asarray(edges, dtype=np.float64), log=log,
                   counts=counts.astype(np.int64), p50=pct["p50"], p99=pct["p99"], label=label,
                   below_min=below, above_max=above, after_max_col=after)


def panels(t: np.ndarray, lat: np.ndarray, groups: dict[str, np.ndarray], **kw: Any) -> list[Heatmap]:
    """One heatmap per group (masks over t/lat), sharing time columns and latency rows."""
    t = np.asarray(t, dtype=np.float64)
    lat = np.asarray(lat, dtype=np.float64)
    if kw.get("t0") is None:
        kw["t0"] = float(t.min()) if len(t) else 0.0
    if kw.get("t1") is None:
        kw["t1"] = float(t.max()) if len(t) else kw["t0"]
    if not groups:
        groups = {"all IOs": np.ones(len(t), bool)}
    if kw.get("step") is None:
        kw["step"] = nice_step(max(kw["t1"] - kw["t0"], 1e-9))
    if kw.get("edges") is None:
        kw["edges"] = row_edges(lat, rows=kw.pop("rows", 50), log=kw.get("log", False), min_lat=kw.pop("min_lat", None),
                                max_lat=kw.pop("max_lat", None), step_lat=kw.pop("step_lat", None))
    for k in ("rows", "min_lat", "max_lat", "step_lat"):
        kw.pop(k, None)
    return [latency_heatmap(t[m], lat[m], label=name, **kw) for name, m in groups.items()]

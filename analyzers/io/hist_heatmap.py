"""The IO latency heatmap of a bcc capture: in-kernel histograms as heatmap panels (analyzers layer).

The perf backend's heatmap (analyzers.io.heatmap) bins one (completion time, latency) pair per IO.
The bcc backend has no pairs: per time slot, device and op it keeps a log-linear histogram
(analyzers.io.histograms). Its cells map onto the same ``heatmap.Heatmap`` matrix, so the same
renderer draws both, with two honest differences:

- columns are the collector's slots (``--interval``, 1 s by default), not a chosen step;
- rows are latency bands of a quarter of a power of two (4 of the histogram's 16 sub-buckets
  per power of two, so every bucket falls in exactly one row, no count is split); the p50 and
  p99 lines are interpolated inside a bucket (at most 6.25% wide), not exact.

Every IO in the file lands in one cell: the matrix of a panel adds up to the op's count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from profiler.analyzers.io import histograms as bcc_hist
from profiler.analyzers.io.heatmap import Heatmap, LatencyHeatmap

ROWS_PER_OCTAVE = 4  # rows per power of two of latency (must divide 2**sub_bits)
OP_ORDER = ("R", "W", "F", "D", "O")


@dataclass
class HistHeatmap(LatencyHeatmap):
    """What the report draws for a bcc capture's block IO: panels plus the captions."""

    slots: bool = True
    source: str = bcc_hist.MEMBER


def _row_of(bucket: int, sub_bits: int) -> int:
    """Row index of a histogram bucket: -1 below 2**sub_bits ns (exact single-ns buckets)."""
    sub = 1 << sub_bits
    if bucket < sub:
        return -1
    return (bucket - sub) // (sub // ROWS_PER_OCTAVE)


def _row_edges(first: int, last: int, sub_bits: int) -> np.ndarray:
    """Edges in seconds of rows first..last (inclusive)."""
    sub = 1 << sub_bits
    width = sub // ROWS_PER_OCTAVE
    lows = [bcc_hist.bucket_bounds(sub + r * width, sub_bits)[0] for r in range(first, last + 1)]
    hi = bcc_hist.bucket_bounds(sub + (last + 1) * width - 1, sub_bits)[1]
    return np.asarray(lows + [hi], dtype=np.float64) / 1e9


def from_hist(h: bcc_hist.BlockHist) -> HistHeatmap | None:
    """One panel per op (read, write, flush, ...), all devices together; None when there were no IOs."""
    sub = 1 << h.sub_bits
    if sub < ROWS_PER_OCTAVE or sub % ROWS_PER_OCTAVE:
        raise ValueError(f"histograms with {sub} sub-buckets per power of two cannot be cut in {ROWS_PER_OCTAVE} rows")
    slots = [s for s in h.slots if s.count > 0 and s.buckets]
    if not slots:
        return None
    step = h.slot_seconds if h.slot_seconds > 0 else 1.0
    rows = [_row_of(b, h.sub_bits) for s in slots for b in s.buckets]
    first, last = max(0, min(rows)), max(0, max(rows))
    edges = _row_edges(first, last, h.sub_bits)
    nrows = last - first + 1
    ncols = max(int(math.floor((s.t - h.t0) / step + 0.5)) for s in slots) + 1
    ops = sorted({s.op for s in slots}, key=lambda o: (OP_ORDER.index(o) if o in OP_ORDER else 99, o))
    panels = []
    for op in ops:
        counts = np.zeros((ncols, nrows), dtype=np.int64)
        per_col: list[dict[int, int]] = [{} for _ in range(ncols)]
        col_max = [0] * ncols
        below = 0
        for s in slots:
            if s.op != op:
                continue
            c = max(0, int(math.floor((s.t - h.t0) / step + 0.5)))
            col_max[c] = max(col_max[c], s.max_ns)
            for b, n in s.buckets.items():
                r = _row_of(b, h.sub_bits) - first
                if r < 0:
                    below += n
                counts[c, min(max(r, 0), nrows - 1)] += n
                per_col[c][b] = per_col[c].get(b, 0) + n
        p50 = np.full(ncols, np.nan)
        p99 = np.full(ncols, np.nan)
        for c, bk in enumerate(per_col):
            if bk:
                p50[c] = (bcc_hist.quantile_ns(bk, 50, h.sub_bits, col_max[c]) or math.nan) / 1e9
                p99[c] = (bcc_hist.quantile_ns(bk, 99, h.sub_bits, col_max[c]) or math.nan) / 1e9
        panels.append(Heatmap(t0=h.t0, step=step, row_edges=edges, log=True, counts=counts, p50=p50, p99=p99,
                              label=bcc_hist.OP_NAMES.get(op, op), below_min=below))
    total = sum(s.count for s in slots)
    pct = bcc_hist.percentiles(h, (50, 99))
    mx = max(s.max_ns for s in slots) / 1e3
    subtitle = (f"{total} IOs, p50 {pct.get('p50', 0):.0f} us, p99 {pct.get('p99', 0):.0f} us, max {mx:.0f} us; "
                f"bcc histograms, {step:g} s columns")
    totals = {"IOs": total, "unmatched completions": h.counters.get("unmatched_complete", 0),
              "in flight at stop": h.in_flight_at_stop}
    return HistHeatmap(panels=panels, subtitle=subtitle, totals=totals)

"""Block IOs by time, latency, device/op and thread, for the HTML report (analyzers layer).

The page draws the IO latency heatmap from these counts, and the IO statistics of any range a
reader selects, narrowed to the threads a filter picks: each entry is (column, latency row,
group, thread, count). Latency rows are log-spaced (``PER_DECADE`` per decade from 1 us), so a
range's percentiles are known to within one row (about 26%: the page prints them as such).
Columns start at 0.1 s and double until there are at most ``MAX_COLUMNS`` of them and at most
``MAX_ENTRIES`` entries. Traced IOs (perf backend) carry their issuing thread; the bcc
backend's in-kernel histograms are per device, op and second: no thread (-1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from profiler.analyzers.io import histograms
from profiler.analyzers.views.blockio import IOEvents

LO = 1e-6  # seconds: the first row's lower edge
PER_DECADE = 10
ROWS = 70  # 1 us .. 10 s
MAX_COLUMNS = 1_200
MAX_ENTRIES = 50_000
FIRST_COLUMN = 0.1  # seconds
OPS = {"R": "read", "W": "write", "D": "discard", "F": "flush", "O": "other"}


@dataclass
class IoRanges:
    source: str  # "trace" (per IO) or "histograms" (bcc, per second)
    column: float  # seconds per column
    t0: float  # column 0's start on the timeline axis
    ncolumns: int
    groups: list[str]  # "254:0 read"
    entries: list[tuple[int, int, int, int, int]]  # (column, row, group, thread, count)
    total: int
    max_s: dict[int, float] = field(default_factory=dict)  # group -> the largest latency seen
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        cols = list(zip(*self.entries, strict=True)) if self.entries else [(), (), (), (), ()]
        return {"source": self.source, "column": self.column, "t0": round(self.t0, 6), "ncolumns": self.ncolumns,
                "lo": LO, "per_decade": PER_DECADE, "rows": ROWS, "groups": self.groups,
                "col": list(cols[0]), "row": list(cols[1]), "g": list(cols[2]), "th": list(cols[3]),
                "c": list(cols[4]), "total": self.total,
                "max": {str(k): round(v, 9) for k, v in self.max_s.items()}, "notes": self.notes}


def row_of(latency_s: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.floor(np.log10(np.maximum(latency_s, 1e-12) / LO) * PER_DECADE)
    out: np.ndarray = np.clip(np.nan_to_num(r, nan=0.0), 0, ROWS - 1).astype(np.int64)
    return out


def _column(span: float, count: Callable[[float], int]) -> float:
    b = FIRST_COLUMN
    while (span / b > MAX_COLUMNS or count(b) > MAX_ENTRIES) and b < span:
        b *= 2
    return b


def from_events(ev: IOEvents, t0: float, t1: float, thread_of: dict[int, int],
                devices: dict[str, str] | None = None) -> IoRanges | None:
    """Traced IOs (issue time, latency, device, op, issuing thread): ``t0``/``t1`` the timeline's
    span (monotonic), ``thread_of`` tid -> row of the page's thread table (others: -1),
    ``devices`` '254:0' -> 'vda' where the capture recorded names."""
    if not len(ev.t):
        return None
    t = np.asarray(ev.t, dtype=np.float64)
    lo = min(t0, float(t.min()))
    span = max(t1, float(t.max())) - lo
    groups: dict[tuple[int, int], int] = {}
    gcode = np.zeros(len(t), dtype=np.int64)
    pairs = np.asarray(ev.dev_code, dtype=np.int64) * 16 + np.asarray(ev.op_code, dtype=np.int64)
    for key in np.unique(pairs):
        groups[(int(key) // 16, int(key) % 16)] = len(groups)
        gcode[pairs == key] = groups[(int(key) // 16, int(key) % 16)]
    th = np.asarray([thread_of.get(int(x), -1) for x in ev.tid], dtype=np.int64) + 1
    rows = row_of(np.asarray(ev.latency, dtype=np.float64))
    nth = int(th.max()) + 1
    inner = (rows * len(groups) + gcode) * nth + th
    width = ROWS * len(groups) * nth

    def count(b: float) -> int:
        return int(len(np.unique(np.floor((t - lo) / b).astype(np.int64) * width + inner)))

    col = _column(span, count)
    keys, counts = np.unique(np.floor((t - lo) / col).astype(np.int64) * width + inner, return_counts=True)
    rest = keys % width
    entries = [(int(k // width), int(r // nth) // len(groups), int(r // nth) % len(groups), int(r % nth) - 1, int(c))
               for k, r, c in zip(keys, rest, counts, strict=True)]
    devs = devices or {}
    names = [f"{devs.get(ev.dev_names[d], ev.dev_names[d])} {ev.op_names[o]}" for (d, o) in groups]
    max_s = {g: float(np.max(np.asarray(ev.latency)[gcode == g])) for g in range(len(groups))}
    notes = []
    if ev.unpaired:
        notes.append(f"{ev.unpaired:,} completions without their issue in the trace (issued before it started, "
                     "or the issue was lost) are not counted: they have no latency")
    return IoRanges(source="trace", column=col, t0=lo - t0, ncolumns=int(math.ceil(span / col)) or 1,
                    groups=names, entries=entries, total=len(t), max_s=max_s, notes=notes)


def from_hist(h: histograms.BlockHist, t0: float, t1: float, devices: dict[str, str] | None = None) -> IoRanges | None:
    """The bcc backend's per-second histograms: each histogram bucket's count in the row of its
    middle latency; no thread."""
    if not h.slots:
        return None
    lo = min([t0] + [s.t for s in h.slots])
    span = max([t1] + [s.end for s in h.slots]) - lo
    col = max(h.slot_seconds or 1.0, FIRST_COLUMN)
    while span / col > MAX_COLUMNS:
        col *= 2
    groups: dict[str, int] = {}
    got: dict[tuple[int, int, int], int] = {}
    max_s: dict[int, float] = {}
    for s in h.slots:
        g = groups.setdefault(f"{(devices or {}).get(s.dev, s.dev)} {OPS.get(s.op, s.op)}", len(groups))
        c = int((s.t - lo) // col)
        max_s[g] = max(max_s.get(g, 0.0), s.max_ns / 1e9)
        for k, n in s.buckets.items():
            a, b = histograms.bucket_bounds(k, h.sub_bits)
            r = int(row_of(np.asarray([math.sqrt(max(a, 1) * max(b, 1)) / 1e9]))[0])
            got[(c, r, g)] = got.get((c, r, g), 0) + n
    entries = sorted((c, r, g, -1, n) for (c, r, g), n in got.items())
    return IoRanges(source="histograms", column=col, t0=lo - t0, ncolumns=int(math.ceil(span / col)) or 1,
                    groups=list(groups), entries=entries, total=sum(n for *_, n in entries), max_s=max_s,
                    notes=["in-kernel histograms (bcc): per device, op and second, not per thread"])

"""Self-contained SVG for latency heatmaps and sub-second CPU heatmaps (renderers layer).

``LATENCY`` draws a LatencyHeatmap, one panel per heatmap (op, device or issuer) sharing the
time columns and latency rows, whichever backend built it (paired perf events or bcc's
in-kernel histograms); ``SUBSECOND`` draws the FlameScope-style CPU view of a
SubsecondHeatmap. The geometry and colours are computed here (deterministic: same input, same
bytes); the template lays them out and an inlined script shows counts on hover. No network,
no external fonts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from profiler.analyzers.io.heatmap import Heatmap, LatencyHeatmap, fmt_latency
from profiler.analyzers.stacks.subsecond import SubsecondHeatmap
from profiler.renderers import jinja_env

__all__ = ["LATENCY", "SUBSECOND", "COLOUR_SCALES", "HeatmapOptions", "colour_levels", "fmt_latency", "fmt_time"]

# light yellow -> orange -> red -> dark red (perceptually ordered, readable on white)
_STOPS = [(0.0, (255, 240, 170)), (0.35, (253, 174, 97)), (0.7, (227, 26, 28)), (1.0, (110, 0, 30))]
FONT = "Verdana, 'DejaVu Sans', Arial, sans-serif"
COLOUR_SCALES = ("log", "quantile", "linear")


@dataclass(frozen=True)
class HeatmapOptions:
    """How to draw a heatmap; None means the kind's default (latency: log colours, 14 px columns or
    60 px for a collector's 1 s slots; sub-second: linear colours)."""

    title: str | None = None
    subtitle: str | None = None  # None: the model's own (a LatencyHeatmap has one)
    colour: str | None = None  # one of COLOUR_SCALES
    percentile_lines: bool = True  # p50 and p99 per column (latency only)
    max_cell_width: float | None = None  # px, the widest a latency column is drawn
    source: str = "BUNDLE"  # what the sub-second view's click-to-select prints as the flamegraph input


def _ramp(v: float) -> str:
    v = min(max(v, 0.0), 1.0)
    for (a, ca), (b, cb) in zip(_STOPS, _STOPS[1:], strict=False):
        if v <= b:
            f = (v - a) / (b - a) if b > a else 0.0
            r, g, bl = (round(x + (y - x) * f) for x, y in zip(ca, cb, strict=True))
            return f"#{r:02x}{g:02x}{bl:02x}"
    r, g, bl = _STOPS[-1][1]
    return f"#{r:02x}{g:02x}{bl:02x}"


def colour_levels(counts: np.ndarray, scale: str = "log") -> np.ndarray:
    """Map counts to [0, 1] intensities. 'log' and 'quantile' keep one hot cell from washing
    out the rest; 'linear' is HeatMap's. Zero stays zero."""
    c = np.asarray(counts, dtype=np.float64)
    out = np.zeros_like(c)
    nz = c > 0
    if not nz.any():
        return out
    mx = float(c.max())
    if scale == "linear":
        out[nz] = c[nz] / mx
    elif scale == "quantile":
        vals = np.unique(c[nz])
        rank = np.searchsorted(vals, c[nz], side="right")
        out[nz] = rank / len(vals)
    elif scale == "log":
        out[nz] = np.log1p(c[nz]) / math.log1p(mx) if mx > 0 else 1.0
    else:
        raise ValueError(f"unknown colour scale {scale!r}: use {', '.join(COLOUR_SCALES)}")
    # the faintest non-empty cell stays visible
    out[nz] = 0.08 + 0.92 * out[nz]
    return out


def fmt_time(s: float) -> str:
    if abs(s - round(s)) < 1e-9:
        return f"{int(round(s))}s"
    return f"{s:.3g}s"


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    e = 10 ** math.floor(math.log10(raw))
    step = next(m * e for m in (1, 2, 2.5, 5, 10) if m * e >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(round(v, 15))
        v += step
    return out


def _log_ticks(lo: float, hi: float) -> list[float]:
    decades = math.log10(hi / lo)
    mults = (1,) if decades > 4 else ((1, 2, 5) if decades > 1.5 else (1, 2, 3, 5, 7))
    out = []
    e = math.floor(math.log10(lo))
    while 10.0**e <= hi * (1 + 1e-9):
        for m in mults:
            v = m * 10.0**e
            if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9):
                out.append(v)
        e += 1
    return out


class _YAxis:
    def __init__(self, edges: np.ndarray, log: bool, top: float, height: float) -> None:
        self.lo, self.hi, self.log = float(edges[0]), float(edges[-1]), log
        self.top, self.height = top, height

    def y(self, v: float) -> float:
        if self.log:
            f = math.log(max(v, self.lo * 1e-3) / self.lo) / math.log(self.hi / self.lo)
        else:
            f = (v - self.lo) / (self.hi - self.lo)
        return self.top + self.height * (1 - min(max(f, 0.0), 1.0))

    def ticks(self) -> list[float]:
        return _log_ticks(self.lo, self.hi) if self.log else _nice_ticks(self.lo, self.hi)


def _polyline_segments(xs: list[float], ys: list[float | None]) -> list[str]:
    segs: list[str] = []
    cur: list[str] = []
    for x, y in zip(xs, ys, strict=True):
        if y is None:
            if len(cur) > 1:
                segs.append(" ".join(cur))
            cur = []
        else:
            cur.append(f"{x:.1f},{y:.1f}")
    if len(cur) > 1:
        segs.append(" ".join(cur))
    elif len(cur) == 1:  # a single column: a short tick so it is visible
        sx, sy = cur[0].split(",")
        segs.append(f"{float(sx) - 3:.1f},{sy} {float(sx) + 3:.1f},{sy}")
    return segs


def _draw_latency(panels: list[Heatmap], *, title: str = "Block IO latency heatmap", subtitle: str = "",
           colour: str = "log", totals: dict[str, Any] | None = None, percentile_lines: bool = True,
           max_cell_width: float = 14.0) -> str:
    """One SVG with a panel per heatmap; all panels share columns and rows.

    ``max_cell_width``: the widest a column is drawn (px); few wide columns (the bcc backend's
    1 s slots) read better wider than the default."""
    if not panels:
        raise ValueError("nothing to draw")
    first = panels[0]
    ncols, nrows = first.ncols, first.nrows
    cw = min(max_cell_width, max(2.0, 960.0 / ncols))
    panel_h = 300.0 if len(panels) <= 2 else 190.0
    ch = min(14.0, max(2.0, panel_h / nrows))
    panel_h = ch * nrows
    left, right, top = 82.0, 30.0, 62.0
    gw = cw * ncols
    width = max(left + gw + right, 720.0)
    gap = 44.0
    level_all = colour_levels(np.stack([p.counts for p in panels]), colour)
    maxc = int(max(int(p.counts.max()) if p.counts.size else 0 for p in panels))
    drawn: list[dict[str, Any]] = []
    y = top
    for pi, p in enumerate(panels):
        y += 20.0  # panel label
        ax = _YAxis(p.row_edges, p.log, y, panel_h)
        cells = []
        lv = level_all[pi]
        cols, rows = np.nonzero(p.counts)
        for c, r in zip(cols.tolist(), rows.tolist(), strict=True):
            cells.append((f"{left + c * cw:.1f}", f"{y + (nrows - 1 - r) * ch:.1f}", _ramp(float(lv[c, r]))))
        xs = [left + (c + 0.5) * cw for c in range(ncols)]
        ncol = p.counts.sum(axis=1)
        # a percentile of a handful of IOs is noise: draw p50 from 3 IOs, p99 from 20
        p50 = [None if math.isnan(v) or k < 3 else ax.y(v) for v, k in zip(p.p50, ncol, strict=True)]
        p99 = [None if math.isnan(v) or k < 20 else ax.y(v) for v, k in zip(p.p99, ncol, strict=True)]
        yt = [(f"{ax.y(v):.1f}", fmt_latency(v)) for v in ax.ticks()]
        col_tot = p.counts.sum(axis=1)
        drawn.append({
            "label": p.label,
            "total": p.total,
            "y": y,
            "h": panel_h,
            "cells": cells,
            "p50": _polyline_segments(xs, p50) if percentile_lines else [],
            "p99": _polyline_segments(xs, p99) if percentile_lines else [],
            "yticks": yt,
            "note": _panel_note(p),
            "data": {
                "counts": p.counts.tolist(),
                "colTotals": col_tot.tolist(),
                "p50": [None if math.isnan(v) else v for v in p.p50.tolist()],
                "p99": [None if math.isnan(v) else v for v in p.p99.tolist()],
                "y": y,
                "label": p.label,
            },
        })
        y += panel_h + gap
    span = first.step * ncols
    xt = []
    for v in _nice_ticks(0.0, span, max(2, min(10, int(gw // 90)))):
        if v <= span + 1e-9:
            xt.append((f"{left + v / first.step * cw:.1f}", fmt_time(v)))
    height = y - gap + 34 + 44 + 30
    legend = [(_ramp(0.08 + 0.92 * i / 9), i) for i in range(10)]
    data = {
        "left": left, "cw": cw, "ch": ch, "ncols": ncols, "nrows": nrows, "t0": first.t0, "step": first.step,
        "edges": [float(e) for e in first.row_edges], "panels": [d["data"] for d in drawn],
    }
    return jinja_env.render(
        "heatmap.svg.j2",
        kind="latency", width=f"{width:.0f}", height=f"{height:.0f}", title=title, subtitle=subtitle, font=FONT,
        left=left, gw=f"{gw:.1f}", cw=f"{cw:.2f}", ch=f"{ch:.2f}", panels=drawn, xticks=xt,
        axis_y=f"{y - gap + 16:.1f}", details_y=f"{y - gap + 52:.1f}", legend_y=f"{y - gap + 74:.1f}",
        legend=legend, maxc=maxc, colour=colour, data=data, script=jinja_env.asset("heatmap.js"),
        totals=totals or {}, xlabel="time (s since the first event)" if first.t0 else "time (s)",
        log=first.log,
    )


def _panel_note(p: Heatmap) -> str:
    bits = []
    if p.above_max:
        bits.append(f"{p.above_max} above the top row, counted in it")
    if p.below_min:
        bits.append(f"{p.below_min} below the bottom row, counted in it")
    if p.after_max_col:
        bits.append(f"{p.after_max_col} after the last column, counted in it")
    return "; ".join(bits)


def _draw_subsecond(h: SubsecondHeatmap, *, title: str = "CPU samples: sub-second offset heatmap", subtitle: str = "",
                     colour: str = "linear", source: str = "BUNDLE") -> str:
    """FlameScope-style: a column per second, rows = offset within it (0 at the top).

    Clicking two cells selects a time range and prints the matching
    ``profiler flamegraph SOURCE --from A --to B`` line.
    """
    ncols, rows = h.ncols, h.rows
    cw = min(40.0, max(6.0, 960.0 / ncols))
    ch = min(12.0, max(4.0, 400.0 / rows))
    left, right, top = 82.0, 30.0, 82.0
    gw, gh = cw * ncols, ch * rows
    width = max(left + gw + right, 720.0)
    lv = colour_levels(h.counts, colour)
    cols, rws = np.nonzero(h.counts)
    cells = [(f"{left + c * cw:.1f}", f"{top + r * ch:.1f}", _ramp(float(lv[c, r]))) for c, r in zip(cols.tolist(), rws.tolist(), strict=True)]
    yt = [(f"{top + (ms / 1000.0) * gh:.1f}", f"{ms}ms") for ms in range(0, 1001, 200)]
    xt = [(f"{left + (v + 0.5) * cw:.1f}", fmt_time(v * h.step)) for v in _nice_ticks(0.0, float(ncols - 1), max(1, min(10, int(gw // 60))))
          if v <= ncols - 1 and float(v).is_integer()]
    if h.note:
        subtitle = f"{subtitle} ({h.note})" if subtitle else h.note
    height = top + gh + 34 + 44 + 30
    legend = [(_ramp(0.08 + 0.92 * i / 9), i) for i in range(10)]
    data = {"left": left, "top": top, "cw": cw, "ch": ch, "ncols": ncols, "rows": rows, "t0": h.t0, "step": h.step,
            "counts": h.counts.tolist(), "source": source}
    return jinja_env.render(
        "heatmap.svg.j2",
        kind="subsecond", width=f"{width:.0f}", height=f"{height:.0f}", title=title, subtitle=subtitle, font=FONT,
        left=left, top=top, gw=f"{gw:.1f}", gh=f"{gh:.1f}", cw=f"{cw:.2f}", ch=f"{ch:.2f}", cells=cells, xticks=xt,
        yticks=yt, axis_y=f"{top + gh + 16:.1f}", details_y=f"{top + gh + 52:.1f}", legend_y=f"{top + gh + 74:.1f}",
        legend=legend, maxc=int(h.counts.max()) if h.counts.size else 0, colour=colour, data=data,
        script=jinja_env.asset("heatmap.js"), total=h.total,
    )


class LatencyHeatmapSvg:
    """Block IO (or any latency) heatmap: panels sharing time columns and latency rows, p50/p99 lines."""

    model = LatencyHeatmap
    formats = ("svg",)
    extensions = (".svg",)

    def render(self, model: LatencyHeatmap, options: HeatmapOptions | None = None) -> str:
        o = options or HeatmapOptions()
        return _draw_latency(model.panels, title=o.title or "Block IO latency heatmap",
                             subtitle=model.subtitle if o.subtitle is None else o.subtitle, colour=o.colour or "log",
                             totals=model.totals, percentile_lines=o.percentile_lines,
                             max_cell_width=o.max_cell_width or (60.0 if model.slots else 14.0))


class SubsecondHeatmapSvg:
    """CPU samples by second (columns) and offset within the second (rows); click two cells for a range."""

    model = SubsecondHeatmap
    formats = ("svg",)
    extensions = (".svg",)

    def render(self, model: SubsecondHeatmap, options: HeatmapOptions | None = None) -> str:
        o = options or HeatmapOptions()
        return _draw_subsecond(model, title=o.title or "CPU samples: sub-second offset heatmap", subtitle=o.subtitle or "",
                               colour=o.colour or "linear", source=o.source)


LATENCY = LatencyHeatmapSvg()
SUBSECOND = SubsecondHeatmapSvg()

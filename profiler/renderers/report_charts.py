"""Small inline SVG charts for the HTML report (renderers layer): line and stacked-area timelines, bars.

Our own drawing, no library and no script: each chart is a self-contained ``<svg>`` string.
Every piece of text is escaped here (series names come from thread and process names).
Colours are fixed per series position so the same report renders the same way every time.
"""

from __future__ import annotations

import math
from html import escape

PALETTE = ("#2f6fb0", "#d9822b", "#3a9a5b", "#b8434e", "#7b5ea7", "#8c6d3f", "#c75fa0", "#6b7a8f", "#b3a11a", "#17a2b8")
STATE_COLOURS = {
    "running or runnable": "#3a9a5b", "blocked on IO": "#d9822b", "futex (locks, parked workers)": "#b8434e",
    "idle (epoll, recv)": "#c9d3df", "sleep": "#e3e7ec", "other": "#9aa5b1",
}
W, PAD_L, PAD_R, PAD_T, PAD_B = 1040, 56, 170, 10, 22


def _nice_max(v: float) -> float:
    if v <= 0 or not math.isfinite(v):
        return 1.0
    exp = 10.0 ** math.floor(math.log10(v))
    for m in (1, 2, 4, 6, 8, 10):  # quarters of these read well
        if m * exp >= v:
            return float(m * exp)
    return float(10 * exp)


def _fmt_tick(v: float) -> str:
    if v >= 10000:
        return f"{v / 1000:.0f}k"
    if v >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.2g}" if v < 1 else f"{v:.1f}"


MARK_COLOURS = {"warmup": "#8c99a6", "dip": "#d9822b"}


def timeline(t: list[float], series: dict[str, list[float | None]], unit: str, *, stacked: bool = False,
             height: int = 150, t_max: float | None = None, colours: dict[str, str] | None = None,
             marks: list[tuple[float, float, str, str]] | None = None) -> str:
    """A time chart: x is seconds since the capture started (shared by every panel), y in ``unit``;
    ``marks``: (start, end, kind, label) ranges shaded behind the lines (a load's warm-up, dips)."""
    h = height
    pw, ph = W - PAD_L - PAD_R, h - PAD_T - PAD_B
    names = list(series)
    if not t or not names:
        return _empty(h, "no data")
    step = (t[1] - t[0]) if len(t) > 1 else 1.0
    x_max = t_max if t_max else t[-1] + step
    if not (math.isfinite(x_max) and x_max > 0):
        x_max = 1.0
    xs = [PAD_L + pw * (ti + step / 2) / x_max for ti in t]
    if stacked:
        acc = [0.0] * len(t)
        layers = []
        for n in names:
            lo = acc[:]
            acc = [a + (v or 0.0) for a, v in zip(acc, series[n], strict=True)]
            layers.append((n, lo, acc[:]))
        top = max(acc) if acc else 0.0
    else:
        vals = [v for n in names for v in series[n] if v is not None and math.isfinite(v)]
        top = max(vals) if vals else 0.0
    y_max = _nice_max(top)

    def y(v: float) -> float:
        return PAD_T + ph - ph * min(v, y_max) / y_max

    parts = [f'<svg class="chart" viewBox="0 0 {W} {h}" width="100%" role="img" xmlns="http://www.w3.org/2000/svg">']
    # grid and axes
    for i in range(5):
        gv = y_max * i / 4
        gy = y(gv)
        parts.append(f'<line x1="{PAD_L}" x2="{PAD_L + pw}" y1="{gy:.1f}" y2="{gy:.1f}" class="grid"/>')
        parts.append(f'<text x="{PAD_L - 6}" y="{gy + 4:.1f}" class="tick" text-anchor="end">{escape(_fmt_tick(gv))}</text>')
    # at most ~10 ticks whatever the span (a damaged timestamp can make it years long)
    tick = next((s for s in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600) if x_max / s <= 10),
                max(3600.0, _nice_max(x_max / 10)))
    k = 0
    while k * tick <= x_max + 1e-9:
        xv = k * tick
        gx = PAD_L + pw * xv / x_max
        k += 1
        parts.append(f'<text x="{gx:.1f}" y="{h - 6}" class="tick" text-anchor="middle">{escape(_fmt_tick(xv))}s</text>')
    for start, end, kind, label in marks or ():
        x0 = PAD_L + pw * max(0.0, start) / x_max
        x1 = PAD_L + pw * min(x_max, end) / x_max
        if x1 > x0:
            parts.append(f'<rect x="{x0:.1f}" y="{PAD_T}" width="{x1 - x0:.1f}" height="{ph}" '
                         f'fill="{MARK_COLOURS.get(kind, "#8c99a6")}" fill-opacity="0.14"><title>{escape(label)}</title></rect>')
    col = colours or {}
    for i, n in enumerate(names):
        c = col.get(n, PALETTE[i % len(PALETTE)])
        if stacked:
            _, lo, hi = layers[i]
            pts = [f"{x:.1f},{y(v):.1f}" for x, v in zip(xs, hi, strict=True)]
            pts += [f"{x:.1f},{y(v):.1f}" for x, v in reversed(list(zip(xs, lo, strict=True)))]
            parts.append(f'<polygon points="{" ".join(pts)}" fill="{c}" fill-opacity="0.85" stroke="none">'
                         f'<title>{escape(n)}</title></polygon>')
        else:
            segs: list[list[str]] = [[]]
            for x, v in zip(xs, series[n], strict=True):
                if v is None or not math.isfinite(v):
                    if segs[-1]:
                        segs.append([])
                    continue
                segs[-1].append(f"{x:.1f},{y(v):.1f}")
            for seg in segs:
                if len(seg) == 1:
                    cx, cy = seg[0].split(",")
                    parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{c}"/>')
                elif seg:
                    parts.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{c}" stroke-width="1.8">'
                                 f'<title>{escape(n)}</title></polyline>')
        ly = PAD_T + 12 + 15 * i
        if ly < h - PAD_B:
            label = n if len(n) <= 24 else n[:23] + "…"
            vals_n = [v for v in series[n] if v is not None]
            mean = sum(vals_n) / len(vals_n) if vals_n else None
            tip = f"{n}: mean {_fmt_tick(mean)} {unit}" if mean is not None else n
            parts.append(f'<rect x="{PAD_L + pw + 12}" y="{ly - 9}" width="10" height="10" fill="{c}"/>'
                         f'<text x="{PAD_L + pw + 27}" y="{ly}" class="legend"><title>{escape(tip)}</title>{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bars(items: list[tuple[str, float, str]], unit: str, *, max_value: float | None = None, marker: float | None = None) -> str:
    """Horizontal bars: (label, value, colour); an optional marker line (e.g. the 80% threshold)."""
    if not items:
        return _empty(40, "no data")
    row = 22
    h = PAD_T + row * len(items) + 24
    lw = 260
    pw = W - lw - 120
    top = max_value or _nice_max(max(v for _, v, _ in items))
    parts = [f'<svg class="chart" viewBox="0 0 {W} {h}" width="100%" role="img" xmlns="http://www.w3.org/2000/svg">']
    for i, (label, v, c) in enumerate(items):
        y0 = PAD_T + i * row
        wv = pw * min(v, top) / top if top > 0 else 0
        lab = label if len(label) <= 36 else label[:35] + "…"
        parts.append(f'<text x="{lw - 8}" y="{y0 + 15}" class="legend" text-anchor="end"><title>{escape(label)}</title>{escape(lab)}</text>')
        parts.append(f'<rect x="{lw}" y="{y0 + 4}" width="{wv:.1f}" height="{row - 8}" fill="{c}"/>')
        parts.append(f'<text x="{lw + wv + 6:.1f}" y="{y0 + 15}" class="tick">{escape(_fmt_tick(v))} {escape(unit)}</text>')
    if marker is not None and top > 0:
        mx = lw + pw * min(marker, top) / top
        parts.append(f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{PAD_T}" y2="{h - 20}" class="marker"/>'
                     f'<text x="{mx:.1f}" y="{h - 6}" class="tick" text-anchor="middle">{escape(_fmt_tick(marker))} {escape(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def share_bar(shares: dict[str, float], colours: dict[str, str] | None = None, width: int = 220) -> str:
    """A one-line 100% bar of shares (thread time by state), for table cells."""
    col = colours or {}
    x = 0.0
    parts = [f'<svg class="sharebar" viewBox="0 0 {width} 12" width="{width}" height="12" xmlns="http://www.w3.org/2000/svg">']
    for i, (k, v) in enumerate(shares.items()):
        if v <= 0:
            continue
        w = width * v
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="12" fill="{col.get(k, PALETTE[i % len(PALETTE)])}">'
                     f'<title>{escape(k)} {100 * v:.0f}%</title></rect>')
        x += w
    parts.append("</svg>")
    return "".join(parts)


def _empty(h: int, text: str) -> str:
    return (f'<svg class="chart" viewBox="0 0 {W} {h}" width="100%" xmlns="http://www.w3.org/2000/svg">'
            f'<text x="{W / 2}" y="{h / 2}" class="tick" text-anchor="middle">{escape(text)}</text></svg>')

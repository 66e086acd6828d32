"""Small inline SVG charts for the HTML report (renderers layer): bars and share bars.

Our own drawing, no library and no script: each chart is a self-contained ``<svg>`` string. The
time charts are drawn once, by the page's script (templates/report.js), from the analysis JSON.
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
    mx = lw + pw * min(marker, top) / top if marker is not None and top > 0 else None
    for i, (label, v, c) in enumerate(items):
        y0 = PAD_T + i * row
        wv = pw * min(v, top) / top if top > 0 else 0
        lab = label if len(label) <= 36 else label[:35] + "…"
        parts.append(f'<text x="{lw - 8}" y="{y0 + 15}" class="legend" text-anchor="end"><title>{escape(label)}</title>{escape(lab)}</text>')
        parts.append(f'<rect x="{lw}" y="{y0 + 4}" width="{wv:.1f}" height="{row - 8}" fill="{c}"/>')
        text = f"{_fmt_tick(v)} {unit}"
        tx = lw + wv + 6
        if mx is not None and tx - 4 <= mx <= tx + 7 * len(text):  # the marker line would run through it
            tx = mx + 6
        parts.append(f'<text x="{tx:.1f}" y="{y0 + 15}" class="tick">{escape(text)}</text>')
    if mx is not None and marker is not None:
        parts.append(f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{PAD_T}" y2="{h - 20}" class="marker"/>'
                     f'<text x="{mx:.1f}" y="{h - 6}" class="tick" text-anchor="middle">{escape(_fmt_tick(marker))} {escape(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def share_bar(shares: dict[str, float], colours: dict[str, str] | None = None, width: int = 220) -> str:
    """A one-line 100% bar of shares (thread time by state), for table cells."""
    col = colours or {}
    x = 0.0
    parts = [f'<svg class="sharebar" viewBox="0 0 {width} 12" preserveAspectRatio="none" xmlns="http://www.w3.org/2000/svg">']
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

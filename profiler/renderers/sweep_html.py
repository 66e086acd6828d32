"""The sweep report (renderers layer): throughput and latency against concurrency, the knee,
and each step's verdict, as one offline HTML file (templates/sweep.html.j2, report.css)."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from markupsafe import Markup

from profiler.analyzers.load.sweep import CATEGORY_WORDS, Sweep
from profiler.renderers import formatting as fmt
from profiler.renderers import jinja_env
from profiler.renderers.report_charts import PAD_B, PAD_L, PAD_T, W, _fmt_tick, _nice_max

TEMPLATE = "sweep.html.j2"
COLOURS = {"cpu": "#b8434e", "io_wait": "#d9822b", "memory": "#7b5ea7", "lock_contention": "#c75fa0",
           "not_saturated": "#3a9a5b"}


def curve(xs: list[float], ys: list[float | None], unit: str, *, colour: str, knee: float | None,
          height: int = 220, labels: list[str] | None = None) -> str:
    """y against the swept value; a log2 x axis when the values grow geometrically (1, 2, 4...)."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and x > 0]
    if not pts:
        return f'<svg class="chart" viewBox="0 0 {W} 40" width="100%"><text x="{W / 2}" y="24" class="tick" text-anchor="middle">no data</text></svg>'
    pad_r = 40
    pw, ph = W - PAD_L - pad_r, height - PAD_T - PAD_B - 6
    lo, hi = min(x for x, _ in pts), max(x for x, _ in pts)
    log = lo > 0 and hi / lo >= 4
    fx = (lambda v: math.log2(v)) if log else (lambda v: v)
    a, b = fx(lo), fx(hi)
    span = (b - a) or 1.0

    def X(v: float) -> float:
        return PAD_L + 20 + (pw - 40) * (fx(v) - a) / span

    top = _nice_max(max(y for _, y in pts))

    def Y(v: float) -> float:
        return PAD_T + ph - ph * min(v, top) / top

    out = [f'<svg class="chart" viewBox="0 0 {W} {height}" width="100%" role="img" xmlns="http://www.w3.org/2000/svg">']
    for i in range(5):
        gv = top * i / 4
        out.append(f'<line x1="{PAD_L}" x2="{W - pad_r}" y1="{Y(gv):.1f}" y2="{Y(gv):.1f}" class="grid"/>'
                   f'<text x="{PAD_L - 6}" y="{Y(gv) + 4:.1f}" class="tick" text-anchor="end">{escape(_fmt_tick(gv))}</text>')
    for x, lab in zip(xs, labels or [f"{x:g}" for x in xs], strict=True):
        if x > 0:
            out.append(f'<text x="{X(x):.1f}" y="{height - 8}" class="tick" text-anchor="middle">{escape(lab)}</text>')
    if knee is not None:
        out.append(f'<line x1="{X(knee):.1f}" x2="{X(knee):.1f}" y1="{PAD_T}" y2="{PAD_T + ph}" class="marker"/>'
                   f'<text x="{X(knee) + 4:.1f}" y="{PAD_T + 12}" class="tick">knee</text>')
    line = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in pts)
    out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
    for x, y in pts:
        out.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3.5" fill="{colour}">'
                   f'<title>{escape(f"{x:g}: {y:,.2f} {unit}")}</title></circle>')
    out.append(f'<text x="{PAD_L + 6}" y="{PAD_T + 10}" class="unit">{escape(unit)}</text></svg>')
    return "".join(out)


def context(sw: Sweep) -> dict[str, Any]:
    ok = [s for s in sw.steps if s.status == "ok" and s.threads is not None]
    xs = [s.threads or 0.0 for s in ok]
    knee = sw.knee.threads if sw.knee is not None else None
    key = sw.latency_key
    rows = []
    for s in sw.steps:
        rows.append({"s": s, "colour": COLOURS.get(s.category or "", "#6b7a8f"),
                     "title": fmt.CATEGORY_TITLES.get(s.category or "", s.status),
                     "targets": [{"t": t, "words": CATEGORY_WORDS.get(t.category, t.category),
                                  "cores": fmt.cores(t.cpu_cores, t.cpu_available)} for t in s.targets]})
    return {
        "sw": sw, "rows": rows, "knee": knee, "latency_key": key, "data": sw.to_dict(),
        "css": Markup(jinja_env.asset("report.css")),
        "tps_chart": Markup(curve(xs, [s.tps for s in ok], "transactions/s", colour="#2f6fb0", knee=knee,
                                  labels=[s.value for s in ok])),
        "lat_chart": Markup(curve(xs, [s.latency_ms for s in ok], f"{key or 'latency'} ms", colour="#d9822b", knee=knee,
                                  labels=[s.value for s in ok])) if key else None,
    }


class SweepHtml:
    """DIR/report.html of `profiler sweep`."""

    model = Sweep
    formats = ("html",)
    extensions = (".html", ".htm")

    def render(self, model: Sweep, options: object | None = None) -> str:
        return jinja_env.render(TEMPLATE, **context(model))


RENDERER = SweepHtml()

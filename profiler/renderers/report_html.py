"""Self-contained HTML report of an Analysis (renderers layer): one offline file, verdict first.

templates/report.html.j2 and its CSS come through the shared Jinja environment (jinja_env.py,
autoescape on); the analysis is embedded as JSON with ``tojson``; charts are inline SVG drawn
by report_charts.py; nothing is fetched from the network. The analysis's pictures (flame
graphs, heatmaps) are drawn by the SVG renderers in PICTURES, each in its own sandboxed
frame; a picture that was not captured, or that no renderer draws, is said, not faked.
"""

from __future__ import annotations

import re
from typing import Any

from markupsafe import Markup, escape

from profiler.analyzers.analysis import Analysis
from profiler.renderers import flamegraph_svg, heatmap_svg, jinja_env
from profiler.renderers import formatting as fmt
from profiler.renderers import report_charts as charts
from profiler.renderers.protocol import Registry, ReportOptions

TEMPLATE = "report.html.j2"

CATEGORY_COLOURS = {
    "cpu": "#b8434e", "io_wait": "#d9822b", "memory": "#7b5ea7", "lock_contention": "#c75fa0", "not_saturated": "#3a9a5b",
}


# The pictures a report embeds, found by the model each artifact holds.
PICTURES = Registry(flamegraph_svg.RENDERER, heatmap_svg.LATENCY, heatmap_svg.SUBSECOND)


def _artifact_svg(a: Analysis, name: str) -> tuple[Markup | None, str | None]:
    """An artifact drawn by its own renderer, framed in an isolated iframe (its ids and script stay its own)."""
    if name not in a.artifacts:
        return None, a.missing_artifacts.get(name, "not captured")
    renderer = PICTURES.find(a.artifacts[name], "svg")
    if renderer is None:
        return None, "this build cannot draw it yet"
    try:
        svg = renderer.render(a.artifacts[name])
    except Exception as exc:  # noqa: BLE001 - one broken picture must not sink the report
        return None, f"could not be drawn: {type(exc).__name__}: {exc}"
    m = re.search(r'<svg[^>]*\sheight="(\d+)', svg)
    height = int(m.group(1)) + 8 if m else 600
    # srcdoc is an attribute: escape() makes the SVG text safe inside it; the frame renders it.
    # The SVG keeps its viewBox and scales to the frame's width (no horizontal scrolling).
    doc = "<style>html,body{margin:0}svg{display:block;width:100%;height:auto}</style>" + svg
    return Markup(f'<iframe class="artifact" sandbox="allow-scripts" style="height:{min(height, 1400)}px" '
                  f'srcdoc="{escape(doc)}"></iframe>'), None


def context(a: Analysis) -> dict[str, Any]:
    v = a.verdict.overall
    m = a.metrics
    tl = a.timeline
    t_max = (tl.t[-1] + tl.step) if tl.t else None
    panels = []
    order = ("load_tps", "load_latency", "cpu", "states", "host_cpu", "io_iops", "io_latency", "disk_iops",
             "disk_await", "syscalls", "ctxsw", "rss", "majflt", "psi")
    marks = [(mk.start, mk.end, mk.kind, mk.label) for mk in tl.marks]
    for key in order:
        p = tl.panels.get(key)
        if p is None or not p.series:
            continue
        colours = charts.STATE_COLOURS if key == "states" else None
        panels.append({"key": key, "title": p.title, "unit": p.unit,
                       "svg": Markup(charts.timeline(tl.t, p.series, p.unit, stacked=p.stacked, t_max=t_max,
                                                     colours=colours, height=170 if key == "states" else 140,
                                                     marks=marks))})
    targets = []
    for tv, tm in zip(a.verdict.per_target, m.targets, strict=True):
        shares = {k: tm.states.get(k, 0.0) for k in ("cpu", "runnable", "io", "futex", "idle", "sleep", "other")}
        colour_map = {"cpu": "#3a9a5b", "runnable": "#9fd4a8", "io": "#d9822b", "futex": "#b8434e", "idle": "#c9d3df",
                      "sleep": "#e3e7ec", "other": "#9aa5b1"}
        active = {k: tm.active_states.get(k, 0.0) for k in shares} if tm.active_states else {}
        pools = []
        for pool in tm.pools[:20]:
            pools.append({"p": pool, "bar": Markup(charts.share_bar({k: pool.states.get(k, 0.0) for k in shares}, colour_map, 160))})
        targets.append({
            "tm": tm, "v": tv, "colour": CATEGORY_COLOURS[tv.category], "title": fmt.CATEGORY_TITLES[tv.category],
            "bar_all": Markup(charts.share_bar(shares, colour_map, 260)),
            "bar_active": Markup(charts.share_bar(active, colour_map, 260)) if active else None,
            "pools": pools,
            "pool_chart": Markup(charts.bars([(p.pool, p.util, "#b8434e" if p.util >= 0.8 else "#2f6fb0")
                                              for p in tm.pools[:12] if p.cpu_cores >= 0.01], "of size",
                                             max_value=1.0, marker=0.8)) if len([p for p in tm.pools if p.cpu_cores >= 0.01]) >= 2 else None,
        })
    comparison = None
    if len(m.targets) > 1:
        outliers = {i.outlier for i in a.verdict.imbalances}
        comparison = Markup(charts.bars([(t.label, t.cpu_cores or 0.0, "#b8434e" if t.label in outliers else "#2f6fb0")
                                         for t in m.targets], "cores"))
    pictures = []
    for name, title in (
        ("cpu_flame", "On-CPU flame graph"),
        ("offcpu_flame", "Off-CPU flame graph (blocked time)"),
        ("io_heatmap", "IO latency heatmap"),
        ("cpu_heatmap", "CPU sub-second heatmap"),
    ):
        svg, why = _artifact_svg(a, name)
        pictures.append({"name": name, "title": title, "svg": svg, "why": why})
    data = a.to_dict()
    load = None
    if a.load is not None:
        dip_svg, dip_why = _artifact_svg(a, "load_dip_flame") if a.load.phases.dips else (None, None)
        load = {"l": a.load, "d": data["load"], "dip_svg": dip_svg, "dip_why": dip_why}
    return {
        "load": load,
        "a": a, "v": v, "m": m, "cap": a.manifest,
        "title": fmt.CATEGORY_TITLES[v.category], "colour": CATEGORY_COLOURS[v.category],
        "panels": panels, "targets": targets, "comparison": comparison, "pictures": pictures,
        "css": Markup(jinja_env.asset("report.css")),
        "data": data,
        "fmt": fmt,
        "thresholds": sorted(data["thresholds"].items()),
    }


class HtmlReport:
    """The self-contained HTML report: verdict, evidence, timelines, thread pools, pictures, capture health."""

    model = Analysis
    formats = ("html", "htm")
    extensions = (".html", ".htm")

    def render(self, model: Analysis, options: ReportOptions | None = None) -> str:
        return jinja_env.render(TEMPLATE, **context(model))


RENDERER = HtmlReport()

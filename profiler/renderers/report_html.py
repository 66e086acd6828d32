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

from markupsafe import Markup

from profiler.analyzers.analysis import Analysis
from profiler.analyzers.stacks import ranges, subsecond
from profiler.renderers import flamegraph_svg, heatmap_svg, jinja_env, report_server
from profiler.renderers import formatting as fmt
from profiler.renderers import report_charts as charts
from profiler.renderers.protocol import Registry, Renderer, ReportOptions

# The timeline's panels in this order; panels others add (load, server metrics) follow by key.
PANEL_ORDER = ("load_tps", "load_latency", "cpu", "states", "host_cpu", "io_iops", "io_latency", "disk_iops",
               "disk_await", "syscalls", "ctxsw", "rss", "majflt", "psi")

TEMPLATE = "report.html.j2"

CATEGORY_COLOURS = {
    "cpu": "#b8434e", "io_wait": "#d9822b", "memory": "#7b5ea7", "lock_contention": "#c75fa0", "not_saturated": "#3a9a5b",
}


MAX_HEATMAP_COLUMNS = 900  # seconds of the CPU sub-second heatmap drawn in the page (15 minutes)
UNKNOWN_SHARE = 0.05  # advise about [unknown] frames when this share of a graph's stacks hold one

# The pictures a report embeds, found by the model each artifact holds.
PICTURES: Registry[Renderer[Any, Any]] = Registry(flamegraph_svg.RENDERER, heatmap_svg.LATENCY, heatmap_svg.SUBSECOND)


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
    # the frame keeps the picture's proportions at any width (the SVG scales to the frame's
    # width): no scroll box inside the page
    w = re.search(r'<svg[^>]*\swidth="(\d+)', svg)
    h = re.search(r'<svg[^>]*\sheight="(\d+)', svg)
    size = f"aspect-ratio:{w.group(1)}/{h.group(1)}" if w and h else "height:600px"
    # srcdoc is a single-quoted attribute: only "&" (character references) and "'" (its end)
    # mean anything inside one, so only they are escaped. escape() also turned every <, > and "
    # into 4-5 bytes: 45% more for an IO heatmap's frame, whose SVG quotes every attribute with
    # '"' and holds few "'". The SVG keeps its viewBox and scales to the frame's width.
    doc = "<style>html,body{margin:0}svg{display:block;width:100%;height:auto}</style>" + svg
    return Markup(f'<iframe class="artifact" sandbox="allow-scripts" style="{size}" '
                  f"srcdoc='{attribute(doc)}'></iframe>"), None


def attribute(text: str) -> str:
    """``text`` made safe inside a single-quoted HTML attribute."""
    return text.replace("&", "&amp;").replace("'", "&#39;")


def context(a: Analysis) -> dict[str, Any]:
    v = a.verdict.overall
    m = a.metrics
    tl = a.timeline
    t_max = (tl.t[-1] + tl.step) if tl.t else None
    panels = []
    marks = [(mk.start, mk.end, mk.kind, mk.label) for mk in tl.marks]
    for key in [k for k in PANEL_ORDER if k in tl.panels] + sorted(k for k in tl.panels if k not in PANEL_ORDER):
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
        shares = {k: tm.time.states.get(k, 0.0) for k in ("cpu", "runnable", "io", "futex", "idle", "sleep", "other")}
        colour_map = {"cpu": "#3a9a5b", "runnable": "#9fd4a8", "io": "#d9822b", "futex": "#b8434e", "idle": "#c9d3df",
                      "sleep": "#e3e7ec", "other": "#9aa5b1"}
        active = {k: tm.time.active_states.get(k, 0.0) for k in shares} if tm.time.active_states else {}
        pools = []
        for pool in tm.time.pools[:20]:
            pools.append({"p": pool, "bar": Markup(charts.share_bar({k: pool.states.get(k, 0.0) for k in shares}, colour_map, 160))})
        targets.append({
            "tm": tm, "v": tv, "colour": CATEGORY_COLOURS[tv.category], "title": fmt.CATEGORY_TITLES[tv.category],
            "bar_all": Markup(charts.share_bar(shares, colour_map, 260)),
            "bar_active": Markup(charts.share_bar(active, colour_map, 260)) if active else None,
            "pools": pools,
            "pool_chart": Markup(charts.bars([(p.pool, p.util, "#b8434e" if p.util >= 0.8 else "#2f6fb0")
                                              for p in tm.time.pools[:12] if p.cpu_cores >= 0.01], "of size",
                                             max_value=1.0, marker=0.8)) if len([p for p in tm.time.pools if p.cpu_cores >= 0.01]) >= 2 else None,
        })
    comparison = None
    if len(m.targets) > 1:
        outliers = {i.outlier for i in a.verdict.imbalances}
        comparison = Markup(charts.bars([(t.label, t.process.cpu_cores or 0.0, "#b8434e" if t.label in outliers else "#2f6fb0")
                                         for t in m.targets], "cores"))
    pictures = []
    for name, title in (("io_heatmap", "IO latency heatmap"),):
        svg, why = _artifact_svg(a, name)
        pictures.append({"name": name, "title": title, "svg": svg, "why": why})
    flames = []
    for key, art, rng, title in (("cpu", "cpu_flame", "cpu_range", "On-CPU: where the CPU time goes"),
                                 ("offcpu", "offcpu_flame", "offcpu_range", "Off-CPU: where threads wait (blocked time)")):
        model = a.artifacts.get(art)
        flames.append({"key": key, "title": title, "ok": rng in a.artifacts,
                       "subtitle": model.subtitle if model is not None else None,
                       "notes": list(model.notes) if model is not None else [],
                       "why": a.missing_artifacts.get(art, "not captured"),
                       "unknown": unknown_advice(a, a.artifacts.get(rng))})
    page = page_data(a)
    data = a.to_dict()
    # the goroutine view is drawn by the page's flame graph (search, zoom, top functions), from page["flames"]
    gwhy = None if "goroutine" in page["flames"] else a.missing_artifacts.get("goroutine_flame", "no goroutine profile")
    server = report_server.html_context(a, "goroutine" in page["flames"], gwhy)
    load = None
    if a.load is not None:
        dip_svg, dip_why = _artifact_svg(a, "load_dip_flame") if a.load.phases.dips else (None, None)
        load = {"l": a.load, "d": data["load"], "dip_svg": dip_svg, "dip_why": dip_why}
    return {
        "load": load,
        "a": a, "v": v, "m": m, "cap": a.manifest,
        "title": fmt.CATEGORY_TITLES[v.category], "colour": CATEGORY_COLOURS[v.category],
        "panels": panels, "targets": targets, "server": server, "comparison": comparison, "pictures": pictures, "flames": flames,
        "cpu_heatmap_why": None if "cpu_heatmap" in a.artifacts else a.missing_artifacts.get("cpu_heatmap", "not captured"),
        "page": page,
        "devs": a.devices,
        "health": _health(a),
        "css": Markup(jinja_env.asset("report.css")),
        "script": Markup(jinja_env.script("report.js")),
        "data": data,
        "fmt": fmt,
        "thresholds": sorted(data["thresholds"].items()),
    }


def _health(a: Analysis) -> list[dict[str, Any]]:
    """The capture health table: one row per collector, and the evidence sources no collector
    stands for (an older bundle's), each once."""
    rows = [fmt.health_row(h.collector, h.backend, h.status, h.reason, h.files, h.stats) | {"reading": list(h.reading)}
            for h in a.health]
    covered = {h.collector for h in a.health} | {"offcpu" if "offcpu-stacks" in {h.collector for h in a.health} else ""}
    for name, status in sorted(a.metrics.sources.items()):
        if status != "ok" and name not in covered:
            word, _, why = status.partition(":")
            rows.append({"collector": name, "backend": "", "status": word, "reason": why.strip() or None,
                         "captured": "nothing", "details": [], "reading": []})
    return rows


def page_data(a: Analysis) -> dict[str, Any]:
    """What the page's script draws besides the analysis JSON: the range flame graphs' stacks by
    time bucket, the goroutine view's stacks, the CPU sub-second heatmap on the timeline's axis,
    and the panels' order."""
    tl = a.timeline
    out: dict[str, Any] = {"panel_order": list(PANEL_ORDER), "state_colours": charts.STATE_COLOURS, "flames": {}}
    for key, name in (("cpu", "cpu_range"), ("offcpu", "offcpu_range")):
        rs = a.artifacts.get(name)
        if isinstance(rs, ranges.RangeStacks):
            out["flames"][key] = rs.to_json()
    if "goroutine_flame" in a.artifacts:  # a snapshot, not a range: the same graph whatever the range
        from profiler.analyzers.server import report as server_report

        gs = ranges.from_totals(server_report.goroutine_folded(a.server), "goroutines")
        if gs is not None:
            out["flames"]["goroutine"] = gs.to_json()
    hm = a.artifacts.get("cpu_heatmap")
    if isinstance(hm, subsecond.SubsecondHeatmap) and hm.total:
        cols = hm.counts[: MAX_HEATMAP_COLUMNS]
        out["cpu_heatmap"] = {"rows": hm.rows, "counts": cols.tolist(),
                              "offset": round(hm.t0 - tl.t0, 6) if tl.t0 is not None else 0.0,
                              "cut": len(hm.counts) > MAX_HEATMAP_COLUMNS}
    if tl.t:
        out["t_end"] = tl.t[-1] + tl.step
    else:
        ends = [rs.t0 + rs.nbuckets * rs.bucket for rs in (a.artifacts.get("cpu_range"), a.artifacts.get("offcpu_range"))
                if isinstance(rs, ranges.RangeStacks) and rs.timed]
        out["t_end"] = max(ends, default=1.0)
    return out


def unknown_advice(a: Analysis, rs: Any) -> dict[str, str] | None:
    """Why stacks hold [unknown] frames and how to get names, when enough of them do."""
    if not isinstance(rs, ranges.RangeStacks) or rs.unknown_share < UNKNOWN_SHARE:
        return None
    share = f"{100 * rs.unknown_share:.0f}%"
    opts = a.manifest.get("options") or {}
    container = any(t.get("container") for t in a.manifest.get("targets") or [])
    if rs.unknown_deep >= rs.unknown_share / 2 and opts.get("call_graph", "fp") == "fp":
        why = (f"{share} of these stacks run into frames without a name, most of them in long runs: the frame-pointer "
               "walk (--call-graph fp) went astray in code built without frame pointers (often libc, or the program "
               "itself), and read addresses that are not code. Runs of [unknown] are folded into one frame here.")
        fix = ("capture again with --call-graph dwarf (larger captures), or rebuild the program with frame pointers "
               "(C/C++: -fno-omit-frame-pointer; Rust: RUSTFLAGS=\"-C force-frame-pointers=yes\"; Go keeps them).")
    elif container:
        why = (f"{share} of these stacks hold frames without a name, and a target runs in a container: its binaries and "
               "their symbols live in the container's filesystem.")
        fix = ("keep the container running until the capture has finished symbolizing (profiler reads symbols through "
               "/proc/PID/root), and ship symbols in the image (not stripped binaries, or debug packages).")
    else:
        why = f"{share} of these stacks hold frames without a name: stripped binaries, JIT code, or a broken stack walk."
        fix = ("install the programs' debug symbols (Debian: the -dbgsym packages), give JIT runtimes a perf map "
               "(/tmp/perf-PID.map), or capture with --call-graph dwarf.")
    return {"why": why, "fix": fix}


class HtmlReport:
    """The self-contained HTML report: verdict, evidence, timelines, thread pools, pictures, capture health."""

    model = Analysis
    formats = ("html", "htm")
    extensions = (".html", ".htm")

    def render(self, model: Analysis, options: ReportOptions | None = None) -> str:
        return jinja_env.render(TEMPLATE, **context(model))


RENDERER = HtmlReport()

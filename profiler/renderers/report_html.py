"""Self-contained HTML report of an Analysis (renderers layer): one offline file, verdict first.

templates/report.html.j2 and its CSS come through the shared Jinja environment (jinja_env.py,
autoescape on); the analysis is embedded as JSON with ``tojson``, and what the page explores
(analyzers/explore.py: threads and their tracks, stacks, syscalls and block IOs by time and
thread, goroutine snapshots) as a second JSON block; the page's scripts (report.js, then
report_flame.js and report_views.js) draw every time chart, flame graph and heatmap from them,
once. Small static bars (thread states, pools, the cross-target comparison) are inline SVG from
report_charts.py. Nothing is fetched from the network. A view that was not captured is said,
not faked.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from profiler.analyzers.analysis import Analysis
from profiler.analyzers.explore import Explore
from profiler.analyzers.stacks import ranges
from profiler.renderers import formatting as fmt
from profiler.renderers import jinja_env, report_server
from profiler.renderers import report_charts as charts
from profiler.renderers.protocol import ReportOptions

# The timeline's panels in this order; panels others add (load, server metrics) follow by key.
PANEL_ORDER = ("load_tps", "load_latency", "cpu", "states", "host_cpu", "io_iops", "io_latency", "disk_iops",
               "disk_await", "syscalls", "ctxsw", "rss", "majflt", "psi")

TEMPLATE = "report.html.j2"
SCRIPTS = ("report.js", "report_flame.js", "report_views.js")

CATEGORY_COLOURS = {
    "cpu": "#b8434e", "io_wait": "#d9822b", "memory": "#7b5ea7", "lock_contention": "#c75fa0", "not_saturated": "#3a9a5b",
}
RUNTIMES = {"go": "Go", "rust": "Rust", "c": "C", "c++": "C++", "jvm": "JVM", "python": "Python"}
STATE_KEYS = ("cpu", "runnable", "io", "futex", "idle", "sleep", "other")
STATE_BAR_COLOURS = {"cpu": "#3a9a5b", "runnable": "#9fd4a8", "io": "#d9822b", "futex": "#b8434e", "idle": "#c9d3df",
                     "sleep": "#e3e7ec", "other": "#9aa5b1"}


def _runtime(name: str | None) -> str | None:
    """A target's runtime as people name it ("c" was shown bare)."""
    if not name:
        return None
    return "runtime: " + RUNTIMES.get(name.lower(), name)


def script() -> Markup:
    """The page's scripts, in order, and the call that starts them."""
    return Markup("\n".join(jinja_env.script(f) for f in SCRIPTS) + "\nprofilerReport.start();")


def context(a: Analysis) -> dict[str, Any]:
    v = a.verdict.overall
    m = a.metrics
    targets = []
    for tv, tm in zip(a.verdict.per_target, m.targets, strict=True):
        shares = {k: tm.time.states.get(k, 0.0) for k in STATE_KEYS}
        active = {k: tm.time.active_states.get(k, 0.0) for k in shares} if tm.time.active_states else {}
        pools = []
        for pool in tm.time.pools[:20]:
            pools.append({"p": pool, "bar": Markup(charts.share_bar({k: pool.states.get(k, 0.0) for k in shares},
                                                                    STATE_BAR_COLOURS, 160))})
        busy = [p for p in tm.time.pools if p.cpu_cores >= 0.01]
        targets.append({
            "tm": tm, "v": tv, "colour": CATEGORY_COLOURS[tv.category], "title": fmt.CATEGORY_TITLES[tv.category],
            "runtime": _runtime(tm.runtime),
            "bar_all": Markup(charts.share_bar(shares, STATE_BAR_COLOURS, 260)),
            "bar_active": Markup(charts.share_bar(active, STATE_BAR_COLOURS, 260)) if active else None,
            "pools": pools,
            "pool_chart": Markup(charts.bars([(p.pool, p.util, "#b8434e" if p.util >= 0.8 else "#2f6fb0")
                                              for p in busy[:12]], "of size", max_value=1.0, marker=0.8))
            if len(busy) >= 2 else None,
        })
    comparison = None
    if len(m.targets) > 1:
        outliers = {i.outlier for i in a.verdict.imbalances}
        comparison = Markup(charts.bars([(t.label, t.process.cpu_cores or 0.0, "#b8434e" if t.label in outliers else "#2f6fb0")
                                         for t in m.targets], "cores"))
    flames = []
    for key, art, rng, title in (("cpu", "cpu_flame", "cpu_range", "On-CPU: where the CPU time goes"),
                                 ("offcpu", "offcpu_flame", "offcpu_range", "Off-CPU: where threads wait (blocked time)")):
        rs = a.artifacts.get(rng)
        if isinstance(rs, ranges.RangeStacks):
            flames.append({"key": key, "title": title, "ok": True, "subtitle": rs.subtitle, "notes": list(rs.notes),
                           "why": None, "unknown": rs.advice})
        else:
            flames.append({"key": key, "title": title, "ok": False, "subtitle": None, "notes": [],
                           "why": a.missing_artifacts.get(art, "not captured"), "unknown": None})
    page = page_data(a)
    data = a.to_dict()
    gwhy = None if "goroutines" in page["explore"] else a.missing_artifacts.get("goroutine_flame", "no goroutine profile")
    server = report_server.html_context(a, "goroutines" in page["explore"], gwhy)
    load = None
    if a.load is not None:
        load = {"l": a.load, "d": data["load"]}
    io_why = None if "io" in page["explore"] else a.missing_artifacts.get("io_heatmap", "not captured")
    cpu_why = None if "cpu_cells" in page["explore"] else a.missing_artifacts.get("cpu_heatmap", "not captured")
    return {
        "load": load,
        "a": a, "v": v, "m": m, "cap": a.manifest,
        "title": fmt.CATEGORY_TITLES[v.category], "colour": CATEGORY_COLOURS[v.category],
        "has_panels": any(p.series for p in a.timeline.panels.values()),
        "targets": targets, "server": server, "comparison": comparison, "flames": flames,
        "cpu_heatmap_why": cpu_why, "io_heatmap_why": io_why,
        "io_note": _io_note(a),
        "page": page,
        "devs": a.devices,
        "health": _health(a),
        "css": Markup(jinja_env.asset("report.css")),
        "script": script(),
        "data": data,
        "fmt": fmt,
        "thresholds": sorted(data["thresholds"].items()),
    }


def _io_note(a: Analysis) -> str | None:
    """Why the block IO table counts fewer IOs than the collector's completions (the IOs that
    paired with their issue have a latency; the rest do not)."""
    io = a.metrics.io
    rec = next((h for h in a.health if h.collector == "block-io"), None)
    done = rec.stats.get("completions") if rec is not None else None
    if io is None or not isinstance(done, int) or isinstance(done, bool) or done <= io.total:
        return None
    return (f"{io.total:,} IOs paired with their issue, of the {done:,} completions the collector traced: the others "
            "were issued before the trace started, on devices or partitions outside it, or lost their issue "
            "(requeued, merged); without an issue they have no latency")


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
    """What the page's scripts draw besides the analysis JSON: the range flame graphs' stacks by
    time bucket and thread, what the page explores (analyzers/explore.py), the panels' order,
    and what the command line for a range needs."""
    tl = a.timeline
    out: dict[str, Any] = {"panel_order": list(PANEL_ORDER), "state_colours": charts.STATE_COLOURS, "flames": {}}
    for key, name in (("cpu", "cpu_range"), ("offcpu", "offcpu_range")):
        rs = a.artifacts.get(name)
        if isinstance(rs, ranges.RangeStacks):
            out["flames"][key] = rs.to_json() | {"subtitle": rs.subtitle}
    ex = a.artifacts.get("explore")
    out["explore"] = ex.to_json() if isinstance(ex, Explore) else {}
    if tl.t:
        out["t_end"] = tl.t[-1] + tl.step
    else:
        ends = [rs.t0 + rs.nbuckets * rs.bucket for rs in (a.artifacts.get("cpu_range"), a.artifacts.get("offcpu_range"))
                if isinstance(rs, ranges.RangeStacks) and rs.timed]
        out["t_end"] = max(ends, default=1.0)
    out["cli"] = {"bundle": a.bundle, "offset": ex.cli_offset if isinstance(ex, Explore) else 0.0}
    out["server_panels"] = {f"{t.pid}:{kv.info.key}": f"server_{kv.info.key.replace('.', '_')}_{t.pid}"
                            for t in (a.server.targets.values() if a.server is not None else ()) for kv in t.keys
                            if f"server_{kv.info.key.replace('.', '_')}_{t.pid}" in tl.panels}
    return out


class HtmlReport:
    """The self-contained HTML report: verdict, evidence, timelines, thread pools, pictures, capture health."""

    model = Analysis
    formats = ("html", "htm")
    extensions = (".html", ".htm")

    def render(self, model: Analysis, options: ReportOptions | None = None) -> str:
        return jinja_env.render(TEMPLATE, **context(model))


RENDERER = HtmlReport()

"""Markdown report of an Analysis (renderers layer): for pasting into an issue or a blog post, as the seeds did."""

from __future__ import annotations

from profiler.analyzers.analysis import Analysis
from profiler.renderers import formatting as fmt
from profiler.renderers import load_text, report_server
from profiler.renderers.protocol import ReportOptions
from profiler.untrusted import markdown, sanitize


def _cell(text: object) -> str:
    """Untrusted text (thread names, frames, paths, host names): rendered as the characters it
    is, never as HTML, Markdown markup or terminal escapes, and never breaking its table row."""
    return markdown(text)


def _code(text: object) -> str:
    """Untrusted text inside a fenced code block: no control characters, no fence of its own."""
    return sanitize(str(text), newlines=False).replace("`", "'")


def _render(a: Analysis) -> str:
    v = a.verdict.overall
    m = a.metrics
    cap = a.manifest
    out: list[str] = []
    out.append(f"## Bottleneck: {fmt.CATEGORY_TITLES[v.category]}")
    out.append("")
    out.append(f"**{_cell(fmt.plain(v.headline, a.devices))}**")
    out.append("")
    out.append(f"Score {v.score:.2f}, confidence **{v.confidence_label}** ({v.confidence:.2f})"
               + (f": {_cell('; '.join(v.confidence_reasons))}" if v.confidence_reasons else "") + ".")
    out.append("")
    if v.primary.evidence:
        out += ["| evidence | value | threshold | past it? | note |", "| --- | ---: | ---: | --- | --- |"]
        for e in v.primary.evidence:
            past = "yes" if e.crossed else "no" if e.crossed is False else ""
            out.append(f"| {_cell(fmt.plain(e.metric, a.devices))} | {fmt.value(e.value, e.unit)} | "
                       f"{_cell(fmt.threshold(e.threshold, e.unit))} | {past} | {_cell(fmt.plain(e.note, a.devices))} |")
        out.append("")
    if v.primary.recommendation:
        out += [f"**What to do:** {_cell(v.primary.recommendation)}", ""]
    if v.contributing:
        out.append("Contributing:")
        out += [f"- {fmt.CATEGORY_TITLES[f.category]} ({f.score:.2f}, {_cell(f.target)}): {_cell(fmt.plain(f.sub_cause, a.devices))}" for f in v.contributing]
        out.append("")
    if a.load is not None:
        out += ["### Load", ""] + [f"- {_cell(x)}" for x in load_text.lines(a.load, a.bundle)] + [""]
    out += ["### Targets", "", "| target | verdict | score | CPU | busy threads | run queue | IO wait | futex | RSS |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for tv, tm in zip(a.verdict.per_target, m.targets, strict=True):
        st = tm.time.active_states or {}
        out.append(f"| {_cell(tm.label)} | {_cell(tv.category)} | {tv.score:.2f} | {fmt.cores(tm.process.cpu_cores, tm.limits.cpu_available)} | "
                   f"{tm.time.active_threads}/{tm.time.threads} | {fmt.pct(tm.time.runq_share)} | {fmt.pct(st.get('io'))} | "
                   f"{fmt.pct(st.get('futex'))} | {fmt.mib(tm.process.rss)} |")
    out.append("")
    for i in a.verdict.imbalances:
        out.append(f"- **Imbalance:** {_cell(i.note)}")
    if a.verdict.imbalances:
        out.append("")
    for tm in m.targets:
        pools = [p for p in tm.time.pools if p.cpu_cores >= 0.01 or p.threads > 1][:12]
        if len(pools) < 2:
            continue
        out += [f"### Thread pools of {_cell(tm.label)}", "",
                "| pool | threads | CPU (cores) | busy / size | wants CPU | IO wait | futex | idle | knob |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for p in pools:
            out.append(f"| {_cell(p.pool)} | {p.threads} | {p.cpu_cores:.2f} | {fmt.pct(p.util)} | {fmt.pct(p.demand)} | {fmt.pct(p.states.get('io'))} | "
                       f"{fmt.pct(p.states.get('futex'))} | {fmt.pct(p.states.get('idle', 0) + p.states.get('sleep', 0))} | {_cell(p.knob or '')} |")
        out.append("")
    s = m.system
    if s is not None:
        out += ["### Host", "", "```"]
        out.append(f"CPUs {s.ncpu}: busy {fmt.pct(s.cpu_util)}, iowait {fmt.pct(s.iowait)}, steal {fmt.pct(s.steal)}; "
                   f"runnable tasks {s.procs_running or 0:.1f}, blocked (D) {s.procs_blocked or 0:.1f}")
        if s.psi:
            out.append("PSI some (% of time): " + ", ".join(f"{_code(k.split('_')[0])} {v:.1f}" for k, v in sorted(s.psi.items()) if k.endswith("some")))
        for d in s.disks[:3]:
            out.append(f"{_code(d.name)}: {d.iops:.0f} IOPS (r {d.read_iops:.0f} / w {d.write_iops:.0f}), "
                       f"{(d.read_bps + d.write_bps) / 1048576:.1f} MiB/s, await {d.await_ms or 0:.2f} ms, "
                       f"util {fmt.pct(d.util)}, queue {d.queue_depth:.1f}")
        out += ["```", ""]
    if m.io is not None:
        out += ["### Block IO (" + ("in-kernel histograms" if m.io.histograms else "traced") + ")", "", "| device | op | IOs | IOPS | p50 | p99 | max | by targets |",
                "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for g in m.io.groups[:8]:
            out.append(f"| {_cell(g.dev)} | {_cell(g.op)} | {g.count} | {g.iops:.0f} | {g.p50_ms:.2f} ms | {g.p99_ms:.2f} ms | {g.max_ms:.1f} ms | {fmt.pct(g.target_share)} |")
        out.append("")
    out += report_server.markdown_lines(a)
    out += ["### Capture", "", "| collector | status | reason |", "| --- | --- | --- |"]
    for h in a.health:
        reason = "; ".join([h.reason or ""] + h.reading).strip("; ")
        out.append(f"| {_cell(h.collector)} | {_cell(h.status)} | {_cell(reason)} |")
    for name, why in sorted(a.missing_artifacts.items()):
        out.append(f"| {_cell(name)} | not shown | {_cell(why)} |")
    out.append("")
    for w in a.warnings:
        out.append(f"- **Warning:** {_cell(w)}")
    if a.warnings:
        out.append("")
    out.append(f"<sub>profiler, {_cell(cap['created'])}, {_cell(cap['host']['hostname'])} ({_cell(cap['host']['kernel'])}), "
               f"{m.window:.0f} s window.</sub>")
    return "\n".join(out) + "\n"


class MarkdownReport:
    """The report for pasting into an issue: tables, untrusted text kept from breaking them."""

    model = Analysis
    formats = ("md", "markdown")
    extensions = (".md", ".markdown")

    def render(self, model: Analysis, options: ReportOptions | None = None) -> str:
        return _render(model)


RENDERER = MarkdownReport()

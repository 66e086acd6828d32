"""Terminal summary of an Analysis (renderers layer): what attach/run/analyze print at the end."""

from __future__ import annotations

from profiler.analyzers.analysis import Analysis
from profiler.renderers import formatting as fmt
from profiler.renderers import load_text, report_server
from profiler.renderers.protocol import ReportOptions
from profiler.untrusted import sanitize


def _render(a: Analysis, report_path: str | None = None) -> str:
    v = a.verdict.overall
    m = a.metrics
    cap = a.manifest
    lines = [
        f"profiler: {a.bundle}  ({cap['status']}, {m.window:.0f} s window, "
        f"{cap['host']['cpus']} CPUs, {len(m.targets)} target{'s' if len(m.targets) != 1 else ''})",
        "",
        f"  verdict: {fmt.CATEGORY_TITLES[v.category].upper()}   score {v.score:.2f}   confidence {v.confidence_label} ({v.confidence:.2f})",
        f"  {fmt.plain(v.headline, a.devices)}",
    ]
    if v.primary.evidence:
        lines.append("  evidence:")
        for e in v.primary.evidence:
            th = f"  (threshold {fmt.threshold(e.threshold, e.unit)})" if e.threshold is not None else ""
            mark = " past" if e.crossed else " within" if e.crossed is False else ""
            note = f"  {fmt.plain(e.note, a.devices)}" if e.note else ""
            lines.append(f"    {fmt.plain(e.metric, a.devices):<28} {fmt.value(e.value, e.unit):>10}{th}{mark}{note}")
    for f in v.contributing:
        lines.append(f"  contributing: {fmt.CATEGORY_TITLES[f.category]} {f.score:.2f} [{f.target}]: {fmt.plain(f.sub_cause, a.devices)}")
    if v.primary.recommendation:
        lines.append(f"  what to do: {fmt.plain(v.primary.recommendation, a.devices)}")
    if len(a.verdict.per_target) > 1:
        lines.append("  targets:")
        for tv, tm in zip(a.verdict.per_target, m.targets, strict=True):
            lines.append(f"    {tm.label:<34} {tv.category:<16} {tv.score:.2f}  CPU {fmt.cores(tm.process.cpu_cores, tm.limits.cpu_available)}")
    for i in a.verdict.imbalances:
        lines.append(f"  imbalance: {i.note}")
    if a.load is not None:
        lines.extend(f"  load: {x}" for x in load_text.lines(a.load, a.bundle))
    lines += report_server.text_lines(a)
    if v.confidence_reasons:
        lines.append("  confidence: " + "; ".join(v.confidence_reasons))
    skipped = [f"{h.collector} {h.status}" + (f" ({h.reason})" if h.reason else "")
               for h in a.health if h.status != "ok"]
    if skipped:
        lines.append("  capture: " + "; ".join(skipped))
    for w in a.warnings:
        lines.append(f"  warning: {w}")
    if report_path:
        lines.append(f"  report: {report_path}")
    # every line may hold untrusted names (threads, frames, paths from another machine): no
    # escape sequence reaches the terminal, and no name can break its line into forged ones
    return "\n".join(sanitize(line, newlines=False) for line in lines) + "\n"


class TextReport:
    """The verdict summary attach, run and analyze print; says where the HTML report went."""

    model = Analysis
    formats = ("text", "txt", "terminal")
    extensions = (".txt", ".text")

    def render(self, model: Analysis, options: ReportOptions | None = None) -> str:
        return _render(model, (options or ReportOptions()).report_path)


RENDERER = TextReport()

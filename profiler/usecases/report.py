"""Analyze a capture bundle and render its report (usecases layer): what analyze, report, attach and run share.

The analysis holds its pictures as the models the renderers draw (FlameGraph, LatencyHeatmap,
SubsecondHeatmap), so renderers never see a bundle or run an analyzer.
"""

from __future__ import annotations

from pathlib import Path

from profiler.analyzers.analysis import Analysis, analyze
from profiler.analyzers.stacks.flame import FlameGraph, build_tree
from profiler.analyzers.stacks.folding import FoldOptions
from profiler.bundle import Bundle, members
from profiler.errors import ProfilerError
from profiler.inputs.window import TimeWindow
from profiler.renderers.protocol import ReportOptions
from profiler.renderers.registry import REGISTRY

REPORT_NAME = members.REPORT  # the tool's own derived file inside a bundle, rewritten on each analysis


def analysis_of(bundle_dir: str | Path) -> Analysis:
    """The bundle's analysis (a missing or invalid bundle is an InputError), with the flame graph
    of the load's deepest throughput dip when there is one."""
    bundle = Bundle.open(bundle_dir)
    a = analyze(bundle)
    _dip_flame(a, str(bundle_dir))
    return a


def _dip_flame(a: Analysis, bundle_dir: str) -> None:
    """The on-CPU flame graph of the deepest dip's time range (the CPU stacks folded again, kept
    to that range: what `profiler flamegraph BUNDLE --from --to` draws)."""
    from profiler.usecases.flamegraph import load_stacks

    if a.load is None or not a.load.phases.dips or "cpu_flame" not in a.artifacts:
        return
    d = max(a.load.phases.dips, key=lambda d: d.drop * (d.end - d.start))
    rel0, rel1 = d.start - a.load.origin, d.end - a.load.origin
    try:
        stacks = load_stacks(bundle_dir, FoldOptions(pools=True, count_samples=True, window=TimeWindow(d.start, d.end)))
    except (ProfilerError, OSError) as exc:
        a.missing_artifacts["load_dip_flame"] = f"could not be built: {exc}"
        return
    if not stacks.counts:
        a.missing_artifacts["load_dip_flame"] = f"no CPU samples of the targets between {rel0:.1f} and {rel1:.1f} s"
        return
    a.artifacts["load_dip_flame"] = FlameGraph(
        root=build_tree(stacks.counts, min_fraction=0.0005), unit="samples",
        title=f"On-CPU during the throughput dip, {rel0:.1f}-{rel1:.1f} s",
        subtitle=f"{stacks.samples:,} cpu-clock samples; {d.drop:.0%} below the steady {d.level:,.0f}/s")


def pick_format(fmt: str | None, output: str | Path | None) -> str:
    """--format, else the output file's extension, else text; a UsageError names the formats there are."""
    return str(REGISTRY.pick(Analysis, fmt, output, default="text").formats[0])


def render(analysis: Analysis, fmt: str, report_path: str | None = None) -> str:
    """The report in one format (``report_path``: where the HTML report is, for the text summary)."""
    return REGISTRY.pick(Analysis, fmt).render(analysis, ReportOptions(report_path=report_path))


def report(bundle_dir: str | Path, fmt: str) -> str:
    """`profiler report`: the bundle's report in one format."""
    return render(analysis_of(bundle_dir), fmt)


def default_report(bundle_dir: str | Path, html_path: str | Path | None = None, *, write_html: bool = True) -> str:
    """Analyze a bundle, write its HTML report (default: BUNDLE/report.html), return the text summary.

    attach and run call this at the end of a capture; so does `profiler analyze`.
    """
    analysis = analysis_of(bundle_dir)
    target = Path(html_path) if html_path else Path(bundle_dir) / REPORT_NAME
    shown: str | None = None
    if write_html:
        target.write_text(render(analysis, "html"), encoding="utf-8")
        shown = str(target)
    return render(analysis, "text", shown)

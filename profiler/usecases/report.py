"""Analyze a capture bundle and render its report (usecases layer): what analyze, report, attach and run share.

The analysis holds its pictures as the models the renderers draw (FlameGraph, LatencyHeatmap,
SubsecondHeatmap), so renderers never see a bundle or run an analyzer.
"""

from __future__ import annotations

from pathlib import Path

from profiler.analyzers.analysis import Analysis, analyze
from profiler.bundle import Bundle, members
from profiler.progress import Progress
from profiler.renderers.protocol import ReportOptions
from profiler.renderers.registry import REGISTRY

REPORT_NAME = members.REPORT  # the tool's own derived file inside a bundle, rewritten on each analysis


def analysis_of(bundle_dir: str | Path, progress: Progress | None = None) -> Analysis:
    """The bundle's analysis (a missing or invalid bundle is an InputError)."""
    return analyze(Bundle.open(bundle_dir), progress)


def pick_format(fmt: str | None, output: str | Path | None) -> str:
    """--format, else the output file's extension, else text; a UsageError names the formats there are."""
    return str(REGISTRY.pick(Analysis, fmt, output, default="text").formats[0])


def render(analysis: Analysis, fmt: str, report_path: str | None = None) -> str:
    """The report in one format (``report_path``: where the HTML report is, for the text summary)."""
    return REGISTRY.pick(Analysis, fmt).render(analysis, ReportOptions(report_path=report_path))


def report(bundle_dir: str | Path, fmt: str, progress: Progress | None = None) -> str:
    """`profiler report`: the bundle's report in one format."""
    return render(analysis_of(bundle_dir, progress), fmt)


def default_report(bundle_dir: str | Path, html_path: str | Path | None = None, *, write_html: bool = True,
                   progress: Progress | None = None) -> str:
    """Analyze a bundle, write its HTML report (default: BUNDLE/report.html), return the text summary.

    attach and run call this at the end of a capture; so does `profiler analyze`.
    """
    analysis = analysis_of(bundle_dir, progress)
    target = Path(html_path) if html_path else Path(bundle_dir) / REPORT_NAME
    shown: str | None = None
    if write_html:
        target.write_text(render(analysis, "html"), encoding="utf-8")
        shown = str(target)
    return render(analysis, "text", shown)

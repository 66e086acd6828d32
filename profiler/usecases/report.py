"""Analyze a capture bundle and render its report (usecases layer): what analyze, report, attach and run share.

The analysis holds its pictures as the models the renderers draw (FlameGraph, LatencyHeatmap,
SubsecondHeatmap), so renderers never see a bundle or run an analyzer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from profiler.analyzers.analysis import Analysis, analyze
from profiler.analyzers.views import install_taps, start_early_reads
from profiler.bundle import Bundle, CollectorRecord, EarlyReads, Manifest, members
from profiler.errors import OutputError
from profiler.files import is_stdout, output_kind, write_output
from profiler.progress import Progress
from profiler.renderers.protocol import ReportOptions
from profiler.renderers.registry import REGISTRY

REPORT_NAME = members.REPORT  # the tool's own derived file inside a bundle, rewritten on each analysis


def analysis_of(bundle_dir: str | Path, progress: Progress | None = None, early: EarlyReads | None = None,
                within: str | Path | None = None) -> Analysis:
    """The bundle's analysis (a missing or invalid bundle is an InputError); ``early``: members
    read while the capture finished (attach, run), taken instead of reading them again;
    ``within``: what the bundle may not leave (a cluster bundle, for a node's)."""
    bundle = Bundle.open(bundle_dir, within)
    bundle.early = early
    return analyze(bundle, progress)


def early_reads(bundle_dir: str | Path) -> tuple[EarlyReads, Callable[[CollectorRecord, Manifest], None]]:
    """For a capture about to end: the early reads, and what to call with each collector's
    record as it stops (starts reading what it wrote, if a view can)."""
    early = EarlyReads(Path(bundle_dir))
    install_taps(early)
    return early, lambda rec, manifest: start_early_reads(early, rec, manifest)


def pick_format(fmt: str | None, output: str | Path | None) -> str:
    """--format, else the output file's extension, else text; a UsageError names the formats there are."""
    return str(REGISTRY.pick(Analysis, fmt, output, default="text").formats[0])


def render(analysis: Analysis, fmt: str, report_path: str | None = None) -> str:
    """The report in one format (``report_path``: where the HTML report is, for the text summary)."""
    return REGISTRY.pick(Analysis, fmt).render(analysis, ReportOptions(report_path=report_path))


def report(bundle_dir: str | Path, fmt: str, progress: Progress | None = None) -> str:
    """`profiler report`: the bundle's report in one format."""
    return render(analysis_of(bundle_dir, progress), fmt)


@dataclass
class DefaultReport:
    """What analyze, attach and run print: the text summary, and whether the HTML report was written."""

    summary: str
    html: str | None  # where the HTML report went (None: not written)
    error: OutputError | None = None  # why it could not be written
    warnings: list[str] | None = None  # what reading the bundle tolerated
    replaced: str | None = None  # BUNDLE/report.html was a link, device or pipe: what was replaced


def write_html(analysis: Analysis, bundle_dir: str | Path, html_path: str | Path | None, *, force: bool = False) -> str:
    """Write the HTML report: to ``html_path`` (the overwrite rule: ``force``), or to
    BUNDLE/report.html, the tool's own derived file, rewritten on each analysis, where only a
    regular file is ever written: a symbolic link, a device or a pipe by that name is replaced,
    never followed or written into (docs/cli.md#outputs). Returns where it went."""
    in_bundle = html_path is None
    target = Path(bundle_dir) / REPORT_NAME if in_bundle else Path(html_path)  # type: ignore[arg-type]
    write_output(target, render(analysis, "html"), force=force or in_bundle, root=bundle_dir if in_bundle else None)
    return "standard output" if html_path is not None and is_stdout(html_path) else str(target)


def default_report(bundle_dir: str | Path, html_path: str | Path | None = None, *, write_html_report: bool = True,
                   force: bool = False, progress: Progress | None = None,
                   early: EarlyReads | None = None) -> DefaultReport:
    """Analyze a bundle, write its HTML report (default: BUNDLE/report.html), and render the text
    summary. A report that cannot be written is not an analysis lost: the summary comes back with
    the error, for the caller to print both.

    attach and run call this at the end of a capture (with their ``early`` reads); so does
    `profiler analyze`.
    """
    analysis = analysis_of(bundle_dir, progress, early)
    shown: str | None = None
    error: OutputError | None = None
    replaced = None
    if write_html_report:
        if html_path is None:
            replaced = _not_a_file(Path(bundle_dir) / REPORT_NAME)
        try:
            shown = write_html(analysis, bundle_dir, html_path, force=force)
        except OutputError as exc:
            error = exc
            replaced = None
    summary = render(analysis, "text", shown)
    return DefaultReport(summary, shown, error, list(analysis.reading_warnings), replaced)


def _not_a_file(path: Path) -> str | None:
    """'a symbolic link to X' / 'a device or pipe' when ``path`` is there but no regular file."""
    kind = output_kind(path)
    if kind == "link":
        try:
            return f"a symbolic link to {os.readlink(path)}"
        except OSError:
            return "a symbolic link"
    return "a device or pipe" if kind == "special" else None

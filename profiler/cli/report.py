"""`profiler report`: render a bundle's analysis as html, md, json or text (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.cli import _term
from profiler.cli._common import check_output, write_output, wrote
from profiler.cli._progress import Bars
from profiler.errors import UsageError

HELP = """Render the report of a capture bundle (post-mortem; needs neither perf nor root).

The format comes from --format, else from -o's extension (.html, .md, .json, .txt), else text.

**Examples**

    profiler report cap/                      # terminal summary

    profiler report cap/ -o cap.html          # the self-contained HTML report

    profiler report cap/ --format md -o cap.md   # paste into an issue

    profiler report cap/ --format json | jq .verdict.category   # fail a CI run on a verdict
"""

def command(
    bundle: Path = typer.Argument(..., readable=False, help="A capture bundle directory."),  # unreadable: exit 4, one line
    format: str = typer.Option(None, "--format", help="html, md, json or text (default: from -o's extension, else text)."),
    output: Path = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
    json_out: bool = typer.Option(False, "--json", help="The JSON report (same as --format json)."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite an existing output file."),
) -> None:
    from profiler.bundle.cluster import is_cluster_bundle
    from profiler.usecases import cluster as cluster_report
    from profiler.usecases.report import analysis_of, pick_format, render

    if json_out:
        if format not in (None, "json"):
            raise UsageError(f"--json and --format {format} disagree: give one of them")
        format = "json"
    fmt = pick_format(format, output)
    if output is not None:
        check_output(output, force)
    bars = Bars()
    if is_cluster_bundle(bundle):
        text = cluster_report.report(bundle, fmt)
    else:
        try:
            analysis = analysis_of(bundle, bars)
        finally:
            bars.done()
        text = render(analysis, fmt)
        if fmt not in ("text", "txt", "terminal") or output is not None:
            # the text summary lists them already; other formats (and files) get them on stderr
            for w in analysis.reading_warnings:
                bars.warn(w)
    if output is None and fmt == "text":
        _term.report_text(text)
    else:
        write_output(text, output, force)
    wrote(output, fmt)


def register(app: typer.Typer) -> None:
    app.command("report", help=HELP)(command)

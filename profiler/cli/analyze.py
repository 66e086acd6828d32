"""`profiler analyze`: analyze a bundle, write its HTML report, print the verdict (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.analyzers.analysis import analyze
from profiler.bundle import Bundle, members
from profiler.cli._common import check_output
from profiler.cli.report import render

HELP = """Analyze a capture bundle (post-mortem, on any host): write report.html into the bundle
and print the verdict summary.

**Examples**

    profiler analyze cap/

    profiler analyze cap/ -o /tmp/cap.html     # the HTML report elsewhere

    profiler analyze samples/io-fsync-fio/ --no-html
"""

REPORT_NAME = members.REPORT


def default_report(bundle_dir: str | Path, html_path: str | Path | None = None, *, write_html: bool = True) -> str:
    """Analyze a bundle, write its HTML report (default: BUNDLE/report.html), return the text summary.

    attach and run call this at the end of a capture. The report inside the bundle is the
    tool's own derived file and is rewritten on each analysis.
    """
    bundle = Bundle.open(bundle_dir)
    analysis = analyze(bundle)
    target = Path(html_path) if html_path else Path(bundle_dir) / REPORT_NAME
    shown: str | None = None
    if write_html:
        target.write_text(render(analysis, "html"), encoding="utf-8")
        shown = str(target)
    return render(analysis, "text", shown)


def command(
    bundle: Path = typer.Argument(..., help="A capture bundle directory."),
    output: Path = typer.Option(None, "--output", "-o", help=f"Write the HTML report here instead of BUNDLE/{REPORT_NAME}."),
    no_html: bool = typer.Option(False, "--no-html", help="Only print the summary."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing -o file."),
) -> None:
    if output:
        check_output(output, force)
    typer.echo(default_report(bundle, output, write_html=not no_html), nl=False)


def register(app: typer.Typer) -> None:
    app.command("analyze", help=HELP)(command)

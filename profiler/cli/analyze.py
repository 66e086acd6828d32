"""`profiler analyze`: analyze a bundle, write its HTML report, print the verdict (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.bundle.cluster import is_cluster_bundle
from profiler.cli import _term
from profiler.cli._common import check_output
from profiler.cli._progress import Bars
from profiler.usecases import cluster as cluster_report
from profiler.usecases.report import REPORT_NAME, default_report

HELP = """Analyze a capture bundle (post-mortem, on any host): write report.html into the bundle
and print the verdict summary.

**Examples**

    profiler analyze cap/

    profiler analyze cap/ -o /tmp/cap.html     # the HTML report elsewhere

    profiler analyze samples/io-fsync-fio/ --no-html
"""

def command(
    bundle: Path = typer.Argument(..., help="A capture bundle directory."),
    output: Path = typer.Option(None, "--output", "-o", help=f"Write the HTML report here instead of BUNDLE/{REPORT_NAME}."),
    no_html: bool = typer.Option(False, "--no-html", help="Only print the summary."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite an existing -o file."),
) -> None:
    if output:
        check_output(output, force)
    if is_cluster_bundle(bundle):  # DIR/cluster.json: compare the nodes (profiler/cluster/report.py)
        typer.echo(cluster_report.default_report(bundle, output, write_html=not no_html), nl=False)
        return
    bars = Bars()
    try:
        text = default_report(bundle, output, write_html=not no_html, progress=bars)
    finally:
        bars.done()
    _term.report_text(text)


def register(app: typer.Typer) -> None:
    app.command("analyze", help=HELP)(command)

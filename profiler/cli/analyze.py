"""`profiler analyze`: analyze a bundle, write its HTML report, print the verdict (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.bundle.members import REPORT as REPORT_NAME
from profiler.cli import _term
from profiler.cli._common import check_output
from profiler.cli._progress import Bars

HELP = """Analyze a capture bundle (post-mortem, on any host): write report.html into the bundle
and print the verdict summary.

**Examples**

    profiler analyze cap/

    profiler analyze cap/ -o /tmp/cap.html     # the HTML report elsewhere

    profiler analyze samples/io-fsync-fio/ --no-html

BUNDLE/report.html is the tool's own file, rewritten on each analysis; only a regular file is
ever written there (a symbolic link or device by that name is replaced, never followed). With
-o, an existing file needs --force. On a read-only bundle the summary is still printed and the
exit code is 9: pass -o FILE or --no-html.
"""

def command(
    bundle: Path = typer.Argument(..., readable=False, help="A capture bundle directory."),  # unreadable: exit 4, one line
    output: Path = typer.Option(None, "--output", "-o", help=f"Write the HTML report here instead of BUNDLE/{REPORT_NAME}."),
    no_html: bool = typer.Option(False, "--no-html", help="Only print the summary."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite an existing -o file."),
) -> None:
    from profiler import files
    from profiler.bundle.cluster import is_cluster_bundle
    from profiler.usecases import cluster as cluster_report
    from profiler.usecases.report import default_report

    if output is not None and not no_html:
        check_output(output, force)
    if is_cluster_bundle(bundle):  # DIR/cluster.json: compare the nodes (profiler/cluster/report.py)
        typer.echo(cluster_report.default_report(bundle, output, write_html=not no_html, force=force), nl=False)
        return
    bars = Bars()
    try:
        res = default_report(bundle, output, write_html_report=not no_html, force=force, progress=bars)
    finally:
        bars.done()
    if res.replaced is not None:
        bars.warn(f"{bundle / REPORT_NAME} was {res.replaced}: replaced by the report "
                  "(never followed or written into)")
    if output is not None and not no_html and files.output_kind(output) in ("stdout", "fd"):
        typer.echo(res.summary, nl=False, err=True)  # the HTML report is on standard output: out of its way
    else:
        _term.report_text(res.summary)
    if res.error is not None:
        raise res.error


def register(app: typer.Typer) -> None:
    app.command("analyze", help=HELP)(command)

"""`profiler analyze`: analyze a bundle post-mortem and print the verdict (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.cli import report

HELP = """Analyze a capture bundle (post-mortem, on any host) and print the summary.

**Examples**

    profiler analyze cap/

    profiler analyze samples/demo-mixed/
"""


def command(bundle: Path = typer.Argument(..., help="A capture bundle directory.")) -> None:
    report.command(bundle=bundle, format="text", output=None, force=False)


def register(app: typer.Typer) -> None:
    app.command("analyze", help=HELP)(command)

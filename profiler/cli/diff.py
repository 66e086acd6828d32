"""`profiler diff`: what changed between two captures (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.errors import NotYetAvailable

HELP = """Compare two captures: differential flame graph, verdict and metric deltas.

**Examples**

    profiler diff before/ after/ -o diff.svg
"""


def command(
    before: Path = typer.Argument(..., help="The baseline bundle."),
    after: Path = typer.Argument(..., help="The bundle to compare."),
    output: Path = typer.Option(None, "--output", "-o", help="Output file."),
) -> None:
    raise NotYetAvailable("diff: lands with issue #4 (differential flame graphs) and #6 (verdict deltas)")


def register(app: typer.Typer) -> None:
    app.command("diff", help=HELP)(command)

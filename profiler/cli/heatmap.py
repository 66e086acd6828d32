"""`profiler heatmap`: IO latency heatmap from a bundle, block tracepoints, or time/latency pairs (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.errors import NotYetAvailable

HELP = """Draw an IO latency heatmap (SVG) or print its matrix as JSON.

**Examples**

    profiler heatmap cap/ -o io.svg

    profiler heatmap biosnoop.txt --units-time s --units-latency us -o io.svg
"""


def command(
    input: str = typer.Argument(..., help="A bundle, perf.data / perf script of block tracepoints, or 'time latency' pairs."),
    output: Path = typer.Option(None, "--output", "-o", help="Output file."),
) -> None:
    raise NotYetAvailable("heatmap: lands with issue #5")


def register(app: typer.Typer) -> None:
    app.command("heatmap", help=HELP)(command)

"""`profiler flamegraph`: one flame graph from perf.data, perf script text, folded stacks or a bundle (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.errors import NotYetAvailable

HELP = """Draw a flame graph (SVG) or write folded stacks.

**Examples**

    profiler flamegraph cap/ -o cpu.svg

    perf script | profiler flamegraph - --folded > out.folded
"""


def command(
    input: str = typer.Argument(..., help="perf.data, perf script text (.gz ok), folded stacks, a bundle, or - for stdin."),
    output: Path = typer.Option(None, "--output", "-o", help="Output file."),
) -> None:
    raise NotYetAvailable("flamegraph: lands with issue #4")


def register(app: typer.Typer) -> None:
    app.command("flamegraph", help=HELP)(command)

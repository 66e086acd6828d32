"""`profiler demo`: first run on a fresh host: profile a bundled workload and write the report (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.errors import NotYetAvailable

HELP = """Start a bundled multi-threaded workload (named CPU, IO and lock threads), profile it, and write the report.

**Examples**

    profiler demo

    profiler demo --duration 10s -o demo-cap
"""


def command(
    output: Path = typer.Option(Path("profiler-demo"), "--output", "-o", help="Bundle directory to write."),
    force: bool = typer.Option(False, "--force", help="Overwrite a non-empty output directory."),
) -> None:
    raise NotYetAvailable("demo: lands with the collectors (issue #3)")


def register(app: typer.Typer) -> None:
    app.command("demo", help=HELP)(command)

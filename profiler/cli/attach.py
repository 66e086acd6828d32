"""`profiler attach`: capture from running processes, then analyze and report (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.errors import NotYetAvailable

HELP = """Capture evidence from running processes for a while, then analyze and write the report.

**Examples**

    profiler attach --pid tikv --duration 30s -o tikv-cap

    profiler attach --pid tikv --pid tidb -o cluster-cap    # every tikv-server and tidb-server

    profiler attach --pid 4242 --call-graph dwarf -o cap    # Rust built without frame pointers
"""


def command(
    pid: list[str] = typer.Option(..., "--pid", "-p", help="Process name or pid; repeat for several. A name may match several processes."),
    duration: str = typer.Option("30s", "--duration", "-d", help="How long to capture (30s, 2m)."),
    output: Path = typer.Option(None, "--output", "-o", help="Bundle directory to write (default: profiler-YYYYmmdd-HHMMSS)."),
    force: bool = typer.Option(False, "--force", help="Overwrite a non-empty output directory."),
) -> None:
    raise NotYetAvailable("attach: the collectors land with issue #3")


def register(app: typer.Typer) -> None:
    app.command("attach", help=HELP)(command)

"""`profiler run`: capture exactly while a load command runs (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.errors import NotYetAvailable

HELP = """Capture from the targets exactly while a load command runs; its output is saved in the bundle and its exit code passed through.

**Examples**

    profiler run --pid tikv -o cap -- sysbench oltp_point_select --threads=64 run

    profiler run --pid tidb --pid tikv -o cap -- go-ycsb run mysql -P workloads/workloada
"""


def command(
    load: list[str] = typer.Argument(None, help="The load command, after --."),
    pid: list[str] = typer.Option(..., "--pid", "-p", help="Process name or pid; repeat for several."),
    output: Path = typer.Option(None, "--output", "-o", help="Bundle directory to write."),
    force: bool = typer.Option(False, "--force", help="Overwrite a non-empty output directory."),
) -> None:
    raise NotYetAvailable("run: the collectors land with issue #3")


def register(app: typer.Typer) -> None:
    app.command("run", help=HELP)(command)

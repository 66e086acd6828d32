"""`profiler doctor`: what this host can capture and how to fix what it cannot (CLI layer)."""

from __future__ import annotations

import typer

from profiler.errors import NotYetAvailable

HELP = """Check what this host (and optionally a target) can capture, one line per check with the fix.

**Examples**

    profiler doctor

    profiler doctor --pid tikv --json
"""


def command(
    pid: list[str] = typer.Option(None, "--pid", "-p", help="Also check these targets (cgroup limits, container)."),
    json_out: bool = typer.Option(False, "--json", help="Print the checks as JSON."),
) -> None:
    raise NotYetAvailable("doctor: in progress")


def register(app: typer.Typer) -> None:
    app.command("doctor", help=HELP)(command)

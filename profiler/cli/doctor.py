"""`profiler doctor`: what this host can capture and how to fix what it cannot (CLI layer)."""

from __future__ import annotations

import json

import typer

from profiler.cli import _term

HELP = """Check what this host (and optionally a target) can capture: one line per check, a status word (ok, warn, fail, info) and the fix.

Exit code 0 when nothing failed, 5 when some collector cannot run here.

**Examples**

    profiler doctor

    profiler doctor --pid tikv            # also the targets' cgroup limits and container

    profiler doctor --json | jq '.checks[] | select(.status=="fail")'
"""


def command(
    pid: list[str] = typer.Option(None, "--pid", "-p", help="Also check these targets (cgroup limits, container)."),
    json_out: bool = typer.Option(False, "--json", help="Print the checks as JSON."),
) -> None:
    from profiler.capture import doctor
    from profiler.capture.targets import resolve

    checks = doctor.host_checks()
    for t in resolve(pid) if pid else []:
        checks += doctor.target_checks(t)
    result = doctor.summary(checks)
    if json_out:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        scope = "host"
        for c in checks:
            if c.scope != scope:
                scope = c.scope
                _term.line(f"-- {scope}", style="bold")
            _term.status_line(c.status, c.name, c.detail, c.fix)
        summary = f"{result['failed']} failed, {result['warnings']} warnings"
        _term.line(summary, style="bold red" if result["failed"] else "bold yellow" if result["warnings"] else "bold green")
    if result["failed"]:
        raise typer.Exit(5)


def register(app: typer.Typer) -> None:
    app.command("doctor", help=HELP)(command)

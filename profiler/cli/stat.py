"""`profiler stat`: read a saved perf stat output and say what it shows (cli layer)."""

from __future__ import annotations

import json

import typer

from profiler.cli import _term
from profiler.untrusted import sanitize

HELP = """Read a saved `perf stat` output (its table, or `perf stat -x,` CSV, with or without -I) and
say what the counters show: CPUs used, context switches and faults per second, IPC where the
host counts cycles, and the counters it could not count.

**Examples**

    perf stat -p $(pidof tikv-server) -- sleep 30 2> stat.txt; profiler stat stat.txt

    perf stat -x, -e task-clock,context-switches,cycles -p 4242 -- sleep 10 2> stat.csv; profiler stat stat.csv --json
"""


def command(
    input: str = typer.Argument(..., help="perf stat output (table or -x, CSV; .gz ok), or - for stdin."),
    json_out: bool = typer.Option(False, "--json", help="Print the counters and findings as JSON."),
) -> None:
    from profiler.usecases.stat import summarize

    s = summarize(input)
    for w in s.warnings:
        typer.echo(f"profiler: warning: {sanitize(w)}", err=True)
    if json_out:
        typer.echo(json.dumps(s.to_json(), indent=2, sort_keys=True))
        return
    # names from the file (events, units, perf's metric text, the target) lose terminal escapes
    head = f"{s.input}: {s.format}" + (f", {s.target}" if s.target else "") + (f", {s.elapsed:.1f} s" if s.elapsed else "")
    _term.line(sanitize(head), style="bold")
    rows = []
    for r in s.rows:
        value = "-" if r.value is None else (f"{r.value:,.3f}" if r.value != int(r.value) else f"{int(r.value):,}")
        rows.append([sanitize(c) for c in (r.event, value + (f" {r.unit}" if r.unit and r.value is not None else ""),
                                            r.status, r.meaning)])
    _term.table(["counter", "value", "status", "what it means"], rows, status_col=2, right=(1,))
    for f in s.findings:
        _term.line("  " + sanitize(f))


def register(app: typer.Typer) -> None:
    app.command("stat", help=HELP)(command)

"""`profiler run`: capture exactly while a load command runs (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.cli._capture import capture, make_options, partial_is_an_error, status_options
from profiler.cli._common import parse_duration
from profiler.errors import UsageError

HELP = """Capture from the targets exactly while a load command runs; its output is saved in the bundle (load.log) and its exit code passed through.

The capture stops when the load command exits (or at --duration, or on Ctrl-C, which also stops the load).
Each line of the load's output is timed as it arrives: sysbench, go-ycsb and go-tpc reports become
throughput and latency on the report's timeline; the warm-up is left out of the verdict (docs/load.md).

**Examples**

    profiler run --pid tikv -o cap -- sysbench oltp_point_select --threads=64 --report-interval=1 run

    profiler run --pid tidb --pid tikv -o cap -- go-ycsb run mysql -P workloads/workloada
"""


def command(
    load: list[str] = typer.Argument(None, help="The load command, after --."),
    pid: list[str] = typer.Option(..., "--pid", "-p", help="Process name or pid; repeat for several."),
    output: Path = typer.Option(None, "--output", "-o", help="Bundle directory to write."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite a non-empty output directory."),
    duration: str = typer.Option(None, "--duration", "-d", help="Stop the capture (and the load) after this long at most."),
    frequency: int = typer.Option(99, "--frequency", "-F", help="cpu-clock sampling frequency (Hz)."),
    call_graph: str = typer.Option("fp", "--call-graph", help="Stack unwinding: fp, dwarf or lbr."),
    interval: str = typer.Option("1s", "--interval", help="perf stat / syscall-rate interval."),
    backend: str = typer.Option("perf", "--backend", help="perf (default), bcc, or auto (bcc where the host supports it, else perf)."),
    no_report: bool = typer.Option(False, "--no-report", help="Capture only; do not analyze or write the report."),
    keep_perf_data: bool = typer.Option(False, "--keep-perf-data", help="Also keep perf.data files in the bundle."),
    collectors: list[str] = typer.Option(None, "--collector", help="Run only this collector (repeatable); syscalls-trace or offcpu-trace trace the whole capture instead of 1 s in 10."),
    status_url: list[str] = typer.Option(None, "--status-url", help="The target's HTTP status port: http://HOST:PORT, or PID=http://HOST:PORT (repeatable)."),
    status_interval: str = typer.Option("5s", "--status-interval", help="How often server-status scrapes /metrics."),
    no_server_cpu_profile: bool = typer.Option(False, "--no-server-cpu-profile", help="Do not ask Go servers for their own CPU profile."),
) -> None:
    if not load:
        raise UsageError("no load command: put it after --, e.g. profiler run --pid tikv -o cap -- sysbench ... run")
    options = make_options(parse_duration(duration) if duration else None, frequency, call_graph, interval, backend,
                           status_options(status_url, status_interval, not no_server_cpu_profile))
    result = capture(pid, output, options, force=force, keep_perf_data=keep_perf_data,
                     collectors=collectors or None, load=list(load), report=not no_report)
    code = result.load_exit_code
    if code:
        raise typer.Exit(code)  # the load's own failure comes first: it is what the user ran
    partial_is_an_error(result)


def register(app: typer.Typer) -> None:
    app.command("run", help=HELP, context_settings={"allow_interspersed_args": False})(command)

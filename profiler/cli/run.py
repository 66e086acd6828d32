"""`profiler run`: capture exactly while a load command runs (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.cli import _capture as shared
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
    pid: list[str] = shared.PID,
    output: Path = typer.Option(None, "--output", "-o", help="Bundle directory to write (default: profiler-YYYYmmdd-HHMMSS)."),
    force: bool = shared.FORCE,
    duration: str = shared.DURATION_AT_MOST,
    frequency: int = shared.FREQUENCY,
    call_graph: str = shared.CALL_GRAPH,
    interval: str = shared.INTERVAL,
    backend: str = shared.BACKEND,
    no_report: bool = shared.NO_REPORT,
    live: bool = shared.LIVE,
    keep_perf_data: bool = shared.KEEP_PERF_DATA,
    collectors: list[str] = shared.COLLECTOR,
    status_url: list[str] = shared.STATUS_URL,
    status_interval: str = shared.STATUS_INTERVAL,
    no_server_cpu_profile: bool = shared.NO_SERVER_CPU_PROFILE,
) -> None:
    if not load:
        raise UsageError("no load command: put it after --, e.g. profiler run --pid tikv -o cap -- sysbench ... run")
    options = make_options(parse_duration(duration) if duration else None, frequency, call_graph, interval, backend,
                           status_options(status_url, status_interval, not no_server_cpu_profile))
    result = capture(pid, output, options, force=force, keep_perf_data=keep_perf_data,
                     collectors=collectors or None, load=list(load), report=not no_report, live=live)
    code = result.load_exit_code
    if code:
        raise typer.Exit(code)  # the load's own failure comes first: it is what the user ran
    partial_is_an_error(result)


def register(app: typer.Typer) -> None:
    app.command("run", help=HELP, context_settings={"allow_interspersed_args": False})(command)

"""`profiler sweep`: one capture per concurrency step, the throughput curve and its knee (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.cli import _capture as shared
from profiler.cli._capture import make_options, status_options
from profiler.cli._common import parse_duration
from profiler.cli._progress import Bars
from profiler.errors import UsageError

HELP = """Run the same load at several concurrencies, one capture per step, and find where throughput stops scaling.

The load command (after --) holds a placeholder, {threads} by default (--param NAME for {NAME}),
filled with each value of --threads in turn. Each step is a normal capture bundle in
DIR/step-VALUE/ with its own report; DIR/sweep.json holds every step's throughput, latency,
verdict and per-target CPU, and the knee; DIR/report.html draws the curve. Ctrl-C keeps the
finished steps and marks the sweep partial. Exit code: 0, or the first failing load's.

**Examples**

    profiler sweep --threads 8,16,32,64 --pid tidb --pid tikv -o sweep -- sysbench oltp_point_select --threads={threads} --time=60 run

    profiler sweep --threads 1,2,4,8,16 --pid mariadbd -o sweep -- sysbench oltp_read_only --threads={threads} --time=10 --report-interval=1 run

    profiler sweep --param conc --threads 16,64,256 --pid tikv -o sweep -- go-ycsb run tikv -P workloada --threads {conc}
"""


def parse_values(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise UsageError(f"--threads wants a list of values, e.g. 1,2,4,8 (got {text!r})")
    return values


def command(
    load: list[str] = typer.Argument(None, help="The load command, after --, with {threads} (or {NAME}) in it."),
    threads: str = typer.Option(..., "--threads", "-t", help="The values to sweep, comma-separated: 1,2,4,8,16."),
    param: str = typer.Option("threads", "--param", help="The placeholder's name in the load command ({threads})."),
    pid: list[str] = shared.PID,
    output: Path = typer.Option(..., "--output", "-o", help="Sweep directory to write (a bundle per step, sweep.json, report.html)."),
    force: bool = shared.FORCE,
    pause: str = typer.Option("1s", "--pause", help="Pause between steps, for the server to settle."),
    duration: str = shared.DURATION_AT_MOST,
    frequency: int = shared.FREQUENCY,
    call_graph: str = shared.CALL_GRAPH,
    interval: str = shared.INTERVAL,
    backend: str = shared.BACKEND,
    keep_perf_data: bool = shared.KEEP_PERF_DATA,
    collectors: list[str] = shared.COLLECTOR,
    status_url: list[str] = shared.STATUS_URL,
    status_interval: str = shared.STATUS_INTERVAL,
    no_server_cpu_profile: bool = shared.NO_SERVER_CPU_PROFILE,
) -> None:
    from profiler.collectors import registry
    from profiler.usecases.sweep import SWEEP_JSON, SWEEP_REPORT, SweepRequest, sweep

    if not param.isidentifier():
        raise UsageError(f"--param {param!r}: a placeholder name is letters, digits and _ (e.g. threads)")
    options = make_options(parse_duration(duration) if duration else None, frequency, call_graph, interval, backend,
                           status_options(status_url, status_interval, not no_server_cpu_profile))
    req = SweepRequest(pids=list(pid), output=output, command=list(load or []), values=parse_values(threads),
                       param=param, options=options, collectors=collectors or None, keep_perf_data=keep_perf_data,
                       force=force, pause=parse_duration(pause) if pause not in ("0", "0s") else 0.0)
    used, why = registry.backend_choice(options)
    bars = Bars()
    try:
        sw, code = sweep(req, bars.say, progress=bars,
                         extra_options={"keep_perf_data": keep_perf_data, "backend_used": used, "backend_reason": why})
    finally:
        bars.done()
    typer.echo(sw.conclusion)
    typer.echo(f"profiler: wrote {output / SWEEP_JSON} and {output / SWEEP_REPORT}", err=True)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("sweep", help=HELP, context_settings={"allow_interspersed_args": False})(command)

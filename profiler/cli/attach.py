"""`profiler attach`: capture from running processes, then analyze and report (CLI layer)."""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.capture.loadlog import parse_load_start
from profiler.cli import _capture as shared
from profiler.cli._capture import capture, make_options, partial_is_an_error, status_options
from profiler.cli._common import parse_duration
from profiler.errors import InputError, UsageError

HELP = """Capture evidence from running processes for a while, then analyze and write the report.

Every collector this host can run (see `profiler doctor`) runs side by side on one clock:
interval counters (stat.csv), cpu-clock stacks, off-CPU stacks, block IO, syscalls, /proc samples.
The capture stops when the duration ends, on Ctrl-C, or when every target has exited; the
bundle is kept either way (marked partial when it is not complete).

**Examples**

    profiler attach --pid tikv --duration 30s -o tikv-cap

    profiler attach --pid tikv --pid tidb -o cluster-cap    # every tikv-server and tidb-server

    profiler attach --pid 4242 --call-graph dwarf -o cap    # Rust built without frame pointers

    profiler attach --container tikv1 -d 30s -o cap         # a docker/podman container's processes, its limits named

    profiler attach --pid tidb-server --status-url http://127.0.0.1:10080 -o cap   # name the status port
    profiler attach --pid mariadbd -d 30s --load-log sb.log -o cap   # a load started elsewhere, on the timeline

A load started elsewhere (--load-log FILE: sysbench, go-ycsb or go-tpc output) is followed while the
capture runs: lines written meanwhile get their arrival time, which puts the load on the capture's
clock. A log written only before or after the capture needs absolute times (a `ts` or `date` prefix on
each line) or --load-start: when the load started, as a wall time (2026-11-24T10:15:30, 10:15:30 today,
@1795490424.5 Unix seconds), an offset from the capture's start (-30s: 30 s before it), or a
CLOCK_MONOTONIC time (mono:12345.6). docs/load.md says more.
"""

def command(
    pid: list[str] = shared.PID_OR_CONTAINER,
    container: list[str] = shared.CONTAINER,
    duration: str = shared.DURATION,
    output: Path = typer.Option(None, "--output", "-o", help="Bundle directory to write (default: profiler-YYYYmmdd-HHMMSS)."),
    force: bool = shared.FORCE,
    frequency: int = shared.FREQUENCY,
    call_graph: str = shared.CALL_GRAPH,
    interval: str = shared.INTERVAL,
    backend: str = shared.BACKEND,
    no_report: bool = shared.NO_REPORT,
    live: bool = shared.LIVE,
    keep_perf_data: bool = shared.KEEP_PERF_DATA,
    collectors: list[str] = shared.COLLECTOR,
    load_log: Path = typer.Option(None, "--load-log", help="The output of a load started elsewhere (sysbench, go-ycsb, go-tpc): followed during the capture and put on its timeline."),
    load_start: str = typer.Option(None, "--load-start", help="When that load started, if its log has no absolute times: 2026-11-24T10:15:30, 10:15:30, @UNIX_SECONDS, -30s (before the capture start) or mono:SECONDS."),
    status_url: list[str] = shared.STATUS_URL,
    status_interval: str = shared.STATUS_INTERVAL,
    no_server_cpu_profile: bool = shared.NO_SERVER_CPU_PROFILE,
) -> None:
    if not pid and not container:
        raise UsageError("no target: pass --pid NAME|PID or --container NAME|ID (repeatable)")
    if load_start is not None and load_log is None:
        raise UsageError("--load-start goes with --load-log (the load's output file)")
    if load_log is not None and not load_log.is_file():
        raise InputError(f"--load-log {load_log}: no such file" if not load_log.exists() else
                         f"--load-log {load_log} is not a regular file")
    start = parse_load_start(load_start)
    options = make_options(parse_duration(duration), frequency, call_graph, interval, backend,
                           status_options(status_url, status_interval, not no_server_cpu_profile))
    result = capture(pid or [], output, options, containers=container or [], force=force, keep_perf_data=keep_perf_data,
                     collectors=collectors or None, report=not no_report, load_log=load_log, load_start=start,
                     live=live)
    partial_is_an_error(result)


def register(app: typer.Typer) -> None:
    app.command("attach", help=HELP)(command)

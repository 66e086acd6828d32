"""`profiler demo`: first run on a fresh host: profile a bundled workload and write the report (CLI layer)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import typer

from profiler.bundle import members
from profiler.cli import _capture as shared
from profiler.cli._capture import capture, make_options
from profiler.cli._common import parse_duration
from profiler.errors import CapabilityError

HELP = """Start the bundled demo workload (a process with named CPU, IO, lock and idle thread pools), profile it with `attach`, and write the report.

The demo's threads: demo-cpu-N hash buffers (on-CPU), demo-io-N write and fsync (block IO wait),
demo-lock-N queue on one lock (futex waits), demo-idle-N wait on a condition (idle pool). The
report shows each pool's share in the flame graphs, thread-state table and verdict.

**Examples**

    profiler demo                       # 15 s capture into profiler-demo-YYYYmmdd-HHMMSS/

    profiler demo --duration 10s -o demo-cap
"""

THREADS = 11  # demo-main + 2 cpu + 2 io + 4 lock + 2 idle


def _wait_for_threads(pid: int, want: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len(os.listdir(f"/proc/{pid}/task")) >= want:
                return
        except OSError:
            break
        time.sleep(0.05)
    raise CapabilityError("the demo workload did not start its threads (is python3 working?)")


def command(
    output: Path = typer.Option(None, "--output", "-o", help="Bundle directory to write (default: profiler-demo-YYYYmmdd-HHMMSS)."),
    duration: str = typer.Option("15s", "--duration", "-d", help="How long to capture (30s, 2m)."),
    force: bool = shared.FORCE,
    backend: str = shared.BACKEND,
) -> None:
    secs = parse_duration(duration)
    out = output or Path(time.strftime("profiler-demo-%Y%m%d-%H%M%S"))
    options = make_options(secs, 99, "fp", "1s", backend)
    workload = subprocess.Popen(
        [sys.executable, "-m", "profiler.demo.workload", "--duration", str(secs + 120)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        _wait_for_threads(workload.pid, THREADS)
        typer.echo(f"profiler: demo workload started (pid {workload.pid}); capturing for {secs:g}s", err=True)
        capture([str(workload.pid)], out, options, force=force, keep_perf_data=False, collectors=None, report=True)
    finally:
        workload.terminate()
        try:
            workload.wait(10)
        except subprocess.TimeoutExpired:
            workload.kill()
            workload.wait()
    report = out / members.REPORT
    if report.exists():
        typer.echo(f"profiler: report written to {report}")


def register(app: typer.Typer) -> None:
    app.command("demo", help=HELP)(command)

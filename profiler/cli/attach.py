"""`profiler attach`: capture from running processes, then analyze and report (CLI layer)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from profiler.bundle import Manifest
from profiler.capture.session import CaptureResult, Session
from profiler.capture.targets import resolve
from profiler.cli._common import parse_duration
from profiler.collectors.base import CaptureOptions
from profiler.errors import CaptureIncomplete, Interrupted, UsageError

HELP = """Capture evidence from running processes for a while, then analyze and write the report.

Every collector this host can run (see `profiler doctor`) runs side by side on one clock:
interval counters (stat.csv), cpu-clock stacks, off-CPU stacks, block IO, syscalls, /proc samples.
The capture stops when the duration ends, on Ctrl-C, or when every target has exited; the
bundle is kept either way (marked partial when it is not complete).

**Examples**

    profiler attach --pid tikv --duration 30s -o tikv-cap

    profiler attach --pid tikv --pid tidb -o cluster-cap    # every tikv-server and tidb-server

    profiler attach --pid 4242 --call-graph dwarf -o cap    # Rust built without frame pointers
"""

CALL_GRAPHS = ("fp", "dwarf", "lbr")
BACKENDS = ("perf", "bcc", "auto")


def default_output() -> Path:
    return Path(time.strftime("profiler-%Y%m%d-%H%M%S"))


def make_options(duration: float | None, frequency: int, call_graph: str, interval: str, backend: str) -> CaptureOptions:
    if call_graph not in CALL_GRAPHS:
        raise UsageError(f"--call-graph {call_graph!r}: use one of {', '.join(CALL_GRAPHS)}")
    if backend not in BACKENDS:
        raise UsageError(f"--backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if not 1 <= frequency <= 10000:
        raise UsageError("--frequency must be between 1 and 10000 Hz")
    iv = parse_duration(interval)
    if iv < 0.01:
        raise UsageError("--interval must be at least 10ms")
    return CaptureOptions(duration=duration, frequency=frequency, call_graph=call_graph,
                          interval=iv, backend=backend)


def capture(pids: list[str], output: Path | None, options: CaptureOptions, *, force: bool,
            keep_perf_data: bool, collectors: list[str] | None, load: list[str] | None = None,
            report: bool = True) -> CaptureResult:
    """Shared by attach and run: resolve, capture, summarize; raises Interrupted after finishing on Ctrl-C."""
    from profiler.collectors import registry

    targets = resolve(pids)
    out = output or default_output()
    chosen = (registry.by_name(options, collectors, keep_perf_data) if collectors
              else registry.default_collectors(options, keep_perf_data))
    names = ", ".join(t.describe() for t in targets)
    what = f"until {load[0]} exits" if load else (f"for {options.duration:g}s" if options.duration else "until Ctrl-C")
    typer.echo(f"profiler: capturing {names} {what} into {out}/", err=True)
    used, why = registry.backend_choice(options)
    session = Session(targets, out, options, chosen, force=force, load=load,
                      extra_options={"keep_perf_data": keep_perf_data, "backend_used": used, "backend_reason": why,
                                     **({"collectors": collectors} if collectors else {})})
    result = session.run()
    typer.echo(summary(result.manifest, out), err=False)
    if report:
        _report(out)
    if result.interrupted:
        raise Interrupted(f"interrupted: the bundle in {out}/ was kept, marked {result.manifest.status}")
    if result.manifest.status == "failed":
        raise CaptureIncomplete(f"capture failed: {result.manifest.reason}")
    return result


def summary(m: Manifest, out: Path) -> str:
    """The collector table printed at the end of a capture."""
    rows = [("collector", "status", "files", "notes")]
    for r in m.collectors:
        notes = []
        # (block-io's issue/completion difference is left out: flushes complete without an issue;
        # the heatmap's pairing gives the real paired/unpaired counts)
        for key in ("samples", "rows", "events", "intervals", "lost", "completions"):
            if key in r.stats and not isinstance(r.stats[key], (list, dict)):
                notes.append(f"{r.stats[key]} {key}")
        if r.reason:
            notes.append(r.reason)
        rows.append((r.name, r.status, ", ".join(r.files) or "-", "; ".join(notes)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"bundle {out}/: {m.status}" + (f" ({m.reason})" if m.reason else "")]
    for row in rows:
        lines.append("  " + "  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3])
    return "\n".join(line.rstrip() for line in lines)


def _report(out: Path) -> None:
    """Analyze and render the terminal report when the analysis layer is installed."""
    try:
        from profiler.analyzers import analysis  # noqa: F401
    except ImportError:
        return
    try:
        from profiler.cli import report as report_cli

        fn = getattr(report_cli, "render_after_capture", None)
        if callable(fn):
            fn(out)
    except Exception as exc:  # noqa: BLE001 - the capture is done; a report failure must not lose it
        print(f"profiler: the report could not be written ({type(exc).__name__}: {exc}); "
              f"the bundle is intact: run `profiler report {out}`", file=sys.stderr)


def command(
    pid: list[str] = typer.Option(..., "--pid", "-p", help="Process name or pid; repeat for several. A name may match several processes."),
    duration: str = typer.Option("30s", "--duration", "-d", help="How long to capture (30s, 2m)."),
    output: Path = typer.Option(None, "--output", "-o", help="Bundle directory to write (default: profiler-YYYYmmdd-HHMMSS)."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite a non-empty output directory."),
    frequency: int = typer.Option(99, "--frequency", "-F", help="cpu-clock sampling frequency (Hz)."),
    call_graph: str = typer.Option("fp", "--call-graph", help="Stack unwinding: fp, dwarf (Rust/C++ without frame pointers) or lbr."),
    interval: str = typer.Option("1s", "--interval", help="perf stat / syscall-rate interval."),
    backend: str = typer.Option("perf", "--backend", help="perf (default), bcc, or auto (bcc where the host supports it, else perf)."),
    no_report: bool = typer.Option(False, "--no-report", help="Capture only; do not analyze or write the report."),
    keep_perf_data: bool = typer.Option(False, "--keep-perf-data", help="Also keep perf.data files in the bundle."),
    collectors: list[str] = typer.Option(None, "--collector", help="Run only this collector (repeatable): perf-stat, procfs, cpu-stacks, offcpu-stacks, block-io, syscalls; syscalls-trace or offcpu-trace trace the whole capture instead of 1 s in 10."),
) -> None:
    options = make_options(parse_duration(duration), frequency, call_graph, interval, backend)
    capture(pid, output, options, force=force, keep_perf_data=keep_perf_data,
            collectors=collectors or None, report=not no_report)


def register(app: typer.Typer) -> None:
    app.command("attach", help=HELP)(command)

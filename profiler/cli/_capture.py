"""What attach, run and demo share (CLI layer): capture options from the command line, the
capture itself through profiler.capture.Session, the collector table printed after it, the
report written after it, and the exit code of a partial capture."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import typer

from profiler.bundle import CollectorRecord, EarlyReads, Manifest
from profiler.capture.loadlog import LoadStart
from profiler.capture.session import CaptureResult, Session
from profiler.capture.targets import resolve
from profiler.cli import _term
from profiler.cli._common import parse_duration
from profiler.collectors.base import CaptureOptions
from profiler.errors import CaptureIncomplete, Interrupted, UsageError

CALL_GRAPHS = ("fp", "dwarf", "lbr")
BACKENDS = ("perf", "bcc", "auto")


def default_output() -> Path:
    return Path(time.strftime("profiler-%Y%m%d-%H%M%S"))


def status_options(urls: list[str] | None, interval: str, cpu_profile: bool) -> dict[str, object]:
    """--status-url [PID=]URL (repeatable), --status-interval, --no-server-cpu-profile."""

    checked = []
    for u in urls or []:
        m = re.fullmatch(r"(?:(\d+)=)?(https?://[^/\s]+)/?", u.strip())
        if m is None:
            raise UsageError(f"--status-url {u!r}: use http://HOST:PORT, or PID=http://HOST:PORT for one target")
        checked.append(u.strip().rstrip("/"))
    iv = parse_duration(interval)
    if iv < 0.5:
        raise UsageError("--status-interval must be at least 500ms")
    return {"status_urls": checked, "status_interval": iv, "server_cpu_profile": cpu_profile}


def make_options(duration: float | None, frequency: int, call_graph: str, interval: str, backend: str,
                 status: dict[str, object] | None = None) -> CaptureOptions:
    if call_graph not in CALL_GRAPHS:
        raise UsageError(f"--call-graph {call_graph!r}: use one of {', '.join(CALL_GRAPHS)}")
    if backend not in BACKENDS:
        raise UsageError(f"--backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if not 1 <= frequency <= 10000:
        raise UsageError("--frequency must be between 1 and 10000 Hz")
    iv = parse_duration(interval)
    if iv < 0.01:
        raise UsageError("--interval must be at least 10ms")
    options = CaptureOptions(duration=duration, frequency=frequency, call_graph=call_graph,
                             interval=iv, backend=backend)
    for key, value in (status or {}).items():
        setattr(options, key, value)
    return options


def capture(pids: list[str], output: Path | None, options: CaptureOptions, *, force: bool,
            keep_perf_data: bool, collectors: list[str] | None, load: list[str] | None = None,
            report: bool = True, load_log: Path | None = None, load_start: LoadStart | None = None,
            containers: list[str] | None = None) -> CaptureResult:
    """Shared by attach and run: resolve, capture, summarize; raises Interrupted after finishing on Ctrl-C."""
    from profiler.collectors import registry

    targets = resolve(pids, containers)
    out = output or default_output()
    chosen = (registry.by_name(options, collectors, keep_perf_data) if collectors
              else registry.default_collectors(options, keep_perf_data))
    names = ", ".join(t.describe() for t in targets)
    what = f"until {load[0]} exits" if load else (f"for {options.duration:g}s" if options.duration else "until Ctrl-C")
    typer.echo(f"profiler: capturing {names} {what} into {out}/", err=True)
    used, why = registry.backend_choice(options)
    early, on_stopped = _early_reads(out) if report else (None, None)
    session = Session(targets, out, options, chosen, force=force, load=load, load_log=load_log, load_start=load_start,
                      on_stopped=on_stopped, early=early,
                      extra_options={"keep_perf_data": keep_perf_data, "backend_used": used, "backend_reason": why,
                                     **({"collectors": collectors} if collectors else {})})
    result = session.run()
    show_summary(result.manifest, out)
    if report:
        _report(out, early)
    if result.interrupted:
        raise Interrupted(f"interrupted: the bundle in {out}/ was kept, marked {result.manifest.status}")
    if result.manifest.status == "failed":
        raise CaptureIncomplete(f"capture failed: {result.manifest.reason}")
    return result


def show_summary(m: Manifest, out: Path) -> None:
    """The collector table on stdout: coloured on a terminal, plain text in a pipe."""
    if not _term.rich_stdout():
        typer.echo(summary(m, out))
        return
    head, *_ = summary(m, out).split("\n", 1)
    _term.line(head, style="bold" if m.status == "ok" else "bold yellow")
    _term.table(["collector", "status", "files", "notes"], _rows(m), status_col=1)


def _files(files: list[str], keep: int = 3) -> str:
    """A collector's files, the first few named (server-status writes a profile per request)."""
    if len(files) <= keep + 1:
        return ", ".join(files) or "-"
    return ", ".join(files[:keep]) + f" and {len(files) - keep} more"


def _rows(m: Manifest) -> list[list[str]]:
    rows = []
    for r in m.collectors:
        notes = []
        # (block-io's issue/completion difference is left out: flushes complete without an issue;
        # the heatmap's pairing gives the real paired/unpaired counts)
        for key in ("samples", "rows", "events", "intervals", "lost", "completions"):
            if key in r.stats and not isinstance(r.stats[key], (list, dict)):
                notes.append(f"{r.stats[key]} {key}")
        if r.reason:
            notes.append(r.reason)
        rows.append([r.name, r.status, _files(r.files), "; ".join(notes)])
    return rows


def summary(m: Manifest, out: Path) -> str:
    """The collector table printed at the end of a capture."""
    rows = [["collector", "status", "files", "notes"], *_rows(m)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"bundle {out}/: {m.status}" + (f" ({m.reason})" if m.reason else "")]
    for row in rows:
        lines.append("  " + "  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3])
    return "\n".join(line.rstrip() for line in lines)


def _early_reads(out: Path) -> tuple[EarlyReads | None, Callable[[CollectorRecord, Manifest], None] | None]:
    """Import the analysis and the renderers before the capture, not after it (the report after
    the capture is what the user waits for; main() imports only this verb's module), and set up
    the members read while the capture finishes (profiler/bundle/early.py)."""
    try:
        import profiler.cli.report  # noqa: F401
        from profiler.usecases.report import early_reads
    except ImportError:
        return None, None
    return early_reads(out)


def _report(out: Path, early: EarlyReads | None = None) -> None:
    """Analyze and render the terminal report when the analysis layer is installed."""
    try:
        from profiler.analyzers import analysis  # noqa: F401
    except ImportError:
        return
    try:
        from profiler.cli import report as report_cli

        fn = getattr(report_cli, "render_after_capture", None)
        if callable(fn):
            fn(out, early)
    except Exception as exc:  # noqa: BLE001 - the capture is done; a report failure must not lose it
        print(f"profiler: the report could not be written ({type(exc).__name__}: {exc}); "
              f"the bundle is intact: run `profiler report {out}`", file=sys.stderr)


def partial_is_an_error(result: CaptureResult) -> None:
    """Exit 6 when a fault made the capture partial (docs/cli.md): perf missing or no permission, a
    target gone, a full disk, a collector failed or killed. The bundle is kept and reported either
    way; a capture partial only because collectors lost events on a busy host exits 0 with a warning."""
    if result.manifest.status != "partial":
        return
    if result.fault is None:
        typer.echo(f"profiler: warning: the capture is partial ({_first(result.manifest.reason)}); "
                   "the report says how much was lost", err=True)
        return
    raise CaptureIncomplete(f"the capture is partial ({_first(result.fault)}): {result.output}/ keeps what was "
                            "captured and its manifest says why in full")


def _first(reason: str | None) -> str:
    why = (reason or "").split("; ")[0]
    return why if len(why) <= 160 else why[:157] + "..."

"""What the capturing verbs share (CLI layer): the one definition of every capture option (attach,
run, sweep, demo, cluster attach|run declare them from here: the same flag, default and help
text everywhere), the capture itself through profiler.capture.Session, the collector table
printed after it, the report written after it, and the exit code of a partial capture."""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from profiler.cli import _term
from profiler.cli._common import parse_duration
from profiler.cli._progress import Bars
from profiler.errors import CaptureIncomplete, Interrupted, ProfilerError, UsageError

if TYPE_CHECKING:  # imported where a capture runs, not by every verb's --help
    from profiler.bundle import EarlyReads, Manifest
    from profiler.capture.loadlog import LoadStart
    from profiler.capture.session import CaptureResult
    from profiler.collectors.base import CaptureOptions

CALL_GRAPHS = ("fp", "dwarf", "lbr")
BACKENDS = ("perf", "bcc", "auto")
MAX_FREQUENCY = 10000
MAX_INTERVAL = 3600.0  # s: perf stat -I takes milliseconds in an int

# ----------------------------------------------------------------------------- the capture options
# Declared once; every capturing verb takes them from here (tests/test_cli_conventions.py checks
# that a flag's help text is the same in every verb).
_PID_HELP = "Process name or pid; repeat for several. A name may match several processes, or a container's processes."
PID = typer.Option(..., "--pid", "-p", help=_PID_HELP)
PID_OR_CONTAINER = typer.Option(None, "--pid", "-p", help=_PID_HELP)  # attach: --pid or --container
CONTAINER = typer.Option(None, "--container", help="Every process of a running container: docker, podman, containerd or a Kubernetes pod's ([NAMESPACE/]POD[/CONTAINER]), by name, id or id prefix (repeatable; docs/containers.md).")
FORCE = typer.Option(False, "--force", "-f", help="Replace an earlier capture in the output directory: only the files the profiler wrote there are removed (docs/cli.md#force).")
DURATION = typer.Option("30s", "--duration", "-d", help="How long to capture (30s, 2m).")
DURATION_AT_MOST = typer.Option(None, "--duration", "-d", help="Stop the capture (and the load) after this long at most (30s, 2m).")
FREQUENCY = typer.Option(99, "--frequency", "-F", help=f"cpu-clock sampling frequency (Hz, 1 to {MAX_FREQUENCY}).")
CALL_GRAPH = typer.Option("fp", "--call-graph", help="Stack unwinding: fp, dwarf (Rust/C++ without frame pointers) or lbr.")
INTERVAL = typer.Option("1s", "--interval", help="perf stat and syscalls interval (10ms to 1h).")
BACKEND = typer.Option("auto", "--backend", help="auto (default: in-kernel aggregation with bcc where the host supports it, else perf; the manifest says which and why), bcc, or perf (docs/bcc.md).")
NO_REPORT = typer.Option(False, "--no-report", help="Capture only; do not analyze or write the report.")
LIVE = typer.Option(False, "--live", help="Redraw the running verdict in the terminal every --interval during the capture: its top evidence, the top waits, the top on-CPU functions per thread pool, the load's throughput and latency (docs/cli.md#live).")
KEEP_PERF_DATA = typer.Option(False, "--keep-perf-data", help="Also keep perf.data files in the bundle.")
COLLECTOR = typer.Option(None, "--collector", help="Run only this collector (repeatable): perf-stat, procfs, cpu-stacks, offcpu-stacks, block-io, syscalls, server-status; syscalls-trace or offcpu-trace trace the whole capture instead of 1 s in 10.")
STATUS_URL = typer.Option(None, "--status-url", help="The target's HTTP status port, when profiler cannot find it or it is on another host: http://HOST:PORT, or PID=http://HOST:PORT (repeatable).")
STATUS_INTERVAL = typer.Option("5s", "--status-interval", help="How often server-status scrapes /metrics (500ms to 1h).")
NO_SERVER_CPU_PROFILE = typer.Option(False, "--no-server-cpu-profile", help="Do not ask Go servers for their own CPU profile over the window.")


def default_output() -> Path:
    return Path(time.strftime("profiler-%Y%m%d-%H%M%S"))


def _url_parts_hold(url: str) -> bool:
    """A host and a port a socket can be opened to (``http://[::1``, port 99999 and 0 cannot)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # an unclosed IPv6 bracket, a port that is no number or out of range
        return False
    return bool(parts.hostname) and (port is None or port > 0)


def status_options(urls: list[str] | None, interval: str, cpu_profile: bool) -> dict[str, object]:
    """--status-url [PID=]URL (repeatable), --status-interval, --no-server-cpu-profile."""

    checked = []
    for u in urls or []:
        m = re.fullmatch(r"(?:(\d+)=)?(https?://[^/\s]+)/?", u.strip())
        if m is None or not _url_parts_hold(m.group(2)) or (m.group(1) is not None and not 0 < int(m.group(1)) < 1 << 22):
            raise UsageError(f"--status-url {u!r}: use http://HOST:PORT (a port from 1 to 65535), or PID=http://HOST:PORT "
                             "for one target")
        checked.append(u.strip().rstrip("/"))
    iv = parse_duration(interval)
    if not 0.5 <= iv <= MAX_INTERVAL:
        raise UsageError("--status-interval must be between 500ms and 1h")
    return {"status_urls": checked, "status_interval": iv, "server_cpu_profile": cpu_profile}


def make_options(duration: float | None, frequency: int, call_graph: str, interval: str, backend: str,
                 status: dict[str, object] | None = None) -> CaptureOptions:
    if call_graph not in CALL_GRAPHS:
        raise UsageError(f"--call-graph {call_graph!r}: use one of {', '.join(CALL_GRAPHS)}")
    if backend not in BACKENDS:
        raise UsageError(f"--backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if not 1 <= frequency <= MAX_FREQUENCY:
        raise UsageError(f"--frequency must be between 1 and {MAX_FREQUENCY} Hz")
    iv = parse_duration(interval)
    if not 0.01 <= iv <= MAX_INTERVAL:
        raise UsageError("--interval must be between 10ms and 1h")
    from profiler.collectors.base import CaptureOptions

    options = CaptureOptions(duration=duration, frequency=frequency, call_graph=call_graph,
                             interval=iv, backend=backend)
    for key, value in (status or {}).items():
        setattr(options, key, value)
    return options


def capture(pids: list[str], output: Path | None, options: CaptureOptions, *, force: bool,
            keep_perf_data: bool, collectors: list[str] | None, load: list[str] | None = None,
            report: bool = True, load_log: Path | None = None, load_start: LoadStart | None = None,
            containers: list[str] | None = None, live: bool = False) -> CaptureResult:
    """Shared by attach and run: resolve, capture, summarize; raises Interrupted after finishing on Ctrl-C."""
    from profiler.capture.session import Session
    from profiler.capture.signals import describe
    from profiler.capture.targets import resolve
    from profiler.collectors import registry

    targets = resolve(pids, containers)
    out = output or default_output()
    chosen = (registry.by_name(options, collectors, keep_perf_data) if collectors
              else registry.default_collectors(options, keep_perf_data))
    names = ", ".join(t.describe() for t in targets)
    what = f"until {load[0]} exits" if load else (f"for {options.duration:g}s" if options.duration else "until Ctrl-C")
    typer.echo(f"profiler: capturing {names} {what} into {out}/", err=True)
    used, why = registry.backend_choice(options)
    early, on_stopped = None, None
    if report:
        # the analysis and the renderers imported now, not after the capture (the report after it
        # is what the user waits for), and the members read while the capture finishes set up
        from profiler.usecases.report import early_reads

        early, on_stopped = early_reads(out)
    bars = Bars(enabled=False if live else None)  # --live: the screen is the live view's
    watch = None
    if live:
        from profiler.bundle import members
        from profiler.usecases.live import LiveCapture

        watch = LiveCapture(out, used, load_log=out / members.LOAD_LOG if (load or load_log) else None)
    session = Session(targets, out, options, chosen, force=force, load=load, load_log=load_log, load_start=load_start,
                      on_stopped=on_stopped, early=early, progress=bars, say=bars.say,
                      tees=watch.tees() if watch is not None else None,
                      extra_options={"keep_perf_data": keep_perf_data, "backend_used": used, "backend_reason": why,
                                     **({"collectors": collectors} if collectors else {})})
    screen = sampler = None
    if watch is not None:
        from profiler.cli.live import LiveScreen, on_cpu_sampler

        manifest = session.prepare()
        sampler = on_cpu_sampler(watch, [t.pid for t in targets], options.interval)
        screen = LiveScreen(watch, lambda: manifest, options.interval)
        screen.start()
    try:
        result = session.run()
    finally:
        bars.done()
        if screen is not None:
            screen.stop()
        if sampler is not None:
            sampler.stop()
    finish(result, out, report, early)
    if result.interrupted:
        raise Interrupted(f"interrupted ({describe(result.signal or 2)}): the bundle in {out}/ was kept, "
                          f"marked {result.manifest.status}", result.signal or 2)
    if result.manifest.status == "failed":
        raise CaptureIncomplete(f"capture failed: {result.manifest.reason}")
    return result


def finish(result: CaptureResult, out: Path, report: bool, early: EarlyReads | None) -> None:
    """The collector table, then the report (not after SIGTERM or SIGHUP). A stop signal in
    between (a second Ctrl-C while the report is written) ends it with the signal named and where
    the bundle is: what is on disk is whole, only the report is missing."""
    from profiler.capture.signals import describe

    try:
        _after(result, out, report, early)
    except (KeyboardInterrupt, Interrupted) as exc:
        signum = int(getattr(exc, "signum", signal.SIGINT))
        raise Interrupted(f"interrupted ({describe(signum)}) after the capture: the bundle in {out}/ was kept, "
                          f"marked {result.manifest.status}; the report was not finished: run `profiler report {out}`",
                          signum) from None


def _after(result: CaptureResult, out: Path, report: bool, early: EarlyReads | None) -> None:
    from profiler.capture.signals import describe

    try:
        show_summary(result.manifest, out)
    except OSError:
        if result.signal != signal.SIGHUP:  # after a hangup the terminal may be gone: the bundle is kept
            raise
    if report and result.signal in (signal.SIGTERM, signal.SIGHUP):
        # asked to end (timeout, systemd, kubectl, a closed terminal): the bundle is what counts
        print(f"profiler: the report was not written ({describe(result.signal)}): run `profiler report {out}`",
              file=sys.stderr)
    elif report:
        _report(out, early)


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


def _report(out: Path, early: EarlyReads | None = None) -> None:
    """Write BUNDLE/report.html and print the verdict summary (the report use case, directly). A
    report that fails leaves the capture as it is: one line says how to make it again."""
    from profiler.usecases.report import default_report

    bars = Bars()
    try:
        res = default_report(out, progress=bars, early=early)
    except Interrupted:
        raise
    except ProfilerError as exc:  # the bundle cannot be analyzed (nothing captured)
        print(f"profiler: the report could not be written ({exc}); the bundle is intact: run `profiler report {out}`",
              file=sys.stderr)
        return
    finally:
        bars.done()
    _term.report_text(res.summary)
    if res.error is not None:
        raise res.error


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

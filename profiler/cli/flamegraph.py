"""`profiler flamegraph`: one flame graph from perf.data, perf script text, folded stacks or a bundle (CLI layer)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import typer

from profiler.analyzers.stacks.flame import (
    FlameGraph,
    build_tree,
    offcpu_by_reason,
    offcpu_folded,
    read_intervals,
)
from profiler.analyzers.stacks.folding import (
    COMPAT_MODES,
    PARALLEL_MIN_BYTES,
    Collapser,
    FoldOptions,
    collapse_file,
    format_folded,
    is_folded,
    iter_decoded,
    open_binary,
    parse_folded,
)
from profiler.analyzers.stacks.perfscript import iter_samples
from profiler.bundle import Bundle, looks_like_bundle, members
from profiler.cli._common import check_output
from profiler.errors import CapabilityError, InputError, UsageError
from profiler.renderers.flamegraph_svg import SvgOptions, render

HELP = """Draw a flame graph (SVG) or write folded stacks.

INPUT is a perf.data file (perf script is run for you), perf script text (plain or .gz),
folded stacks (`a;b;c 12` lines), a capture bundle directory, or `-` for stdin.
Folding matches inferno-collapse-perf / stackcollapse-perf.pl line for line; see
docs/flamegraph.md for the few deliberate differences (`--compat inferno` removes them).

**Examples**

    profiler flamegraph cap/ -o cpu.svg

    profiler flamegraph cap/ --offcpu -o offcpu.svg      # time blocked, by wait reason

    profiler flamegraph perf.data --pools -o pools.svg    # one root frame per thread pool

    profiler flamegraph cap/ --from 10s --to 20s -o spike.svg

    perf script | profiler flamegraph - --folded > out.folded
"""

PERF_MAGIC = b"PERFILE2"
TEST_SVG_ENV = "PROFILER_SVG_TEST"  # small, diffable SVGs for golden tests


@dataclass
class Loaded:
    """Folded counts plus what the graph's labels need to know about them."""

    counts: dict[str, int]
    unit: str = "samples"
    event: str | None = None
    samples: int = 0
    source: str = ""
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Progress:
    """'folding: 640 MB read (150 MB/s)' on stderr every 64 MB, when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.chars = 0
        self.next = 64 << 20
        self.t0 = time.monotonic()

    def tick(self, n: int) -> None:
        if not self.enabled:
            return
        self.chars += n
        if self.chars >= self.next:
            self.next += 64 << 20
            mb = self.chars / 1e6
            rate = mb / max(time.monotonic() - self.t0, 1e-6)
            sys.stderr.write(f"\rfolding: {mb:,.0f} MB read ({rate:,.0f} MB/s)")
            sys.stderr.flush()

    def done(self) -> None:
        if self.enabled and self.chars >= 64 << 20:
            sys.stderr.write("\n")


def sniff(path: str) -> str:
    """perf.data | bundle | folded | perfscript (a gzip file is looked at inside)."""
    if path == "-":
        return "stdin"
    p = Path(path)
    if p.is_dir():
        if looks_like_bundle(p):
            return "bundle"
        raise InputError(f"{path} is a directory but not a capture bundle (no manifest.json)")
    if not p.exists():
        raise InputError(f"no such file: {path}")
    with open(p, "rb") as f:
        head = f.read(8)
        if head == PERF_MAGIC:
            return "perf.data"
        f.seek(0)
        text = _peek_text(f)
    return "folded" if is_folded(text) else "perfscript"


def _peek_text(f: IO[bytes]) -> str:
    try:
        src = open_binary(f)
        data = src.read(64 << 10)
    except (EOFError, OSError) as exc:
        raise InputError(f"cannot read input: {exc}") from None
    if b"\x00" in data[:4096]:
        raise InputError("input is binary, not perf script text, folded stacks or perf.data")
    text: str = data.decode("utf-8", "replace")
    return text


def fold_stream(stream: IO[bytes], opts: FoldOptions, progress: bool = False) -> Collapser:
    c = Collapser(opts)
    prog = _Progress(progress)
    for chunk in iter_decoded(stream, warnings=c.warnings):
        prog.tick(len(chunk))
        c.feed(chunk)
    c.close()
    prog.done()
    return c


# Only the fields folding reads: no symbol offsets and no CPU column, which makes perf print
# (and us read) about 7% less and spares perf the offset formatting.
FOLD_FIELDS = "comm,pid,tid,time,period,event,ip,sym,dso"


def perf_script_argv(perf_data: str, fields: str | None = None) -> list[str]:
    perf = shutil.which("perf")
    if perf is None:
        raise CapabilityError("perf is not installed: cannot read perf.data (install linux-perf, or pass perf script text)")
    argv = [perf, "script", "-i", perf_data]
    if fields:
        argv += ["-F", fields]
    return argv


def run_perf_script(perf_data: str, opts: FoldOptions, progress: bool = False) -> Collapser:
    """Fold `perf script` output while perf is still printing it (two processes, two cores).

    perf is asked for the folding fields only; if it refuses them (an event type without one of
    them), it is run again with its default fields.
    """
    try:
        return _run_perf_script(perf_script_argv(perf_data, FOLD_FIELDS), perf_data, opts, progress)
    except _PerfRefused:
        pass
    try:
        return _run_perf_script(perf_script_argv(perf_data), perf_data, opts, progress)
    except _PerfRefused as exc:
        raise InputError(str(exc)) from None


def _widen_pipe(fd: int) -> None:
    """A 1 MiB pipe (Linux F_SETPIPE_SZ) instead of 64 KiB: perf and the folder wake each other
    16 times less often, which matters on a busy machine."""
    try:
        import fcntl

        fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ
    except (OSError, ImportError):
        pass


class _PerfRefused(Exception):
    pass


def _run_perf_script(argv: list[str], perf_data: str, opts: FoldOptions, progress: bool) -> Collapser:
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise CapabilityError(f"cannot run perf script: {exc}") from None
    assert proc.stdout is not None and proc.stderr is not None
    _widen_pipe(proc.stdout.fileno())
    try:
        c = fold_stream(proc.stdout, opts, progress)
    finally:
        proc.stdout.close()
        err = proc.stderr.read().decode("utf-8", "replace")
        proc.stderr.close()
        rc = proc.wait()
    if rc != 0:
        last = [ln for ln in err.splitlines() if ln.strip()]
        msg = f"perf script failed on {perf_data}: {last[-1] if last else f'exit code {rc}'}"
        if c.samples == 0:
            raise _PerfRefused(msg)
        raise InputError(msg)
    return c


def _unit_for(event: str | None, count_samples: bool) -> str:
    if count_samples or event is None:
        return "samples"
    base = event.split(":")[0]
    return "ns" if base in ("cpu-clock", "task-clock") else "events"


def _from_collapser(c: Collapser, opts: FoldOptions, source: str) -> Loaded:
    event = c._event  # noqa: SLF001 - the event the collapser settled on
    return Loaded(
        counts=c.counts,
        unit=_unit_for(event, opts.count_samples),
        event=event,
        samples=c.samples,
        source=source,
        warnings=list(c.warnings),
    )


def resolve_times(bundle: Bundle | None, t_from: str | None, t_to: str | None) -> tuple[float | None, float | None, bool]:
    """--from/--to: '12.5s' is relative to the capture start (a bundle's clock, else the first
    sample); '@12345.678' is an absolute perf timestamp. Returns (from, to, relative)."""
    from profiler.cli._common import parse_time_offset

    def one(text: str | None) -> tuple[float | None, bool]:
        if text is None:
            return None, False
        if text.startswith("@"):
            try:
                return float(text[1:]), False
            except ValueError:
                raise UsageError(f"cannot read absolute time {text!r}: use e.g. @12345.678") from None
        return parse_time_offset(text), True

    f, frel = one(t_from)
    t, trel = one(t_to)
    if t_from is not None and t_to is not None and frel != trel:
        raise UsageError("--from and --to must both be relative (12s) or both absolute (@12345.6)")
    relative = frel or trel
    if relative and bundle is not None:
        base = bundle.manifest.clock.monotonic_start
        f = base + f if f is not None else None
        t = base + t if t is not None else None
        relative = False
    if f is not None and t is not None and t <= f:
        raise UsageError("--to must be later than --from")
    return f, t, relative


def load(
    input: str,
    opts: FoldOptions,
    *,
    offcpu: bool = False,
    t_from: str | None = None,
    t_to: str | None = None,
    progress: bool = False,
) -> Loaded:
    """Any accepted input -> folded counts (CPU samples, or off-CPU time in µs)."""
    kind = sniff(input)
    bundle = Bundle.open(input) if kind == "bundle" else None
    f, t, relative = resolve_times(bundle, t_from, t_to)
    if (f is not None or t is not None) and kind == "folded":
        raise UsageError("--from/--to need timestamps: folded stacks have none")
    opts = replace(opts, time_from=f, time_to=t, time_relative=relative)
    if offcpu:
        return _load_offcpu(input, kind, bundle, opts)
    if kind == "bundle":
        assert bundle is not None
        name = members.CPU_STACKS if bundle.has(members.CPU_STACKS) else "cpu.perf.txt"
        if not bundle.has(name):
            raise InputError(f"{input} has no CPU stacks (cpu.perf.txt.gz): was the cpu-stacks collector skipped?")
        with open(bundle.path(name), "rb") as fh:
            c = fold_stream(fh, opts, progress)
        out = _from_collapser(c, opts, f"{input}/{name}")
        out.notes.extend(_collector_note(bundle, "cpu-stacks"))
        return out
    if kind == "perf.data":
        return _from_collapser(run_perf_script(input, opts, progress), opts, input)
    if kind == "stdin":
        data = sys.stdin.buffer
        buffered: IO[bytes] = data if hasattr(data, "peek") else io.BufferedReader(data, 1 << 20)  # type: ignore[type-var]
        head = _peek_stdin(buffered)
        if is_folded(head):
            counts = parse_folded(io.TextIOWrapper(open_binary(buffered), encoding="utf-8", errors="replace"))
            return Loaded(counts=counts, source="stdin", samples=sum(counts.values()))
        return _from_collapser(fold_stream(buffered, opts, progress), opts, "stdin")
    if kind == "folded":
        with open(input, "rb") as fh:
            counts = parse_folded(io.TextIOWrapper(open_binary(fh), encoding="utf-8", errors="replace"))
        return Loaded(counts=counts, source=input, samples=sum(counts.values()))
    if os.path.getsize(input) >= PARALLEL_MIN_BYTES:
        return _from_collapser(collapse_file(input, opts), opts, input)  # several processes
    with open(input, "rb") as fh:
        return _from_collapser(fold_stream(fh, opts, progress), opts, input)


def _peek_stdin(stream: IO[bytes]) -> str:
    data = stream.peek(64 << 10)[: 64 << 10]  # type: ignore[attr-defined]
    if data[:2] == b"\x1f\x8b":
        try:
            data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
        except zlib.error:
            data = b""
    text: str = data.decode("utf-8", "replace")
    return text


def _load_offcpu(input: str, kind: str, bundle: Bundle | None, opts: FoldOptions) -> Loaded:
    if kind == "folded":
        raise UsageError("--offcpu needs sched_switch samples (a bundle or perf script text), not folded stacks")
    warnings: list[str] = []
    intervals = None
    if kind == "bundle":
        assert bundle is not None
        name = members.OFFCPU_STACKS if bundle.has(members.OFFCPU_STACKS) else "offcpu.perf.txt"
        if not bundle.has(name):
            if bundle.has(members.OFFCPU_FOLDED):
                return _load_bcc_offcpu(input, bundle, opts)
            raise InputError(f"{input} has no off-CPU evidence (offcpu.perf.txt.gz): was the offcpu-stacks collector skipped?")
        if bundle.has(members.OFFCPU_INTERVALS):
            intervals = read_intervals(bundle.iter_lines(members.OFFCPU_INTERVALS))
        lines = bundle.iter_lines(name)
        source = f"{input}/{name}"
    elif kind == "perf.data":
        argv = perf_script_argv(input)
        try:
            res = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, check=False)
        except OSError as exc:
            raise CapabilityError(f"cannot run perf script: {exc}") from None
        if res.returncode != 0:
            raise InputError(f"perf script failed on {input}: {res.stderr.decode(errors='replace').strip()[-200:]}")
        lines = iter(res.stdout.decode("utf-8", "replace").splitlines())
        source = input
    else:
        stream = sys.stdin.buffer if kind == "stdin" else open(input, "rb")  # noqa: SIM115
        lines = io.TextIOWrapper(open_binary(stream), encoding="utf-8", errors="replace")
        source = "stdin" if kind == "stdin" else input
    samples = iter_samples(lines)
    if opts.time_relative and (opts.time_from is not None or opts.time_to is not None):
        samples_list = list(samples)
        base = min((s.time for s in samples_list if s.time is not None), default=0.0)
        f = base + opts.time_from if opts.time_from is not None else None
        t = base + opts.time_to if opts.time_to is not None else None
        samples = iter(samples_list)
    else:
        f, t = opts.time_from, opts.time_to
    counts, stats = offcpu_folded(samples, pools=opts.pools, time_from=f, time_to=t, intervals=intervals)
    if bundle is not None:
        warnings.extend(bundle.warnings)
    if not counts:
        raise InputError(f"no sched_switch samples with blocked time in {source}")
    notes = list(stats.notes)
    if bundle is not None:
        notes.extend(_collector_note(bundle, "offcpu-stacks"))
    return Loaded(
        counts=counts,
        unit="us",
        event="sched:sched_switch",
        samples=stats.switches,
        source=source,
        warnings=warnings,
        notes=notes,
    )


def _collector_note(bundle: Bundle, name: str) -> list[str]:
    """One line when the collector that wrote the evidence did not run the whole window."""
    rec = bundle.manifest.collector(name)
    if rec is not None and rec.status not in ("ok", "pending"):
        return [f"{name} {rec.status}: {rec.reason or 'see manifest'}"]
    return []


def _load_bcc_offcpu(input: str, bundle: Bundle, opts: FoldOptions) -> Loaded:
    """The bcc backend's offcpu.folded.gz: blocked nanoseconds per stack, folded in the kernel."""
    from profiler.knowledge import pool_of

    counts = parse_folded(bundle.iter_lines(members.OFFCPU_FOLDED))
    if opts.pools:
        pooled: dict[str, int] = {}
        for k, v in counts.items():
            root, sep, rest = k.partition(";")
            key = pool_of(root) + sep + rest
            pooled[key] = pooled.get(key, 0) + v
        counts = pooled
    if opts.time_from is not None or opts.time_to is not None:
        raise UsageError("--from/--to: the bcc backend's off-CPU stacks are totals over the capture, without times")
    return Loaded(
        counts=offcpu_by_reason(counts),
        unit="ns",
        event="offcpu (bcc)",
        source=f"{input}/offcpu.folded.gz",
        warnings=list(bundle.warnings),
    )


def make_graph(loaded: Loaded, *, title: str | None, subtitle: str | None, offcpu: bool, min_fraction: float) -> FlameGraph:
    if title is None:
        title = "Off-CPU Flame Graph (time blocked, by wait reason)" if offcpu else "CPU Flame Graph"
    if subtitle is None:
        bits = [loaded.source]
        if loaded.event:
            bits.append(loaded.event)
        if loaded.samples:
            bits.append(f"{loaded.samples:,} {'switches' if offcpu else 'samples'}")
        bits.extend(loaded.notes[:1])
        subtitle = " · ".join(bits)
    root = build_tree(loaded.counts, min_fraction=min_fraction)
    return FlameGraph(root=root, title=title, subtitle=subtitle, unit=loaded.unit, notes=loaded.notes)


def svg_options(width: int, min_width: float, inverted: bool) -> SvgOptions:
    return SvgOptions(width=width, min_width=min_width, inverted=inverted, test_mode=os.environ.get(TEST_SVG_ENV) == "1")


def write_output(text: str | list[str], output: Path | None, force: bool) -> None:
    if output is None or str(output) == "-":
        out = sys.stdout
        if isinstance(text, str):
            out.write(text)
        else:
            out.writelines(text)
        out.flush()
        return
    if output.exists() and not output.is_file():
        # a device or a pipe (/dev/null, a fifo): write straight into it, never replace it
        with open(output, "w", encoding="utf-8") as fh:
            if isinstance(text, str):
                fh.write(text)
            else:
                fh.writelines(text)
        return
    check_output(output, force)
    tmp = output.with_name(f".{output.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        if isinstance(text, str):
            fh.write(text)
        else:
            fh.writelines(text)
    os.replace(tmp, output)


def command(
    input: str = typer.Argument(..., help="perf.data, perf script text (.gz ok), folded stacks, a bundle, or - for stdin."),
    output: Path = typer.Option(None, "--output", "-o", help="Output file (default: stdout)."),
    folded: bool = typer.Option(False, "--folded", help="Write folded stacks ('a;b;c count') instead of an SVG."),
    offcpu: bool = typer.Option(False, "--offcpu", help="Off-CPU graph from sched_switch samples: width = time blocked, root = wait reason."),
    pid: bool = typer.Option(False, "--pid", help="Root frames are 'comm-PID' (one tower per process)."),
    tid: bool = typer.Option(False, "--tid", help="Root frames are 'comm-PID/TID' (one tower per thread)."),
    pools: bool = typer.Option(False, "--pools", help="One root frame per thread pool (grpc-server-3 -> grpc-server)."),
    only_pid: list[int] = typer.Option(None, "--only-pid", help="Keep samples of this process id (repeatable)."),
    only_tid: list[int] = typer.Option(None, "--only-tid", help="Keep samples of this thread id (repeatable)."),
    t_from: str = typer.Option(None, "--from", help="Start of the time range: 12.5s after capture start, or @MONOTONIC seconds."),
    t_to: str = typer.Option(None, "--to", help="End of the time range (same forms as --from)."),
    event: str = typer.Option(None, "--event", help="Event to keep (default: the first one in the input)."),
    kernel: bool = typer.Option(False, "--kernel", help="Annotate kernel frames with _[k]."),
    jit: bool = typer.Option(False, "--jit", help="Annotate JIT frames with _[j]."),
    addrs: bool = typer.Option(False, "--addrs", help="Include raw addresses where symbols are unknown."),
    samples: bool = typer.Option(False, "--samples", help="Count samples, not the event period perf printed."),
    compat: str = typer.Option("ours", "--compat", help="Folding rules: ours (default), inferno (byte-identical to inferno-collapse-perf), perl."),
    title: str = typer.Option(None, "--title", help="Graph title."),
    subtitle: str = typer.Option(None, "--subtitle", help="Graph subtitle (default: input, event, samples)."),
    inverted: bool = typer.Option(False, "--inverted", help="Icicle graph: roots at the top."),
    min_width: float = typer.Option(0.1, "--min-width", help="Leave out frames narrower than this many pixels."),
    width: int = typer.Option(1200, "--width", help="Image width in pixels."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite the output file."),
) -> None:
    if compat not in COMPAT_MODES:
        raise UsageError(f"--compat must be one of {', '.join(COMPAT_MODES)}")
    if min_width < 0 or width < 100:
        raise UsageError("--min-width must be >= 0 and --width >= 100")
    if output is not None and str(output) != "-" and (output.is_file() or not output.exists()):
        check_output(output, force)
    opts = FoldOptions(
        include_pid=pid,
        include_tid=tid,
        annotate_kernel=kernel,
        annotate_jit=jit,
        include_addrs=addrs,
        event_filter=event,
        pools=pools,
        count_samples=samples,
        pid_filter=frozenset(only_pid) if only_pid else None,
        tid_filter=frozenset(only_tid) if only_tid else None,
        compat=compat,
    )
    loaded = load(input, opts, offcpu=offcpu, t_from=t_from, t_to=t_to, progress=sys.stderr.isatty())
    for w in loaded.warnings:
        typer.echo(f"profiler: warning: {w}", err=True)
    if not loaded.counts:
        raise InputError(f"no samples with stacks in {loaded.source}" + (" in that time range" if t_from or t_to else ""))
    what = f"{loaded.samples:,} {'switches' if offcpu else 'samples'}" + (f" of {loaded.event}" if loaded.event else "")
    if folded:
        write_output(list(format_folded(loaded.counts)), output, force)
        _said(output, f"{len(loaded.counts):,} stacks, {what}")
        return
    so = svg_options(width, min_width, inverted)
    frac = min_width / (width - 20) if min_width > 0 else 0.0
    graph = make_graph(loaded, title=title, subtitle=subtitle, offcpu=offcpu, min_fraction=frac)
    svg = render(graph, so)
    write_output(svg, output, force)
    _said(output, f"{svg.count('<g data-i='):,} frames drawn, {len(loaded.counts):,} unique stacks, {what}")


def _said(output: Path | None, what: str) -> None:
    if output is not None and str(output) != "-" and output.is_file():
        typer.echo(f"profiler: wrote {output} ({what})", err=True)


def register(app: typer.Typer) -> None:
    app.command("flamegraph", help=HELP)(command)

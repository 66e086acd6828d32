"""`profiler flamegraph`: one flame graph from any stack input (cli layer).

Inputs: perf.data, perf script text, folded stacks, a pprof profile or a bundle.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from profiler.cli._common import (
    check_new_output,
    for_terminal,
    parse_window,
    write_bytes,
    write_output,
    wrote,
)
from profiler.cli._progress import Bars
from profiler.errors import UsageError

if TYPE_CHECKING:
    from profiler.renderers.flamegraph_svg import FlameGraphOptions

HELP = """Draw a flame graph (SVG) or write folded stacks.

INPUT is a perf.data file (perf script is run for you), perf script text (plain or .gz),
folded stacks (`a;b;c 12` lines), a pprof profile (Go's /debug/pprof/profile, TiKV's), a
capture bundle directory, or `-` for stdin. Folding matches inferno-collapse-perf /
stackcollapse-perf.pl line for line; see docs/flamegraph.md for the few deliberate differences
(`--compat inferno` removes them).

**Examples**

    profiler flamegraph cap/ -o cpu.svg

    profiler flamegraph cap/ --offcpu -o offcpu.svg      # time blocked, by wait reason

    profiler flamegraph perf.data --by pool -o pools.svg  # one root frame per thread pool

    profiler flamegraph perf.data --pid 4242 --by thread  # one process, a tower per thread

    profiler flamegraph cap/ --from 10s --to 20s -o spike.svg

    profiler flamegraph cpu.pb.gz -o go.svg               # curl host:6060/debug/pprof/profile > cpu.pb.gz

    profiler flamegraph cap/ -o cpu.pb.gz                 # for go tool pprof (--format pprof)

    profiler flamegraph cap/ --offcpu --format speedscope -o offcpu.speedscope.json

    perf script | profiler flamegraph - --folded > out.folded
"""

GROUPINGS = ("comm", "pool", "process", "thread")
TEST_SVG_ENV = "PROFILER_SVG_TEST"  # small, diffable SVGs for golden tests


def svg_options(width: int, min_width: float, inverted: bool) -> FlameGraphOptions:
    from profiler.renderers.flamegraph_svg import FlameGraphOptions

    if min_width < 0 or width < 100:
        raise UsageError("--min-width must be >= 0 and --width >= 100")
    return FlameGraphOptions(width=width, min_width=min_width, inverted=inverted, test_mode=os.environ.get(TEST_SVG_ENV) == "1")


def command(
    input: str = typer.Argument(..., help="perf.data, perf script text (.gz ok), folded stacks, a pprof profile, a bundle, or - for stdin."),
    output: Path = typer.Option(None, "--output", "-o", help="Output file (default: stdout)."),
    folded: bool = typer.Option(False, "--folded", help="Write folded stacks ('a;b;c count') instead of an SVG."),
    offcpu: bool = typer.Option(False, "--offcpu", help="Off-CPU graph from sched_switch samples: width = time blocked, root = wait reason."),
    by: str = typer.Option("comm", "--by", help="Root frames: comm (thread name, default), pool (grpc-server-3 -> grpc-server), process (comm-PID) or thread (comm-PID/TID)."),
    pools: bool = typer.Option(False, "--pools", help="Same as --by pool."),
    only_pid: list[int] = typer.Option(None, "--pid", "--only-pid", help="Keep samples of this process id (repeatable)."),
    only_tid: list[int] = typer.Option(None, "--tid", "--only-tid", help="Keep samples of this thread id (repeatable)."),
    t_from: str = typer.Option(None, "--from", help="Start of the time range: 12.5s after capture start, or @MONOTONIC seconds."),
    t_to: str = typer.Option(None, "--to", help="End of the time range (same forms as --from)."),
    event: str = typer.Option(None, "--event", help="Event to keep (default: the first one in the input); for pprof, the sample type (cpu, goroutine, inuse_space...)."),
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
    group_by: list[str] = typer.Option(None, "--group-by", help="pprof inputs: root the stacks at the values of this sample label (repeatable), as go tool pprof -tagroot does: a TiDB profile's Top SQL digest, a Go program's pprof.Do labels."),
    fmt: str = typer.Option(None, "--format", help="svg (default), folded, pprof (gzipped profile.proto for go tool pprof) or speedscope; by default from -o's extension (.pb.gz, .speedscope.json)."),
) -> None:
    from profiler.analyzers.stacks.folding import COMPAT_MODES, FoldOptions
    from profiler.usecases.flamegraph import export, export_format, export_formats, flamegraph

    if by not in GROUPINGS:
        raise UsageError(f"--by {by!r}: use one of {', '.join(GROUPINGS)}")
    if pools and by not in ("comm", "pool"):
        raise UsageError(f"--pools and --by {by} disagree: give one of them")
    pools = pools or by == "pool"
    pid, tid = by == "process", by == "thread"
    if compat not in COMPAT_MODES:
        raise UsageError(f"--compat must be one of {', '.join(COMPAT_MODES)}")
    if fmt is not None and fmt not in ("svg", "folded", *export_formats()):
        raise UsageError(f"--format {fmt!r}: use svg, folded, {', '.join(export_formats())}")
    folded = folded or fmt == "folded"
    exporting = None if folded or fmt == "svg" else export_format(fmt, str(output) if output else None)
    svg = svg_options(width, min_width, inverted)
    check_new_output(output, force)
    opts = FoldOptions(
        include_pid=pid, include_tid=tid, annotate_kernel=kernel, annotate_jit=jit, include_addrs=addrs,
        event_filter=event, pools=pools, count_samples=samples, compat=compat, window=parse_window(t_from, t_to),
        pid_filter=frozenset(only_pid) if only_pid else None, tid_filter=frozenset(only_tid) if only_tid else None,
        group_by=tuple(group_by or ()),
    )
    progress = Bars()
    if exporting is not None:
        try:
            data, st = export(input, opts, exporting, offcpu=offcpu, progress=progress, warn=progress.warn)
        finally:
            progress.done()
        if isinstance(data, bytes):
            write_bytes(data, output, force)
        else:
            write_output(data, output, force)
        wrote(output, f"{exporting}: {len(st.counts):,} unique stacks, {_how_many(st.samples, st.event, offcpu, bool(st.counts))}")
        return
    try:
        result = flamegraph(input, opts, svg, offcpu=offcpu, folded_output=folded, title=title, subtitle=subtitle,
                            progress=progress, warn=progress.warn)
    finally:
        progress.done()
    st = result.stacks
    what = _how_many(st.samples, st.event, offcpu, bool(st.counts))
    write_output(for_terminal(result.output, output) if isinstance(result.output, list) else result.output, output, force)
    if folded:
        wrote(output, f"{len(st.counts):,} stacks, {what}")
    else:
        wrote(output, f"{result.frames:,} frames drawn, {len(st.counts):,} unique stacks, {what}")


def _how_many(samples: int, event: str | None, offcpu: bool, stacks: bool) -> str:
    """"12,345 samples of cpu-clock"; a count of 0 beside stacks means it is not known (a perf.data
    read one sample per distinct stack, some of them not folded): said so, never "0 samples"."""
    unit = "switches" if offcpu else "samples"
    of = f" of {event}" if event else ""
    if samples or not stacks:
        return f"{samples:,} {unit}{of}"
    return f"{unit}{of} (how many is not known: some were not folded)"


def register(app: typer.Typer) -> None:
    app.command("flamegraph", help=HELP)(command)

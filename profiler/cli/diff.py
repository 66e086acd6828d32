"""`profiler diff`: what changed between two captures (CLI layer).

The differential flame graph lives in `diff_flamegraph` so that other parts of the verb
(verdict and metric deltas) can call it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from profiler.analyzers.stacks.flame import FlameGraph, differential
from profiler.analyzers.stacks.folding import FoldOptions
from profiler.bundle import Bundle, looks_like_bundle
from profiler.cli._common import check_output
from profiler.cli.flamegraph import load, svg_options, write_output
from profiler.errors import InputError, UsageError
from profiler.renderers.flamegraph_svg import format_amount, render

HELP = """Compare two captures: differential flame graph, verdict and metric deltas.

A and B are capture bundles, perf script text, perf.data or folded stacks. The graph is
sized by B; red frames grew, blue shrank, against A normalised to B's total samples, or to
B's amount of work when both throughputs are given (--throughput A_OPS,B_OPS: operations per
second of each load; bundles' durations are taken into account).

**Examples**

    profiler diff before/ after/ -o diff.svg

    profiler diff before/ after/ --throughput 1200,1850 -o per-op.svg

    profiler diff a.folded b.folded --folded > diff.folded     # 'stack a b' lines
"""


def _duration(path: str) -> float | None:
    if not looks_like_bundle(path):
        return None
    m = Bundle.open(path).manifest
    if m.ended is not None and m.clock.monotonic_start:
        return max(m.ended - m.clock.monotonic_start, 0.0) or None
    return m.duration


def parse_throughput(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--throughput wants two numbers 'A,B' (ops/s), not {text!r}") from None
    if a <= 0 or b <= 0:
        raise UsageError("--throughput values must be positive")
    return a, b


def diff_flamegraph(
    before: str,
    after: str,
    *,
    opts: FoldOptions | None = None,
    throughput: tuple[float, float] | None = None,
    offcpu: bool = False,
    title: str | None = None,
) -> tuple[FlameGraph, dict[str, int], dict[str, int]]:
    """Load both inputs and build the differential graph; returns (graph, before, after counts)."""
    opts = opts or FoldOptions()
    a = load(before, opts, offcpu=offcpu)
    b = load(after, opts, offcpu=offcpu)
    if not a.counts or not b.counts:
        raise InputError(f"no stacks in {before if not a.counts else after}")
    work_a = work_b = None
    how = "normalised by total samples"
    if throughput is not None:
        da, db = _duration(before), _duration(after)
        if da and db:
            work_a, work_b = throughput[0] * da, throughput[1] * db
        else:
            work_a, work_b = throughput  # equal capture durations assumed
        how = f"normalised by throughput ({throughput[0]:g} -> {throughput[1]:g} ops/s)"
    root, scale = differential(a.counts, b.counts, work_a, work_b)
    sa, sb = sum(a.counts.values()), sum(b.counts.values())
    graph = FlameGraph(
        root=root,
        title=title or "Differential Flame Graph (red grew, blue shrank)",
        subtitle=f"{before} -> {after} · {how} · A x {scale:.3g} · {format_amount(sa, b.unit)} -> {format_amount(sb, b.unit)}",
        unit=b.unit,
        differential=True,
    )
    return graph, a.counts, b.counts


def command(
    before: str = typer.Argument(..., help="The baseline: a bundle, perf script text, perf.data or folded stacks."),
    after: str = typer.Argument(..., help="The capture to compare (same forms)."),
    output: Path = typer.Option(None, "--output", "-o", help="Output file (default: stdout)."),
    folded: bool = typer.Option(False, "--folded", help="Write 'stack before after' lines instead of an SVG."),
    throughput: str = typer.Option(None, "--throughput", help="Operations per second of each capture, 'A,B': normalise per unit of work."),
    offcpu: bool = typer.Option(False, "--offcpu", help="Compare off-CPU (blocked time) instead of CPU stacks."),
    pools: bool = typer.Option(False, "--pools", help="One root frame per thread pool."),
    title: str = typer.Option(None, "--title", help="Graph title."),
    inverted: bool = typer.Option(False, "--inverted", help="Icicle graph: roots at the top."),
    min_width: float = typer.Option(0.1, "--min-width", help="Leave out frames narrower than this many pixels."),
    width: int = typer.Option(1200, "--width", help="Image width in pixels."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite the output file."),
) -> None:
    if output is not None and str(output) != "-":
        check_output(output, force)
    graph, a, b = diff_flamegraph(
        before, after, opts=FoldOptions(pools=pools), throughput=parse_throughput(throughput), offcpu=offcpu, title=title
    )
    if folded:
        lines = [f"{k} {a.get(k, 0)} {b.get(k, 0)}\n" for k in sorted(set(a) | set(b))]
        write_output(lines, output, force)
        return
    write_output(render(graph, svg_options(width, min_width, inverted)), output, force)
    if output is not None and str(output) != "-" and output.is_file():
        typer.echo(f"profiler: wrote {output} ({graph.subtitle})", err=True)


def register(app: typer.Typer) -> None:
    app.command("diff", help=HELP)(command)

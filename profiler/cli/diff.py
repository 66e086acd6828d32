"""`profiler diff`: what changed between two captures (CLI layer)."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from profiler.cli._common import check_new_output, for_terminal, write_output, wrote
from profiler.cli._progress import Bars
from profiler.errors import UsageError

HELP = """Compare two captures: differential flame graph, verdict and metric deltas.

A and B are capture bundles, perf script text, perf.data, folded stacks or pprof profiles. The
graph is sized by B; red frames grew, blue shrank, against A normalised to B's total samples,
or to B's amount of work: automatically when both are bundles whose load was recorded
(`profiler run`, `attach --load-log`: samples per 1,000 transactions, counted from each load's
series), or when both throughputs are given (--throughput A_OPS,B_OPS: operations per second of
each load; bundles' durations are taken into account).

**Examples**

    profiler diff before/ after/ -o diff.svg

    profiler diff before/ after/ --throughput 1200,1850 -o per-op.svg

    profiler diff a.folded b.folded --folded > diff.folded     # 'stack a b' lines
"""


def parse_throughput(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--throughput wants two numbers 'A,B' (ops/s), not {text!r}") from None
    if not (0 < a < math.inf and 0 < b < math.inf):  # NaN fails both comparisons
        raise UsageError(f"--throughput {text!r}: two positive, finite numbers are needed")
    return a, b


def command(
    before: str = typer.Argument(..., help="The baseline: a bundle, perf script text, perf.data, folded stacks or a pprof profile."),
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
    from profiler.analyzers.stacks.folding import FoldOptions
    from profiler.cli.flamegraph import svg_options
    from profiler.renderers.flamegraph_svg import format_amount
    from profiler.usecases.diff import diff

    check_new_output(output, force)
    result = diff(before, after, svg_options(width, min_width, inverted), opts=FoldOptions(pools=pools),
                  throughput=parse_throughput(throughput), offcpu=offcpu, title=title, folded_output=folded)
    warn = Bars().warn
    for w in result.warnings:
        warn(w)
    write_output(for_terminal(result.output, output) if isinstance(result.output, list) else result.output, output, force)
    if not folded:
        wrote(output, result.graph.subtitle or "")
    if result.per_1000 is not None:
        a, b = result.per_1000
        typer.echo(f"profiler: per 1,000 transactions: {format_amount(a, result.graph.unit)} -> "
                   f"{format_amount(b, result.graph.unit)} ({(b / a - 1) if a else 0:+.0%})", err=True)


def register(app: typer.Typer) -> None:
    app.command("diff", help=HELP)(command)

"""What changed between two captures: the differential flame graph (usecases layer).

`diff_flamegraph` is the step other parts of the verb (verdict and metric deltas) can call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from profiler.analyzers.stacks.differential import differential
from profiler.analyzers.stacks.flame import FlameGraph
from profiler.analyzers.stacks.folding import FoldOptions
from profiler.bundle import Bundle, looks_like_bundle
from profiler.errors import InputError
from profiler.renderers.flamegraph_svg import RENDERER, FlameGraphOptions, format_amount
from profiler.usecases.flamegraph import load_stacks


@dataclass
class DiffResult:
    output: str | list[str]  # the SVG, or 'stack before after' lines
    graph: FlameGraph
    warnings: list[str] = field(default_factory=list)  # what reading either input tolerated


def _duration(path: str) -> float | None:
    """A bundle's capture duration (for work = throughput x duration), None for other inputs."""
    try:
        if not looks_like_bundle(path):
            return None
    except OSError:
        return None
    m = Bundle.open(path).manifest
    if m.ended is not None and m.clock.monotonic_start:
        return max(m.ended - m.clock.monotonic_start, 0.0) or None
    return m.duration


def diff_flamegraph(
    before: str,
    after: str,
    *,
    opts: FoldOptions | None = None,
    throughput: tuple[float, float] | None = None,
    offcpu: bool = False,
    title: str | None = None,
    warnings: list[str] | None = None,
) -> tuple[FlameGraph, dict[str, int], dict[str, int]]:
    """Load both inputs and build the differential graph; returns (graph, before, after counts).
    What reading the inputs tolerated is appended to ``warnings``."""
    opts = opts or FoldOptions()
    a = load_stacks(before, opts, offcpu=offcpu)
    b = load_stacks(after, opts, offcpu=offcpu)
    if warnings is not None:
        warnings.extend(a.warnings + b.warnings)
    if not a.counts or not b.counts:
        empty = a if not a.counts else b
        read = f" (read: {'; '.join(empty.warnings)})" if empty.warnings else ""
        raise InputError(f"no stacks in {before if not a.counts else after}{read}")
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


def diff(before: str, after: str, svg: FlameGraphOptions, *, opts: FoldOptions | None = None,
         throughput: tuple[float, float] | None = None, offcpu: bool = False, title: str | None = None,
         folded_output: bool = False) -> DiffResult:
    """`profiler diff`: the differential SVG, or 'stack before after' lines."""
    warnings: list[str] = []
    graph, a, b = diff_flamegraph(before, after, opts=opts, throughput=throughput, offcpu=offcpu, title=title,
                                  warnings=warnings)
    if folded_output:
        return DiffResult([f"{k} {a.get(k, 0)} {b.get(k, 0)}\n" for k in sorted(set(a) | set(b))], graph, warnings)
    return DiffResult(RENDERER.render(graph, svg), graph, warnings)

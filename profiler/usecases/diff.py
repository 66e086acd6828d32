"""What changed between two captures: the differential flame graph (usecases layer).

`diff_flamegraph` is the step other parts of the verb (verdict and metric deltas) can call.
When both inputs are bundles whose load was recorded (`profiler run`, `attach --load-log`),
the graph is normalised by the work each capture did: samples per 1,000 transactions, the
transactions counted from each load's series over its capture (docs/load.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from profiler.analyzers.load.analysis import analyze_load
from profiler.analyzers.load.view import read_load
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
    per_1000: tuple[float, float] | None = None  # samples per 1,000 transactions, before and after
    warnings: list[str] = field(default_factory=list)  # what reading either input tolerated


@dataclass(frozen=True)
class LoadWork:
    """The transactions a bundle's load did during its capture."""

    transactions: float
    tps: float
    seconds: float
    tool: str


def load_work(path: str, warnings: list[str] | None = None) -> LoadWork | None:
    """Transactions done during a bundle's capture, from its load; None without a usable one
    (a load log that cannot be read at all is a warning in ``warnings``, the graph then
    normalised by total samples)."""
    try:
        if not looks_like_bundle(path):
            return None
    except OSError:
        return None
    bundle = Bundle.open(path)
    m = bundle.manifest
    try:
        log = read_load(bundle)
        if log is None or m.ended is None:
            return None
        la = analyze_load(log, m)
    except Exception as exc:  # noqa: BLE001 - damage in the load's log is no reason to lose the graph
        if warnings is not None:
            warnings.append(f"{path}: the load's log could not be read: {type(exc).__name__}: {exc}")
        return None
    if warnings is not None:
        warnings.extend(bundle.read_warnings())
    got = la.transactions(m.clock.monotonic_start, m.ended) if la.status == "ok" else None
    if got is None or got[0] <= 0:
        return None
    done, seconds = got
    return LoadWork(transactions=done, tps=done / seconds, seconds=seconds, tool=la.tool or "load")


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
) -> tuple[FlameGraph, dict[str, int], dict[str, int], tuple[float, float] | None]:
    """Load both inputs and build the differential graph; returns (graph, before counts, after
    counts, samples per 1,000 transactions before and after when both loads' work is known).
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
    la, lb = (load_work(before, warnings), load_work(after, warnings)) if throughput is None else (None, None)
    if la is not None and lb is not None:
        work_a, work_b = la.transactions, lb.transactions
        how = (f"normalised by throughput: {format_amount(1000 * sum(a.counts.values()) / work_a, b.unit)} -> "
               f"{format_amount(1000 * sum(b.counts.values()) / work_b, b.unit)} per 1,000 transactions "
               f"({la.tool} {la.tps:,.0f}/s over {la.seconds:.0f} s -> {lb.tool} {lb.tps:,.0f}/s over {lb.seconds:.0f} s)")
    elif throughput is not None:
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
    per = (1000 * sa / work_a, 1000 * sb / work_b) if la is not None and lb is not None and work_a and work_b else None
    return graph, a.counts, b.counts, per


def diff(before: str, after: str, svg: FlameGraphOptions, *, opts: FoldOptions | None = None,
         throughput: tuple[float, float] | None = None, offcpu: bool = False, title: str | None = None,
         folded_output: bool = False) -> DiffResult:
    """`profiler diff`: the differential SVG, or 'stack before after' lines."""
    warnings: list[str] = []
    graph, a, b, per = diff_flamegraph(before, after, opts=opts, throughput=throughput, offcpu=offcpu, title=title,
                                       warnings=warnings)
    if folded_output:
        return DiffResult([f"{k} {a.get(k, 0)} {b.get(k, 0)}\n" for k in sorted(set(a) | set(b))], graph, per, warnings)
    return DiffResult(RENDERER.render(graph, svg), graph, per, warnings)
